"""Attacks through relays (7): hostile relay URLs, trickling and dropping relays, probing, floods.

Real servers on loopback: the aggregator under uvicorn (tests/aggregator), the
peer relay under uvicorn (tests/peer/test_relay's fixture), and hostile
members played by raw sockets that trickle or drop.
"""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import requests

from anonml.crypto import (
    Hop,
    Identity,
    Redemption,
    SphinxRelay,
    WindowSchedule,
    build_cover_packet,
    build_packet,
)
from anonml.outbound import OutboundError, fetch, post
from anonml.privacy import PrivacyLedger
from anonml.protocol import DEFAULT_ROUTES, CosignatureBundle, check_relay_url, sign_message
from anonml.store import EventStore
from peer.client import AggregatorClient, fetch_witness
from peer.dispatch import Dispatcher
from peer.participant import Aborted, Participant, PeerNode
from peer.relay import RelayRound, RelayService, packet_cap
from peer.roster import RosterView
from tests.aggregator.conftest import aggregator  # noqa: F401 - a fixture, registered by import
from tests.aggregator.helpers import (
    WirePeer,
    close_registration,
    draft,
    propose,
    register_and_close,
    roster_of,
    status,
    wait_phase,
)
from tests.aggregator.helpers import post as post_json
from tests.loopback import Listener
from tests.peer.helpers import mooc_dropout_draft, simulated_nodes, simulation_host
from tests.peer.test_relay import OCTETS, ROUND, relays  # noqa: F401 - the relay fixture
from tests.waiting import wait_until

if TYPE_CHECKING:
    from peer.host import PeerHost

HEX = "ab" * 16


# --- hostile members played by raw sockets -------------------------------------------------------


class RawServer(Listener):
    """A TCP server on loopback that reads a request, then answers as ``mode`` says.

    ``trickle``: ``HTTP/1.1 200 OK…`` one byte every ``every`` seconds;
    ``huge``: a declared 64 MiB body; ``endless``: a chunked body that never ends;
    ``drop``: an empty 202 for every packet, which it then throws away.
    """

    def __init__(self, mode: str, every: float = 2.0) -> None:
        self.mode = mode
        self.every = every
        self.hits: list[bytes] = []
        super().__init__(backlog=64)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            self.hits.append(head.split(b"\r\n", 1)[0])
            if self.mode == "trickle":
                for byte in b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}":
                    if self.stop.wait(self.every):
                        return
                    conn.sendall(bytes([byte]))
            elif self.mode == "huge":
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 67108864\r\n\r\n" + bytes(65536))
            elif self.mode == "endless":
                conn.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                while not self.stop.is_set():
                    conn.sendall(b"10000\r\n" + bytes(65536) + b"\r\n")
            elif self.mode == "drop":
                conn.sendall(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        except OSError:
            pass
        finally:
            conn.close()


@pytest.fixture
def raw() -> Iterator[dict[str, RawServer]]:
    servers: dict[str, RawServer] = {}

    def make(mode: str) -> RawServer:
        servers[mode] = RawServer(mode)
        return servers[mode]

    yield make  # type: ignore[misc]
    for server in servers.values():
        server.close()


# --- hostile relay URLs --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        f"http://127.0.0.1:9/relay/{HEX}?next=http://169.254.169.254/",
        f"http://127.0.0.1:9/relay/{HEX}#x",
        f"https://user:pw@relay.example/relay/{HEX}",
        f"http://10.0.0.5/relay/{HEX}",
        "http://127.0.0.1:9/admin",
        f"http://127.0.0.1:9/relay/{HEX}/../../x",
        f"https://relay.example/relay/{HEX}/",
        f"HTTP://127.0.0.1:9/relay/{HEX}",
    ],
)
def test_relay_urls_of_any_other_form_are_refused(url):
    with pytest.raises(ValueError, match="relay URL"):
        check_relay_url(url, allow_loopback_http=True)


def test_https_is_the_form_and_loopback_http_needs_test_mode():
    assert check_relay_url(f"https://relay.example:8443/relay/{HEX}", allow_loopback_http=False)
    with pytest.raises(ValueError, match="test mode"):
        check_relay_url(f"http://127.0.0.1:9/relay/{HEX}", allow_loopback_http=False)


