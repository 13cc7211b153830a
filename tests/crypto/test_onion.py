"""AnonSphinx-v2: round trips, constant size, tamper/replay rejection, sealed payloads, cover and path
length indistinguishable at every hop (exit included)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anonml.crypto import onion
from anonml.crypto.exceptions import InvalidEncoding, InvalidPacket, ReplayedPacket
from anonml.crypto.identity import Identity
from anonml.crypto.onion import (
    MAX_HOPS,
    MAX_REPORT_SIZE,
    PACKET_SIZE,
    PAYLOAD_SIZE,
    SEAL_OVERHEAD,
    Deliver,
    Forward,
    Hop,
    Payload,
    SphinxRelay,
    UnsupportedVersion,
    build_cover_packet,
    build_packet,
    open_payload,
    seal_payload,
)
from anonml.crypto.tokens import Redemption
from tests.crypto import edwards_ref as ed
from tests.crypto.helpers import flip_bit

ROUND = 5
AGGREGATOR = b"\xaa" * 16
REDEMPTION = Redemption(b"p1/r5/s0", bytes(range(32)), bytes(range(32, 64)))
REPORT = b"\x01\x00\x01\x01 perturbed bits"
#: The aggregator: its identity's X25519 half is the intake key every payload is sealed to.
AGG = Identity.generate(np.random.default_rng(99))
INTAKE = AGG.public.relay_key


def opened(delivered: Deliver) -> Payload:
    """What the aggregator reads from a delivery (the exit relay only forwards it)."""
    return open_payload(AGG, delivered.sealed, round_id=delivered.round_id)


def _packet(path: Sequence[Hop], round_id: int = ROUND, rng: np.random.Generator | None = None) -> bytes:
    """A real packet along ``path`` carrying :data:`REDEMPTION` and :data:`REPORT` to the aggregator."""
    return build_packet(
        path, REDEMPTION, REPORT, round_id=round_id, destination=AGGREGATOR, intake_key=INTAKE, rng=rng
    )


def _cover(path: Sequence[Hop], rng: np.random.Generator | None = None) -> bytes:
    """A cover packet along ``path`` to the aggregator, in round :data:`ROUND`."""
    return build_cover_packet(path, round_id=ROUND, destination=AGGREGATOR, intake_key=INTAKE, rng=rng)


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
    # Sealed box (48) around version, kind, round id (10), the largest redemption (129), length (2).
    assert SEAL_OVERHEAD == 48
    assert MAX_REPORT_SIZE == PAYLOAD_SIZE - 48 - 10 - (1 + 64 + 32 + 32) - 2 == 886


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_packets_decode_at_the_final_hop(net: Network, k: int) -> None:
    path = [Hop(h.node_id, h.public_key, delay_ms=100 * (i + 1)) for i, h in enumerate(net.hops[:k])]
    packet = _packet(path)
    delivered, seen = net.route(packet, path[0].node_id)
    assert len(seen) == k and all(len(p) == PACKET_SIZE for p in seen)
    assert len(delivered.sealed) == PAYLOAD_SIZE and REPORT not in delivered.sealed
    payload = opened(delivered)
    assert payload.redemption == REDEMPTION and payload.report == REPORT and payload.round_id == ROUND
    assert delivered.destination == AGGREGATOR and delivered.delay_ms == 100 * k
    assert not payload.is_cover


def test_routing_commands_carry_next_hop_and_delay(net: Network) -> None:
    path = [
        Hop(h.node_id, h.public_key, delay_ms=d) for h, d in zip(net.hops[:3], (7, 0, 2**32 - 1), strict=True)
    ]
    packet = _packet(path)
    first = net.relays[path[0].node_id].process(packet)
    assert isinstance(first, Forward) and first.next_hop == path[1].node_id and first.delay_ms == 7
    second = net.relays[path[1].node_id].process(first.packet)
    assert isinstance(second, Forward) and second.next_hop == path[2].node_id and second.delay_ms == 0
    last = net.relays[path[2].node_id].process(second.packet)
    assert isinstance(last, Deliver) and last.delay_ms == 2**32 - 1


def test_alpha_changes_at_every_hop(net: Network) -> None:
    packet = _packet(net.hops)
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
    report = None if cover else report
    packet = build_packet(
        path, redemption, report, round_id=ROUND, destination=AGGREGATOR, intake_key=INTAKE, rng=rng
    )
    delivered, seen = net.route(packet, path[0].node_id)
    assert [len(p) for p in seen] == [PACKET_SIZE] * k
    assert len(delivered.sealed) == PAYLOAD_SIZE
    payload = opened(delivered)
    assert payload.is_cover == cover
    if not cover:
        assert payload.redemption == redemption and payload.report == report


_SHARED_NET = Network(seed=3)


def test_report_too_large_is_refused(net: Network) -> None:
    def build(report_size: int) -> bytes:
        report = bytes(report_size)
        return build_packet(
            net.hops[:1], REDEMPTION, report, round_id=ROUND, destination=AGGREGATOR, intake_key=INTAKE
        )

    largest = PAYLOAD_SIZE - SEAL_OVERHEAD - 10 - (1 + 32 + 32 + 2) - len(REDEMPTION.slot)
    build(largest)
    with pytest.raises(InvalidEncoding):
        build(largest + 1)


def test_path_length_bounds(net: Network) -> None:
    with pytest.raises(InvalidEncoding):
        _packet([])
    with pytest.raises(InvalidEncoding):
        _packet(net.hops + net.hops[:1])


@pytest.mark.parametrize("position", ["first of three", "last of three"])
def test_every_bit_flip_in_every_field_is_rejected(net: Network, position: str) -> None:
    packet = _packet(net.hops[:3], rng=np.random.default_rng(3))
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
    packet = _packet(net.hops[:2])
    relay = net.relays[net.hops[0].node_id]
    relay.process(packet)
    with pytest.raises(ReplayedPacket):
        relay.process(packet)


def test_replay_tag_is_checked_only_after_the_mac(net: Network) -> None:
    packet = _packet(net.hops[:2])
    relay = net.relays[net.hops[0].node_id]
    relay.process(packet)
    tampered = flip_bit(packet, 8 * 600)  # same α (same replay tag), altered β/δ
    with pytest.raises(InvalidPacket) as info:
        relay.process(tampered)
    assert not isinstance(info.value, ReplayedPacket)  # rejected by the MAC, not by the cache


def test_wrong_round_or_destroyed_key_is_rejected(net: Network) -> None:
    packet = _packet(net.hops[:1], round_id=ROUND + 1)
    with pytest.raises(InvalidPacket, match="round"):
        net.relays[net.hops[0].node_id].process(packet)
    packet = _packet(net.hops[:1])
    relay = net.relays[net.hops[0].node_id]
    relay.close()
    with pytest.raises(InvalidPacket, match="destroyed"):
        relay.process(packet)
    assert len(relay.replay_cache) == 0


def test_packet_for_another_relay_fails_the_mac(net: Network) -> None:
    packet = _packet(net.hops[:2])
    with pytest.raises(InvalidPacket, match="MAC"):
        net.relays[net.hops[1].node_id].process(packet)


def _with_alpha(packet: bytes, alpha: bytes) -> bytes:
    return packet[:9] + alpha + packet[41:]


def test_all_zero_small_order_and_non_canonical_alpha_are_rejected(net: Network) -> None:
    packet = _packet(net.hops[:1])
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
        relay.process(b"\x02" + ROUND.to_bytes(8, "big") + body)


def test_cover_packets_follow_the_same_path_and_only_the_last_hop_tells(net: Network) -> None:
    cover = _cover(net.hops[:3])
    delivered, seen = net.route(cover, net.hops[0].node_id)
    assert len(seen) == 3 and all(len(p) == PACKET_SIZE for p in seen)
    assert delivered.destination == AGGREGATOR and len(delivered.sealed) == PAYLOAD_SIZE
    assert opened(delivered).is_cover and opened(delivered).report is None


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
        real.append(_packet(net.hops[:3], rng=rng))
        cover.append(_cover(net.hops[:3], rng=rng))
    first = net.relays[net.hops[0].node_id]
    for kind in (real, cover):
        sent = b"".join(p[41:] for p in kind)  # beta, gamma, delta (alpha is an X25519 value)
        assert _chi_square_uniform(sent) < 390
        forwarded = b"".join(first.process(p).packet[41:] for p in kind)
        assert _chi_square_uniform(forwarded) < 390
        assert {p[:9] for p in kind} == {b"\x02" + ROUND.to_bytes(8, "big")}
    assert _chi_square_uniform(bytes(PAYLOAD_SIZE) + REPORT) > 10_000  # the statistic has power


# -- what the exit relay can see ----------------------------------------------------------------------


def _exit_view(net: Network, packet: bytes, first: bytes) -> tuple[Deliver, bytes]:
    """Route ``packet`` to its last hop; that hop's result and the β it opens (after its command).

    Recomputed with the last hop's own round key — everything the exit relay can compute.
    """
    node = first
    while True:
        relay = net.relays[node]
        out = relay.process(packet)
        if isinstance(out, Deliver):
            break
        node, packet = out.next_hop, out.packet
    alpha, beta = packet[9:41], packet[41:189]
    keys = onion._hop_keys(relay.key.exchange(alpha), alpha)
    opened = onion._xor(beta + bytes(37), onion._keystream(keys.stream)[: 148 + 37])
    return out, opened[37:]


def test_the_exit_forwards_the_same_sealed_form_for_reports_and_cover(net: Network) -> None:
    """The exit's result for a real and a cover packet: same fields, same lengths, no report bytes, and
    sealed bytes that look uniform (chi-square, 255 df: mean 255, sd 22.6; bound 255 + 6 sd = 390)."""
    real, cover = [], []
    for i in range(100):
        path = net.hops[: 1 + i % 4]
        real.append(_exit_view(net, _packet(path), path[0].node_id)[0])
        cover.append(_exit_view(net, _cover(path), path[0].node_id)[0])
    secrets = (REPORT, REDEMPTION.slot, REDEMPTION.nonce, REDEMPTION.mac, bytes(REDEMPTION))
    for kind in (real, cover):
        assert {(d.destination, d.round_id, len(d.sealed)) for d in kind} == {
            (AGGREGATOR, ROUND, PAYLOAD_SIZE)
        }
        assert not any(s in d.sealed for d in kind for s in secrets)
        assert _chi_square_uniform(b"".join(d.sealed[32:] for d in kind)) < 390  # after the ephemeral key
        assert len({d.sealed for d in kind}) == len(kind)  # fresh ephemeral keys: no two alike
    # Only the intake secret tells them apart.
    assert all(not opened(d).is_cover for d in real) and all(opened(d).is_cover for d in cover)
    other = Identity.generate()
    with pytest.raises(InvalidPacket, match="does not open"):
        open_payload(other, real[0].sealed, round_id=ROUND)


def test_path_lengths_one_to_four_leave_the_exit_the_same_padding() -> None:
    """The β the exit opens after its command, for k = 1..4: every byte position uniform.

    v1 padded with 37·(4−k) zero bytes, so position 0 alone told k = 4 from the rest. Per k and
    position, the mean over n = 240 packets is 127.5 ± 73.9/√240 = ±4.77 under uniformity; we allow
    6 sd (28.6). Over all bytes of each k the chi-square statistic stays under 390 (as above).
    """
    net = Network(seed=6)
    n = 240
    views = {}
    for k in range(1, MAX_HOPS + 1):
        path = net.hops[:k]
        rows = [_exit_view(net, _cover(path), path[0].node_id)[1] for _ in range(n)]
        views[k] = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(n, 148)
    for k, view in views.items():
        assert np.abs(view.mean(axis=0) - 127.5).max() < 6 * 73.9 / np.sqrt(n), k
        assert _chi_square_uniform(view.tobytes()) < 390, k
        assert (view == 0).mean() < 2 / 256, k  # no zero run: uniform has 1/256 zero bytes
    # The test has power: v1's layout (zeros after the command) fails it at once.
    v1 = np.concatenate([np.zeros((n, 37 * 3), np.uint8), views[1][:, 111:]], axis=1)
    assert np.abs(v1.mean(axis=0) - 127.5).max() > 100


def test_sealed_payloads_are_libsodium_sealed_boxes_both_ways() -> None:
    import nacl.public

    sealed = seal_payload(INTAKE, ROUND, REDEMPTION, REPORT)
    plain = nacl.public.SealedBox(nacl.public.PrivateKey(AGG._secret_bytes()[32:])).decrypt(sealed)
    assert len(plain) == PAYLOAD_SIZE - SEAL_OVERHEAD and plain[:10] == b"\x02\x01" + ROUND.to_bytes(8, "big")
    theirs = nacl.public.SealedBox(nacl.public.PublicKey(INTAKE)).encrypt(plain)
    assert open_payload(AGG, theirs, round_id=ROUND) == Payload(ROUND, REDEMPTION, REPORT)


def test_open_payload_refuses_tampering_other_rounds_versions_and_sizes() -> None:
    sealed = seal_payload(INTAKE, ROUND, REDEMPTION, REPORT)
    for bit in (0, 8 * 40, 8 * 500, 8 * PAYLOAD_SIZE - 1):  # ephemeral key, tag, body, last byte
        with pytest.raises(InvalidPacket, match="does not open"):
            open_payload(AGG, flip_bit(sealed, bit), round_id=ROUND)
    with pytest.raises(InvalidPacket, match="round"):
        open_payload(AGG, sealed, round_id=ROUND + 1)
    with pytest.raises(InvalidPacket, match="bytes"):
        open_payload(AGG, sealed[:-1], round_id=ROUND)
    plain = bytearray(onion._encode_payload(ROUND, REDEMPTION, REPORT))
    plain[0] = 1
    with pytest.raises(UnsupportedVersion, match="version 1"):
        open_payload(AGG, onion._seal(bytes(plain), INTAKE, None), round_id=ROUND)
    plain[0], plain[1] = 2, 7
    with pytest.raises(InvalidPacket, match="kind"):
        open_payload(AGG, onion._seal(bytes(plain), INTAKE, None), round_id=ROUND)
    cover = bytearray(onion._encode_payload(ROUND, None, None))
    cover[-1] = 1
    with pytest.raises(InvalidPacket, match="zero-padded"):
        open_payload(AGG, onion._seal(bytes(cover), INTAKE, None), round_id=ROUND)
    for key in (bytes(32), (2**255 - 19).to_bytes(32, "little"), b"\x01" + bytes(31)):  # zero, p, order 4
        with pytest.raises(InvalidEncoding):
            seal_payload(key, ROUND, REDEMPTION, REPORT)


def test_a_v1_packet_is_refused_by_its_version(net: Network) -> None:
    packet = _packet(net.hops[:1])
    with pytest.raises(UnsupportedVersion, match="version 1.*AnonSphinx-v2"):
        net.relays[net.hops[0].node_id].process(b"\x01" + packet[1:])


def test_the_largest_report_the_plan_can_make_fits_and_the_bits_field_maximum_does_not() -> None:
    """Worst case JSON around 465 bytes of bits (m = 3,720): 64-character problem id, partition 999,
    subset 63, subset selection with ω and long floats — within MAX_REPORT_SIZE; 512 bytes is not."""
    from anonml.privacy.mechanisms import SubsetSelection
    from anonml.protocol import PrivateReport

    def report(n_bytes: int) -> bytes:
        mechanism = SubsetSelection(0.0013989352932353948, 8 * n_bytes, 1).descriptor()
        return PrivateReport(
            problem_id="a" * 64, partition=999, subset=63, mechanism=mechanism, bits=bytes(n_bytes)
        ).to_bytes()

    longest = Redemption(b"s" * 64, bytes(32), bytes(32))
    assert len(report(465)) <= MAX_REPORT_SIZE
    seal_payload(INTAKE, ROUND, longest, report(465))
    with pytest.raises(InvalidEncoding, match="does not fit"):
        seal_payload(INTAKE, ROUND, longest, report(512))
