"""Relay URLs that point inside a network are refused (9).

A registrant chooses its relay URL and every other member connects to it: a URL at
``169.254.169.254``, ``10.0.0.1:6443``, ``localhost:22``, ``0.0.0.0``, ``2130706433`` or
``metadata.google.internal`` made each peer a blind request forger and port prober. Here: every
literal and numeric form, refused by its text (:func:`anonml.protocol.check_relay_url`, with and
without loopback test mode); names resolving inside, refused just before a connection
(:func:`anonml.protocol.check_relay_address`) with a stand-in resolver, so nothing depends on the
network; the real aggregator refusing such registrations; and two real peers asked to connect to
an internal service (a listener on this machine's private address, reached through a name the
test's resolver maps there) — a member comparing roster fingerprints and a relay forwarding a
packet — neither of which may ever open a connection to it.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from anonml.crypto import Hop, Identity, Redemption, SphinxRelay, WindowSchedule, build_packet
from anonml.privacy import PrivacyLedger
from anonml.protocol import check_relay_address, check_relay_url
from anonml.store import EventStore
from peer.app import start_peer_server
from peer.db import PeerDB
from peer.host import PeerHost
from peer.participant import PeerNode
from peer.policy import PeerPolicy
from peer.relay import REFUSED_ADDRESS, RelayRound
from tests.adversary.malicious import MaliciousAggregator, mooc_draft, start_peers
from tests.aggregator.helpers import WirePeer, post
from tests.loopback import Listener
from tests.peer.helpers import non_loopback_address
from tests.waiting import wait_until

HEX = "ab" * 16

#: Hosts refused by their text in every mode: (host as written in the URL, what the refusal names).
INSIDE = [
    ("169.254.169.254", "link-local"),
    ("10.0.0.1:6443", "private"),
    ("172.16.5.4", "private"),
    ("192.168.1.1", "private"),
    ("100.64.0.1", "non-global"),
    ("0.0.0.0", "unspecified"),
    ("224.0.0.251", "multicast"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "address"),
    ("192.0.2.7", "address"),
    ("2130706433", "dotted-quad"),
    ("0x7f.1", "dotted-quad"),
    ("0x7f000001", "dotted-quad"),
    ("0177.0.0.1", "dotted-quad"),
    ("017700000001", "dotted-quad"),
    ("127.1", "dotted-quad"),
    ("10.1", "dotted-quad"),
    ("169.254.169.254.1", "dotted-quad"),
    ("010.0.0.1", "dotted-quad"),
    ("metadata.google.internal", ".internal"),
    ("printer.local", ".local"),
    ("router.home.arpa", ".home.arpa"),
    ("x.invalid", ".invalid"),
    ("[::ffff:169.254.169.254]", "not of the form"),
    ("[::ffff:127.0.0.1]", "not of the form"),
    ("[fe80::1]", "not of the form"),
]

#: Loopback hosts: refused outside loopback test mode, allowed in it.
LOOPBACK = ["127.0.0.1", "127.9.9.9:8080", "localhost:22", "relay.localhost", "[::1]"]


@pytest.mark.parametrize("host,why", INSIDE)
@pytest.mark.parametrize("test_mode", [False, True])
def test_internal_hosts_are_refused_by_their_text_in_every_mode(host, why, test_mode):
    url = f"https://{host}/relay/{HEX}"
    with pytest.raises(ValueError, match="relay URL") as refused:
        check_relay_url(url, allow_loopback_http=test_mode)
    assert why in str(refused.value)
    with pytest.raises(ValueError, match="relay URL"):  # and before any connection, without a lookup
        check_relay_address(url, allow_loopback_http=test_mode, resolver=_never_called)


@pytest.mark.parametrize("host", LOOPBACK)
def test_loopback_is_refused_unless_loopback_test_mode_allows_it(host):
    url = f"https://{host}/relay/{HEX}"
    with pytest.raises(ValueError, match="loopback"):
        check_relay_url(url, allow_loopback_http=False)
    assert check_relay_url(url, allow_loopback_http=True) == url
    assert check_relay_address(url, allow_loopback_http=True, resolver=_never_called) == url


@pytest.mark.parametrize("host", ["8.8.8.8", "relay.example", "relay.example:8443", "1.1.1.1:443"])
def test_global_hosts_keep_the_relay_form(host):
    url = f"https://{host}/relay/{HEX}"
    assert check_relay_url(url, allow_loopback_http=False) == url


def _never_called(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError(f"the resolver was asked {args[:1]}: a literal or special-use name needs no lookup")


def _resolver(answers: dict[str, list[str]], calls: list[str] | None = None) -> Any:
    """A stand-in for :func:`socket.getaddrinfo` answering ``answers`` (host → addresses)."""

    def getaddrinfo(host: str, port: Any, family: int = 0, type: int = 0, *rest: Any) -> list[tuple]:
        if calls is not None:
            calls.append(host)
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        out = []
        for address in answers[host]:
            six = ":" in address
            sockaddr = (address, 443, 0, 0) if six else (address, 443)
            out.append((socket.AF_INET6 if six else socket.AF_INET, socket.SOCK_STREAM, 6, "", sockaddr))
        return out

    return getaddrinfo


@pytest.mark.parametrize(
    "addresses_,why",
    [
        (["10.1.2.3"], "private"),
        (["169.254.169.254"], "link-local"),
        (["127.0.0.1"], "loopback"),
        (["0.0.0.0"], "unspecified"),
        (["::ffff:169.254.169.254"], "169.254.169.254 inside"),
        (["::ffff:127.0.0.1"], "127.0.0.1 inside"),
        (["2002:a00:1::1"], "10.0.0.1 inside"),  # 6to4 carrying 10.0.0.1
        (["64:ff9b::a9fe:a9fe"], "169.254.169.254 inside"),  # NAT64 carrying the metadata address
        (["fe80::1%eth0"], "link-local"),
        (["fd00::5"], "private"),
        (["ff02::1"], "multicast"),
        (["93.184.215.14", "10.0.0.9"], "10.0.0.9"),  # one inside among global ones is enough
    ],
)
def test_a_name_that_resolves_inside_is_refused_before_connecting(addresses_, why):
    resolver = _resolver({"relay.attacker.example": addresses_})
    url = f"https://relay.attacker.example/relay/{HEX}"
    assert check_relay_url(url, allow_loopback_http=False) == url  # the text alone cannot tell
    with pytest.raises(ValueError, match="resolves to") as refused:
        check_relay_address(url, allow_loopback_http=False, resolver=resolver)
    assert why in str(refused.value)


def test_a_name_resolving_to_global_addresses_passes_and_is_looked_up_once():
    calls: list[str] = []
    answers = {"relay.example.org": ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"]}
    resolver = _resolver(answers, calls)
    url = f"https://relay.example.org:8443/relay/{HEX}"
    assert check_relay_address(url, allow_loopback_http=False, resolver=resolver) == url
    assert check_relay_address(url, allow_loopback_http=False, resolver=resolver) == url
    assert calls == ["relay.example.org"]  # the answer is remembered (RESOLVE_TTL_SECONDS)


def test_a_name_that_does_not_resolve_is_refused():
    with pytest.raises(ValueError, match="did not resolve"):
        check_relay_address(
            f"https://gone.example.net/relay/{HEX}", allow_loopback_http=False, resolver=_resolver({})
        )


def test_a_resolver_that_never_answers_costs_at_most_the_time_limit():
    release = threading.Event()

    def hangs(*args: Any, **kwargs: Any) -> Any:
        release.wait(60)
        raise socket.gaierror(socket.EAI_AGAIN, "released")

    outcome: list[BaseException] = []

    def check() -> None:
        try:
            url = f"https://slow.example.net/relay/{HEX}"
            check_relay_address(url, allow_loopback_http=False, timeout=0.2, resolver=hangs)
        except ValueError as exc:
            outcome.append(exc)

    runner = threading.Thread(target=check, daemon=True)
    runner.start()
    runner.join(30)  # a deadline for the test, far above the 0.2 s limit: not a timing assertion
    try:
        assert not runner.is_alive(), "the check waited on a resolver that never answers"
        assert len(outcome) == 1 and "no answer from the resolver within 0.2 s" in str(outcome[0])
    finally:
        release.set()


# --- against real services -----------------------------------------------------------------------


def test_the_aggregator_refuses_registrations_with_internal_relay_hosts(adversary: MaliciousAggregator):
    problem = adversary.propose(mooc_draft(min_peers=4))
    refused = [host for host, _ in INSIDE if not host.startswith("[")]
    for host in refused:
        peer = WirePeer()
        own = f"https://{host}/relay/{peer.identity.public.node_id.hex()}"
        answer = post(f"{adversary.url}/problems/{problem.id}/registrations", peer.registration(problem, own))
        assert answer.status_code == 422 and "relay URL" in answer.text, (host, answer.text)
    counted = adversary.status(problem)
    assert counted.rejects == {"bad relay URL": len(refused)} and counted.registered == 0


class _InternalService(Listener):
    """A listener on this machine's private address that counts every connection it is offered."""

    def _serve(self, conn: socket.socket) -> None:
        conn.close()


