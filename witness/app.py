"""The witness's FastAPI app and the ways to serve it: foreground, a thread (tests), a child process.

Served by uvicorn without an access log, like the other roles; request bodies
over ``max_body_bytes`` are refused with 413 before they are parsed
(:class:`anonml.serving.BodyLimit`), and a non-finite number anywhere in a JSON
body with 422 (:func:`anonml.serving.install_input_guards`, as every service).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI

from anonml import serving
from anonml.web import local_api_docs
from witness import routes
from witness.service import Witness
from witness.settings import WitnessSettings

__all__ = [
    "create_app",
    "serve_witness",
    "start_witness_server",
    "WitnessServer",
    "WitnessProcess",
    "start_witness_process",
]


def create_app(witness: Witness, max_body_bytes: int = 8192) -> FastAPI:
    """The witness's HTTP API (:mod:`witness.routes`) over ``witness``."""
    app = FastAPI(
        title="AnonML witness",
        version="1",
        summary="Co-signs one transcript per (aggregator, problem, stage); serves its append-only log.",
        docs_url=None,
        redoc_url=None,  # /docs from local files (local_api_docs), never a CDN
    )
    local_api_docs(app, "AnonML witness")
    app.state.witness = witness
    app.include_router(routes.router)
    serving.install_input_guards(app, max_body_bytes=max_body_bytes)
    app.add_middleware(serving.BodyLimit, max_bytes=max_body_bytes)  # after: runs first
    return app


def serve_witness(settings: WitnessSettings, ready: Callable[[str, Witness], None] | None = None) -> None:
    """Serve a witness in the foreground until interrupted; ``ready(url, witness)`` once listening."""
    witness = Witness.from_settings(settings)
    try:
        serving.run_foreground(
            create_app(witness, settings.max_body_bytes),
            settings.host,
            settings.port,
            tls=settings.server_tls(),
            lifespan="off",
            ready=None if ready is None else lambda url: ready(url, witness),
        )
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
    try:
        served = serving.serve_in_thread(
            create_app(witness, settings.max_body_bytes),
            settings.host,
            settings.port,
            name="witness",
            tls=settings.server_tls(),
            lifespan="off",
            timeout=timeout,
        )
    except BaseException:
        witness.close()
        raise
    return WitnessServer(served.url, served.server, served.thread, witness)


@dataclass
class WitnessProcess(serving.ChildServer):
    """A witness served by ``anonml witness serve`` in a child process (its own interpreter)."""

    identity: bytes = b""


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
    return WitnessProcess(url=line[2], process=process, identity=bytes.fromhex(line[1]))
