"""Batched relaying: ``POST /relay/{node}/batch`` in, releases batched per next hop out, restarts.

Real uvicorn on loopback, a real state DB file; the next hop / intake is a recording stand-in
(:class:`tests.peer.test_relay.Capture`) that speaks both the single and the batch routes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import requests

from aggregator.app import start_server
from anonml.crypto import PACKET_SIZE, Hop, Identity, Redemption, SphinxRelay, WindowSchedule, build_packet
from anonml.privacy import PrivacyLedger
from anonml.protocol import MAX_BATCH_ITEMS
from anonml.store import EventStore
from peer.app import PeerServer, start_peer_server
from peer.db import PeerDB
from peer.host import PeerHost
from peer.participant import PeerNode
from peer.policy import PeerPolicy
from peer.relay import INTAKE_TICK, RelayRound, StoredReplayCache
from tests.peer.test_relay import OCTETS, Capture
from tests.waiting import wait_until

ROUND = 5151


@dataclass
class Relay:
    """One relaying identity in a peer host on a state DB file; its intake is ``capture``."""

    server: PeerServer
    node: PeerNode
    key: object
    hop: Hop
    aggregator: Identity
    capture: Capture
    schedule: WindowSchedule
    db_url: str

    @property
    def url(self) -> str:
        return f"{self.server.url}/relay/{self.node.node_id.hex()}"

    def packet(self, i: int = 0) -> bytes:
        redemption = Redemption(b"p-x/r/0", bytes([i]) * 32, bytes(32))
        report = b'{"problem_id": "p-x", "n": %d}' % i
        return build_packet(
            [self.hop],
            redemption,
            report,
            round_id=ROUND,
            destination=self.aggregator.public.node_id,
            intake_key=self.aggregator.public.relay_key,
        )

    def batch(self, packets: list[bytes]) -> requests.Response:
        return requests.post(f"{self.url}/batch", data=b"".join(packets), headers=OCTETS, timeout=30)

    def counters(self) -> dict[str, int]:
        return dict(self.server.host.relay.counters)

    def stop(self) -> None:
        """Stop serving and drop every scheduled release (what a killed process loses)."""
        self.server.stop()
        self.server.host.close()


def _serve(
    identity: Identity, key: object, cert: object, db_url: str, capture: Capture, schedule: WindowSchedule
) -> Relay:
    """Serve ``identity``'s relay for the round; releases in ``(t_s + δ, t_s + δ + 0.5 s)``."""
    node = PeerNode(identity, EventStore("sqlite://"), PrivacyLedger("sqlite://"))
    db = PeerDB(db_url)
    host = PeerHost([node], db, PeerPolicy(allow_loopback_http=True), [], rng=np.random.default_rng(9))
    server = start_peer_server(host)  # resumes what the state DB holds
    aggregator = _AGGREGATOR
    host.relay.open_round(
        RelayRound(
            node.node_id,
            ROUND,
            SphinxRelay(key, StoredReplayCache(db, node.node_id, ROUND)),
            schedule,
            {node.node_id: f"{server.url}/relay/{node.node_id.hex()}"},
            aggregator.public.node_id,
            f"{capture.url}/intake",
            guard=schedule.t_r - (schedule.t_s + schedule.delta + 0.5),
            vault=node.vault,
            owner=node.fingerprint,
        )
    )
    return Relay(server, node, key, Hop.from_certificate(cert, ROUND), aggregator, capture, schedule, db_url)


_AGGREGATOR = Identity.generate()


@pytest.fixture
def capture() -> Iterator[Capture]:
    capture = Capture()
    server = start_server(capture.app())
    capture.url = server.url
    try:
        yield capture
    finally:
        server.stop()


def _relay(tmp_path: Path, capture: Capture, release_after: float = 0.3) -> Relay:
    identity = Identity.generate()
    key, cert = identity.new_round_relay_key(ROUND)
    now = time.time()
    # Sent in (now, now + release_after), released within 0.5 s after it; t_r leaves room to spare.
    schedule = WindowSchedule(now, release_after, now + release_after + 20.0)
    return _serve(identity, key, cert, f"sqlite:///{tmp_path / 'state.db'}", capture, schedule)


