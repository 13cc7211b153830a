"""A relay retries a release the next hop or the intake could not take, until the round ends."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import requests

from aggregator.app import start_server
from anonml.crypto import Hop, Identity, Redemption, SphinxRelay, WindowSchedule, build_packet
from anonml.privacy import PrivacyLedger
from anonml.serving import free_port
from anonml.store import EventStore
from peer.app import PeerServer, start_peer_server
from peer.db import PeerDB
from peer.host import PeerHost
from peer.participant import PeerNode
from peer.policy import PeerPolicy
from peer.relay import RelayRound, StoredReplayCache, retry_delay
from tests.peer.test_relay import OCTETS, Capture
from tests.waiting import wait_for_clock, wait_until

ROUND = 77


@dataclass
class OneHop:
    server: PeerServer
    node: PeerNode
    hop: Hop
    aggregator: Identity
    intake_port: int
    schedule: WindowSchedule

    def send(self) -> None:
        packet = build_packet(
            [self.hop],
            Redemption(b"p-x/r/0", bytes(range(32)), bytes(32)),
            b'{"problem_id": "p-x"}',
            round_id=ROUND,
            destination=self.aggregator.public.node_id,
            intake_key=self.aggregator.public.relay_key,
        )
        url = f"{self.server.url}/relay/{self.node.node_id.hex()}"
        assert requests.post(url, data=packet, headers=OCTETS, timeout=10).status_code == 202

    def counters(self) -> dict[str, int]:
        return dict(self.server.host.relay.counters)

    def wait_for(self, what: str, n: int, timeout: float) -> None:
        wait_until(lambda: self.counters().get(what, 0) >= n, timeout,
                   lambda: f"{what} >= {n}: {self.counters()}")


@pytest.fixture
def one_hop() -> Iterator[OneHop]:
    node = PeerNode(Identity.generate(), EventStore("sqlite://"), PrivacyLedger("sqlite://"))
    host = PeerHost(
        [node], PeerDB("sqlite://"), PeerPolicy(allow_loopback_http=True), [], rng=np.random.default_rng(3)
    )
    server = start_peer_server(host)
    aggregator, port = Identity.generate(), free_port()
    key, cert = node.identity.new_round_relay_key(ROUND)
    now = time.time()
    schedule = WindowSchedule(now, 0.2, now + 12.0)  # room for retries on a loaded machine
    host.relay.open_round(
        RelayRound(
            node.node_id,
            ROUND,
            SphinxRelay(key),
            schedule,
            {node.node_id: f"{server.url}/relay/{node.node_id.hex()}"},
            aggregator.public.node_id,
            f"http://127.0.0.1:{port}/intake",
            guard=schedule.t_r - schedule.t_s - 1.0,  # release at once after the send window
        )
    )
    try:
        yield OneHop(server, node, Hop.from_certificate(cert, ROUND), aggregator, port, schedule)
    finally:
        server.stop()


def test_backoff_doubles_from_a_quarter_second_and_stops_at_two():
    assert [retry_delay(a) for a in range(6)] == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]


def test_a_release_reaches_an_intake_that_was_down_when_it_was_due(one_hop):
    one_hop.send()
    one_hop.wait_for("delivered retried", 2, timeout=10)  # the intake is down: refused twice at least
    assert one_hop.counters().get("delivered", 0) == 0
    capture = Capture()
    intake = start_server(capture.app(), port=one_hop.intake_port)
    try:
        arrived = capture.wait(1, timeout=one_hop.schedule.t_r - time.time())
    finally:
        intake.stop()
    assert arrived[0][1] == "intake"
    assert arrived[0][0] < one_hop.schedule.t_r
    counters = one_hop.counters()
    assert counters["delivered"] == 1 and counters["delivered after retry"] == 1
    assert "delivered lost" not in counters


def test_a_release_the_intake_never_takes_is_counted_lost_by_the_end_of_the_round(one_hop):
    one_hop.send()
    one_hop.wait_for("delivered lost", 1, timeout=one_hop.schedule.t_r - time.time() + 10)
    counters = one_hop.counters()
    assert counters["delivered failed"] == 1  # the last attempt: unreachable
    assert counters["delivered retried"] >= 3  # 0.25 + 0.5 + 1 + 2 + ... s fit in the window
    assert counters.get("delivered", 0) == 0


def test_a_relay_restarted_on_the_same_state_db_still_refuses_a_replay(tmp_path):
    from anonml.crypto import ReplayedPacket

    node, aggregator = Identity.generate(), Identity.generate()
    key, cert = node.new_round_relay_key(ROUND)
    packet = build_packet(
        [Hop.from_certificate(cert, ROUND)],
        Redemption(b"p-x/r/0", bytes(range(32)), bytes(32)),
        b'{"problem_id": "p-x"}',
        round_id=ROUND,
        destination=aggregator.public.node_id,
        intake_key=aggregator.public.relay_key,
    )
    url = f"sqlite:///{tmp_path / 'state.db'}"
    SphinxRelay(key, StoredReplayCache(PeerDB(url), node.public.node_id, ROUND)).process(packet)
    restarted = PeerDB(url)  # another process, the same file
    with pytest.raises(ReplayedPacket):
        SphinxRelay(key, StoredReplayCache(restarted, node.public.node_id, ROUND)).process(packet)
    restarted.forget_replay_tags(node.public.node_id.hex(), ROUND)  # the round closed: tags go too
    assert restarted.replay_tags(node.public.node_id.hex(), ROUND) == []


def _stored_relay(url: str, node: PeerNode, key, schedule: WindowSchedule, aggregator: Identity, intake: str,
                  seed: int, **options: Any) -> PeerServer:
    """A relay host on the state DB at ``url`` (its replay cache stored there too) relaying round
    ``ROUND`` for ``node`` to ``intake``; ``options`` go to its :class:`RelayRound`."""
    db = PeerDB(url)
    host = PeerHost([node], db, PeerPolicy(allow_loopback_http=True), [], rng=np.random.default_rng(seed))
    server = start_peer_server(host)
    host.relay.open_round(
        RelayRound(
            node.node_id, ROUND, SphinxRelay(key, StoredReplayCache(db, node.node_id, ROUND)), schedule,
            {}, aggregator.public.node_id, intake, **options,
        )  # fmt: skip
    )
    return server


def test_a_relay_restarted_on_the_same_state_db_keeps_its_packet_cap(tmp_path):
    """The cap counts what the node accepted over every run of its host: a restart grants no fresh cap."""
    from anonml.crypto import build_cover_packet

    node = PeerNode(Identity.generate(), EventStore("sqlite://"), PrivacyLedger("sqlite://"))
    url, cap = f"sqlite:///{tmp_path / 'state.db'}", 10
    aggregator = Identity.generate()
    key, cert = node.identity.new_round_relay_key(ROUND)
    hop = Hop.from_certificate(cert, ROUND)
    now = time.time()
    schedule = WindowSchedule(now, 30.0, now + 60.0)

    def serve() -> PeerServer:
        intake = "http://127.0.0.1:9/intake"
        return _stored_relay(url, node, key, schedule, aggregator, intake, 4, max_packets=cap)

    def flood(server: PeerServer, n: int) -> list[int]:
        relay, to = f"{server.url}/relay/{node.node_id.hex()}", aggregator.public.node_id
        key = {"destination": to, "intake_key": aggregator.public.relay_key}
        with requests.Session() as s:
            return [
                s.post(relay, data=build_cover_packet([hop], round_id=ROUND, **key),
                       headers=OCTETS, timeout=10).status_code
                for _ in range(n)
            ]

    first = serve()
    try:
        assert flood(first, 6) == [202] * 6
    finally:
        first.stop()
        first.host.close()  # the process ends: nothing closes the round or forgets its count
    assert PeerDB(url).relay_count(node.node_id.hex(), ROUND) == 6
    second = serve()
    try:
        assert flood(second, 10) == [202] * 4 + [429] * 6  # 6 + 4 = the cap, whatever the restart
        assert second.host.relay.counters["rejected: over cap"] == 6
    finally:
        second.stop()
        second.host.close()


def _send_to_lossy_intake(one_hop: OneHop, then: str, until: str) -> tuple[list[str], dict[str, int]]:
    """Send one report through ``one_hop`` to an intake that takes the first delivery but answers 500
    (its answer lost, as when it is killed after its commit), then answers every retry 409 with
    ``then`` — the real intake's detail. Waits for the relay's counter ``until``; returns the paths
    the intake was asked for and the relay's counters."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app, seen = FastAPI(), []

    @app.post("/{path:path}")
    async def take(path: str) -> JSONResponse:
        seen.append(path)
        if len(seen) == 1:
            return JSONResponse({"detail": "internal error"}, status_code=500)
        return JSONResponse({"detail": then}, status_code=409)

    intake = start_server(app, port=one_hop.intake_port)
    try:
        one_hop.send()
        one_hop.wait_for(until, 1, timeout=one_hop.schedule.t_r - time.time() + 5)
    finally:
        intake.stop()
    return seen, one_hop.counters()


