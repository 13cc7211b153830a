"""How every service is run under uvicorn: in the foreground, or from a thread of this process.

- :func:`uvicorn_options` / :func:`uvicorn_server`: the roles' settings (no access log, warnings
  only, :class:`~anonml.serving.connections.GuardedH11Protocol`, https with a certificate).
- :func:`run_foreground`: the one foreground runner (the aggregator's, peer's, relay's and
  witness's ``serve`` commands), optionally telling a callback the URL once it serves.
- :func:`start_in_thread` / :func:`serve_in_thread` / :class:`ThreadedServer`: the one thread
  starter (tests, the demo, benchmarks, a child service's entry point).
"""

from __future__ import annotations

import gc
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import uvicorn

from anonml.serving.connections import ConnectionLimits, guarded_protocol
from anonml.serving.sockets import ServerTls, base_url, bind

__all__ = [
    "uvicorn_options",
    "uvicorn_server",
    "run_foreground",
    "keep_startup_objects",
    "wait_started",
    "start_in_thread",
    "serve_in_thread",
    "ThreadedServer",
]


def uvicorn_options(limits: ConnectionLimits | None = None, tls: ServerTls | None = None) -> dict[str, Any]:
    """What every service passes uvicorn: no access log, warnings and worse only, the guarded protocol.

    With ``tls``, uvicorn serves https only (its ``ssl_certfile``/``ssl_keyfile``).
    """
    options: dict[str, Any] = {"access_log": False, "log_level": "warning", "http": guarded_protocol(limits)}
    if tls is not None:
        options |= {"ssl_certfile": str(tls.cert), "ssl_keyfile": str(tls.key)}
    return options


def uvicorn_server(
    app: Any,
    *,
    lifespan: Literal["on", "off"] = "on",
    limits: ConnectionLimits | None = None,
    tls: ServerTls | None = None,
) -> uvicorn.Server:
    """A uvicorn server for ``app`` with :func:`uvicorn_options` (``limits``, ``tls``)."""
    return uvicorn.Server(uvicorn.Config(app, lifespan=lifespan, **uvicorn_options(limits, tls)))


def wait_started(
    server: uvicorn.Server, thread: threading.Thread | None = None, timeout: float = 30.0
) -> bool:
    """Poll until ``server`` has started, ``thread`` (its runner) died, or ``timeout`` seconds passed."""
    deadline = time.monotonic() + timeout
    while not server.started:
        if (thread is not None and not thread.is_alive()) or time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def start_in_thread(
    server: uvicorn.Server, sock: socket.socket, *, name: str, timeout: float = 30.0
) -> threading.Thread:
    """Run ``server`` on ``sock`` in a daemon thread; return it once started.

    Raises
    ------
    RuntimeError
        When the server did not start within ``timeout`` seconds (naming ``name`` and the address).
    """
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name=name)
    thread.start()
    if not wait_started(server, thread, timeout):
        host, port = sock.getsockname()[:2]
        raise RuntimeError(f"{name} on {host}:{port} did not start")
    return thread


@dataclass
class ThreadedServer:
    """A uvicorn server running in a thread of this process; ``stop`` asks it to exit and joins."""

    url: str
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def serve_in_thread(
    app: Any,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    name: str,
    sock: socket.socket | None = None,
    tls: ServerTls | None = None,
    limits: ConnectionLimits | None = None,
    lifespan: Literal["on", "off"] = "on",
    timeout: float = 30.0,
) -> ThreadedServer:
    """Serve ``app`` on ``host:port`` (0 = a free port) from a daemon thread, named ``name``.

    ``sock``: a socket already bound there (:func:`~anonml.serving.sockets.bind`), for a caller
    that must know the port before it makes the app. Returns once it serves, with the URL it is
    reached at (``host`` as given, https with ``tls``); raises :class:`RuntimeError` as
    :func:`start_in_thread` does.
    """
    if sock is None:
        sock = bind(host, port)
    server = uvicorn_server(app, lifespan=lifespan, limits=limits, tls=tls)
    thread = start_in_thread(server, sock, name=name, timeout=timeout)
    return ThreadedServer(base_url(host, sock.getsockname()[1], tls), server, thread)


def keep_startup_objects() -> None:
    """Exempt every object built so far from the cyclic collector (:func:`gc.freeze`), once a
    service's app is built and before it serves.

    Why: the modules, classes, route and pydantic schemas built at start-up (some 300,000 objects
    for the aggregator) live as long as the process, yet each full collection walks them all; one
    used to fall between building the app and the first ``/healthz`` answer, about 0.1 s of CPU
    (``benchmarks/cold_start_stages.py``, issue 31), and each later one pauses the requests in
    flight as long. The cost: garbage cycles left by the imports themselves are never reclaimed (a
    one-time, bounded amount). Only for a process that serves until it exits (the foreground
    runner, ``python -m aggregator``), never for apps built in a test's process.
    """
    gc.freeze()


def run_foreground(
    app: Any,
    host: str,
    port: int,
    *,
    tls: ServerTls | None = None,
    lifespan: Literal["on", "off"] = "on",
    ready: Callable[[str], None] | None = None,
    workers: int = 1,
    worker_healthcheck_seconds: float = 60.0,
) -> None:
    """Serve ``app`` on ``host:port`` in this thread until interrupted (Ctrl-C, SIGTERM).

    ``ready(url)`` is called once it serves (from a watcher thread; not at all when it never
    starts), for a service that must say where it listens only when it does. With ``workers`` > 1,
    ``app`` is the import path of a factory (``"module:function"``, as uvicorn's supervisor starts
    each worker process from it) and uvicorn's supervisor runs them on one socket, replacing a
    worker whose health answer takes over ``worker_healthcheck_seconds`` (uvicorn's 5 s is too
    short for a busy worker on a loaded machine).

    Raises
    ------
    ValueError
        ``workers`` > 1 with an app object instead of an import path, or with ``ready``.
    """
    if workers > 1:
        if not isinstance(app, str) or ready is not None:
            raise ValueError("run_foreground: workers > 1 takes an app factory's import path and no ready")
        uvicorn.run(
            app,
            factory=True,
            workers=workers,
            host=host,
            port=port,
            lifespan=lifespan,
            timeout_worker_healthcheck=worker_healthcheck_seconds,
            **uvicorn_options(tls=tls),
        )
        return
    sock = bind(host, port)
    server = uvicorn_server(app, lifespan=lifespan, tls=tls)
    keep_startup_objects()
    if ready is not None:
        url = base_url(host, sock.getsockname()[1], tls)
        watcher = threading.Thread(
            target=lambda: wait_started(server, timeout=float("inf")) and ready(url),
            daemon=True,
            name="ready",
        )
        watcher.start()
    server.run(sockets=[sock])