def _wait_counter(r: Relay, what: str, n: int) -> None:
    wait_until(lambda: r.counters().get(what, 0) >= n, 60, lambda: f"{what} >= {n}: {r.counters()}")


def _statuses(answer: requests.Response) -> list[int]:
    assert answer.status_code == 200, answer.text
    return [item["status"] for item in answer.json()["results"]]


def test_a_batch_gets_a_result_per_packet_and_a_bad_packet_sinks_no_good_one(tmp_path, capture):
    r = _relay(tmp_path, capture, release_after=0.3)
    try:
        good = [r.packet(i) for i in range(3)]
        tampered = bytearray(r.packet(9))
        tampered[-1] ^= 1
        other_round = build_packet(
            [r.hop],
            None,
            None,
            round_id=ROUND + 1,
            destination=_AGGREGATOR.public.node_id,
            intake_key=_AGGREGATOR.public.relay_key,
        )
        answer = r.batch([good[0], bytes(tampered), good[1], other_round, good[2]])
        assert _statuses(answer) == [202, 400, 202, 404, 202]
        results = answer.json()["results"]
        # Accepted packets get byte-identical results; a refusal the same detail as alone.
        assert results[0] == results[2] == results[4] == {"status": 202, "detail": ""}
        assert results[1]["detail"] == "packet rejected"
        alone = requests.post(r.url, data=bytes(tampered), headers=OCTETS, timeout=30)
        assert (alone.status_code, alone.json()["detail"]) == (400, results[1]["detail"])
        arrived = capture.wait(3, timeout=r.schedule.t_r - time.time())
        assert len({body for _, _, body in arrived}) == 3
        assert all(path == "intake" for _, path, _ in arrived)
        assert all(r.schedule.t_s + r.schedule.delta < when < r.schedule.t_r for when, _, _ in arrived)
    finally:
        r.stop()


def test_a_packet_replayed_inside_a_batch_or_across_batches_is_taken_once(tmp_path, capture):
    r = _relay(tmp_path, capture, release_after=0.3)
    try:
        a, b, c = (r.packet(i) for i in range(3))
        assert _statuses(r.batch([a, b, a])) == [202, 202, 409]
        assert _statuses(r.batch([c, b])) == [202, 409]
        assert requests.post(r.url, data=a, headers=OCTETS, timeout=30).status_code == 409
        capture.wait(3, timeout=r.schedule.t_r - time.time())
        _wait_counter(r, "delivered", 3)
        assert r.counters()["rejected: replay"] == 3 and len(capture.received) == 3
    finally:
        r.stop()


def test_batch_size_limits_are_clear_413_and_422(tmp_path, capture):
    r = _relay(tmp_path, capture, release_after=0.3)
    try:
        over = requests.post(
            f"{r.url}/batch", data=bytes(PACKET_SIZE * (MAX_BATCH_ITEMS + 1)), headers=OCTETS
        )
        assert over.status_code == 413 and f"at most {MAX_BATCH_ITEMS} packets" in over.json()["detail"]

        def streamed() -> Iterator[bytes]:  # no declared length: refused once the cap is read past
            for _ in range(MAX_BATCH_ITEMS + 1):
                yield bytes(PACKET_SIZE)

        assert requests.post(f"{r.url}/batch", data=streamed(), headers=OCTETS).status_code == 413
        ragged = requests.post(f"{r.url}/batch", data=bytes(PACKET_SIZE + 7), headers=OCTETS)
        assert (
            ragged.status_code == 422 and f"whole packets of {PACKET_SIZE} bytes" in ragged.json()["detail"]
        )
        assert requests.post(f"{r.url}/batch", data=b"", headers=OCTETS).status_code == 422
        # Exactly the cap is taken: every packet gets its own result.
        distinct = [r.packet(i) for i in range(250)]
        full = r.batch([distinct[i % 250] for i in range(MAX_BATCH_ITEMS)])
        assert _statuses(full) == [202] * 250 + [409] * (MAX_BATCH_ITEMS - 250)
    finally:
        r.stop()