def test_a_retry_answered_already_processed_counts_as_delivered(one_hop):
    # Issue 26, item 6: the copy the first try sent arrived; the retry's 409 says so.
    seen, counters = _send_to_lossy_intake(one_hop, "token already redeemed", "delivered")
    assert len(seen) == 2
    assert counters["delivered after retry"] == 1 and counters["delivered (already processed)"] == 1
    assert "delivered lost" not in counters


def test_a_retry_refused_for_another_reason_is_still_lost(one_hop):
    _, counters = _send_to_lossy_intake(
        one_hop, "the report round of p-x ended at t_r=1.000", "delivered lost"
    )
    assert counters["delivered refused (409)"] == 1 and counters.get("delivered", 0) == 0


def _relay_with_grace(url: str, node: PeerNode, key, intake_port: int, schedule: WindowSchedule,
                      aggregator: Identity, grace: float) -> PeerServer:
    """A relay host on the state DB at ``url`` relaying round ``ROUND`` with the intake's ``grace``,
    releasing at once after the send window (held packets sealed, so a restart finds them)."""
    return _stored_relay(
        url, node, key, schedule, aggregator, f"http://127.0.0.1:{intake_port}/intake", 5,
        guard=schedule.t_r - schedule.t_s - schedule.delta - 0.2, vault=node.vault,
        owner=node.fingerprint, grace=grace,
    )  # fmt: skip


