"""The aggregator's FastAPI app: :func:`create_app` assembles state, routers and the phase machine.

Served by uvicorn with ``access_log=False``: the intake's clients are the
last relays of onion routes, and their addresses must not be written down
next to the reports (:mod:`aggregator.routes.intake`). Request bodies larger
than ``max_body_bytes`` are refused with 413 before they are parsed, and a
JSON body holding a non-finite number with 422
(:func:`anonml.serving.install_input_guards`). Under overload a request that
could not be served before its client's deadline is answered ``503`` with
``Retry-After`` instead (:func:`admission`; ``/healthz`` counts them).
OpenAPI is at ``/openapi.json`` (``/docs`` for people).

Several worker processes. :func:`serve` with ``workers > 1`` runs uvicorn's
own multi-process mode on one listening socket: every worker builds its app
with :func:`worker_app` from the settings the parent hands down in
:data:`SETTINGS_VARIABLE` (JSON; the environment of a process is readable by
its user only, like the 0600 admin-token file), serves every route, and runs
a phase driver that advances phases only while it holds the database's phase
lease (:mod:`aggregator.lease`). What routes keep in memory is correct per
process: the parsed problem documents are immutable once published and
re-read from the database until complete (:class:`~aggregator.state.ProblemContext`),
the token verifier caches only per-slot MAC keys (spending is the intake's
transaction), refusal counters are database upserts, and an answer posted to
one worker wakes a median step driven by another within its 0.25 s database
poll. The database must be PostgreSQL (:func:`check_workers`).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from aggregator.db import create_tables
from aggregator.rounds import RoundDriver
from aggregator.routes import (
    calibration,
    console,
    intake,
    medians,
    model,
    problems,
    reachability,
    registration,
    tokens,
)
from aggregator.settings import ENV_PREFIX, AggregatorSettings
from aggregator.state import AggregatorState, load_or_create_identity
from aggregator.storage import RETRY_AFTER_SECONDS, storage_failure
from anonml import outbound, serving
from anonml.database import make_engine
from anonml.errors import AnonMLError
from anonml.web import local_api_docs

__all__ = [
    "create_app",
    "admission",
    "route_class",
    "serve",
    "check_workers",
    "worker_app",
    "SETTINGS_VARIABLE",
    "start_workers_process",
    "ServerHandle",
    "start_server",
    "ServerProcess",
    "start_server_process",
    "serve_child",
]

log = logging.getLogger("anonml.aggregator")


#: The route classes admitted apart (:class:`anonml.serving.Admission`), each with its clients' deadline:
#: the intake's clients are last-hop relays posting with a packet's deadline, the rest peers' calls.
INTAKE = serving.RouteClass("intake", outbound.PACKET_DEADLINE)
READS = serving.RouteClass("reads", outbound.AGGREGATOR_DEADLINE)
WRITES = serving.RouteClass("writes", outbound.AGGREGATOR_DEADLINE)
#: Readiness in a class of its own: a flood of peers' calls never queues it, and a flood of probes
#: (each a database query on a worker thread) cannot take every thread from the event loop.
HEALTH = serving.RouteClass("health", outbound.AGGREGATOR_DEADLINE)
#: Never shed: the API's own description.
_UNGATED = frozenset({"/openapi.json", "/docs"})


def route_class(method: str, path: str) -> serving.RouteClass | None:
    """The admission class of a request: intake deliveries, other writes, reads, ``/healthz``."""
    if path in _UNGATED or path.startswith("/static/"):
        return None
    if path == "/healthz":
        return HEALTH
    if path == "/intake" or path.startswith("/intake/"):
        return INTAKE
    return READS if method in ("GET", "HEAD") else WRITES


def admission(settings: AggregatorSettings) -> serving.Admission:
    """The aggregator's admission gate state (:data:`INTAKE`, :data:`READS`, :data:`WRITES`,
    :data:`HEALTH`)."""
    return serving.Admission(
        route_class, concurrency=settings.admission_concurrency, wait_share=settings.admission_wait_share
    )


def create_app(settings: AggregatorSettings | None = None) -> FastAPI:
    """The aggregator app; its state and phase machine start with the app's lifespan."""
    settings = settings or AggregatorSettings.from_env()
    if settings.ca_bundle is not None:
        outbound.trust_ca_bundle(settings.ca_bundle)
    state = AggregatorState(settings)
    driver = RoundDriver(state)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        driver.start()
        try:
            yield
        finally:
            driver.stop()
            state.engine.dispose()

    app = FastAPI(
        title="AnonML aggregator",
        version="1",
        summary="Problems, registration, private medians, blind tokens, anonymous intake, training.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,  # /docs from local files (local_api_docs), never a CDN
    )
    local_api_docs(app, "AnonML aggregator")
    app.state.aggregator = state
    app.state.driver = driver
    gate = app.state.admission = admission(settings)
    for router in (
        problems.router,
        registration.router,
        reachability.router,
        medians.router,
        calibration.router,
        tokens.router,
        intake.router,
        model.router,
        console.router,
    ):
        app.include_router(router)

    _install_error_handlers(app, state)
    _install_healthz(app, state, gate)
    serving.install_input_guards(app, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(serving.BodyLimit, max_bytes=settings.max_body_bytes)  # after: runs first
    app.add_middleware(serving.AdmissionGate, admission=gate)  # first of all: a shed body is never read
    return app


def _install_error_handlers(app: FastAPI, state: AggregatorState) -> None:
    """Map an expected :class:`~anonml.errors.AnonMLError` to 400 with its reason, and a storage
    failure to 503 with ``Retry-After`` (any other database error to 500)."""

    @app.exception_handler(AnonMLError)
    async def _expected(request: Request, exc: AnonMLError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=400)

    @app.exception_handler(SQLAlchemyError)
    @app.exception_handler(OSError)
    async def _storage(request: Request, exc: Exception) -> JSONResponse:
        """A write the disk refused: 503 with Retry-After, said once (:mod:`aggregator.storage`);
        any other database error is a bug: its traceback, and 500."""
        reason = storage_failure(exc)
        if reason is None:
            log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
            return JSONResponse({"detail": "internal error"}, status_code=500)
        state.storage.failed(reason, f"{request.method} {request.url.path}")
        return JSONResponse(
            {"detail": f"the aggregator cannot store anything now ({reason}); nothing was accepted, "
                       "try again later"},
            status_code=503,
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )


def _install_healthz(app: FastAPI, state: AggregatorState, gate: serving.Admission) -> None:
    """Add ``GET /healthz``: readiness of the database and storage, identity and admission counts."""

    @app.get("/healthz", tags=["service"])
    def healthz() -> JSONResponse:
        """Readiness: one query on the database and writable storage (503 when either fails,
        :meth:`~aggregator.storage.StorageHealth.not_ready`), the public identity (hex), and the
        admission gate's counts per route class (``shed``: answered 503 for overload so far)."""
        load = {"shed": gate.shed(), "classes": {k: asdict(v) for k, v in gate.stats().items()}}
        try:
            with state.sessions() as s:
                s.execute(text("SELECT 1")).scalar_one()
        except Exception as exc:  # any database error: the aggregator cannot serve
            return JSONResponse(
                {"status": "unavailable", "detail": f"database: {exc.__class__.__name__}: {exc}"[:300]},
                status_code=503,
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        storage = state.storage.not_ready()
        if storage is not None:
            return JSONResponse(
                {"status": "unavailable", "detail": storage[:300]},
                status_code=503,
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        return JSONResponse({"status": "ok", "identity": state.public_identity.hex(), "admission": load})


#: The variable through which ``serve(..., workers=N)`` hands its settings (JSON) to its workers.
SETTINGS_VARIABLE = ENV_PREFIX + "SETTINGS_JSON"

#: Seconds uvicorn's supervisor waits for a busy worker's health answer before replacing it
#: (uvicorn's default, 5 s, is too short for a worker on a loaded machine).
WORKER_HEALTHCHECK_SECONDS = 60


def check_workers(db_url: str, workers: int) -> None:
    """Refuse ``workers`` processes on ``db_url`` unless it can serve them (PostgreSQL for N > 1).

    Raises
    ------
    AnonMLError
        ``workers`` < 1, or N > 1 on SQLite, saying why and what to use.
    """
    if workers < 1:
        raise AnonMLError(f"--workers {workers}: needs at least 1 worker process")
    if workers > 1 and db_url.startswith("sqlite"):
        raise AnonMLError(
            f"--workers {workers} needs a PostgreSQL database (--db postgresql+psycopg://USER@HOST/DB): "
            "SQLite lets one process write at a time, so more workers would wait on its lock instead of "
            "adding throughput; run one worker on SQLite"
        )


def worker_app() -> FastAPI:
    """The app of one worker process of :func:`serve` (uvicorn's factory; settings from the parent)."""
    raw = os.environ.get(SETTINGS_VARIABLE)
    if not raw:
        raise RuntimeError(f"{SETTINGS_VARIABLE} is not set: start workers with 'anonml aggregator serve'")
    return create_app(AggregatorSettings.model_validate_json(raw))


def serve(settings: AggregatorSettings, workers: int = 1) -> None:
    """Run the aggregator in the foreground under uvicorn (no access log), in ``workers`` processes.

    With ``workers > 1`` the parent first creates the tables, the identity and
    the admin token once (so workers never race to create them), then runs
    uvicorn's supervisor, which starts the workers on one socket and replaces
    any that dies; exactly one of them at a time advances phases (the lease).
    """
    check_workers(settings.db_url, workers)
    tls = settings.server_tls()
    if workers == 1:
        serving.run_foreground(create_app(settings), settings.host, settings.port, tls=tls)
        return
    engine = make_engine(settings.db_url)
    try:
        create_tables(engine)
    finally:
        engine.dispose()
    load_or_create_identity(settings)
    settings = settings.model_copy(update={"admin_token": settings.resolved_admin_token()})
    os.environ[SETTINGS_VARIABLE] = settings.model_dump_json()
    try:
        serving.run_foreground(
            "aggregator.app:worker_app",
            settings.host,
            settings.port,
            tls=tls,
            workers=workers,
            worker_healthcheck_seconds=WORKER_HEALTHCHECK_SECONDS,
        )
    finally:
        os.environ.pop(SETTINGS_VARIABLE, None)


@dataclass
class ServerHandle(serving.ThreadedServer):
    """An aggregator served by uvicorn from a thread of this process."""

    app: FastAPI


def start_server(
    app: FastAPI,
    host: str = "127.0.0.1",
    port: int = 0,
    timeout: float = 30.0,
    tls: serving.ServerTls | None = None,
) -> ServerHandle:
    """Serve ``app`` from a thread on ``host:port`` (0 = a free port; https with ``tls``) until it is up."""
    served = serving.serve_in_thread(app, host, port, name="aggregator", tls=tls, timeout=timeout)
    return ServerHandle(served.url, served.server, served.thread, app)


def serve_child() -> None:
    """Entry of ``python -m aggregator``: settings JSON on stdin, URL on stdout, stop at stdin EOF.

    The admin token travels on stdin, not the command line, so other users of
    the machine cannot read it from the process list.
    """
    import sys

    settings = AggregatorSettings.model_validate_json(sys.stdin.readline())
    try:
        app = create_app(settings)
        serving.keep_startup_objects()  # this process serves until its parent closes stdin
        served = serving.serve_in_thread(
            app,
            settings.host,
            settings.port,
            name="aggregator",
            tls=settings.server_tls(),
            timeout=float("inf"),
        )
    except RuntimeError:
        print("", flush=True)  # the parent's ready_line reads "": it did not start
        return
    print(served.url, flush=True)
    sys.stdin.read()  # returns at EOF: the parent closed our stdin
    served.stop()


#: An aggregator served from a child process: ``stop`` closes its stdin (:func:`start_server_process`)
#: or sends SIGINT, as Ctrl-C stops ``serve`` (:func:`start_workers_process`).
ServerProcess = serving.ChildServer


def start_server_process(
    settings: AggregatorSettings, timeout: float = serving.CHILD_START_SECONDS, *, stderr: Path | None = None
) -> ServerProcess:
    """Serve an aggregator from ``python -m aggregator`` (port from ``settings``; 0 = a free one);
    ``stderr``: a file its log is appended to."""
    process = serving.spawn_child(["-m", "aggregator"], first_line=settings.model_dump_json(), stderr=stderr)
    url = serving.ready_line(process, timeout).strip()
    if not url:
        process.kill()
        raise RuntimeError("the aggregator process did not start (see its stderr)")
    return ServerProcess(url, process, stop_signal=None)


def start_workers_process(
    settings: AggregatorSettings, workers: int, timeout: float = serving.CHILD_START_SECONDS
) -> ServerProcess:
    """Run ``anonml aggregator serve --workers N`` as a child process; returns once ``/healthz`` answers.

    ``settings`` reach it as ``ANONML_AGGREGATOR_<FIELD>`` variables, as a
    deployment would set them (port 0: a free loopback port is chosen first).
    Stopped with SIGINT, as Ctrl-C stops ``serve``.
    """
    check_workers(settings.db_url, workers)
    port = settings.port or serving.free_port(settings.host)
    root, env = serving.child_environment()
    for name, value in settings.model_copy(update={"port": port}).model_dump(mode="json").items():
        if value is not None:
            env[ENV_PREFIX + name.upper()] = str(value).lower() if isinstance(value, bool) else str(value)
    process = subprocess.Popen(
        [sys.executable, "-m", "anonml", "aggregator", "serve", "--workers", str(workers)],
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=root,
    )
    url = serving.base_url(settings.host, port, settings.server_tls())
    what = f"'anonml aggregator serve --workers {workers}'"
    serving.wait_answering(url, process, what=what, timeout=timeout)
    return ServerProcess(url, process, stop_signal=signal.SIGINT)
