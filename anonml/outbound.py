"""Every outbound HTTP request of a service: bounded in total time and in size.

Every request a peer makes — to the aggregator (:mod:`peer.client`), to
another member's relay (packets, roster fingerprints), to the intake — and
every request the aggregator makes of a witness goes through :func:`fetch`, which bounds it
twice: a **total deadline** (connect, send, status line, headers and the
whole body; not a per-read timeout, which a server trickling one byte every
two seconds would never trip) and a **response-size cap** (a declared
``Content-Length`` over the cap is refused before reading; otherwise at most
cap + 1 bytes are read). The deadline is kept by one watchdog thread that
shuts the connection down when it passes, so the blocked read returns at once
and the worker thread is free again — whatever the answer's shape: HTTP/1.0
or ``Connection: close`` (where :mod:`http.client` lets go of the socket once
the headers are in and the response reads on from it), chunked, or trickled
byte by byte. The watchdog holds its own duplicate of the connection's
descriptor for that (:class:`_Guard`). The name lookup runs in a thread of
its own that the request stops waiting for at the deadline, and the TCP
connect and TLS handshake are inside the deadline too. No member can hold a
worker longer than the deadline of the request it answers. By default connections are not
reused (``Connection: close``). A relay's releases pass a :class:`KeepAlive`:
a connection whose answer was read in full and in time goes back to it and
carries the next request to the same origin; a kept connection that turns
out closed by the other side is replaced once, inside the same deadline, and
any other failure closes it — so what a previous request did still cannot
delay the next beyond its own deadline.

Where a request may go. A caller that checked a host's addresses before
connecting (a member's relay must be at global addresses:
:mod:`anonml.addresses`) passes the same judgement as ``address_check``; it is
applied to each address the connection itself resolves and connects to, so a
name that answers one address to the check and another to the connection (DNS
rebinding with a zero TTL) reaches nothing it may not.

TLS. An ``https`` URL's certificate is verified (chain and host name, Python's
:func:`ssl.create_default_context`) against the system's store, or — when one
is named — against a CA bundle only: :func:`trust_ca_bundle` (what a service
does with its ``ca_bundle`` setting) or else the ``ANONML_CA_BUNDLE``
environment variable, read at the first request. This module holds the one
client context of the process; :func:`requests_verify` gives the same choice
to the few commands that use :mod:`requests`. A failed verification is an
:class:`OutboundError` naming the URL, the reason and what was trusted.
Plain ``http`` goes only to a loopback host (``127.0.0.0/8``, ``[::1]``,
``localhost``): everywhere else traffic between members crosses networks
nobody in the protocol controls. The one exception is a test network named in
``ANONML_TEST_NETWORKS`` (:func:`anonml.addresses.test_networks`; never set by
default): the network-namespace tests (``tests/network``) run services on
private addresses there.
"""

from __future__ import annotations

import datetime
import email.utils
import heapq
import http.client
import ipaddress
import itertools
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from anonml.addresses import TEST_NETWORKS_VARIABLE, IPAddress, is_loopback_host, test_networks
from anonml.errors import ProtocolError

__all__ = [
    "Reply",
    "OutboundError",
    "RefusedAddress",
    "AddressCheck",
    "KeepAlive",
    "fetch",
    "post",
    "client_context",
    "trust_ca_bundle",
    "trusted_roots",
    "requests_verify",
    "plain_http_refusal",
    "CA_BUNDLE_VARIABLE",
    "TEST_NETWORKS_VARIABLE",
    "PACKET_DEADLINE",
    "AGGREGATOR_DEADLINE",
    "REPLY_CAP",
    "retry_after_seconds",
]

#: Seconds a packet send (to a relay or the intake) may take in all.
PACKET_DEADLINE = 5.0
#: Seconds an ordinary call of a peer to the aggregator may take in all (larger documents say their own).
AGGREGATOR_DEADLINE = 15.0
#: Bytes of an answer a peer reads by default (a roster or a model asks for more).
REPLY_CAP = 1 << 20

#: Why a connection may not go to an address, or None when it may (e.g. a partial of
#: :func:`anonml.addresses.address_refusal`).
AddressCheck = Callable[[IPAddress], "str | None"]


