"""What the aggregator, the peer host and the witness share to serve HTTP: sockets, uvicorn, children.

- :func:`bind`: the listening socket (``SO_REUSEADDR``, as uvicorn binds), so port 0
  yields a free port that is known before the server starts.
- :func:`uvicorn_server`: uvicorn with the roles' settings (no access log, warnings only, and
  :class:`GuardedH11Protocol`); :func:`uvicorn_options` are those settings for ``uvicorn.run``.
- :class:`ServerTls`: the certificate chain and key a service serves https with (uvicorn's
  ``ssl_certfile``/``ssl_keyfile``), checked when given; :func:`server_tls` from a service's
  ``tls_cert``/``tls_key`` settings, :func:`base_url` the URL it is then reached at.
- :class:`ConnectionLimits` / :class:`GuardedH11Protocol`: what keeps slow or greedy clients
  from exhausting a server — a request's headers and body must arrive in time, a client that
  does not read its answer is dropped, and connections are limited per client and in all.
- :func:`start_in_thread` / :class:`ThreadedServer`: serve from a daemon thread of this
  process and wait until uvicorn reports it started (tests, the demo, benchmarks).
- :class:`HttpMiddleware`: the base of an ASGI middleware that acts on HTTP requests only;
  :class:`BodyLimit`, the one request-body cap of every service (413 before parsing).
- :class:`AdmissionGate` / :class:`Admission`: under overload a request is answered ``503`` with
  ``Retry-After`` at once (or after a bounded wait) instead of queueing past its client's deadline.
- :func:`install_input_guards`: what every service's app installs so that no request body can
  produce a 500 — a 422 naming the place of any non-finite number in a JSON body
  (:class:`FiniteJson`), and validation errors whose answer always encodes
  (:func:`validation_error_response`); :func:`too_large_response` is the 413 of a body limit.
- :func:`child_environment`: the folder and environment of a child interpreter that must
  import this repository (``python -m aggregator``, ``anonml witness serve``, benchmark workers);
  :func:`spawn_child` starts one there with text pipes, :func:`ready_line` waits for the line
  it prints once it serves.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import json
import math
import os
import resource
import select
import socket
import ssl
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal
from weakref import WeakKeyDictionary

import h11
import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, model_validator
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "bind",
    "free_port",
    "uvicorn_server",
    "uvicorn_options",
    "ServerTls",
    "TlsSettings",
    "server_tls",
    "base_url",
    "ConnectionLimits",
    "GuardedH11Protocol",
    "guarded_protocol",
    "start_in_thread",
    "wait_started",
    "ThreadedServer",
    "HttpMiddleware",
    "BodyLimit",
    "RouteClass",
    "Admission",
    "AdmissionGate",
    "LaneStats",
    "install_input_guards",
    "FiniteJson",
    "non_finite_number",
    "validation_error_response",
    "too_large_response",
    "MAX_JSON_BODY_BYTES",
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


@dataclass(frozen=True)
class ServerTls:
    """The PEM certificate chain (leaf first) and private key a service serves https with.

    Checked when made: both files must load as a matching pair (the TLS
    server context uvicorn builds from them), so a wrong path or a key of
    another certificate is refused at start, naming the files, instead of
    failing every handshake later.
    """

    cert: Path
    key: Path

    def __post_init__(self) -> None:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(str(self.cert), str(self.key))
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(
                f"TLS certificate {self.cert} with key {self.key}: cannot be loaded as a PEM certificate "
                f"chain and its private key ({exc})"
            ) from None


def server_tls(cert: Path | None, key: Path | None) -> ServerTls | None:
    """:class:`ServerTls` from a service's ``tls_cert`` / ``tls_key`` settings (both or neither).

    Raises
    ------
    ValueError
        When only one is given, or they do not load (:class:`ServerTls`).
    """
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        given = "tls_cert" if key is None else "tls_key"
        raise ValueError(f"tls_cert and tls_key go together: got only {given}")
    return ServerTls(cert, key)


class TlsSettings(BaseModel):
    """The settings of a service that may serve https itself (a base of its settings model).

    Attributes
    ----------
    tls_cert, tls_key : Path or None
        PEM certificate chain (leaf first) and its private key; both given: the
        service serves https only (:class:`ServerTls`, checked when the settings
        are made); neither: plain http, for loopback or behind a TLS proxy.
    """

    tls_cert: Path | None = None
    tls_key: Path | None = None

    @model_validator(mode="after")
    def _tls_loads(self) -> TlsSettings:
        server_tls(self.tls_cert, self.tls_key)
        return self

    def server_tls(self) -> ServerTls | None:
        """What the service serves https with, or None (plain http)."""
        return server_tls(self.tls_cert, self.tls_key)


def base_url(host: str, port: int, tls: ServerTls | None) -> str:
    """The URL of a service listening on ``host:port``: https when it serves ``tls``, else http."""
    shown = f"[{host}]" if ":" in host else host
    return f"{'https' if tls is not None else 'http'}://{shown}:{port}"


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
        await too_large_response(self.max_bytes)({"type": "http"}, _empty_receive, send)


class _TooLarge(Exception):
    pass


async def _empty_receive() -> Message:
    return {"type": "http.disconnect"}


@dataclass(frozen=True)
class RouteClass:
    """Requests admitted together: a name and the deadline (seconds) their clients give a whole call."""

    name: str
    client_deadline: float

    def __post_init__(self) -> None:
        if not self.client_deadline > 0:
            raise ValueError(
                f"RouteClass {self.name!r}: client_deadline must be > 0, not {self.client_deadline}"
            )


@dataclass(frozen=True)
class LaneStats:
    """One route class's admission so far: requests at work and waiting now, admitted and shed in all,
    and the measured mean service time (seconds; None before the first completion)."""

    in_flight: int
    waiting: int
    admitted: int
    shed: int
    shed_on_arrival: int
    shed_after_wait: int
    service_seconds: float | None


class _Lane:
    """The admission state of one route class; touched only on the server's event loop."""

    def __init__(self, route: RouteClass) -> None:
        self.route = route
        self.in_flight = 0
        # Queued requests in arrival order: each one's future (True: admitted, False: shed) and the
        # monotonic time its allowance ends.
        self.waiting: collections.deque[tuple[asyncio.Future[bool], float]] = collections.deque()
        self.admitted = 0
        self.shed_on_arrival = 0
        self.shed_after_wait = 0
        self.service: float | None = None  # EWMA of seconds from admission to the answer's end
        self.gap: float | None = None  # EWMA of seconds between two answers while requests queued
        self.gaps = 0  # how many such gaps were measured
        self.last_done: float | None = None  # monotonic time of the last answer
        self.queued_since = 0.0  # monotonic time the queue last went from empty to not empty

    def stats(self) -> LaneStats:
        return LaneStats(
            self.in_flight,
            len(self.waiting),
            self.admitted,
            self.shed_on_arrival + self.shed_after_wait,
            self.shed_on_arrival,
            self.shed_after_wait,
            None if self.service is None else round(self.service, 4),
        )


