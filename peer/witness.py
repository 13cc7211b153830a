"""The witness: an independent service that co-signs at most one transcript per (aggregator, problem, stage).

A malicious aggregator can show different peers different signed documents
(another token key, other bins, another copy of the Problem) and, knowing the
seed while registration is open, grind the roster until a victim lands in the
partition it wants. A witness closes both doors. The aggregator must bring it
each transcript (:func:`anonml.protocol.transcript_hash` of the signed Problem,
Roster and — for stage ``"bins"`` — Bins) before peers act on it; the witness
signs the statement ``(aggregator, problem, stage, transcript)`` for the
**first** transcript it is shown and refuses (409) any other for that triple,
forever. Peers accept a stage only with cosignatures on the transcript they
computed themselves (:mod:`peer.transcript`), so every peer that proceeds saw
the same documents; and the roster cosignatures, deterministic Ed25519
signatures, form the beacon of the partition plan, so the aggregator gets one
draw (:mod:`anonml.learn.partition`). Everything signed is kept in an
append-only log anyone can read.

Routes
------
``POST /cosign``
    A :class:`~anonml.protocol.CosignRequest` signed by the aggregator its
    statement names (403 otherwise). 200 with the
    :class:`~anonml.protocol.Cosignature`; the same transcript again gets the same
    cosignature (idempotent); another transcript for the same (aggregator key,
    problem, stage) is refused with 409 and the reason.
``GET /log?start=&limit=``
    The append-only log (:class:`~anonml.protocol.WitnessLogEntry`), oldest first.
``GET /cosignatures/{aggregator hex}/{problem}/{stage}``
    The cosignature for that triple (404 if none).
``GET /identity``, ``GET /healthz``
    The witness's public identity (hex) for pinning; liveness.

The witness knows nothing about peers and never imports ``aggregator``. Its
state is one SQLite file (mode 0600 in a 0700 home) and its identity a key file
(:func:`anonml.crypto.load_or_create_identity`). Request bodies over
``max_body_bytes`` are refused with 413 before they are parsed; no access log.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy import LargeBinary, String, Text, UniqueConstraint, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from anonml import serving
from anonml.crypto import CryptoError, Identity, PublicIdentity, load_or_create_identity
from anonml.database import make_engine, migrate
from anonml.paths import private_dir
from anonml.protocol import (
    STAGES,
    Cosignature,
    CosignRequest,
    TranscriptStatement,
    WitnessLogEntry,
    sign_message,
    verify_message,
)

__all__ = [
    "WitnessSettings",
    "Witness",
    "WitnessRefusal",
    "WitnessIdentity",
    "create_witness_app",
    "serve_witness",
    "start_witness_server",
    "WitnessServer",
    "WitnessProcess",
    "start_witness_process",
]

MAX_LOG_PAGE = 1000


class WitnessSettings(BaseModel):
    """Where a witness keeps its state and listens.

    Attributes
    ----------
    home : Path
        Its folder (made 0700): ``identity.json`` (its Ed25519/X25519 identity,
        0600) and ``witness.db`` (the log, 0600).
    identity_passphrase : str or None
        Passphrase of the key file (None: a plain 0600 file).
    host, port : str, int
        Where it listens (port 0: a free one).
    max_body_bytes : int
        Largest request body read (a cosign request is about 500 bytes).
    """

    model_config = ConfigDict(extra="forbid")

    home: Path
    identity_passphrase: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=8472, ge=0, le=65535)
    max_body_bytes: int = Field(default=8192, ge=1024, le=1 << 20)

    @property
    def identity_file(self) -> Path:
        return self.home / "identity.json"

    @property
    def db_path(self) -> Path:
        return self.home / "witness.db"


class WitnessIdentity(BaseModel):
    """``GET /identity``: the witness's 64-byte public identity and its fingerprint, as hex."""

    identity: str
    fingerprint: str


class _Base(DeclarativeBase):
    pass