class OutboundError(ProtocolError):
    """An outbound request failed: unreachable, too slow in total, or an answer too large."""


class RefusedAddress(OutboundError):
    """The host resolved, when connecting, only to addresses the request's ``address_check`` refuses."""


class _Refused(OSError):
    """Raised inside a connect: every address the name gave was refused by the check."""


@dataclass(frozen=True)
class Reply:
    """A complete answer: status, body (at most the cap), and the URL asked."""

    status: int
    body: bytes
    url: str
    content_type: str = ""
    retry_after: float | None = None  # seconds the server asked to wait (its Retry-After), if it did

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


class _Guard:
    """The connection of one exchange, for the watchdog to shut down when its deadline passes.

    It keeps its own duplicate of the socket's descriptor: :mod:`http.client`
    drops its reference (``conn.sock = None``) once the headers of an HTTP/1.0
    or ``Connection: close`` answer are read, while the response reads the
    body on from the same socket. ``shutdown`` acts on the connection, not on
    one descriptor, so shutting the duplicate down ends every read of the
    response as well; and since only this object closes the duplicate (in
    :meth:`release`, under the same lock as :meth:`expire`), the watchdog never
    acts on a descriptor number that another connection reuses meanwhile.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dup: socket.socket | None = None
        self._expired = False
        self._released = False

    def attach(self, sock: socket.socket) -> None:
        """Watch the connection of ``sock`` (shut down at once if the deadline already passed)."""
        with self._lock:
            if self._released:
                return
            if self._dup is not None:
                self._dup.close()
            self._dup = socket.fromfd(sock.fileno(), sock.family, sock.type)
            if self._expired:
                self._shutdown()

    def expire(self) -> None:
        """The deadline passed: shut the connection down (now, or as soon as it is attached)."""
        with self._lock:
            self._expired = True
            if not self._released:
                self._shutdown()

    def release(self) -> None:
        """The exchange is over: close the duplicate; :meth:`expire` does nothing from now on."""
        with self._lock:
            self._released = True
            if self._dup is not None:
                self._dup.close()
                self._dup = None

    def _shutdown(self) -> None:
        if self._dup is not None:
            try:
                self._dup.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # not connected (any more): nothing to wake


class _Watchdog:
    """One thread that expires the :class:`_Guard` of each exchange when its deadline passes."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, _Guard]] = []
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, end: float, guard: _Guard) -> None:
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="outbound-deadlines", daemon=True)
                self._thread.start()
            heapq.heappush(self._heap, (end, next(self._seq), guard))
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    wait = None if not self._heap else self._heap[0][0] - time.monotonic()
                    self._cond.wait(timeout=wait)
                _, _, guard = heapq.heappop(self._heap)
            guard.expire()  # a no-op for an exchange already over


_WATCHDOG = _Watchdog()

#: The environment variable naming a CA bundle (PEM) that replaces the system store for every client.
CA_BUNDLE_VARIABLE = "ANONML_CA_BUNDLE"


def client_context(ca_bundle: Path | None = None) -> ssl.SSLContext:
    """A TLS client context that verifies the chain and the host name, against ``ca_bundle`` or the system.

    :func:`ssl.create_default_context`: ``CERT_REQUIRED``, ``check_hostname``,
    TLS 1.2 at least. With ``ca_bundle``, only the certificates in that PEM
    file are trusted (as ``requests``' ``verify=<path>``).

    Raises
    ------
    OutboundError
        Naming the file when it cannot be read or holds no PEM certificate.
    """
    if ca_bundle is None:
        return ssl.create_default_context()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED and check_hostname; no system roots
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_verify_locations(cafile=str(ca_bundle))
    except (OSError, ssl.SSLError) as exc:
        raise OutboundError(
            f"CA bundle {ca_bundle}: not a readable PEM file of certificates ({exc})"
        ) from None
    if not context.get_ca_certs():
        raise OutboundError(f"CA bundle {ca_bundle}: holds no CA certificate")
    return context


@dataclass(frozen=True)
class _Trust:
    """The process's client context and what it trusts (for error messages)."""

    context: ssl.SSLContext
    ca_bundle: Path | None


_trust: _Trust | None = None
_trust_lock = threading.Lock()