class Admission:
    """Who is served now and who is told to come back (:class:`AdmissionGate`'s state and policy).

    Per route class (``classify(method, path)``; None: never gated, e.g. ``/healthz``) at most
    ``concurrency`` requests are at work in the app; the next wait in FIFO order for a slot. A
    request may wait at most ``wait_share`` of its class's client deadline, which leaves the rest
    of that deadline for its own service and the network. With every one of the ``c`` slots busy
    and ``q`` requests ahead of it, a request waits for ``q + 1`` answers: ``(q + 1) · g``, where
    ``g`` is the measured time between two successive answers while requests queue (the inverse
    of the service rate; an exponentially weighted mean, weight ``1/8`` per answer; the first
    answer of a busy spell only starts the clock, since it also carries the time to fill the
    slots). Until ``c`` such gaps are measured — the first answers of a burst come close together,
    having started together — Little's law stands in for newcomers: ``g = S / c``, with ``S`` the
    mean admission-to-answer time (weighted alike), which a cold first request rather overstates;
    the queue is trimmed (below) only on measured gaps. A newcomer whose expected wait exceeds its
    allowance is answered ``503`` with ``Retry-After`` at once; so is a queued request as soon as
    its expected wait exceeds what is left of its allowance (checked from the back of the queue
    whenever a slot frees), and one that waited its whole allowance. Its client hears within the
    allowance — never after its deadline — and the app never saw the request, so nothing is
    accepted and then lost. ``Retry-After`` is the time the queue ahead needs to drain,
    ``⌈(q + 1) · g⌉`` seconds (1 to ``max_retry_after``); clients add jitter
    (:func:`peer.client.retry_wait`) so the shed do not come back in one wave. Before the first
    answer of a class, its requests wait (at most their allowance). Erring high at a cold start
    sheds some that could have been served (they come back after Retry-After); erring low would
    keep a thousand waiting the whole allowance, on a loaded machine past their deadline (measured:
    ``benchmarks/aggregator_load.py``).

    ``on_shed(class name)`` is told of each shed request (a host's counters).
    """

    def __init__(
        self,
        classify: Callable[[str, str], RouteClass | None],
        *,
        concurrency: int = 4,
        wait_share: float = 1 / 3,
        max_retry_after: int = 30,
        on_shed: Callable[[str], None] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"Admission: concurrency must be >= 1, got {concurrency}")
        if not 0 < wait_share < 1:
            raise ValueError(f"Admission: wait_share must be in (0, 1), got {wait_share}")
        if max_retry_after < 1:
            raise ValueError(f"Admission: max_retry_after must be >= 1, got {max_retry_after}")
        self.classify = classify
        self.concurrency = concurrency
        self.wait_share = wait_share
        self.max_retry_after = max_retry_after
        self.on_shed = on_shed
        self._lanes: dict[str, _Lane] = {}

    def stats(self) -> dict[str, LaneStats]:
        """Each route class's :class:`LaneStats`, by name (a snapshot)."""
        return {name: lane.stats() for name, lane in list(self._lanes.items())}

    def shed(self) -> int:
        """Requests shed so far, all classes together."""
        return sum(s.shed for s in self.stats().values())

    def lane(self, route: RouteClass) -> _Lane:
        lane = self._lanes.get(route.name)
        if lane is None:
            lane = self._lanes[route.name] = _Lane(route)
        return lane

    def per_answer(self, lane: _Lane, *, measured: bool = False) -> float | None:
        """Seconds between two answers of ``lane`` while requests queue (``g``): measured once ``c``
        gaps were, Little's ``S / c`` before (None then with ``measured``); None before any answer."""
        if lane.gap is not None and lane.gaps >= self.concurrency:
            return lane.gap
        if measured or lane.service is None:
            return None
        return lane.service / self.concurrency

    def expected_wait(self, lane: _Lane, ahead: int, *, measured: bool = False) -> float:
        """Seconds until a slot frees for a request with ``ahead`` requests queued before it
        (0 while a slot is free, and while nothing is measured yet)."""
        gap = self.per_answer(lane, measured=measured)
        if lane.in_flight < self.concurrency or gap is None:
            return 0.0
        return (ahead + 1) * gap

    def retry_after(self, lane: _Lane, ahead: int) -> int:
        """Whole seconds the ``ahead`` queued requests (and the busy slots) need to drain, 1 to
        ``max_retry_after``."""
        gap = self.per_answer(lane)
        drain = 0.0 if gap is None else (ahead + 1) * gap
        return max(1, min(self.max_retry_after, math.ceil(drain)))

    def allowance(self, lane: _Lane) -> float:
        """Seconds a request of ``lane`` may wait for a slot."""
        return lane.route.client_deadline * self.wait_share

    def release(self, lane: _Lane, started: float) -> None:
        """A request admitted at ``started`` (monotonic) was answered: measure it, hand its slot on,
        and shed from the back of the queue what can no longer be served within its allowance."""
        now = time.monotonic()
        took = now - started
        lane.service = took if lane.service is None else lane.service + (took - lane.service) / 8
        if lane.waiting and lane.last_done is not None and lane.last_done >= lane.queued_since:
            gap = now - lane.last_done  # two answers while requests queued: one service gap
            lane.gap = gap if lane.gap is None else lane.gap + (gap - lane.gap) / 8
            lane.gaps += 1
        lane.last_done = now
        lane.in_flight -= 1
        while lane.waiting:
            waiter, _ = lane.waiting.popleft()
            if not waiter.done():
                lane.in_flight += 1  # taken on the waiter's behalf: no newcomer can slip in between
                waiter.set_result(True)
                break
        while lane.waiting:
            waiter, gives_up = lane.waiting[-1]
            wait = self.expected_wait(lane, len(lane.waiting) - 1, measured=True)
            if not waiter.done() and wait <= gives_up - now:
                break
            lane.waiting.pop()
            if not waiter.done():
                waiter.set_result(False)

    def count_shed(self, lane: _Lane, on_arrival: bool) -> None:
        if on_arrival:
            lane.shed_on_arrival += 1
        else:
            lane.shed_after_wait += 1
        if self.on_shed is not None:
            self.on_shed(lane.route.name)


