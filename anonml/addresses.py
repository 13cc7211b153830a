"""Where a relay may be: global addresses only, names resolved within a bounded time.

A roster member's relay URL is chosen by the member and fetched by every other member (roster
witnesses, onion packets). A URL whose host is inside a network — the cloud metadata service at
``169.254.169.254``, ``10.0.0.1:6443``, ``localhost:22``, ``0.0.0.0`` — would turn every peer
into a blind request forger and port prober for whoever registered it. So a relay host must be a
*global* address (:func:`address_refusal`, by the stdlib :mod:`ipaddress` tables of the IANA
special-purpose registries), unless loopback test mode allows loopback:

- :func:`host_refusal` decides what can be decided from the text alone: an IPv4 literal must be a
  dotted quad (a host whose last label is a number is read as IPv4 by URL parsers and resolvers,
  in forms like ``2130706433``, ``0x7f.1`` or ``0177.0.0.1``: WHATWG URL Standard, "ends in a
  number"; refused outright rather than decoded), and names in special-use domains that never
  name a public host are refused (``localhost``, ``local``, ``internal``, ``home.arpa``,
  ``invalid``).
- :func:`resolve_host` resolves any other name with :func:`socket.getaddrinfo` in a thread of its
  own, waiting at most ``timeout`` seconds (at most :data:`RESOLVER_THREADS` lookups at once, so a
  resolver that hangs costs bounded threads), and remembers the answer for
  :data:`RESOLVE_TTL_SECONDS`; :func:`resolved_refusal` refuses a name if *any* of its addresses
  is not global (IPv4-mapped, 6to4, Teredo and NAT64 IPv6 addresses are judged by the IPv4
  address they carry), or if it does not resolve in time.

Test networks. A test that runs services in network namespaces of its own (``tests/network``)
gives them private addresses; ``ANONML_TEST_NETWORKS`` (comma-separated CIDR prefixes, e.g.
``10.77.0.0/24``; unset by default) names such networks, and an address inside one is allowed
*only in loopback test mode* (``allow_loopback``, the ``allow_loopback_http`` setting and
policy field) — never in a deployment, whose default checks are unchanged
(:func:`test_networks`, :func:`address_refusal`).

The check resolves the name, and the connection made afterwards resolves it again; a name whose
answers change between the two (DNS rebinding with a zero TTL) would reach an internal address,
so the connection applies the same judgement to the address it connects to
(:func:`connect_check`, passed to :func:`anonml.outbound.fetch`).
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "IPAddress",
    "Resolver",
    "address_refusal",
    "connect_check",
    "host_refusal",
    "is_loopback_host",
    "resolve_host",
    "resolved_refusal",
    "test_networks",
    "TEST_NETWORKS_VARIABLE",
    "RESOLVE_SECONDS",
    "RESOLVE_TTL_SECONDS",
    "RESOLVER_THREADS",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: ``socket.getaddrinfo``'s signature: (host, port, family, type) → [(family, type, proto, name, sockaddr)].
Resolver = Callable[..., Sequence[tuple[Any, ...]]]

#: Seconds a name may take to resolve before the relay is refused (for now: asked again later).
RESOLVE_SECONDS = 2.0

#: Seconds an answer (or a failure) is remembered: a roster names each host once per member.
RESOLVE_TTL_SECONDS = 30.0

#: Lookups in flight at once; one more waits for a slot within its own time limit.
RESOLVER_THREADS = 16

#: Special-use domains whose names never denote a public host: ``localhost`` (RFC 6761 §6.3:
#: loopback), ``invalid`` (RFC 6761 §6.4), ``local`` (multicast DNS, RFC 6762), ``home.arpa``
#: (RFC 8375) and ``internal`` (ICANN's private-use top-level domain, 2024; e.g.
#: ``metadata.google.internal``).
INTERNAL_DOMAINS = ("localhost", "invalid", "local", "home.arpa", "internal")

_HEX_LABEL = re.compile(r"0x[0-9a-f]*")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052's well-known prefix


def _in_domain(host: str, domain: str) -> bool:
    return host == domain or host.endswith("." + domain)


def _carried_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, 6to4, Teredo client, NAT64), if any."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


#: The environment variable naming test networks (module docstring); unset in any deployment.
TEST_NETWORKS_VARIABLE = "ANONML_TEST_NETWORKS"

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@functools.lru_cache(maxsize=8)
def _parse_networks(raw: str) -> tuple[IPNetwork, ...]:
    found = []
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        try:
            found.append(ipaddress.ip_network(entry))
        except ValueError:
            raise ValueError(f"{TEST_NETWORKS_VARIABLE}: {entry[:60]!r} is not a network prefix") from None
    return tuple(found)


def test_networks() -> tuple[IPNetwork, ...]:
    """The networks ``ANONML_TEST_NETWORKS`` names (empty when unset; module docstring).

    Raises
    ------
    ValueError
        Naming the variable and the entry that is not a network prefix (e.g. ``10.77.0.0/24``).
    """
    return _parse_networks(os.environ.get(TEST_NETWORKS_VARIABLE, ""))


def address_refusal(address: IPAddress, *, allow_loopback: bool) -> str | None:
    """Why a relay may not be at ``address``, or None when it may (a global address).

    Refused: loopback (unless ``allow_loopback``), unspecified, link-local, multicast, private,
    reserved, and anything else the IANA registries do not mark global (e.g. the shared address
    space 100.64.0.0/10, documentation prefixes). An IPv6 address carrying an IPv4 address is
    judged by that address as well. In loopback test mode (``allow_loopback``) an address inside
    a network named in ``ANONML_TEST_NETWORKS`` is allowed too (:func:`test_networks`).
    """
    carried = _carried_ipv4(address)
    if carried is not None:
        inner = address_refusal(carried, allow_loopback=allow_loopback)
        if inner is not None:
            return f"{inner} ({carried} inside {address})"
    if address.is_loopback:
        return None if allow_loopback else "a loopback address (allowed only in loopback test mode)"
    if allow_loopback and any(address in network for network in test_networks()):
        return None  # a network a test built for itself, declared in the environment
    kinds = (
        ("an unspecified", address.is_unspecified),
        ("a link-local", address.is_link_local),
        ("a multicast", address.is_multicast),
        ("a reserved", address.is_reserved),
        ("a private", address.is_private),
        ("a non-global", not address.is_global),
    )
    for kind, applies in kinds:
        if applies:
            return f"{kind} address"
    return None


def connect_check(*, allow_loopback: bool) -> Callable[[IPAddress], str | None]:
    """:func:`address_refusal` for the address a connection is about to use (module docstring)."""
    return functools.partial(address_refusal, allow_loopback=allow_loopback)


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (lowercase, IPv6 in brackets) is loopback by its text alone."""
    if host.startswith("["):
        try:
            return ipaddress.IPv6Address(host[1:-1]).is_loopback
        except ValueError:
            return False
    if _in_domain(host, "localhost"):
        return True
    try:
        return ipaddress.IPv4Address(host).is_loopback
    except ValueError:
        return False