def trust_ca_bundle(ca_bundle: Path | None) -> None:
    """Verify every later https request of this process against ``ca_bundle`` (None: the system store).

    Raises :class:`OutboundError` naming the file when it is not a bundle of
    certificates (the trust in force stays as it was).
    """
    global _trust
    trust = _Trust(client_context(ca_bundle), ca_bundle)
    with _trust_lock:
        _trust = trust


def _current_trust() -> _Trust:
    global _trust
    with _trust_lock:
        if _trust is None:
            named = os.environ.get(CA_BUNDLE_VARIABLE) or None
            bundle = Path(named) if named is not None else None
            _trust = _Trust(client_context(bundle), bundle)
        return _trust


def trusted_roots() -> str:
    """What https certificates are verified against, in words (for messages)."""
    bundle = _current_trust().ca_bundle
    return "the system's certificate store" if bundle is None else f"the CA bundle {bundle}"


def requests_verify() -> str | bool:
    """``requests``' ``verify=`` for the same trust as :func:`fetch` (a bundle's path, or True)."""
    bundle = _current_trust().ca_bundle
    return str(bundle) if bundle is not None else True


def plain_http_refusal(host: str) -> str | None:
    """Why plain http may not go to ``host`` (as a URL writes it), or None (loopback, or a test network)."""
    host = host.lower()
    if is_loopback_host(host) or is_loopback_host(f"[{host}]"):
        return None
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        address = None
    try:
        networks = test_networks()
    except ValueError as exc:
        return str(exc)
    if address is not None and any(address in network for network in networks):
        return None
    return (
        "plain http goes only to a loopback host (or to a test network named in "
        f"{TEST_NETWORKS_VARIABLE}); use https"
    )


_Origin = tuple[str, str, int | None]


class KeepAlive:
    """Idle connections kept for reuse, per origin (scheme, host, port); see the module docstring.

    At most ``per_origin`` idle connections are kept per origin, none idle for
    longer than ``idle_seconds`` (servers close idle keep-alive connections:
    uvicorn after 5 s).
    """

    def __init__(self, per_origin: int = 4, idle_seconds: float = 4.0) -> None:
        self.per_origin, self.idle_seconds = per_origin, idle_seconds
        self._idle: dict[_Origin, list[tuple[float, _Connection]]] = {}
        self._lock = threading.Lock()

    def take(self, origin: _Origin) -> _Connection | None:
        """A kept connection to ``origin`` (the most recently used), or None."""
        stale = []
        conn = None
        with self._lock:
            kept = self._idle.get(origin, [])
            while kept:
                since, candidate = kept.pop()
                if time.monotonic() - since < self.idle_seconds:
                    conn = candidate
                    break
                stale.append(candidate)
        for old in stale:
            old.close()
        return conn

    def give(self, origin: _Origin, conn: _Connection) -> None:
        """Keep ``conn`` for the next request to ``origin`` (closed instead if enough are kept)."""
        with self._lock:
            kept = self._idle.setdefault(origin, [])
            if len(kept) < self.per_origin:
                kept.append((time.monotonic(), conn))
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for kept in idle.values():
            for _, conn in kept:
                conn.close()


