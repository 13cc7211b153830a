"""AnonSphinx-v1: round trips, constant size, tamper/replay rejection, cover indistinguishability."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anonml.crypto.exceptions import InvalidEncoding, InvalidPacket, ReplayedPacket
from anonml.crypto.identity import Identity
from anonml.crypto.onion import (
    MAX_HOPS,
    MAX_REPORT_SIZE,
    PACKET_SIZE,
    PAYLOAD_SIZE,
    Deliver,
    Forward,
    Hop,
    SphinxRelay,
    build_cover_packet,
    build_packet,
)
from anonml.crypto.tokens import Redemption
from tests.crypto import edwards_ref as ed
from tests.crypto.helpers import flip_bit

ROUND = 5
AGGREGATOR = b"\xaa" * 16
REDEMPTION = Redemption(b"p1/r5/s0", bytes(range(32)), bytes(range(32, 64)))
REPORT = b"\x01\x00\x01\x01 perturbed bits"

# Field offsets in the packet: AD 0..9, alpha 9..41, beta 41..189, gamma 189..205, delta 205..1280.
FIELDS = {"AD": (0, 9), "alpha": (9, 41), "beta": (41, 189), "gamma": (189, 205), "delta": (205, 1280)}


class Network:
    """Four relays of one round, addressable by node id."""

    def __init__(self, seed: int = 1) -> None:
        rng = np.random.default_rng(seed)
        self.relays: dict[bytes, SphinxRelay] = {}
        self.hops: list[Hop] = []
        for _ in range(MAX_HOPS):
            ident = Identity.generate(rng)
            key, cert = ident.new_round_relay_key(ROUND, rng)
            self.relays[cert.node_id] = SphinxRelay(key)
            self.hops.append(Hop.from_certificate(cert, ROUND))

    def route(self, packet: bytes, first: bytes) -> tuple[Deliver, list[bytes]]:
        """Process hop by hop; return the delivery and every packet seen on the wire."""
        seen, node = [packet], first
        while True:
            out = self.relays[node].process(packet)
            if isinstance(out, Deliver):
                return out, seen
            assert isinstance(out, Forward)
            node, packet = out.next_hop, out.packet
            seen.append(packet)


@pytest.fixture()
def net() -> Network:
    return Network()


def test_layout_fits_the_ipv6_minimum_mtu() -> None:
    assert PACKET_SIZE == 1280
    assert PAYLOAD_SIZE == FIELDS["delta"][1] - FIELDS["delta"][0]
    assert MAX_REPORT_SIZE == PAYLOAD_SIZE - 1 - (1 + 64 + 32 + 32) - 2


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_packets_decode_at_the_final_hop(net: Network, k: int) -> None:
    path = [Hop(h.node_id, h.public_key, delay_ms=100 * (i + 1)) for i, h in enumerate(net.hops[:k])]
    packet = build_packet(path, REDEMPTION, REPORT, round_id=ROUND, destination=AGGREGATOR)
    delivered, seen = net.route(packet, path[0].node_id)
    assert len(seen) == k and all(len(p) == PACKET_SIZE for p in seen)
    assert delivered.redemption == REDEMPTION and delivered.report == REPORT
    assert delivered.destination == AGGREGATOR and delivered.delay_ms == 100 * k
    assert not delivered.is_cover


def test_routing_commands_carry_next_hop_and_delay(net: Network) -> None:
    path = [
        Hop(h.node_id, h.public_key, delay_ms=d) for h, d in zip(net.hops[:3], (7, 0, 2**32 - 1), strict=True)
    ]
    packet = build_packet(path, REDEMPTION, REPORT, round_id=ROUND, destination=AGGREGATOR)
    first = net.relays[path[0].node_id].process(packet)
    assert isinstance(first, Forward) and first.next_hop == path[1].node_id and first.delay_ms == 7
    second = net.relays[path[1].node_id].process(first.packet)
    assert isinstance(second, Forward) and second.next_hop == path[2].node_id and second.delay_ms == 0
    last = net.relays[path[2].node_id].process(second.packet)
    assert isinstance(last, Deliver) and last.delay_ms == 2**32 - 1


def test_alpha_changes_at_every_hop(net: Network) -> None:
    packet = build_packet(net.hops, REDEMPTION, REPORT, round_id=ROUND, destination=AGGREGATOR)
    _, seen = net.route(packet, net.hops[0].node_id)
    alphas = {p[9:41] for p in seen}
    assert len(alphas) == len(seen)  # unlinkable headers: no field survives a hop unchanged
    betas = {p[41:189] for p in seen}
    assert len(betas) == len(seen)


@settings(derandomize=True, max_examples=60, deadline=None)
@given(
    k=st.integers(1, MAX_HOPS),
    slot=st.binary(min_size=1, max_size=64),
    report_size=st.integers(0, MAX_REPORT_SIZE),
    delays=st.lists(st.integers(0, 2**32 - 1), min_size=4, max_size=4),
    cover=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_packet_size_is_constant_at_every_hop(k, slot, report_size, delays, cover, seed) -> None:
    net = Network(seed=2)  # fresh replay caches: equal seeds legitimately rebuild the same packet
    rng = np.random.default_rng(seed)
    path = [Hop(h.node_id, h.public_key, delays[i]) for i, h in enumerate(net.hops[:k])]
    report = rng.bytes(report_size)  # MAX_REPORT_SIZE fits even with the longest slot
    redemption = None if cover else Redemption(slot, rng.bytes(32), rng.bytes(32))
    packet = build_packet(path, redemption, report, round_id=ROUND, destination=AGGREGATOR, rng=rng)
    delivered, seen = net.route(packet, path[0].node_id)
    assert [len(p) for p in seen] == [PACKET_SIZE] * k
    assert delivered.is_cover == cover
    if not cover:
        assert delivered.redemption == redemption and delivered.report == report


_SHARED_NET = Network(seed=3)


def test_report_too_large_is_refused(net: Network) -> None:
    def build(report_size: int) -> bytes:
        report = bytes(report_size)
        return build_packet(net.hops[:1], REDEMPTION, report, round_id=ROUND, destination=AGGREGATOR)

    largest = PAYLOAD_SIZE - 68 - len(REDEMPTION.slot)
    build(largest)
    with pytest.raises(InvalidEncoding):
        build(largest + 1)


def test_path_length_bounds(net: Network) -> None:
    with pytest.raises(InvalidEncoding):
        build_packet([], REDEMPTION, REPORT, round_id=ROUND, destination=AGGREGATOR)
    with pytest.raises(InvalidEncoding):
        build_packet(net.hops + net.hops[:1], REDEMPTION, REPORT, round_id=ROUND, destination=AGGREGATOR)


@pytest.mark.parametrize("position", ["first of three", "last of three"])
def test_every_bit_flip_in_every_field_is_rejected(net: Network, position: str) -> None:
    packet = build_packet(
        net.hops[:3], REDEMPTION, REPORT, round_id=ROUND, destination=AGGREGATOR, rng=np.random.default_rng(3)
    )
    node = net.hops[0].node_id
    if position == "last of three":
        for _ in range(2):
            out = net.relays[node].process(packet)
            node, packet = out.next_hop, out.packet
    relay = net.relays[node]
    cache_size = len(relay.replay_cache)
    rejected = dict.fromkeys(FIELDS, 0)
    for field, (lo, hi) in FIELDS.items():
        for bit in range(lo * 8, hi * 8):
            with pytest.raises(InvalidPacket) as info:
                relay.process(flip_bit(packet, bit))
            assert not isinstance(info.value, ReplayedPacket)
            rejected[field] += 1
    assert rejected == {f: (hi - lo) * 8 for f, (lo, hi) in FIELDS.items()}
    assert len(relay.replay_cache) == cache_size  # nothing cached before the MAC passed
    relay.process(packet)  # the untouched packet still goes through


def test_replayed_packet_is_rejected(net: Network) -> None:
    packet = build_packet(net.hops[:2], REDEMPTION, REPORT, round_id=ROUND, destination=AGGREGATOR)
    relay = net.relays[net.hops[0].node_id]
    relay.process(packet)
    with pytest.raises(ReplayedPacket):
        relay.process(packet)


def test_replay_tag_is_checked_only_after_the_mac(net: Network) -> None:
    packet = build_packet(net.hops[:2], REDEMPTION, REPORT, round_id=ROUND, destination=AGGREGATOR)
    relay = net.relays[net.hops[0].node_id]
    relay.process(packet)
    tampered = flip_bit(packet, 8 * 600)  # same α (same replay tag), altered β/δ
    with pytest.raises(InvalidPacket) as info:
        relay.process(tampered)
    assert not isinstance(info.value, ReplayedPacket)  # rejected by the MAC, not by the cache


def test_wrong_round_or_destroyed_key_is_rejected(net: Network) -> None:
    packet = build_packet(net.hops[:1], REDEMPTION, REPORT, round_id=ROUND + 1, destination=AGGREGATOR)
    with pytest.raises(InvalidPacket, match="round"):
        net.relays[net.hops[0].node_id].process(packet)
    packet = build_packet(net.hops[:1], REDEMPTION, REPORT, round_id=ROUND, destination=AGGREGATOR)
    relay = net.relays[net.hops[0].node_id]
    relay.close()
    with pytest.raises(InvalidPacket, match="destroyed"):
        relay.process(packet)
    assert len(relay.replay_cache) == 0


def test_packet_for_another_relay_fails_the_mac(net: Network) -> None:
    packet = build_packet(net.hops[:2], REDEMPTION, REPORT, round_id=ROUND, destination=AGGREGATOR)
    with pytest.raises(InvalidPacket, match="MAC"):
        net.relays[net.hops[1].node_id].process(packet)


def _with_alpha(packet: bytes, alpha: bytes) -> bytes:
    return packet[:9] + alpha + packet[41:]


def test_all_zero_small_order_and_non_canonical_alpha_are_rejected(net: Network) -> None:
    packet = build_packet(net.hops[:1], REDEMPTION, REPORT, round_id=ROUND, destination=AGGREGATOR)
    relay = net.relays[net.hops[0].node_id]
    with pytest.raises(InvalidPacket, match="zero"):
        relay.process(_with_alpha(packet, bytes(32)))
    lows = {0}
    for _, y in ed.small_order_points():
        if y != 1:
            lows.add((1 + y) * ed.inv(1 - y) % ed.P)  # Montgomery u of each torsion point
    bad = [u.to_bytes(32, "little") for u in lows] + [(u + ed.P).to_bytes(32, "little") for u in lows]
    bad.append((int.from_bytes(packet[9:41], "little") | (1 << 255)).to_bytes(32, "little"))
    for alpha in bad:
        with pytest.raises(InvalidPacket):
            relay.process(_with_alpha(packet, alpha))
    relay.process(packet)


@given(st.binary(min_size=0, max_size=1400))
def test_random_bytes_raise_only_invalid_packet(data: bytes) -> None:
    relay = _SHARED_NET.relays[_SHARED_NET.hops[0].node_id]
    with pytest.raises(InvalidPacket):
        relay.process(data)


@given(st.binary(min_size=PACKET_SIZE - 9, max_size=PACKET_SIZE - 9))
def test_random_packets_with_a_valid_ad_raise_only_invalid_packet(body: bytes) -> None:
    relay = _SHARED_NET.relays[_SHARED_NET.hops[0].node_id]
    with pytest.raises(InvalidPacket):
        relay.process(b"\x01" + ROUND.to_bytes(8, "big") + body)


def test_cover_packets_follow_the_same_path_and_only_the_last_hop_tells(net: Network) -> None:
    cover = build_cover_packet(net.hops[:3], round_id=ROUND, destination=AGGREGATOR)
    delivered, seen = net.route(cover, net.hops[0].node_id)
    assert len(seen) == 3 and all(len(p) == PACKET_SIZE for p in seen)
    assert delivered.is_cover and delivered.report is None and delivered.destination == AGGREGATOR


def _chi_square_uniform(data: bytes) -> float:
    counts = np.bincount(np.frombuffer(data, dtype=np.uint8), minlength=256)
    expected = len(data) / 256
    return float(((counts - expected) ** 2 / expected).sum())


def test_cover_and_real_packets_are_indistinguishable_on_the_wire() -> None:
    """Bytes after the AD look uniform for both kinds, at the first and the second hop.

    Under uniformity the statistic over 256 byte values is chi-square with 255
    degrees of freedom: mean 255, sd sqrt(2*255) = 22.6. We allow 255 + 6 sd = 390.
    A plaintext payload (mostly zero padding) scores in the hundreds of thousands.
    """
    net = Network(seed=4)
    rng = np.random.default_rng(4)
    real, cover = [], []
    for _ in range(120):
        real.append(
            build_packet(net.hops[:3], REDEMPTION, REPORT, round_id=ROUND, destination=AGGREGATOR, rng=rng)
        )
        cover.append(build_cover_packet(net.hops[:3], round_id=ROUND, destination=AGGREGATOR, rng=rng))
    first = net.relays[net.hops[0].node_id]
    for kind in (real, cover):
        sent = b"".join(p[41:] for p in kind)  # beta, gamma, delta (alpha is an X25519 value)
        assert _chi_square_uniform(sent) < 390
        forwarded = b"".join(first.process(p).packet[41:] for p in kind)
        assert _chi_square_uniform(forwarded) < 390
        assert {p[:9] for p in kind} == {b"\x01" + ROUND.to_bytes(8, "big")}
    assert _chi_square_uniform(bytes(PAYLOAD_SIZE) + REPORT) > 10_000  # the statistic has power
