"""What the aggregator, the peer host and the witness share to serve HTTP: sockets, uvicorn, children.

- :func:`bind`: the listening socket (``SO_REUSEADDR``, as uvicorn binds), so port 0
  yields a free port that is known before the server starts.
- :func:`uvicorn_server`: uvicorn with the roles' settings (no access log, warnings only).
- :func:`start_in_thread` / :class:`ThreadedServer`: serve from a daemon thread of this
  process and wait until uvicorn reports it started (tests, the demo, benchmarks).
- :class:`HttpMiddleware`: the base of an ASGI middleware that acts on HTTP requests only;
  :class:`BodyLimit`, the one request-body cap of every service (413 before parsing).
- :func:`child_environment`: the folder and environment of a child interpreter that must
  import this repository (``python -m aggregator``, ``anonml witness serve``, benchmark workers);
  :func:`spawn_child` starts one there with text pipes, :func:`ready_line` waits for the line
  it prints once it serves.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import uvicorn
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "bind",
    "free_port",
    "uvicorn_server",
    "start_in_thread",
    "wait_started",
    "ThreadedServer",
    "HttpMiddleware",
    "BodyLimit",
    "child_environment",
    "spawn_child",
    "ready_line",
    "CHILD_START_SECONDS",
]

#: The repository root: the folder holding the ``anonml`` package and the role packages.
ROOT = Path(__file__).resolve().parents[1]

#: Seconds a child service (``python -m aggregator``, ``anonml witness serve``) may take to say it
#: is ready. The wait ends as soon as it is (about 2 s on a quiet machine), but importing the stack
#: took 40-60 s at load 25 on 2 cores.
CHILD_START_SECONDS = 300.0


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (0 = a free port) with ``SO_REUSEADDR``, not yet listening."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


def free_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` nothing listens on at the time of the call.

    For a server started in another process that must be told its port first
    (another process may still take it before that server binds it).
    """
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def uvicorn_server(app: Any, *, lifespan: Literal["on", "off"] = "on") -> uvicorn.Server:
    """A uvicorn server for ``app``: no access log, warnings and worse only."""
    return uvicorn.Server(uvicorn.Config(app, access_log=False, log_level="warning", lifespan=lifespan))


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


class HttpMiddleware(ABC):
    """An ASGI middleware around ``app`` that acts on HTTP requests (:meth:`http`) only.

    Every other scope (``lifespan``, ``websocket``) goes to ``app`` untouched.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    @abstractmethod
    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one HTTP request (calling ``self.app`` to pass it on)."""


class BodyLimit(HttpMiddleware):
    """ASGI middleware: 413 for a body over ``max_bytes`` (declared or streamed)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        super().__init__(app)
        self.max_bytes = max_bytes

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await self._too_large(send)
                return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await self._too_large(send)

    async def _too_large(self, send: Send) -> None:
        response = JSONResponse(
            {"detail": f"request body larger than {self.max_bytes} bytes"}, status_code=413
        )
        await response({"type": "http"}, _empty_receive, send)


class _TooLarge(Exception):
    pass


async def _empty_receive() -> Message:
    return {"type": "http.disconnect"}


def child_environment() -> tuple[str, dict[str, str]]:
    """The repository root and this environment with ``PYTHONPATH`` starting at that root."""
    root = str(ROOT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    return root, env


def spawn_child(args: Sequence[str], *, first_line: str | None = None) -> subprocess.Popen[str]:
    """``python ARGS`` started from the repository root in :func:`child_environment`.

    Its stdout is a text pipe. With ``first_line`` its stdin is a text pipe too, left
    open after that line (a newline added) is written and flushed — the child's
    settings or configuration, as JSON; without, its stdin is ``/dev/null``. A child
    that cannot be handed its line is killed before the error propagates.
    """
    root, env = child_environment()
    process = subprocess.Popen(
        [sys.executable, *args],
        stdin=subprocess.DEVNULL if first_line is None else subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=root,
    )
    if first_line is not None:
        assert process.stdin is not None
        try:
            process.stdin.write(first_line + "\n")
            process.stdin.flush()
        except OSError:
            process.kill()
            process.wait(timeout=10)
            raise
    return process


def ready_line(process: subprocess.Popen[str], timeout: float = CHILD_START_SECONDS) -> str:
    """The first line ``process`` (from :func:`spawn_child`) prints within ``timeout`` seconds, else "".

    The wait ends as soon as the line comes; "" also when the child closed its stdout
    (it died): callers kill it and say it did not start.
    """
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    return process.stdout.readline() if ready else ""