class CosignatureRow(_Base):
    """One log entry; rows are only ever inserted (``index`` = ``id - 1``, never reused)."""

    __tablename__ = "cosignatures"
    __table_args__ = (
        UniqueConstraint("aggregator", "problem_id", "stage", name="uq_one_transcript_per_stage"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    aggregator: Mapped[bytes] = mapped_column(LargeBinary(64))
    problem_id: Mapped[str] = mapped_column(String(64))
    stage: Mapped[str] = mapped_column(String(8))
    transcript: Mapped[bytes] = mapped_column(LargeBinary(32))
    cosignature_json: Mapped[str] = mapped_column(Text)


class WitnessRefusal(Exception):
    """A request the witness refuses: HTTP ``status`` and the reason."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def _private_sqlite(path: Path) -> Engine:
    """A SQLite engine on ``path`` in a 0700 folder (:func:`~anonml.database.make_engine` makes the
    file and its -wal/-shm 0600)."""
    private_dir(path.parent, tighten=True)
    return make_engine(f"sqlite:///{path}", immediate=True)


class Witness:
    """The witness's state and rules (module docstring), independent of HTTP."""

    def __init__(self, identity: Identity, db_path: Path) -> None:
        self.identity = identity
        self.engine = _private_sqlite(Path(db_path))
        migrate(self.engine, "peer.migrations.witness")
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)

    @classmethod
    def from_settings(cls, settings: WitnessSettings) -> Witness:
        private_dir(settings.home, tighten=True)
        identity = load_or_create_identity(settings.identity_file, settings.identity_passphrase)
        return cls(identity, settings.db_path)

    @property
    def public_identity(self) -> bytes:
        return bytes(self.identity.public)

    def cosign(self, request: CosignRequest) -> Cosignature:
        """Co-sign ``request``'s statement if it is the first (or the same) for its triple.

        Raises
        ------
        WitnessRefusal
            403 when the aggregator named in the statement did not sign the
            request; 409 when another transcript was co-signed for the same
            (aggregator, problem, stage) — naming both and the log index.
        """
        statement = request.statement
        try:
            verify_message(request, PublicIdentity.from_bytes(bytes(statement.aggregator)))
        except CryptoError as exc:
            raise WitnessRefusal(
                403, f"cosign request is not signed by the aggregator its statement names: {exc}"
            ) from None
        key = (bytes(statement.aggregator), statement.problem_id, statement.stage)
        for _ in range(2):  # a concurrent first insert of the same triple loses once, then reads
            try:
                with self.sessions() as s, s.begin():
                    row = self._row(s, *key)
                    if row is not None:
                        return self._same_or_refuse(row, statement)
                    cosignature = sign_message(
                        Cosignature(witness=self.public_identity, statement=statement, signature=bytes(64)),
                        self.identity,
                    )
                    s.add(
                        CosignatureRow(
                            aggregator=key[0],
                            problem_id=key[1],
                            stage=key[2],
                            transcript=bytes(statement.transcript),
                            cosignature_json=cosignature.model_dump_json(),
                        )
                    )
                return cosignature
            except IntegrityError:
                continue
        raise WitnessRefusal(503, "could not record the cosignature; try again")

    @staticmethod
    def _row(session, aggregator: bytes, problem_id: str, stage: str) -> CosignatureRow | None:
        return session.scalars(
            select(CosignatureRow).where(
                CosignatureRow.aggregator == aggregator,
                CosignatureRow.problem_id == problem_id,
                CosignatureRow.stage == stage,
            )
        ).first()

    @staticmethod
    def _same_or_refuse(row: CosignatureRow, statement: TranscriptStatement) -> Cosignature:
        if bytes(row.transcript) == bytes(statement.transcript):
            return Cosignature.model_validate_json(row.cosignature_json)
        raise WitnessRefusal(
            409,
            f"already co-signed transcript {bytes(row.transcript).hex()} for problem {row.problem_id} "
            f"stage {row.stage} of this aggregator (log index {row.id - 1}); refusing "
            f"{bytes(statement.transcript).hex()}: one transcript per (aggregator, problem, stage)",
        )

    def lookup(self, aggregator: bytes, problem_id: str, stage: str) -> Cosignature | None:
        with self.sessions() as s:
            row = self._row(s, aggregator, problem_id, stage)
            return None if row is None else Cosignature.model_validate_json(row.cosignature_json)

    def log(self, start: int = 0, limit: int = 100) -> list[WitnessLogEntry]:
        """Log entries ``start`` .. ``start + limit - 1`` (fewer at the end), oldest first."""
        if start < 0 or not 1 <= limit <= MAX_LOG_PAGE:
            raise ValueError(f"start must be >= 0 and limit in 1..{MAX_LOG_PAGE}")
        with self.sessions() as s:
            rows = s.scalars(
                select(CosignatureRow)
                .where(CosignatureRow.id > start)
                .order_by(CosignatureRow.id)
                .limit(limit)
            )
            return [
                WitnessLogEntry(
                    index=row.id - 1, cosignature=Cosignature.model_validate_json(row.cosignature_json)
                )
                for row in rows
            ]

    def close(self) -> None:
        self.engine.dispose()


async def _read_capped(request: Request, max_bytes: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > max_bytes):
        raise HTTPException(status_code=413, detail=f"request body larger than {max_bytes} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise HTTPException(status_code=413, detail=f"request body larger than {max_bytes} bytes")
    return bytes(body)


def create_witness_app(witness: Witness, max_body_bytes: int = 8192) -> FastAPI:
    """The witness's HTTP API (module docstring)."""
    app = FastAPI(
        title="AnonML witness",
        version="1",
        summary="Co-signs one transcript per (aggregator, problem, stage); serves its append-only log.",
    )
    app.state.witness = witness

    @app.post("/cosign", response_model=Cosignature, tags=["witness"])
    async def cosign(request: Request) -> Cosignature:
        """Co-sign the statement of a signed :class:`~anonml.protocol.CosignRequest` (module docstring)."""
        body = await _read_capped(request, max_body_bytes)
        try:
            parsed = CosignRequest.model_validate_json(body)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            raise HTTPException(
                status_code=422, detail=f"malformed cosign request at {where}: {first['msg']}"
            ) from None
        try:
            return witness.cosign(parsed)
        except WitnessRefusal as exc:
            raise HTTPException(status_code=exc.status, detail=exc.detail) from None

    @app.get("/log", response_model=list[WitnessLogEntry], tags=["witness"])
    def log(
        start: Annotated[int, Query(ge=0, lt=2**62)] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_LOG_PAGE)] = 100,
    ) -> list[WitnessLogEntry]:
        """Entries from index ``start`` on, at most ``limit``, oldest first."""
        return witness.log(start, limit)

    @app.get("/cosignatures/{aggregator}/{problem_id}/{stage}", response_model=Cosignature, tags=["witness"])
    def cosignature(
        aggregator: Annotated[str, PathParam(pattern=r"^[0-9a-fA-F]{128}$")],
        problem_id: Annotated[str, PathParam(pattern=r"^[a-z0-9-]{4,64}$")],
        stage: str,
    ) -> Cosignature:
        """The cosignature for (aggregator, problem, stage), 404 if the witness signed none."""
        if stage not in STAGES:
            raise HTTPException(status_code=422, detail=f"stage must be one of {', '.join(STAGES)}")
        found = witness.lookup(bytes.fromhex(aggregator), problem_id, stage)
        if found is None:
            raise HTTPException(status_code=404, detail=f"no cosignature for {problem_id} stage {stage}")
        return found

    @app.get("/identity", response_model=WitnessIdentity, tags=["service"])
    def identity() -> WitnessIdentity:
        """The witness's public identity (hex): what a peer's policy names to trust it."""
        return WitnessIdentity(
            identity=witness.public_identity.hex(), fingerprint=witness.identity.fingerprint.hex()
        )

    @app.get("/healthz", tags=["service"])
    def healthz() -> dict[str, str]:
        return {"status": "ok", "identity": witness.public_identity.hex()}

    return app


