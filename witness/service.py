"""The witness's rules, independent of HTTP: co-sign the first transcript of each triple, refuse the rest.

A triple is (aggregator signing key, problem, stage). Every cosignature
carries the witness's ECVRF proof over the statement
(:func:`anonml.protocol.vrf_input`), whose output — one per key and statement,
whoever computes it — is the witness's share of the roster beacon.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import sessionmaker

from anonml.crypto import CryptoError, Identity, PublicIdentity, load_or_create_identity
from anonml.paths import private_dir
from anonml.protocol import (
    Cosignature,
    CosignRequest,
    TranscriptStatement,
    WitnessLogEntry,
    cosign_statement,
    verify_message,
)
from witness.db import CosignatureRow, find_cosignature, open_log
from witness.settings import WitnessSettings

__all__ = ["Witness", "WitnessRefusal", "MAX_LOG_PAGE"]

MAX_LOG_PAGE = 1000


class WitnessRefusal(Exception):
    """A request the witness refuses: HTTP ``status`` and the reason."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class Witness:
    """A witness's identity and append-only log, and the one rule it keeps."""

    def __init__(self, identity: Identity, db_path: Path) -> None:
        self.identity = identity
        self.engine = open_log(Path(db_path))
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
            (aggregator signing key, problem, stage) — naming both and the log index.
        """
        statement = request.statement
        try:
            verify_message(request, PublicIdentity.from_bytes(bytes(statement.aggregator)))
        except CryptoError as exc:
            raise WitnessRefusal(
                403, f"cosign request is not signed by the aggregator its statement names: {exc}"
            ) from None
        key = (bytes(statement.aggregator)[:32], statement.problem_id, statement.stage)
        for _ in range(2):  # a concurrent first insert of the same triple loses once, then reads
            try:
                with self.sessions() as s, s.begin():
                    row = find_cosignature(s, *key)
                    if row is not None:
                        return self._same_or_refuse(row, statement)
                    cosignature = cosign_statement(statement, self.identity)
                    s.add(
                        CosignatureRow(
                            aggregator=bytes(statement.aggregator),
                            aggregator_key=key[0],
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
    def _same_or_refuse(row: CosignatureRow, statement: TranscriptStatement) -> Cosignature:
        if bytes(row.transcript) == bytes(statement.transcript) and bytes(row.aggregator) == bytes(
            statement.aggregator
        ):
            return Cosignature.model_validate_json(row.cosignature_json)
        raise WitnessRefusal(
            409,
            f"already co-signed transcript {bytes(row.transcript).hex()} for problem {row.problem_id} "
            f"stage {row.stage} of this aggregator signing key (log index {row.id - 1}); refusing "
            f"{bytes(statement.transcript).hex()}: one transcript per (aggregator, problem, stage)",
        )

    def lookup(self, aggregator: bytes, problem_id: str, stage: str) -> Cosignature | None:
        """The cosignature for (aggregator, problem, stage); ``aggregator`` is its identity or signing key."""
        with self.sessions() as s:
            row = find_cosignature(s, bytes(aggregator)[:32], problem_id, stage)
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
