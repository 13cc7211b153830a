"""The relay over real HTTP: hold and release in the second window, refuse replays and bad packets."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import requests
from fastapi import FastAPI, Request, Response

from aggregator.app import start_server
from anonml.crypto import (
    PACKET_SIZE,
    PAYLOAD_SIZE,
    Hop,
    Identity,
    InvalidPacket,
    Redemption,
    RoundRelayKey,
    SphinxRelay,
    WindowSchedule,
    build_cover_packet,
    build_packet,
    open_payload,
)
from anonml.privacy import PrivacyLedger
from anonml.protocol import BatchResults, IntakeBatch, IntakeDelivery, ItemResult
from anonml.store import EventStore
from peer.app import start_peer_server
from peer.db import PeerDB
from peer.host import PeerHost
from peer.participant import PeerNode
from peer.policy import PeerPolicy
from peer.relay import RelayRound, default_guard
from tests.waiting import wait_for_clock, wait_until

ROUND = 4242
OCTETS = {"content-type": "application/octet-stream"}
#: Seconds from the round's opening to t_r in the ``relays`` fixture.
RELEASE_BY = 3.0


@dataclass
class Capture:
    """A stand-in for the next hop or the aggregator's intake: records what arrives, and when."""

    url: str = ""
    received: list[tuple[float, str, bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: list[str] = field(default_factory=list)  # the path of every request, in order
    hold_first: threading.Event | None = None  # if set: the first request waits for it

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/{path:path}")
        async def take(path: str, request: Request) -> Response:
            body = await request.body()
            with self.lock:
                self.requests.append(path)
                first = len(self.requests) == 1
            while first and self.hold_first is not None and not self.hold_first.is_set():
                await asyncio.sleep(0.01)
            now = time.time()
            if not path.endswith("/batch"):
                with self.lock:
                    self.received.append((now, path, body))
                return Response(status_code=201)
            # A batch: what each item would have been alone, and a result per item.
            path = path.removesuffix("/batch")
            if path.startswith("relay/"):
                items = [body[i : i + PACKET_SIZE] for i in range(0, len(body), PACKET_SIZE)]
            else:
                items = [
                    d.model_dump_json().encode() for d in IntakeBatch.model_validate_json(body).deliveries
                ]
            with self.lock:
                self.received.extend((now, path, item) for item in items)
            answer = BatchResults(results=tuple(ItemResult(status=201) for _ in items))
            return Response(answer.model_dump_json(), media_type="application/json")

        return app

    def wait(self, n: int, timeout: float = 10.0) -> list[tuple[float, str, bytes]]:
        wait_until(lambda: len(self.received) >= n, timeout,
                   lambda: f"{n} arrivals, {len(self.received)} so far")
        return list(self.received)


@dataclass
class Relays:
    url: str
    host: PeerHost
    nodes: list[PeerNode]
    hops: list[Hop]
    capture: Capture
    aggregator: Identity
    schedule: WindowSchedule

    def relay_url(self, i: int) -> str:
        return f"{self.url}/relay/{self.nodes[i].node_id.hex()}"


@dataclass
class RelayHost:
    """Three hosted relay nodes on one real peer server, each with a fresh round key for ``round_id``,
    and a real capturing intake: what a relay test opens its rounds on."""

    capture: Capture
    server_url: str
    host: PeerHost
    nodes: list[PeerNode]
    keys: dict[bytes, RoundRelayKey]
    hops: list[Hop]
    routes: dict[bytes, str]
    round_id: int

    def open_rounds(self, schedule: WindowSchedule, destination: bytes, **options: Any) -> None:
        """Open round ``round_id`` on every hosted node: routes among the three, deliveries to the
        capturing intake for ``destination``; ``options`` go to each :class:`RelayRound`."""
        for node in self.nodes:
            self.host.relay.open_round(
                RelayRound(
                    node.node_id,
                    self.round_id,
                    SphinxRelay(self.keys[node.node_id]),
                    schedule,
                    self.routes,
                    destination,
                    f"{self.capture.url}/intake",
                    **options,
                )
            )


@contextmanager
def relay_host(round_id: int, seed: int) -> Iterator[RelayHost]:
    """Serve a :class:`RelayHost` on loopback (host randomness from ``default_rng(seed)``); stop it after."""
    capture = Capture()
    cap_server = start_server(capture.app())
    capture.url = cap_server.url
    nodes = [
        PeerNode(Identity.generate(), EventStore("sqlite://"), PrivacyLedger("sqlite://")) for _ in range(3)
    ]
    host = PeerHost(
        nodes, PeerDB("sqlite://"), PeerPolicy(allow_loopback_http=True), [], rng=np.random.default_rng(seed)
    )
    server = start_peer_server(host)
    keys, hops, routes = {}, [], {}
    for node in nodes:
        key, cert = node.identity.new_round_relay_key(round_id)
        keys[node.node_id] = key
        hops.append(Hop.from_certificate(cert, round_id))
        routes[node.node_id] = f"{server.url}/relay/{node.node_id.hex()}"
    try:
        yield RelayHost(capture, server.url, host, nodes, keys, hops, routes, round_id)
    finally:
        server.stop()
        cap_server.stop()


@pytest.fixture
def relays() -> Iterator[Relays]:
    aggregator = Identity.generate()
    with relay_host(ROUND, seed=1) as h:
        # The window opens once both servers answer (their start takes seconds on a loaded machine,
        # and a window that had closed meanwhile answered 410), and is long enough for a test's
        # few posts under parallel test load; the release window stays short, so deliveries come soon.
        now = time.time()
        schedule = WindowSchedule(now, 0.3, now + RELEASE_BY)
        h.open_rounds(schedule, aggregator.public.node_id)
        yield Relays(h.server_url, h.host, h.nodes, h.hops, h.capture, aggregator, schedule)


def _report_packet(r: Relays, path: list[Hop]) -> tuple[bytes, Redemption, bytes]:
    redemption = Redemption(b"p-x/r/0", bytes(range(32)), bytes(32))
    report = b'{"problem_id": "p-x"}'
    packet = build_packet(
        path,
        redemption,
        report,
        round_id=ROUND,
        destination=r.aggregator.public.node_id,
        intake_key=r.aggregator.public.relay_key,
    )
    return packet, redemption, report


def test_packets_cross_three_hops_and_reach_the_intake_in_the_release_window(relays):
    packets = [_report_packet(relays, relays.hops) for _ in range(5)]
    for packet, _, _ in packets:
        assert requests.post(relays.relay_url(0), data=packet, headers=OCTETS).status_code == 202
    arrived = relays.capture.wait(5)
    s = relays.schedule
    # Every hop releases in (t_s + δ, t_r − guard); network time keeps the last arrival before t_r.
    for when, path, body in arrived:
        assert path == "intake"
        assert s.t_s + s.delta < when < s.t_r
        delivery = IntakeDelivery.model_validate_json(body)
        assert set(json.loads(body)) == {"version", "round_id", "sealed"} and delivery.round_id == ROUND
    # Sealed: only the aggregator's identity opens them; each the same test token and report.
    opened = [open_payload(relays.aggregator, d.sealed, round_id=ROUND) for d in _deliveries(arrived)]
    assert {(bytes(p.redemption), p.report) for p in opened} == {(bytes(packets[0][1]), packets[0][2])}
    # The intake has the deliveries; the relay counts each send once its answer is in, a
    # moment later: poll for the counters with a deadline rather than read them at once.
    counters = relays.host.relay.counters
    wait_until(lambda: counters["delivered"] >= 5 and counters["forwarded"] >= 10, 60,
               lambda: str(dict(counters)))
    assert counters["received"] == 15 and counters["forwarded"] == 10 and counters["delivered"] == 5


def test_replayed_packet_is_refused(relays):
    packet, _, _ = _report_packet(relays, relays.hops[:1])
    assert requests.post(relays.relay_url(0), data=packet, headers=OCTETS).status_code == 202
    again = requests.post(relays.relay_url(0), data=packet, headers=OCTETS)
    assert again.status_code == 409 and "replay" in again.json()["detail"]
    # The refusal is the sync point: once it is answered, the relay has scheduled all it will ever
    # release of the two posts — one packet, the replay counted and dropped.
    counters = relays.host.relay.counters
    assert counters["held"] == 1 and counters["rejected: replay"] == 1
    relays.capture.wait(1)
    # Nothing left to release (the host's dispatcher has nothing scheduled or running): no second copy
    # can arrive after this point, so the count below is final, not a guess after a pause.
    wait_until(relays.host.dispatcher.idle, 30, "the relay to have nothing left to release")
    assert len(relays.capture.received) == 1 and counters["delivered"] == 1


def test_wrong_sizes_tampering_and_unknown_targets_are_refused_before_or_by_crypto(relays):
    url = relays.relay_url(0)
    short = requests.post(url, data=bytes(PACKET_SIZE - 1), headers=OCTETS)
    assert short.status_code == 400 and str(PACKET_SIZE) in short.json()["detail"]
    assert requests.post(url, data=bytes(PACKET_SIZE + 1), headers=OCTETS).status_code == 413
    assert requests.post(url, data=bytes(5 * 1024 * 1024), headers=OCTETS).status_code == 413

    def chunks() -> Iterator[bytes]:  # streamed without a declared length
        for _ in range(4):
            yield bytes(1000)

    assert requests.post(url, data=chunks(), headers=OCTETS).status_code == 413
    packet, _, _ = _report_packet(relays, relays.hops)
    tampered = bytearray(packet)
    tampered[-1] ^= 1
    bad = requests.post(url, data=bytes(tampered), headers=OCTETS)
    assert bad.status_code == 400 and bad.json()["detail"] == "packet rejected"  # uniform, says no more
    assert requests.post(f"{relays.url}/relay/{'00' * 16}", data=packet, headers=OCTETS).status_code == 404
    other_round = build_cover_packet(
        relays.hops[:1],
        round_id=ROUND + 1,
        destination=relays.aggregator.public.node_id,
        intake_key=relays.aggregator.public.relay_key,
    )
    assert requests.post(url, data=other_round, headers=OCTETS).status_code == 404
    # Only the valid packet was accepted; after all this the untampered one still goes through.
    assert requests.post(url, data=packet, headers=OCTETS).status_code == 202
    relays.capture.wait(1)


def _deliveries(arrived: list[tuple[float, str, bytes]]) -> list[IntakeDelivery]:
    return [IntakeDelivery.model_validate_json(body) for _, _, body in arrived]


def test_the_exit_relay_forwards_reports_and_cover_alike_and_can_read_neither(relays):
    """Real relays on loopback: a report and a cover packet over the same two hops reach the intake as
    deliveries of one form and size, holding neither the report nor any part of its redemption, and
    the relays' own counters cannot tell them apart; only the aggregator's key opens them."""
    packet, redemption, report = _report_packet(relays, relays.hops[1:])
    cover = build_cover_packet(
        relays.hops[1:],
        round_id=ROUND,
        destination=relays.aggregator.public.node_id,
        intake_key=relays.aggregator.public.relay_key,
    )
    for p in (packet, cover):
        assert requests.post(relays.relay_url(1), data=p, headers=OCTETS).status_code == 202
    arrived = relays.capture.wait(2)
    bodies = [body for _, _, body in arrived]
    assert [path for _, path, _ in arrived] == ["intake", "intake"]
    assert len(bodies[0]) == len(bodies[1])
    assert [set(json.loads(b)) for b in bodies] == [{"version", "round_id", "sealed"}] * 2
    deliveries = _deliveries(arrived)
    assert [len(d.sealed) for d in deliveries] == [PAYLOAD_SIZE] * 2
    secrets = (report, redemption.slot, redemption.nonce, bytes(redemption))
    assert not any(
        s in d.sealed or s in body for d, body in zip(deliveries, bodies, strict=True) for s in secrets
    )
    # The exit's own account: both delivered, nothing dropped or counted as cover.
    counters = relays.host.relay.counters
    wait_until(lambda: counters["delivered"] >= 2, 60, lambda: str(dict(counters)))
    assert counters["cover"] == 0 and counters["delivered"] == 2
    # The exit's own X25519 key opens nothing; the aggregator's opens both, one of them cover.
    with pytest.raises(InvalidPacket):
        open_payload(relays.nodes[2].identity, deliveries[0].sealed, round_id=ROUND)
    kinds = sorted(open_payload(relays.aggregator, d.sealed, round_id=ROUND).is_cover for d in deliveries)
    assert kinds == [False, True]


def test_a_v1_packet_is_refused_naming_its_version(relays):
    packet, _, _ = _report_packet(relays, relays.hops[:1])
    old = requests.post(relays.relay_url(0), data=b"\x01" + packet[1:], headers=OCTETS)
    assert old.status_code == 400 and "version 1" in old.json()["detail"]
    assert relays.host.relay.counters["rejected: version"] == 1
    assert requests.post(relays.relay_url(0), data=packet, headers=OCTETS).status_code == 202


def test_late_packets_are_dropped_and_the_round_key_destroyed(relays):
    packet, _, _ = _report_packet(relays, relays.hops[:1])
    wait_for_clock(relays.schedule.t_r, RELEASE_BY + 60, "the round's t_r")
    late = requests.post(relays.relay_url(0), data=packet, headers=OCTETS)
    assert late.status_code == 410
    assert not relays.host.relay.has_round(relays.nodes[0].node_id, ROUND)


def test_release_times_fill_the_window_after_the_guard():
    s = WindowSchedule(100.0, 5.0, 110.0)
    assert default_guard(s) == pytest.approx(5.0 / 3.0)