def fetch(
    method: str,
    url: str,
    body: bytes | None = None,
    content_type: str | None = None,
    *,
    deadline: float = 15.0,
    max_bytes: int = REPLY_CAP,
    keep_alive: KeepAlive | None = None,
    address_check: AddressCheck | None = None,
    authorization: str | None = None,
) -> Reply:
    """One HTTP request, complete within ``deadline`` seconds, reading at most ``max_bytes``.

    Raises :class:`OutboundError` naming the URL and what went wrong (no
    answer in time, answer too large, connection failed, not http(s), plain
    http to a host that is neither loopback nor in a test network, a
    certificate that does not verify — module docstring).
    Any status is returned: callers decide what a refusal means. With
    ``keep_alive``, the connection comes from and goes back to it (module
    docstring). With ``address_check``, the connection goes only to an
    address the check allows (:class:`RefusedAddress` otherwise), and only a
    kept connection made under a check is reused. ``authorization``: the value of an
    ``Authorization`` header (an admin's bearer token).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise OutboundError(f"{url[:100]}: not an http(s) URL")
    if parts.scheme == "http":
        refusal = plain_http_refusal(parts.hostname)
        if refusal is not None:
            raise OutboundError(f"{url[:100]}: {refusal}")
    end = time.monotonic() + deadline
    origin: _Origin = (parts.scheme, parts.hostname, parts.port)
    headers = {"accept-encoding": "identity"}
    if keep_alive is None:
        headers["connection"] = "close"
    if content_type is not None:
        headers["content-type"] = content_type
    if authorization is not None:
        headers["authorization"] = authorization
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    req = _Request(
        method, url, path, body, headers, end, deadline, max_bytes, origin, keep_alive, address_check
    )
    conn = keep_alive.take(origin) if keep_alive is not None else None
    if conn is not None and address_check is not None and conn.address_check is None:
        conn.close()  # made without a check: its address was never judged
        conn = None
    if conn is None:
        return _exchange(_connect(origin), req)
    try:
        return _exchange(conn, req)
    except _Stale:  # the other side had closed the kept connection: once more on a new one
        return _exchange(_connect(origin), req)


@dataclass(frozen=True)
class _Request:
    """One request of :func:`fetch` and its bounds."""

    method: str
    url: str
    path: str
    body: bytes | None
    headers: dict[str, str]
    end: float  # time.monotonic() by which the whole answer is in
    deadline: float
    max_bytes: int
    origin: _Origin
    keep_alive: KeepAlive | None
    address_check: AddressCheck | None = None


class _Stale(Exception):
    """A kept connection failed before any answer arrived (closed by the other side meanwhile)."""


class _Connection(http.client.HTTPConnection):
    """:mod:`http.client`'s connection, whose connect stays inside the deadline of the exchange under way.

    ``guard`` and ``end`` are those of the exchange (set by :func:`_exchange`
    before each request): the name lookup and the TCP connect end by ``end``
    (:func:`_open`), and the socket is in ``guard`` before any TLS byte is
    read, so a handshake trickled by the other side is cut at the deadline too.
    """

    def __init__(self, host: str, port: int | None, tls: bool) -> None:
        self.default_port = 443 if tls else 80  # before __init__: it fills in a missing port
        super().__init__(host, port)
        self.tls = tls
        self.guard = _Guard()
        self.end = 0.0
        self.address_check: AddressCheck | None = None

    def connect(self) -> None:
        sock = _open(self.host, self.port, self.end, self.address_check)
        self.guard.attach(sock)
        if self.tls:
            sock = _current_trust().context.wrap_socket(sock, server_hostname=self.host)
        self.sock = sock


def _connect(origin: _Origin) -> _Connection:
    scheme, host, port = origin
    return _Connection(host, port, scheme == "https")


def _resolve(host: str, port: int, end: float) -> list[tuple]:
    """``getaddrinfo`` of ``host:port`` by ``end`` (monotonic); an address literal is not looked up.

    A lookup cannot be interrupted, so a name runs in a daemon thread of its
    own and the request stops waiting for it at ``end``: a slow or silent name
    server then costs the request its deadline, and that thread the resolver's
    own timeout.
    """
    try:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        pass  # a name, not an address
    found: list[list[tuple] | OSError] = []

    def lookup() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as exc:
            found.append(exc)

    thread = threading.Thread(target=lookup, name="outbound-lookup", daemon=True)
    thread.start()
    thread.join(max(0.0, end - time.monotonic()))
    if not found:
        raise TimeoutError(f"the name {host} was not resolved in time")
    if isinstance(found[0], OSError):
        raise found[0]
    return found[0]


def _open(host: str, port: int, end: float, address_check: AddressCheck | None = None) -> socket.socket:
    """A TCP connection to ``host:port`` (each allowed address in turn) made by ``end`` (monotonic)."""
    failure: OSError = TimeoutError(f"no connection to {host}:{port} in time")
    for family, kind, proto, _, address in _resolve(host, port, end):
        if address_check is not None:
            ip = ipaddress.ip_address(str(address[0]).split("%", 1)[0])
            refusal = address_check(ip)
            if refusal is not None:
                failure = _Refused(f"{host} resolved to {ip}, {refusal}")
                continue
        remaining = end - time.monotonic()
        if remaining <= 0:
            break
        sock = socket.socket(family, kind, proto)
        sock.settimeout(remaining)  # per operation; the whole exchange is bounded by the watchdog
        try:
            sock.connect(address)
        except OSError as exc:
            sock.close()
            failure = exc
            continue
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    raise failure


def _exchange(conn: _Connection, req: _Request) -> Reply:
    """Send one request on ``conn`` and read its answer, all before ``req.end``; see :func:`fetch`."""
    reused = conn.sock is not None
    guard = conn.guard = _Guard()
    conn.end = req.end
    if not reused:
        conn.address_check = req.address_check
    if reused:
        guard.attach(conn.sock)
    _WATCHDOG.watch(req.end, guard)
    response: http.client.HTTPResponse | None = None
    kept = False
    try:
        conn.request(req.method, req.path, body=req.body, headers=req.headers)
        response = conn.getresponse()
        declared = response.getheader("content-length")
        if declared is not None and declared.isdigit() and int(declared) > req.max_bytes:
            raise OutboundError(
                f"{req.url[:100]}: answer of {declared} bytes exceeds the cap of {req.max_bytes}"
            )
        data = response.read(req.max_bytes + 1)
        if len(data) > req.max_bytes:
            raise OutboundError(f"{req.url[:100]}: answer exceeds the cap of {req.max_bytes} bytes")
        if time.monotonic() > req.end:
            raise OutboundError(f"{req.url[:100]}: no complete answer within {req.deadline:g} s")
        reply = Reply(
            response.status,
            data,
            req.url,
            response.getheader("content-type") or "",
            retry_after_seconds(response.getheader("retry-after")),
        )
        if req.keep_alive is not None and response.isclosed() and not response.will_close:
            guard.release()
            req.keep_alive.give(req.origin, conn)
            kept = True
        return reply
    except OutboundError:
        raise
    except _Refused as exc:
        raise RefusedAddress(f"{req.url[:100]}: refused to connect: {exc}") from None
    except ssl.SSLCertVerificationError as exc:
        raise OutboundError(
            f"{req.url[:100]}: TLS certificate verification failed: {exc.verify_message or exc.reason} "
            f"(verified against {trusted_roots()})"
        ) from None
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if reused and response is None and time.monotonic() < req.end:
            raise _Stale() from None
        if time.monotonic() >= req.end:
            raise OutboundError(f"{req.url[:100]}: no complete answer within {req.deadline:g} s") from None
        raise OutboundError(f"{req.url[:100]}: {type(exc).__name__}: {exc}") from None
    finally:
        if not kept:
            guard.release()
            if response is not None:
                response.close()  # an answer of HTTP/1.0 or ``Connection: close`` holds the socket
            conn.close()


#: The longest Retry-After a client takes as given (an hour); a longer one is read as this.
MAX_RETRY_AFTER = 3600.0


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (RFC 9110 §10.2.3), or None when absent or unreadable.

    Either delay-seconds (a non-negative integer) or an HTTP-date, taken relative to ``now``
    (``time.time()``; a date in the past is 0). Capped at :data:`MAX_RETRY_AFTER`, so a server
    cannot park a client for longer than any phase lasts.
    """
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return min(MAX_RETRY_AFTER, float(int(value[:12])))
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110's IMF-fixdate is GMT; an obsolete form without a zone too
        when = when.replace(tzinfo=datetime.UTC)
    wait = when.timestamp() - (time.time() if now is None else now)
    return min(MAX_RETRY_AFTER, max(0.0, wait))


def post(
    url: str,
    data: bytes,
    content_type: str,
    deadline: float = PACKET_DEADLINE,
    max_bytes: int = 4096,
    keep_alive: KeepAlive | None = None,
    address_check: AddressCheck | None = None,
) -> Reply:
    """POST ``data`` (packets or intake deliveries) with :func:`fetch`'s bounds; a small answer."""
    return fetch(
        "POST",
        url,
        data,
        content_type,
        deadline=deadline,
        max_bytes=max_bytes,
        keep_alive=keep_alive,
        address_check=address_check,
    )