def host_refusal(host: str, *, allow_loopback: bool) -> str | None:
    """Why a relay may not be at ``host`` judging by its text alone, or None (module docstring).

    ``host`` is as a URL writes it, lowercase (IPv6 in brackets). A name outside the special-use
    domains passes here: whether it may be used depends on what it resolves to
    (:func:`resolved_refusal`).
    """
    if host.startswith("["):
        try:
            literal: IPAddress = ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return "not an IPv6 address"
        return address_refusal(literal, allow_loopback=allow_loopback)
    last = host.rsplit(".", 1)[-1]
    if last.isdigit() or _HEX_LABEL.fullmatch(last):
        try:
            literal = ipaddress.IPv4Address(host)
        except ValueError:
            return (
                "a numeric host that is not a dotted-quad IPv4 address (resolvers read forms like "
                "2130706433, 0x7f.1 or 0177.0.0.1 as addresses; write a global address as a.b.c.d)"
            )
        return address_refusal(literal, allow_loopback=allow_loopback)
    if _in_domain(host, "localhost"):
        return None if allow_loopback else "a loopback name (allowed only in loopback test mode)"
    for domain in INTERNAL_DOMAINS:
        if _in_domain(host, domain):
            return f"a name under .{domain}, a special-use domain that never names a public host"
    return None