class AdmissionGate(HttpMiddleware):
    """ASGI middleware: admit a request to the app, or answer 503 with Retry-After (:class:`Admission`).

    Add it last, so it runs first: a shed request's body is never read.
    """

    def __init__(self, app: ASGIApp, admission: Admission) -> None:
        super().__init__(app)
        self.admission = admission

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.admission.classify(scope.get("method", "GET"), scope.get("path", "/"))
        if route is None:
            await self.app(scope, receive, send)
            return
        admission = self.admission
        lane = admission.lane(route)
        allowance = admission.allowance(lane)
        ahead = len(lane.waiting)
        if admission.expected_wait(lane, ahead) > allowance:
            await self._shed(lane, ahead, on_arrival=True, send=send)
            return
        if lane.in_flight < admission.concurrency and not lane.waiting:
            lane.in_flight += 1
        elif not await self._wait(lane, allowance):
            await self._shed(lane, ahead, on_arrival=False, send=send)
            return
        lane.admitted += 1
        started = time.monotonic()
        try:
            await self.app(scope, receive, send)
        finally:
            admission.release(lane, started)

    async def _wait(self, lane: _Lane, allowance: float) -> bool:
        """Queue for a slot of ``lane`` for at most ``allowance`` seconds: True once it is this
        request's (:meth:`Admission.release` took it on its behalf), False when shed."""
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        entry = (waiter, time.monotonic() + allowance)
        if not lane.waiting:
            lane.queued_since = time.monotonic()
        lane.waiting.append(entry)
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), allowance)
        except TimeoutError:
            if waiter.done():
                return waiter.result()  # decided in the same instant the wait ran out
            waiter.cancel()
            lane.waiting.remove(entry)
            return False
        except BaseException:  # cancelled (the client left, the server stops): give up place or slot
            if waiter.done() and not waiter.cancelled() and waiter.result():
                self.admission.release(lane, time.monotonic())
            elif not waiter.done():
                waiter.cancel()
                if entry in lane.waiting:
                    lane.waiting.remove(entry)
            raise

    async def _shed(self, lane: _Lane, ahead: int, *, on_arrival: bool, send: Send) -> None:
        self.admission.count_shed(lane, on_arrival)
        seconds = self.admission.retry_after(lane, ahead)
        answer = JSONResponse(
            {"detail": f"overloaded: more {lane.route.name} requests queued than can be served before the "
                       f"client's deadline; try again in {seconds} s"},
            status_code=503,
            headers={"Retry-After": str(seconds)},
        )
        await answer({"type": "http"}, _empty_receive, send)