def test_a_relay_url_with_a_query_string_is_refused_at_registration(aggregator):  # noqa: F811
    problem = propose(aggregator.url, draft(kp=1, min_peers=4))
    peer = WirePeer()
    own = f"http://127.0.0.1:9/relay/{peer.identity.public.node_id.hex()}"
    for hostile in (
        own + "?to=http://169.254.169.254/latest",
        own + "#frag",
        f"http://127.0.0.1:9/relay/{HEX}",
    ):
        refused = post_json(
            f"{aggregator.url}/problems/{problem.id}/registrations",
            peer.registration(problem, relay_url=hostile),
        )
        assert refused.status_code == 422, hostile
    assert status(aggregator.url, problem.id).rejects == {"bad relay URL": 3}
    assert status(aggregator.url, problem.id).registered == 0
    assert peer.register(aggregator.url, problem).status_code == 201  # its own node, loopback test mode


def test_a_peer_fetches_nothing_from_a_roster_with_a_query_string_url(aggregator, raw):  # noqa: F811
    """The aggregator signs a roster whose member URL carries a query: the peer aborts before any fetch."""
    listener = raw("drop")
    problem = propose(aggregator.url, draft(kp=1, min_peers=4, pool_fraction=0.0))
    peers = register_and_close(aggregator.url, problem, 4, ("reporting",))
    honest = roster_of(aggregator.url, problem.id)
    entries = list(honest.entries)
    victim_target = peers[1].identity.public.node_id.hex()
    entries[1] = entries[1].model_copy(
        update={"relay_url": f"{listener.base}/relay/{victim_target}?then=http://169.254.169.254/"}
    )
    forged = sign_message(honest.model_copy(update={"entries": tuple(entries)}), aggregator.state.identity)
    view = RosterView.verify(forged, problem)  # signed by the aggregator: the common checks pass
    dispatcher = Dispatcher(workers=2)
    try:
        relay = RelayService(dispatcher, allow_loopback_http=True)
        node = PeerNode(peers[0].identity, EventStore("sqlite://"), PrivacyLedger("sqlite://"))
        participant = Participant(
            node, problem, AggregatorClient(aggregator.url), relay, "http://127.0.0.1:9"
        )
        unwitnessed = CosignatureBundle(problem_id=problem.id, stage="roster", cosignatures=())
        with pytest.raises(Aborted, match="relay URL is refused"):  # before the bundle is even looked at
            participant.check_roster(view, unwitnessed)
        # A relay opened for this roster (an aborted identity still relays) drops the route too.
        relay.open_round(
            RelayRound(
                node.node_id,
                problem.round_id,
                SphinxRelay(peers[0].key),
                WindowSchedule(time.time(), 1.0, time.time() + 3.0),
                dict(view.routes),
                bytes(16),
                f"{aggregator.url}/intake",
            )
        )
        assert relay.counters["route refused: relay URL form"] == 1
        assert node.ledger.releases() == []
    finally:
        dispatcher.close()
    assert listener.hits == []  # nothing was ever requested from the hostile URL


def test_a_peer_refuses_to_register_a_relay_url_its_fellows_would_refuse(aggregator, raw):  # noqa: F811
    problem = propose(aggregator.url, draft(kp=1, min_peers=4))
    listener = raw("drop")  # stands for the aggregator here: it must hear nothing
    dispatcher = Dispatcher(workers=1)
    try:
        node = PeerNode(Identity.generate(), EventStore("sqlite://"), PrivacyLedger("sqlite://"))
        strict = RelayService(dispatcher, allow_loopback_http=False)  # the default policy
        participant = Participant(
            node, problem, AggregatorClient(listener.base), strict, "http://127.0.0.1:8471"
        )
        with pytest.raises(Aborted, match="own relay URL"):
            participant.register()
    finally:
        dispatcher.close()
    assert listener.hits == [] and participant.status == "accepted"


# --- trickling, huge and endless answers ----------------------------------------------------------


@pytest.mark.parametrize("mode", ["trickle", "huge", "endless"])
def test_no_answer_holds_a_request_past_its_deadline_or_cap(raw, mode):
    server = raw(mode)
    start = time.monotonic()
    with pytest.raises(OutboundError) as caught:
        fetch("GET", f"{server.base}/relay/{HEX}/roster/p-x", deadline=1.0, max_bytes=4096)
    elapsed = time.monotonic() - start
    # The trickle would take 2 s per byte for 40 bytes; the deadline is total, not per read.
    assert elapsed < 1.0 + 2.0, elapsed
    assert ("within 1 s" in str(caught.value)) if mode == "trickle" else ("cap" in str(caught.value))
    assert len(server.hits) == 1