_cache: dict[tuple[Resolver, str], tuple[float, tuple[IPAddress, ...] | str]] = {}
_cache_lock = threading.Lock()
_slots = threading.BoundedSemaphore(RESOLVER_THREADS)
_CACHE_ENTRIES = 4096


def _lookup(host: str, timeout: float, resolver: Resolver) -> tuple[IPAddress, ...] | str:
    """The addresses of ``host``, or why there are none, within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    if not _slots.acquire(timeout=timeout):
        return f"{RESOLVER_THREADS} lookups already waiting on the resolver"
    answer: list[tuple[IPAddress, ...] | str] = []
    done = threading.Event()

    def run() -> None:
        try:
            infos = resolver(host, None, 0, socket.SOCK_STREAM)
            found = []
            for info in infos:
                if info[0] in (socket.AF_INET, socket.AF_INET6):
                    found.append(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]))
            answer.append(tuple(found) if found else "no IPv4 or IPv6 address")
        except (OSError, UnicodeError, ValueError) as exc:
            answer.append(f"{type(exc).__name__}: {exc}")
        finally:
            _slots.release()
            done.set()

    # A daemon thread, not a pool: a lookup that never returns must not hold up the process's exit.
    threading.Thread(target=run, daemon=True, name="resolve-relay-host").start()
    if not done.wait(max(0.0, deadline - time.monotonic())):
        return f"no answer from the resolver within {timeout:g} s"
    return answer[0]


def resolve_host(
    host: str, *, timeout: float = RESOLVE_SECONDS, resolver: Resolver | None = None
) -> tuple[IPAddress, ...] | str:
    """The addresses ``host`` resolves to, or a reason it does not, within ``timeout`` seconds.

    ``resolver`` defaults to :func:`socket.getaddrinfo` (looked up at each call). Answers and
    failures are remembered per resolver for :data:`RESOLVE_TTL_SECONDS`.
    """
    resolve = resolver if resolver is not None else socket.getaddrinfo
    key = (resolve, host)
    now = time.monotonic()
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
    answer = _lookup(host, timeout, resolve)
    with _cache_lock:
        if len(_cache) >= _CACHE_ENTRIES:
            for stale in [k for k, (until, _) in _cache.items() if until <= now] or list(_cache)[:1]:
                _cache.pop(stale, None)
        _cache[key] = (time.monotonic() + RESOLVE_TTL_SECONDS, answer)
    return answer


def resolved_refusal(
    host: str, *, allow_loopback: bool, timeout: float = RESOLVE_SECONDS, resolver: Resolver | None = None
) -> str | None:
    """Why a relay may not be at ``host`` (text, then every address it resolves to), or None.

    A literal address or special-use name is judged by :func:`host_refusal` without a lookup;
    any other name by each address :func:`resolve_host` gives (all must be global), and refused
    when it does not resolve within ``timeout`` seconds.
    """
    refusal = host_refusal(host, allow_loopback=allow_loopback)
    if refusal is not None or host.startswith("[") or is_loopback_host(host):
        return refusal
    last = host.rsplit(".", 1)[-1]
    if last.isdigit() or _HEX_LABEL.fullmatch(last):
        return None  # a global dotted quad: nothing to resolve
    answer = resolve_host(host, timeout=timeout, resolver=resolver)
    if isinstance(answer, str):
        return f"a name that did not resolve ({answer})"
    for address in answer:
        refusal = address_refusal(address, allow_loopback=allow_loopback)
        if refusal is not None:
            return f"a name that resolves to {address}, {refusal}"
    return None