#: Largest JSON body :class:`FiniteJson` reads when the service sets no limit of its own (a larger
#: one is refused with 413 before it is held in memory).
MAX_JSON_BODY_BYTES = 1 << 20

#: Digits of the largest integer within a double's range (``10**308`` has 309).
_DOUBLE_DIGITS = 309

#: Every digit as ``0`` and ``E`` as ``e`` (:meth:`bytes.translate`), so that the shapes of a number
#: past a double's range are plain substrings, found at C speed (:func:`_suspect`).
_SHAPES = bytes.maketrans(b"123456789E", b"000000000e")

#: In the translated text: an exponent of three digits or more (after a digit), or a run of 100
#: digits. (A literal reaches 1e308 only if its integer digits plus its exponent exceed 308, so with
#: an exponent of two digits at most it has over 200 digits.) In the text itself: the constants.
_TRANSLATED_SHAPES = (b"0e000", b"0e+000", b"0" * 100)
_CONSTANTS = (b"NaN", b"Infinity")

#: What may precede a token in JSON: the start, whitespace, ``[``, ``:`` or ``,``.
_BEFORE_TOKEN = frozenset(b" \t\r\n[:,")

#: What a number token may hold before its exponent (sign, digits, point).
_NUMBER_PART = frozenset(b"0123456789.-")