def test_a_last_hop_keeps_retrying_past_t_r_within_the_intake_grace_even_across_its_own_restart(tmp_path):
    """Issue 26, item 3: the aggregator is down from before the release until after t_r; the last hop
    keeps the delivery (sealed in its state DB), is killed and restarted after t_r, and delivers once
    the intake is back — before t_r + grace, which the bins carry."""
    node = PeerNode(Identity.generate(), EventStore("sqlite://"), PrivacyLedger("sqlite://"))
    aggregator, port, url = Identity.generate(), free_port(), f"sqlite:///{tmp_path / 'state.db'}"
    key, cert = node.identity.new_round_relay_key(ROUND)
    now = time.time()
    schedule = WindowSchedule(now, 0.3, now + 3.0)
    grace = 30.0
    first = _relay_with_grace(url, node, key, port, schedule, aggregator, grace)
    try:
        packet = build_packet(
            [Hop.from_certificate(cert, ROUND)], Redemption(b"p-x/r/0", bytes(range(32)), bytes(32)),
            b'{"problem_id": "p-x"}', round_id=ROUND, destination=aggregator.public.node_id,
            intake_key=aggregator.public.relay_key,
        )  # fmt: skip
        relay = f"{first.url}/relay/{node.node_id.hex()}"
        assert requests.post(relay, data=packet, headers=OCTETS, timeout=10).status_code == 202
        counters = first.host.relay.counters
        wait_until(lambda: counters.get("delivered retried", 0) >= 1, 20,  # due, and the intake is down
                   lambda: f"a retried delivery: {dict(counters)}")
        wait_for_clock(schedule.t_r, 20, "the round's t_r")
        assert first.host.relay.counters.get("delivered lost", 0) == 0  # t_r passed: still kept
    finally:
        first.stop()
        first.host.close()  # the host ends here; the held delivery stays in its state DB
    assert len(PeerDB(url).held(node.node_id.hex())) == 1
    # The restarted host's start resumes what its state DB holds (PeerHost.resume → resume_held).
    second = _relay_with_grace(url, node, key, port, schedule, aggregator, grace)
    try:
        capture = Capture()
        intake = start_server(capture.app(), port=port)
        try:
            arrived = capture.wait(1, timeout=schedule.t_r + grace - time.time())
        finally:
            intake.stop()
        assert arrived[0][1] == "intake" and schedule.t_r < arrived[0][0] < schedule.t_r + grace
        counters = second.host.relay.counters
        assert counters["held resumed"] == 1 and counters["delivered"] == 1
        assert "delivered lost" not in counters
        assert PeerDB(url).held(node.node_id.hex()) == []  # delivered: no longer held
    finally:
        second.stop()
        second.host.close()