def test_fingerprint_fetches_and_packet_sends_to_a_trickling_member_give_up_in_time(raw):
    server = raw("trickle")
    start = time.monotonic()
    with pytest.raises(OutboundError):
        fetch_witness(f"{server.base}/relay/{HEX}", "p-x", allow_loopback=True)
    assert time.monotonic() - start < 5.0 + 2.0
    start = time.monotonic()
    with pytest.raises(OutboundError):
        post(f"{server.base}/relay/{HEX}", bytes(100), "application/octet-stream", deadline=1.0)
    assert time.monotonic() - start < 1.0 + 2.0


# --- relay response probing and floods -----------------------------------------------------------


def _raw_post(url: str, body: bytes) -> tuple[int, tuple[tuple[str, str], ...], bytes]:
    parts = url.split("/", 3)
    host, port = parts[2].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("POST", "/" + parts[3], body=body, headers=OCTETS)
        response = conn.getresponse()
        headers = tuple(sorted((k.lower(), v) for k, v in response.getheaders() if k.lower() != "date"))
        return response.status, headers, response.read()
    finally:
        conn.close()


def test_every_accepted_packet_gets_a_byte_identical_answer(relays):  # noqa: F811
    to = {"destination": relays.aggregator.public.node_id, "intake_key": relays.aggregator.public.relay_key}
    redemption = Redemption(b"p-x/p0/r0", bytes(range(32)), bytes(32))
    forwarded = build_packet(relays.hops, redemption, b"{}", round_id=ROUND, **to)
    final = build_packet(relays.hops[:1], redemption, b"{}", round_id=ROUND, **to)
    cover_here = build_cover_packet(relays.hops[:1], round_id=ROUND, **to)
    cover_on = build_cover_packet(relays.hops, round_id=ROUND, **to)
    answers = {_raw_post(relays.relay_url(0), p) for p in (forwarded, final, cover_here, cover_on)}
    assert len(answers) == 1
    ((code, headers, body),) = answers
    assert code == 202 and body == b"" and dict(headers)["content-length"] == "0"
    # Refusals after peeling that would depend on position say the same thing too.
    tampered = bytearray(forwarded)
    tampered[-1] ^= 1
    stranger = Identity.generate().public.node_id
    elsewhere = build_packet(
        relays.hops[:1], redemption, b"{}", round_id=ROUND, destination=stranger, intake_key=to["intake_key"]
    )
    refusals = {_raw_post(relays.relay_url(0), bytes(p)) for p in (tampered, elsewhere)}
    assert len(refusals) == 1 and next(iter(refusals))[0] == 400
    counters = relays.host.relay.counters
    assert counters["rejected: invalid"] == 1 and counters["rejected: unknown destination"] == 1


def test_an_outsider_flooding_a_relay_is_capped_per_round(relays):  # noqa: F811
    """A round without a roster (an open relay) takes at most its cap; with a roster an outsider's
    packets are refused unread (tests/adversary/test_relay_capacity.py)."""
    node = relays.nodes[0]
    round_ = 777
    key, cert = node.identity.new_round_relay_key(round_)
    now = time.time()
    cap = packet_cap(1, 3)
    relays.host.relay.open_round(
        RelayRound(
            node.node_id,
            round_,
            SphinxRelay(key),
            WindowSchedule(now, 5.0, now + 10.0),
            {},
            relays.aggregator.public.node_id,
            f"{relays.capture.url}/intake",
            max_packets=cap,
        )
    )
    hop = Hop.from_certificate(cert, round_)
    to = {"destination": relays.aggregator.public.node_id, "intake_key": relays.aggregator.public.relay_key}
    codes = []
    with requests.Session() as s:
        for _ in range(cap + 40):
            packet = build_cover_packet([hop], round_id=round_, **to)
            codes.append(s.post(relays.relay_url(0), data=packet, headers=OCTETS, timeout=10).status_code)
    assert codes[:cap] == [202] * cap and set(codes[cap:]) == {429}
    assert relays.host.relay.counters["rejected: over cap"] == 40
    assert cap == 33  # λ = 3 packets expected per node (1 slot × 3 hops): 3 + 8·√3 + 16, rounded up


# --- a whole round with a trickling and a dropping member -----------------------------------------


def _simulated_host(aggregator_url: str, tmp_path: Path) -> tuple[list, PeerHost, Any]:
    """Eight simulated students as honest peers in one host (seeded routes), served on loopback."""
    from peer.app import start_peer_server

    simulated, nodes = simulated_nodes(tmp_path, 8, seed=4, rng_base=10)
    host = simulation_host(nodes, tmp_path / "peers.db", aggregator_url, workers=8)
    return simulated, host, start_peer_server(host)