#: How much of an offending literal or an echoed input an error shows.
_SHOWN = 200


@dataclass(frozen=True)
class _NonFinite:
    """A number :func:`non_finite_number` refuses, as it was written in the body."""

    text: str


def _suspect(body: bytes) -> bool:
    """Whether ``body`` may hold a non-finite number: one of the shapes above at the start of a token.

    Only such a body is parsed (:func:`non_finite_number`). Base64 text turns up ``NaN`` or ``5e123``
    by chance (a few dozen times per MiB of reports), but always after a letter, digit, ``+`` or
    ``/``, where JSON puts no number: those places are skipped, so a body of ordinary reports costs
    a translation and a few substring searches, not a parse. A body that is not a suspect holds only
    finite numbers.
    """
    shapes = body.translate(_SHAPES)
    for text, needles in ((shapes, _TRANSLATED_SHAPES), (body, _CONSTANTS)):
        for needle in needles:
            at = text.find(needle)
            while at >= 0:
                start = at
                while start > 0 and body[start - 1] in _NUMBER_PART:  # back to the token's first byte
                    start -= 1
                if start == 0 or body[start - 1] in _BEFORE_TOKEN:
                    return True
                at = text.find(needle, at + 1)
    return False


def non_finite_number(body: bytes) -> tuple[tuple[str | int, ...], str] | None:
    """Where the first number of JSON ``body`` that is not a finite double is, and how it was written.

    Refused: ``NaN``, ``Infinity``, ``-Infinity`` (which Python's :func:`json.loads` accepts though
    RFC 8259 §6 has no such values) and literals that overflow a double, integers included
    (``1e400``, 400 digits): RFC 8259 §6 gives numbers within IEEE 754 binary64 as the range
    implementations agree on, and every number of the protocol is within it. Returns
    ``(path, literal)`` — ``path`` the keys and list indices leading to it, in document order — or
    None when every number is finite or the body is not JSON at all (the route's own parser then
    answers for that).
    """
    encoding = json.detect_encoding(body)  # what json.loads (and so FastAPI) decodes it with
    if encoding != "utf-8":  # UTF-16/32, or a byte-order mark: the scan reads UTF-8 without one
        try:
            body = body.decode(encoding).lstrip("\ufeff").encode("utf-8")
        except UnicodeError:
            return None  # json.loads cannot read it either
    if not _suspect(body):
        return None
    marked: list[_NonFinite] = []

    def mark(text: str) -> _NonFinite:
        marked.append(_NonFinite(text))
        return marked[-1]

    def parse_float(text: str) -> float | _NonFinite:
        value = float(text)
        return value if math.isfinite(value) else mark(text)

    def parse_int(text: str) -> int | _NonFinite:
        if len(text.lstrip("-")) > _DOUBLE_DIGITS:  # past the range, and past int()'s digit limit
            return mark(text)
        value = int(text)
        try:
            float(value)
        except OverflowError:
            return mark(text)
        return value

    try:
        value = json.loads(body, parse_constant=mark, parse_float=parse_float, parse_int=parse_int)
    except (ValueError, RecursionError):  # not JSON, not UTF-8/16/32, nested too deep
        return None
    if not marked:
        return None  # the match was inside a string
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, _NonFinite):
            return path, item.text
        if isinstance(item, dict):
            stack.extend(((*path, k), v) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend(((*path, i), v) for i, v in reversed(list(enumerate(item))))
    return None


def _json_content(scope: Scope) -> bool:
    """Whether FastAPI parses this request's body as JSON: ``application/json`` or ``application/*+json``."""
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            media = value.split(b";", 1)[0].strip().lower()
            return media == b"application/json" or (
                media.startswith(b"application/") and media.endswith(b"+json")
            )
    return False  # FastAPI's strict content type: a body without one is not parsed as JSON


def too_large_response(max_bytes: int) -> JSONResponse:
    """The 413 of a body over ``max_bytes``."""
    return JSONResponse({"detail": f"request body larger than {max_bytes} bytes"}, status_code=413)


def _shown(text: str) -> str:
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}… ({len(text)} characters)"