NAME = "relay.inside.example"


#: A global address (example.com's) that a rebinding name answers to the first lookup only.
GLOBAL_ADDRESS = "93.184.216.34"


@pytest.fixture(params=["inside", "rebinding"])
def inside(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[_InternalService]:
    """An internal service, and a resolver (the process's own ``socket.getaddrinfo``) mapping
    :data:`NAME` to it: what an attacker's DNS would answer. Every other name resolves as before.

    ``rebinding``: the name's first answer is a global address (what the peer's check sees) and
    every later one the internal service (what a connection resolving the name again would use:
    DNS rebinding with a zero TTL)."""
    address = non_loopback_address()
    if address is None or ipaddress.ip_address(address).is_global:
        pytest.skip("this machine has no non-global, non-loopback address to stand for an internal service")
    service = _InternalService(address)
    real = socket.getaddrinfo
    lookups = [0]

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == NAME:
            lookups[0] += 1
            answer = GLOBAL_ADDRESS if request.param == "rebinding" and lookups[0] == 1 else address
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answer, int(port or 0)))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    try:
        yield service
    finally:
        service.close()


def test_a_member_never_connects_to_a_roster_member_whose_relay_name_resolves_inside(
    adversary: MaliciousAggregator, cohort, tmp_path: Path, inside: _InternalService
):
    # The name passes the aggregator (its text is a global-looking name); the peer resolves it.
    problem = adversary.propose(mooc_draft(min_peers=4))
    policy = PeerPolicy.for_simulation(auto_accept=True, max_epsilon_per_problem=4.0)
    peers = start_peers(tmp_path, adversary.url, cohort(1), policy, roster_comparisons=2)
    try:
        wait_until(lambda: adversary.status(problem).registered >= 1, 60, "the victim to register")
        for _ in range(3):  # every other member points at the internal service
            adversary.register_sybil(problem, relay_base=f"https://{NAME}:{inside.port}")
        adversary.close(problem)
        wait_until(
            lambda: peers.host.relay.counters["roster witness refused: relay address"] >= 2
            or inside.accepted > 0,
            60,
            "the victim to refuse the members' relay addresses (or to connect to them)",
        )
    finally:
        peers.stop()
    assert inside.accepted == 0, "the peer connected to the internal service"
    peers.assert_ledger_empty()