def _propose_with_hostile_members(
    aggregator_url: str, members: dict[str, tuple[Any, WirePeer]], routes: int = DEFAULT_ROUTES
) -> Any:
    """Propose the dropout problem (each report over ``routes`` routes) and register each hostile
    member with its relay URL."""
    d = mooc_dropout_draft(report_delay_seconds=8.0, send_window_seconds=3.0, release_window_seconds=3.0)
    problem = propose(aggregator_url, d.model_copy(update={"routes": routes}))
    for relay, member in members.values():
        url = f"{relay.base}/relay/{member.identity.public.node_id.hex()}"
        registered = post_json(
            f"{aggregator_url}/problems/{problem.id}/registrations",
            member.registration(problem, relay_url=url),
        )
        assert registered.status_code == 201, registered.text
    return problem


def _round_to_its_end(
    url: str, problem: Any, registrations: int, host: PeerHost, timeout: float
) -> tuple[Any, list]:
    """Once ``registrations`` identities registered, close registration and wait (``timeout``) for the
    round to end ``done`` or ``degraded`` (asserted) and for ``host``'s session to finish: the final
    status and the host's participations (``url``: the aggregator's)."""
    registered = f"{registrations} registrations"
    wait_until(lambda: status(url, problem.id).registered >= registrations, 60, registered)
    close_registration(url, problem.id, or_deadline=True)
    final = wait_phase(url, problem.id, ("done", "degraded", "failed"), timeout=timeout)
    assert final.phase in ("done", "degraded"), final.message
    wait_until(lambda: host.sessions[problem.id].finished, 30, "the host's session to finish")
    return final, host.sessions[problem.id].participants


@pytest.mark.slow
def test_a_round_completes_past_a_trickling_member_and_senders_count_what_a_dropper_lost(
    aggregator,  # noqa: F811
    raw,
    tmp_path,
):
    trickler, dropper = raw("trickle"), raw("drop")
    simulated, host, server = _simulated_host(aggregator.url, tmp_path)
    hostile = {"trickle": WirePeer(), "drop": WirePeer()}
    try:
        # One route per report: each sender's count of what a hostile member cost is then exactly
        # its reports routed through one (a second, disjoint copy would carry most of them:
        # tests/faults/test_dead_relay_host.py measures that).
        problem = _propose_with_hostile_members(
            aggregator.url,
            {"trickle": (trickler, hostile["trickle"]), "drop": (dropper, hostile["drop"])},
            routes=1,
        )
        # The round completes and publishes its model; what the droppers cost is reported.
        final, participants = _round_to_its_end(aggregator.url, problem, 10, host, timeout=90)
        # Every participation ended with the model: done, or degraded when the problem was.
        assert {str(p.status) for p in participants} == {"degraded" if final.phase == "degraded" else "done"}
        bad = {hostile["trickle"].identity.public.node_id, hostile["drop"].identity.public.node_id}
        # Every sender knows exactly which of its reports did not arrive: those routed through
        # the trickling member (the send gave up at its deadline) or the dropping one (it said 202).
        # A report whose route crossed one is lost unless the sender's watch of the relay hosts found
        # that host dead in the send window and sent a copy around it (peer/worker.py): never more.
        expected_lost = crossed = 0
        for p in participants:
            through_bad = sum(any(h.node_id in bad for h in path) for path in p.paths)
            assert p.lost <= through_bad, (p.lost, through_bad)
            expected_lost += p.lost
            crossed += through_bad
        assert crossed > 0  # the seeded routes do cross them
        sent = sum(len(p.tokens) for p in participants)
        assert final.reports_accepted == sent - expected_lost
        account = final.reports
        assert account is not None and account.received == final.reports_accepted
        assert account.lost == account.expected - account.received >= expected_lost
        assert (final.phase == "degraded") == (account.lost_fraction > 0.1)
        counters = host.relay.counters
        assert counters["reports lost in transit"] == expected_lost
        assert counters["reports delivered"] == final.reports_accepted
        # The trickler was asked (fingerprints, packets) and held nobody past the deadline.
        assert len(trickler.hits) >= 1
        receipts = AggregatorClient(aggregator.url).receipts(problem.id)
        assert list(receipts.digests) == sorted(receipts.digests)  # no arrival order
        assert len(receipts.digests) == final.reports_accepted
    finally:
        server.stop()
        for p in simulated:
            p.store.close()
            p.ledger.close()