def test_releases_due_together_leave_together_in_one_request_per_destination(tmp_path, capture):
    capture.hold_first = threading.Event()  # the intake answers its first request late
    r = _relay(tmp_path, capture)
    try:
        n = 40
        assert _statuses(r.batch([r.packet(i) for i in range(n)])) == [202] * n
        relay = r.server.host.relay
        def queued() -> int:
            return sum(len(q) for q in relay._outbound.values())

        wait_until(lambda: queued() >= n - 1, 30, lambda: f"all due, the first in flight: {queued()} queued")
        capture.hold_first.set()
        arrived = capture.wait(n, timeout=r.schedule.t_r - time.time())
        assert len({body for _, _, body in arrived}) == n
        assert capture.requests == ["intake", "intake/batch"]  # 1 + 39 in two requests
        _wait_counter(r, "delivered", n)
        # Each held row goes with its release: deleted in the transaction after the answer's counting
        # (Releases._settle), so it is polled for, not read at the counter's moment (a CI flake).
        db = PeerDB(r.db_url)
        wait_until(lambda: db.held(r.node.node_id.hex()) == [], 30, "the delivered packets' held rows gone")
    finally:
        capture.hold_first.set()
        r.stop()


def test_a_relay_killed_after_a_batch_resumes_its_held_packets_and_still_refuses_replays(tmp_path, capture):
    identity = Identity.generate()
    key, cert = identity.new_round_relay_key(ROUND)
    now = time.time()
    schedule = WindowSchedule(now, 3.0, now + 25.0)  # releases from t_s + 3 s on: killed before
    db_url = f"sqlite:///{tmp_path / 'state.db'}"
    first = _serve(identity, key, cert, db_url, capture, schedule)
    packets = [first.packet(i) for i in range(6)]
    assert _statuses(first.batch(packets)) == [202] * 6
    first.stop()
    assert capture.received == [] and time.time() < schedule.t_s + schedule.delta, "killed too late"
    held = PeerDB(db_url).held(first.node.node_id.hex())
    assert len(held) == 6
    # Deliveries leave on the intake tick (or at the end of the release interval, when no tick
    # is left in it), inside the release interval.
    end = schedule.t_s + schedule.delta + 0.5
    assert all(row.release_at % INTAKE_TICK == 0 or row.release_at == pytest.approx(end) for row in held)
    assert all(schedule.t_s + schedule.delta < row.release_at <= end + 1e-6 for row in held)
    second = _serve(identity, key, cert, db_url, capture, schedule)  # the same identity and state DB
    try:
        assert second.counters()["held resumed"] == 6
        assert _statuses(second.batch(packets[:2])) == [409, 409]  # the tags survived too
        arrived = capture.wait(6, timeout=schedule.t_r - time.time())
        assert len({body for _, _, body in arrived}) == 6
    finally:
        second.stop()


def test_a_relay_that_dies_inside_a_batch_stores_none_of_it_and_takes_it_all_again(
    tmp_path, capture, monkeypatch
):
    identity = Identity.generate()
    key, cert = identity.new_round_relay_key(ROUND)
    now = time.time()
    schedule = WindowSchedule(now, 0.3, now + 20.0)
    db_url = f"sqlite:///{tmp_path / 'state.db'}"
    first = _serve(identity, key, cert, db_url, capture, schedule)
    packets = [first.packet(i) for i in range(5)]

    def dies(*args: object, **kwargs: object) -> list[int]:
        raise RuntimeError("killed while storing the batch")

    monkeypatch.setattr(first.server.host.relay.db, "hold_many", dies)
    assert first.batch(packets).status_code == 500  # no answer for any packet of it
    first.stop()
    state = PeerDB(db_url)
    assert (
        state.held(first.node.node_id.hex()) == []
        and state.replay_tags(first.node.node_id.hex(), ROUND) == []
    )
    second = _serve(identity, key, cert, db_url, capture, schedule)
    try:
        assert _statuses(second.batch(packets)) == [202] * 5  # no tag of the lost batch was kept
        arrived = capture.wait(5, timeout=schedule.t_r - time.time())
        assert len({body for _, _, body in arrived}) == 5
    finally:
        second.stop()