class FiniteJson(HttpMiddleware):
    """ASGI middleware: a JSON body holding a non-finite number is answered 422, before any route sees it.

    The body of a JSON request (:func:`_json_content`) is read in full — at most ``max_body_bytes``
    (413 past it, declared or streamed) — checked with :func:`non_finite_number`, and handed to the
    app unchanged when it passes. The 422 has FastAPI's shape: ``{"detail": [{"type":
    "finite_number", "loc": ["body", …path], "msg": …, "input": literal}]}``. Other bodies (onion
    packets, forms) pass untouched.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int = MAX_JSON_BODY_BYTES) -> None:
        super().__init__(app)
        self.max_body_bytes = max_body_bytes

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _json_content(scope):
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_body_bytes:
                await too_large_response(self.max_body_bytes)(scope, receive, send)
                return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before its body was complete: no one to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await too_large_response(self.max_body_bytes)(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        found = non_finite_number(body)
        if found is not None:
            path, literal = found
            error = {
                "type": "finite_number",
                "loc": ["body", *path],
                "msg": f"{_shown(literal)} is not a finite number: JSON numbers must be finite "
                "(no NaN, no Infinity, nothing beyond ±1.8e308)",
                "input": _shown(literal),
            }
            await JSONResponse({"detail": [error]}, status_code=422)(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect, when it comes

        await self.app(scope, replay, send)


def _encodable(value: Any, depth: int = 0) -> Any:
    """``value`` in a form JSON can carry: non-finite floats by name, bytes as text, long text cut."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, str):
        return _shown(value)
    if isinstance(value, bytes | bytearray):
        return _shown(bytes(value[: _SHOWN * 4]).decode("utf-8", "backslashreplace"))
    if depth >= 32:
        return "…"
    if isinstance(value, dict):
        return {str(k): _encodable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_encodable(v, depth + 1) for v in value]
    return _shown(str(value))


async def validation_error_response(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422 for a request that does not validate, with every value made encodable.

    FastAPI's own handler echoes each error's input as it came: a NaN (JSON cannot encode it) or a
    body of invalid UTF-8 (``jsonable_encoder`` decodes bytes strictly) then made the answer itself
    fail, a 500 with a traceback. Here a non-finite float is given by name, bytes as text with bad
    bytes escaped, and long inputs cut (:func:`_encodable`).
    """
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    return JSONResponse({"detail": [_encodable(e) for e in errors]}, status_code=422)


def install_input_guards(app: FastAPI, *, max_body_bytes: int = MAX_JSON_BODY_BYTES) -> None:
    """Make ``app`` answer every request body it cannot take with a 4xx and a reason, never a 500.

    Installs :class:`FiniteJson` (422 for a non-finite number anywhere in a JSON body, 413 for a
    JSON body over ``max_body_bytes``) and :func:`validation_error_response` for request validation
    errors. Call it in the function that builds the app, before middleware that must run first
    (a body limit) is added: what is added last runs first. Every service calls it — the
    aggregator, the peer host, the witness.
    """
    app.add_exception_handler(RequestValidationError, validation_error_response)
    app.add_middleware(FiniteJson, max_body_bytes=max_body_bytes)


def child_environment() -> tuple[str, dict[str, str]]:
    """The repository root and this environment with ``PYTHONPATH`` starting at that root."""
    root = str(ROOT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    return root, env


def spawn_child(
    args: Sequence[str], *, first_line: str | None = None, stderr: Path | None = None
) -> subprocess.Popen[str]:
    """``python ARGS`` started from the repository root in :func:`child_environment`.

    ``stderr``: a file the child's log is appended to (default: this process's stderr).

    Its stdout is a text pipe. With ``first_line`` its stdin is a text pipe too, left
    open after that line (a newline added) is written and flushed — the child's
    settings or configuration, as JSON; without, its stdin is ``/dev/null``. A child
    that cannot be handed its line is killed before the error propagates.
    """
    root, env = child_environment()
    log = None if stderr is None else stderr.open("a")
    try:
        process = subprocess.Popen(
            [sys.executable, *args],
            stdin=subprocess.DEVNULL if first_line is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
            cwd=root,
        )
    finally:
        if log is not None:
            log.close()  # the child holds its own descriptor
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