def serve_witness(settings: WitnessSettings, ready: Callable[[str, Witness], None] | None = None) -> None:
    """Serve a witness in the foreground until interrupted; ``ready(url, witness)`` once listening."""
    witness = Witness.from_settings(settings)
    sock = serving.bind(settings.host, settings.port)
    server = serving.uvicorn_server(create_witness_app(witness, settings.max_body_bytes), lifespan="off")
    url = f"http://{settings.host}:{sock.getsockname()[1]}"
    if ready is not None:
        thread = threading.Thread(
            target=lambda: (serving.wait_started(server), server.started and ready(url, witness)), daemon=True
        )
        thread.start()
    try:
        server.run(sockets=[sock])
    finally:
        witness.close()


@dataclass
class WitnessServer(serving.ThreadedServer):
    """A witness served by uvicorn from a thread of this process (tests)."""

    witness: Witness

    @property
    def identity(self) -> bytes:
        return self.witness.public_identity

    def stop(self) -> None:
        super().stop()
        self.witness.close()


def start_witness_server(settings: WitnessSettings, timeout: float = 30.0) -> WitnessServer:
    """Serve a witness from a thread on ``settings.host:port`` and wait until it is up."""
    witness = Witness.from_settings(settings)
    sock = serving.bind(settings.host, settings.port)
    server = serving.uvicorn_server(create_witness_app(witness, settings.max_body_bytes), lifespan="off")
    thread = serving.start_in_thread(server, sock, name="witness", timeout=timeout)
    return WitnessServer(f"http://{settings.host}:{sock.getsockname()[1]}", server, thread, witness)


@dataclass
class WitnessProcess:
    """A witness served by ``anonml witness serve`` in a child process (its own interpreter)."""

    url: str
    identity: bytes
    process: subprocess.Popen

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()  # uvicorn shuts down gracefully on SIGTERM
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_witness_process(
    home: Path, *, host: str = "127.0.0.1", port: int = 0, timeout: float = serving.CHILD_START_SECONDS
) -> WitnessProcess:
    """Run ``python -m anonml witness serve --home HOME --port PORT`` and wait for its ready line.

    ``timeout`` bounds the wait, which ends as soon as the line comes.
    """
    process = serving.spawn_child(
        ["-m", "anonml", "witness", "serve", "--home", str(home), "--host", host, "--port", str(port)]
    )
    line = serving.ready_line(process, timeout).split()
    if len(line) != 3 or line[0] != "witness":
        process.kill()
        process.wait(timeout=10)
        raise RuntimeError(
            f"the witness process did not start (said {' '.join(line)[:200]!r}; see its stderr)"
        )
    return WitnessProcess(url=line[2], identity=bytes.fromhex(line[1]), process=process)
