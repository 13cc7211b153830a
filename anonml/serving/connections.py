"""What keeps slow or greedy clients from exhausting a server: per-connection deadlines and limits.

uvicorn's own h11 protocol times out only idle kept-alive connections; :class:`GuardedH11Protocol`
adds a deadline to every phase of a request and caps connections per client and in all.
"""

from __future__ import annotations

import asyncio
import ipaddress
import resource
from dataclasses import dataclass
from typing import Any, ClassVar
from weakref import WeakKeyDictionary

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["ConnectionLimits", "GuardedH11Protocol", "guarded_protocol"]


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

    def shutdown(self) -> None:
        """At the server's shutdown: an idle connection is aborted, a busy one closes after its answer.

        uvicorn closes an idle connection, and the server waits until every connection is gone. Over
        TLS a close first sends ``close_notify`` and waits for the client's, up to asyncio's
        30 s SSL shutdown timeout: one kept-alive client that reads nothing more (a relay's peer,
        a proxy) held a stopping service for those 30 s. Nothing is pending on an idle
        connection, so aborting it loses nothing; the client's next request fails, as it would
        against a stopped server.
        """
        if self.cycle is None or self.cycle.response_complete:
            self.transport.abort()  # connection_lost follows, and cancels any deadline
        else:
            super().shutdown()

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