def test_a_relay_never_forwards_a_packet_to_a_next_hop_whose_name_resolves_inside(
    inside: _InternalService, tmp_path: Path
):
    me = PeerNode(Identity.generate(), EventStore("sqlite://"), PrivacyLedger("sqlite://"))
    host = PeerHost(
        [me], PeerDB(f"sqlite:///{tmp_path / 'relay.db'}"), PeerPolicy(allow_loopback_http=True), [],
        rng=np.random.default_rng(5),
    )
    server = start_peer_server(host)
    try:
        nxt, aggregator = Identity.generate(), Identity.generate()
        round_id = 77
        key, cert = me.identity.new_round_relay_key(round_id)
        _, next_cert = nxt.new_round_relay_key(round_id)
        now = time.time()
        routes = {
            me.node_id: f"{server.url}/relay/{me.node_id.hex()}",
            nxt.public.node_id: f"https://{NAME}:{inside.port}/relay/{nxt.public.node_id.hex()}",
        }
        host.relay.open_round(
            RelayRound(
                me.node_id, round_id, SphinxRelay(key), WindowSchedule(now, 0.2, now + 1.0), routes,
                aggregator.public.node_id, "http://127.0.0.1:9/intake",
            )
        )
        path = [Hop.from_certificate(cert, round_id), Hop.from_certificate(next_cert, round_id)]
        redemption = Redemption(b"p-x/r/0", bytes(range(32)), bytes(32))
        report, destination = b'{"problem_id": "p-x"}', aggregator.public.node_id
        packet = build_packet(
            path, redemption, report, round_id=round_id, destination=destination,
            intake_key=aggregator.public.relay_key,
        )  # fmt: skip
        answer = requests.post(
            routes[me.node_id], data=packet, headers={"content-type": "application/octet-stream"}, timeout=30
        )
        assert answer.status_code == 202
        wait_until(lambda: host.relay.counters["forwarded lost"] >= 1, 60, "the release to be settled")
    finally:
        server.stop()
        host.db.close()
    assert inside.accepted == 0, "the relay connected to the internal service"
    assert host.relay.counters["route refused: relay address"] == 1
    assert host.relay.counters[f"forwarded refused ({REFUSED_ADDRESS})"] == 1
    assert host.relay.counters["forwarded"] == 0

