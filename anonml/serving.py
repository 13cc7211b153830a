"""What the aggregator, the peer host and the witness share to serve HTTP: sockets, uvicorn, children.

- :func:`bind`: the listening socket (``SO_REUSEADDR``, as uvicorn binds), so port 0
  yields a free port that is known before the server starts.
- :func:`uvicorn_server`: uvicorn with the roles' settings (no access log, warnings only, and
  :class:`GuardedH11Protocol`); :func:`uvicorn_options` are those settings for ``uvicorn.run``.
- :class:`ConnectionLimits` / :class:`GuardedH11Protocol`: what keeps slow or greedy clients
  from exhausting a server — a request's headers and body must arrive in time, a client that
  does not read its answer is dropped, and connections are limited per client and in all.
- :func:`start_in_thread` / :class:`ThreadedServer`: serve from a daemon thread of this
  process and wait until uvicorn reports it started (tests, the demo, benchmarks).
- :class:`HttpMiddleware`: the base of an ASGI middleware that acts on HTTP requests only.
- :func:`child_environment`: the folder and environment of a child interpreter that must
  import this repository (``python -m aggregator``, ``anonml witness serve``, benchmark workers);
  :func:`spawn_child` starts one there with text pipes, :func:`ready_line` waits for the line
  it prints once it serves.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import resource
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
from typing import Any, ClassVar, Literal
from weakref import WeakKeyDictionary

import h11
import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "bind",
    "free_port",
    "uvicorn_server",
    "uvicorn_options",
    "ConnectionLimits",
    "GuardedH11Protocol",
    "guarded_protocol",
    "start_in_thread",
    "wait_started",
    "ThreadedServer",
    "HttpMiddleware",
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


def _default_total() -> int:
    """Open connections a server accepts in all: three quarters of this process's limit of open files.

    The rest stays for the database, the files and the listening socket: a
    server at its limit of open files cannot even accept (asyncio pauses
    accepting for a second at a time), so ``/healthz`` would not answer either.
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 16
    return max(32, soft * 3 // 4)


@dataclass(frozen=True)
class ConnectionLimits:
    """How long a client may take to send a request or read its answer, and how many connections it holds.

    ``header_seconds``: the request line and headers must be complete that long
    after the connection opened (or, on a kept-alive connection, after the next
    request's first byte; an idle kept-alive connection is closed by uvicorn after
    its keep-alive timeout, 5 s). ``body_seconds``: the whole body that long
    after the headers (1 MiB, the aggregator's largest body, at 35 KB/s).
    ``write_seconds``: a client that reads nothing of its answer for that long,
    while the server has more to send, is dropped. ``per_client``: connections
    open at once from one address (an IPv6 client: from its /64); the next one
    is answered 503 and closed. Loopback clients are exempt unless
    ``limit_loopback``: behind a reverse proxy every client is loopback (the
    proxy keeps its own limits), and a simulation runs many peers on one
    machine. ``total``: connections open at once in all (None: three quarters of
    the limit of open files), the next one answered 503 and closed.

    Together these bound what slow clients (slowloris) can hold: every
    connection either completes its request in time or is dropped, and no one
    address holds more than ``per_client`` of the ``total``.
    """

    header_seconds: float = 10.0
    body_seconds: float = 30.0
    write_seconds: float = 30.0
    per_client: int = 64
    total: int | None = None
    limit_loopback: bool = False

    def __post_init__(self) -> None:
        for name in ("header_seconds", "body_seconds", "write_seconds"):
            if not getattr(self, name) > 0:
                raise ValueError(f"ConnectionLimits.{name} must be > 0, got {getattr(self, name)!r}")
        if self.per_client < 1 or (self.total is not None and self.total < 1):
            raise ValueError(f"ConnectionLimits: per_client and total must be >= 1 ({self})")

    def client_key(self, client: tuple[str, int] | None) -> str | None:
        """Whom ``client`` (uvicorn's remote address) counts against; None: not limited per client."""
        if client is None:
            return None  # a Unix socket: no address to tell clients apart
        try:
            address = ipaddress.ip_address(client[0].split("%", 1)[0])
        except ValueError:
            return client[0]
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if address.is_loopback and not self.limit_loopback:
            return None
        if isinstance(address, ipaddress.IPv6Address):
            return str(ipaddress.ip_network(f"{address}/64", strict=False))
        return str(address)


#: Per server (its uvicorn state), the connections open per client key.
_OPEN: WeakKeyDictionary[Any, dict[str, int]] = WeakKeyDictionary()

_BUSY = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the deadlines and connection limits of :attr:`limits`.

    uvicorn times out only idle kept-alive connections; a client that opens
    a connection and sends its headers (or its body) one byte at a time, or
    reads nothing of the answer, would hold it — and one of the server's open
    files — for ever. Here each connection has at most one deadline running:
    for the headers from the opening (or the next request's first byte), for
    the body once the headers are in, for the answer's delivery while writing
    is paused; when it passes, the connection is aborted (its queued output
    dropped, its descriptor freed at once). A request the app is working on
    has no deadline from here. See :class:`ConnectionLimits`.
    """

    limits: ClassVar[ConnectionLimits] = ConnectionLimits()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        self._waiting_for: str | None = None
        self._answered = False  # a response completed and no byte of the next request arrived since
        self._key: str | None = None
        self._admitted = False
        super().connection_made(transport)
        limits = self.limits
        total = limits.total if limits.total is not None else _default_total()
        open_by_client = _OPEN.setdefault(self.server_state, {})
        key = limits.client_key(self.client)
        crowded = key is not None and open_by_client.get(key, 0) >= limits.per_client
        if crowded or len(self.connections) > total:
            transport.write(_BUSY)
            transport.close()
            return
        self._admitted, self._key = True, key
        if key is not None:
            open_by_client[key] = open_by_client.get(key, 0) + 1
        self._expect()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        if self._admitted and self._key is not None:
            self._admitted = False
            open_by_client = _OPEN.get(self.server_state, {})
            left = open_by_client.get(self._key, 1) - 1
            if left > 0:
                open_by_client[self._key] = left
            else:
                open_by_client.pop(self._key, None)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._answered = False
        super().data_received(data)
        self._expect()

    def on_response_complete(self) -> None:
        self._answered = True
        super().on_response_complete()
        self._expect()

    def pause_writing(self) -> None:
        super().pause_writing()
        self._arm("write")

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._waiting_for == "write":
            self._cancel()
            self._expect()

    def _expect(self) -> None:
        """Run the deadline of what the connection now waits for from the client (if anything)."""
        if self._waiting_for == "write" or self.transport.is_closing():
            return
        state = self.conn.their_state
        if state is h11.IDLE:
            want = None if self._answered else "header"  # idle after an answer: uvicorn's keep-alive
        elif state is h11.SEND_BODY:
            want = "body"
        else:
            want = None  # the request is in: the app's turn
        if want != self._waiting_for:
            self._arm(want)

    def _arm(self, what: str | None) -> None:
        self._cancel()
        self._waiting_for = what
        if what is not None:
            seconds = {
                "header": self.limits.header_seconds,
                "body": self.limits.body_seconds,
                "write": self.limits.write_seconds,
            }[what]
            self._deadline = self.loop.call_later(seconds, self._expired)

    def _cancel(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._waiting_for = None

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.abort()


def guarded_protocol(limits: ConnectionLimits | None = None) -> type[GuardedH11Protocol]:
    """:class:`GuardedH11Protocol` with ``limits`` (None: the defaults, the class itself).

    Only the class itself can reach uvicorn's worker processes (they import it
    by name); other limits are for servers run in this process.
    """
    if limits is None or limits == GuardedH11Protocol.limits:
        return GuardedH11Protocol
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"limits": limits})


def uvicorn_options(limits: ConnectionLimits | None = None) -> dict[str, Any]:
    """What every service passes uvicorn: no access log, warnings and worse only, the guarded protocol."""
    return {"access_log": False, "log_level": "warning", "http": guarded_protocol(limits)}


def uvicorn_server(
    app: Any, *, lifespan: Literal["on", "off"] = "on", limits: ConnectionLimits | None = None
) -> uvicorn.Server:
    """A uvicorn server for ``app`` with :func:`uvicorn_options` (``limits``: :class:`ConnectionLimits`)."""
    return uvicorn.Server(uvicorn.Config(app, lifespan=lifespan, **uvicorn_options(limits)))


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
