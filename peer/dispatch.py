"""Timed, blocking work off the request path, and every outbound HTTP request of a peer.

Relays hold packets until their release time and peers send inside their
window; both hand a callable and a time to one :class:`Dispatcher`. One timer
thread keeps a heap of due times; due work runs on a small thread pool so a
slow next hop never delays the others.

Outbound HTTP. Every request a peer makes — to the aggregator
(:mod:`peer.client`), to another member's relay (packets, roster
fingerprints), to the intake — goes through :func:`fetch`, which bounds it
twice: a **total deadline** (connect, send, status line, headers and the
whole body; not a per-read timeout, which a server trickling one byte every
two seconds would never trip) and a **response-size cap** (a declared
``Content-Length`` over the cap is refused before reading; otherwise at most
cap + 1 bytes are read). The deadline is kept by one watchdog thread that
shuts the socket down when it passes, so the blocked read returns at once
and the worker thread is free again. No member can hold a worker longer
than the deadline of the request it answers. Connections are not reused
(``Connection: close``): nothing a previous request did can delay the next.
"""

from __future__ import annotations

import heapq
import http.client
import itertools
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

from anonml.errors import ProtocolError

__all__ = ["Dispatcher", "Reply", "OutboundError", "fetch", "post", "PACKET_DEADLINE", "REPLY_CAP"]

log = logging.getLogger("anonml.peer")

#: Seconds a packet send (to a relay or the intake) may take in all.
PACKET_DEADLINE = 5.0
#: Bytes of an answer a peer reads by default (a roster or a model asks for more).
REPLY_CAP = 1 << 20


class OutboundError(ProtocolError):
    """An outbound request failed: unreachable, too slow in total, or an answer too large."""


@dataclass(frozen=True)
class Reply:
    """A complete answer: status, body (at most the cap), and the URL asked."""

    status: int
    body: bytes
    url: str
    content_type: str = ""

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


class _Watchdog:
    """One thread that shuts sockets down when their request's deadline passes."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, http.client.HTTPConnection]] = []
        self._live: set[int] = set()
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, end: float, conn: http.client.HTTPConnection) -> int:
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="outbound-deadlines", daemon=True)
                self._thread.start()
            handle = next(self._seq)
            heapq.heappush(self._heap, (end, handle, conn))
            self._live.add(handle)
            self._cond.notify()
            return handle

    def cancel(self, handle: int) -> None:
        with self._cond:
            self._live.discard(handle)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    wait = None if not self._heap else self._heap[0][0] - time.monotonic()
                    self._cond.wait(timeout=wait)
                _, handle, conn = heapq.heappop(self._heap)
                expired = handle in self._live
                self._live.discard(handle)
            if expired and conn.sock is not None:
                try:
                    conn.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already closed


_WATCHDOG = _Watchdog()
_TLS = ssl.create_default_context()


def fetch(
    method: str,
    url: str,
    body: bytes | None = None,
    content_type: str | None = None,
    *,
    deadline: float = 15.0,
    max_bytes: int = REPLY_CAP,
) -> Reply:
    """One HTTP request, complete within ``deadline`` seconds, reading at most ``max_bytes``.

    Raises :class:`OutboundError` naming the URL and what went wrong (no
    answer in time, answer too large, connection failed, not http(s)).
    Any status is returned: callers decide what a refusal means.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise OutboundError(f"{url[:100]}: not an http(s) URL")
    end = time.monotonic() + deadline
    if parts.scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            parts.hostname, parts.port, timeout=deadline, context=_TLS
        )
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=deadline)
    handle = _WATCHDOG.watch(end, conn)
    headers = {"connection": "close", "accept-encoding": "identity"}
    if content_type is not None:
        headers["content-type"] = content_type
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        declared = response.getheader("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_bytes:
            raise OutboundError(f"{url[:100]}: answer of {declared} bytes exceeds the cap of {max_bytes}")
        data = response.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise OutboundError(f"{url[:100]}: answer exceeds the cap of {max_bytes} bytes")
        if time.monotonic() > end:
            raise OutboundError(f"{url[:100]}: no complete answer within {deadline:g} s")
        return Reply(response.status, data, url, response.getheader("content-type") or "")
    except OutboundError:
        raise
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if time.monotonic() >= end:
            raise OutboundError(f"{url[:100]}: no complete answer within {deadline:g} s") from None
        raise OutboundError(f"{url[:100]}: {type(exc).__name__}: {exc}") from None
    finally:
        _WATCHDOG.cancel(handle)
        conn.close()


def post(
    url: str, data: bytes, content_type: str, deadline: float = PACKET_DEADLINE, max_bytes: int = 4096
) -> Reply:
    """POST ``data`` (packets or intake deliveries) with :func:`fetch`'s bounds; a small answer."""
    return fetch("POST", url, data, content_type, deadline=deadline, max_bytes=max_bytes)


class Dispatcher:
    """Runs ``fn`` at (or just after) POSIX time ``when``; see the module docstring."""

    def __init__(self, workers: int = 16, name: str = "dispatch") -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._closed = False
        self.pending = 0
        self._thread = threading.Thread(target=self._run, name=f"{name}-timer", daemon=True)
        self._thread.start()

    def at(self, when: float, fn: Callable[[], None]) -> None:
        """Schedule ``fn`` for POSIX time ``when`` (now if it is in the past)."""
        with self._cond:
            if self._closed:
                raise RuntimeError("dispatcher is closed")
            heapq.heappush(self._heap, (when, next(self._seq), fn))
            self.pending += 1
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._heap or self._heap[0][0] > time.time()):
                    timeout = None if not self._heap else max(0.0, self._heap[0][0] - time.time())
                    self._cond.wait(timeout=timeout if timeout is None else min(timeout, 1.0))
                if self._closed:
                    return
                _, _, fn = heapq.heappop(self._heap)
            self._pool.submit(self._guarded, fn)

    def _guarded(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:  # a failed send is counted by the caller's callable; never kill the pool
            log.exception("scheduled work failed")
        finally:
            with self._cond:
                self.pending -= 1

    def idle(self) -> bool:
        """True when nothing is scheduled or running."""
        with self._cond:
            return self.pending == 0

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify_all()
        self._thread.join(timeout=5)
        self._pool.shutdown(wait=True, cancel_futures=True)
