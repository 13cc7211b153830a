"""AnonSphinx-v2: constant-size onion packets whose reports only the aggregator can read.

A packet is 1,280 bytes (the IPv6 minimum MTU) at every hop::

    AD (9) = version 0x02 ‖ round id (u64, big-endian)     unchanged along the path
    α  (32) X25519 public value, re-blinded at each hop
    β  (148) routing information: 4 encrypted command blocks of 37 bytes
    γ  (16) MAC of this hop over AD ‖ α ‖ β ‖ δ
    δ  (1075) payload, one XChaCha20 layer per hop around a sealed box

A command block is ``type (1) ‖ next node id (16) ‖ delay ms (u32) ‖ next γ (16)``;
type 0x01 = relay to the next node, 0x02 = deliver to the destination node.

Per hop (Danezis & Goldberg 2009, "Sphinx", §3, with the payload MAC of this
design): ``s = X25519(sk, α)``; keys = BLAKE2b(key=s, personal
``AnonSphinx-v2``; label ‖ α) for labels ``mac``, ``stream``, ``blind``,
``replay``; check γ (constant time); then the replay tag against this round
key's cache — only after the MAC, so garbage cannot fill the cache or probe
it; then ``(β ‖ 0^37) ⊕ stream`` gives the command and the next β (the
appended zeros keep the size constant and hide the position), δ is XORed with
the rest of the stream, and ``α' = X25519(b, α)`` with b the blinding factor.
The sender replays the same chain of scalar multiplications to get every
hop's s: ``s_i = X25519(b_{i-1}, … X25519(b_0, X25519(x, pk_i)))``; clamped
X25519 multiplications commute on u-coordinates, so the relay's and the
sender's values agree without any scalar arithmetic modulo the group order.

Because the MAC covers δ, a single flipped payload bit is caught by the next
relay (no tagging attack), so the wide-block cipher of the original Sphinx is
not needed; there are no reply blocks (SURBs) that would require it.

Path length. The last hop's opened β is its deliver command followed by the
``37·(4−k)`` bytes the sender put after it and the ``37·(k−1)`` filler bytes
the earlier hops' streams produced. In v1 the former were zeros, so the exit
read k off the zero run; in v2 they are random bytes (as in Sphinx, §3.2), and
the whole of β after the command is uniform for every k (the filler is
keystream), so no hop learns the path length or its position.

Sealed payload (v2). What the last hop peels out of δ is a libsodium sealed
box (``crypto_box_seal``: ephemeral X25519 key ‖ XSalsa20-Poly1305 of the
plaintext under ``crypto_box(esk, pk)`` with nonce ``BLAKE2b-192(epk ‖ pk)``;
48 bytes of overhead) to the aggregator's intake key — the X25519 half of the
aggregator identity named by the signed, witnessed Problem — over a fixed
1,027-byte plaintext::

    payload version 0x02 (1) ‖ kind (1: 0x00 cover, 0x01 report) ‖ round id (8)
    report:  redemption (1 + slot ≤ 64 + nonce 32 + MAC 32) ‖ report length (u16) ‖ report ‖ zeros
    cover:   zeros

Real and cover packets are therefore alike at every hop, the exit included:
1,280 bytes in, and at the last hop a 1,075-byte sealed box, which the exit forwards
(:class:`Deliver` carries it unopened) and only the aggregator, holding the
intake secret, opens it (:func:`open_payload`), drops cover and checks the
round id against the packet's. Sizes: ``PAYLOAD_SIZE = 1280 − 9 − 32 − 148 −
16 = 1075``; sealed plaintext ``1075 − 48 = 1027``; with the largest
redemption (129 bytes, slot of 64) ``MAX_REPORT_SIZE = 1027 − 10 − 129 − 2 =
886`` bytes of report (v1: 943). A :class:`~anonml.protocol.PrivateReport` is
JSON of at most about 265 bytes besides its bits (64-character problem id,
partition ≤ 999, subset ≤ 63, a mechanism of three 17-digit floats and ω), so
every report of up to 465 bytes of bits (m ≤ 3,720) fits — measured worst
case 874 bytes; the protocol's bits field allows 512 bytes, whose JSON (about
935 bytes) fits neither this payload nor, once its ω is added, v1's 943, and
:func:`build_packet` refuses such a report with :class:`InvalidEncoding`
before anything is sent.

Keystream. PyNaCl exposes no raw ``crypto_stream_xchacha20``; we take the
ciphertext of ``crypto_aead_xchacha20poly1305_ietf_encrypt`` on n zero bytes
(key = the hop's stream key, nonce = 24 zero bytes) and drop the tag. That
ciphertext is exactly XChaCha20 — HChaCha20 subkey, then ChaCha20 blocks
starting at counter 1 (block 0 becomes the discarded Poly1305 key) — XORed
with zeros, i.e. the XChaCha20 keystream from block 1 on. Its PRF security is
that of XChaCha20 itself. A fixed nonce is sound because each stream key is
used for exactly one packet at one hop: it is derived from the fresh shared
secret s and α, and the replay cache refuses a second use of s.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import nacl.bindings as _b
import nacl.exceptions

from anonml.crypto._util import _ensure_bytes, _i2osp, _random_bytes
from anonml.crypto.exceptions import InvalidEncoding, InvalidPacket, ReplayedPacket
from anonml.crypto.identity import NODE_ID_SIZE, Identity, RelayKeyCertificate, RoundRelayKey, x25519
from anonml.crypto.tokens import MAC_SIZE, NONCE_SIZE, SLOT_MAX_SIZE, Redemption

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "VERSION",
    "PACKET_SIZE",
    "MAX_HOPS",
    "PAYLOAD_SIZE",
    "MAX_REPORT_SIZE",
    "PAYLOAD_VERSION",
    "SEAL_OVERHEAD",
    "Hop",
    "Forward",
    "Deliver",
    "Payload",
    "UnsupportedVersion",
    "ReplayCache",
    "SphinxRelay",
    "build_packet",
    "build_cover_packet",
    "open_payload",
    "seal_payload",
]

VERSION = 0x02
PACKET_SIZE = 1280
MAX_HOPS = 4
_AD = 1 + 8
_ALPHA = 32
_GAMMA = 16
_CMD = 1 + NODE_ID_SIZE + 4 + _GAMMA
_BETA = MAX_HOPS * _CMD
_HEADER = _AD + _ALPHA + _BETA + _GAMMA
PAYLOAD_SIZE = PACKET_SIZE - _HEADER
#: Sealed-box overhead: the ephemeral X25519 public key and the Poly1305 tag.
SEAL_OVERHEAD = _b.crypto_box_SEALBYTES
_SEALED_PLAIN = PAYLOAD_SIZE - SEAL_OVERHEAD
PAYLOAD_VERSION = 0x02
_PLAIN_HEAD = 1 + 1 + 8  # payload version, kind, round id
MAX_REPORT_SIZE = _SEALED_PLAIN - _PLAIN_HEAD - (1 + SLOT_MAX_SIZE + NONCE_SIZE + MAC_SIZE) - 2
_RELAY, _DELIVER = 0x01, 0x02
_COVER, _REPORT = 0x00, 0x01
_PERSON = b"AnonSphinx-v2"
_MAX_DELAY_MS = 2**32 - 1


def _xor(a: bytes, b: bytes) -> bytes:
    n = len(a)
    return (int.from_bytes(a, "little") ^ int.from_bytes(b[:n], "little")).to_bytes(n, "little")


@dataclass(frozen=True, slots=True)
class _HopKeys:
    mac: bytes
    stream: bytes
    blind: bytes
    replay: bytes


def _hop_keys(shared: bytes, alpha: bytes) -> _HopKeys:
    def kdf(label: bytes) -> bytes:
        return hashlib.blake2b(label + alpha, key=shared, digest_size=32, person=_PERSON).digest()

    return _HopKeys(kdf(b"mac"), kdf(b"stream"), kdf(b"blind"), kdf(b"replay"))


def _keystream(key: bytes) -> bytes:
    """XChaCha20 keystream (from block 1) of β+command+payload length; see the module notes."""
    n = _BETA + _CMD + PAYLOAD_SIZE
    return _b.crypto_aead_xchacha20poly1305_ietf_encrypt(bytes(n), None, bytes(24), key)[:n]


def _mac(key: bytes, ad: bytes, alpha: bytes, beta: bytes, delta: bytes) -> bytes:
    return hashlib.blake2b(ad + alpha + beta + delta, key=key, digest_size=_GAMMA, person=_PERSON).digest()


def _ad(round_id: int) -> bytes:
    return _i2osp(VERSION, 1) + _i2osp(round_id, 8)


@dataclass(frozen=True, slots=True)
class Hop:
    """One relay on a path: its node id, its round relay key, and how long it should hold."""

    node_id: bytes
    public_key: bytes
    delay_ms: int = 0

    def __post_init__(self) -> None:
        _ensure_bytes(self.node_id, "node id", size=NODE_ID_SIZE)
        _ensure_bytes(self.public_key, "relay public key", size=32)
        if not isinstance(self.delay_ms, int) or not 0 <= self.delay_ms <= _MAX_DELAY_MS:
            raise InvalidEncoding(f"delay_ms must be an integer in [0, 2^32), got {self.delay_ms!r}")

    @classmethod
    def from_certificate(cls, certificate: RelayKeyCertificate, round_id: int, delay_ms: int = 0) -> Hop:
        """A hop from a roster entry, after checking its signature and round."""
        relay_key = certificate.verify(round_id=round_id)
        return cls(certificate.node_id, relay_key, delay_ms)


@dataclass(frozen=True, slots=True)
class Forward:
    """Processing result at an intermediate hop: send ``packet`` to ``next_hop`` after ``delay_ms``."""

    next_hop: bytes
    delay_ms: int
    packet: bytes


@dataclass(frozen=True, slots=True)
class Deliver:
    """Processing result at the final hop: ``sealed`` (a sealed box only the aggregator opens) for
    ``destination``. Real reports and cover packets look the same here: the exit cannot tell them apart."""

    destination: bytes
    delay_ms: int
    round_id: int
    sealed: bytes


@dataclass(frozen=True, slots=True)
class Payload:
    """A sealed payload the aggregator opened: a report with its redemption, or cover (both None)."""

    round_id: int
    redemption: Redemption | None
    report: bytes | None

    @property
    def is_cover(self) -> bool:
        return self.redemption is None


class UnsupportedVersion(InvalidPacket):
    """A packet or sealed payload of another AnonSphinx version (v1 carried reports in the clear)."""


def _encode_payload(round_id: int, redemption: Redemption | None, report: bytes | None) -> bytes:
    """The fixed-length plaintext of the sealed box (module notes)."""
    head = _i2osp(PAYLOAD_VERSION, 1)
    if redemption is None:
        if report is not None:
            raise InvalidEncoding("a cover packet carries no report (redemption is None)")
        return head + _i2osp(_COVER, 1) + _i2osp(round_id, 8) + bytes(_SEALED_PLAIN - _PLAIN_HEAD)
    if not isinstance(redemption, Redemption):
        raise InvalidEncoding(f"redemption must be a Redemption, not {type(redemption).__name__}")
    report = _ensure_bytes(report, "report")
    body = head + _i2osp(_REPORT, 1) + _i2osp(round_id, 8)
    body += bytes(redemption) + _i2osp(len(report), 2) + report
    if len(body) > _SEALED_PLAIN:
        raise InvalidEncoding(
            f"report of {len(report)} bytes does not fit the {_SEALED_PLAIN}-byte sealed payload "
            f"(at most {_SEALED_PLAIN - len(body) + len(report)} with this slot)"
        )
    return body + bytes(_SEALED_PLAIN - len(body))


def _decode_payload(plain: bytes) -> Payload:
    if len(plain) != _SEALED_PLAIN:
        raise InvalidPacket(f"sealed payload must hold {_SEALED_PLAIN} bytes, got {len(plain)}")
    if plain[0] != PAYLOAD_VERSION:
        raise UnsupportedVersion(
            f"sealed payload version {plain[0]}, this aggregator reads {PAYLOAD_VERSION}"
        )
    kind, round_id, rest = plain[1], int.from_bytes(plain[2:_PLAIN_HEAD], "big"), plain[_PLAIN_HEAD:]
    if kind == _COVER:
        if any(rest):
            raise InvalidPacket("cover payload is not zero-padded")
        return Payload(round_id, None, None)
    if kind != _REPORT:
        raise InvalidPacket(f"unknown payload kind {kind}")
    n = rest[0]
    end = 1 + n + NONCE_SIZE + MAC_SIZE
    if not 1 <= n <= SLOT_MAX_SIZE or end + 2 > len(rest):
        raise InvalidPacket("payload slot length out of range")
    redemption = Redemption(rest[1 : 1 + n], rest[1 + n : 1 + n + NONCE_SIZE], rest[1 + n + NONCE_SIZE : end])
    size = int.from_bytes(rest[end : end + 2], "big")
    if end + 2 + size > len(rest) or any(rest[end + 2 + size :]):
        raise InvalidPacket("payload report length or padding is malformed")
    return Payload(round_id, redemption, rest[end + 2 : end + 2 + size])


def _seal(plain: bytes, intake_key: bytes, rng: np.random.Generator | None) -> bytes:
    """``crypto_box_seal(plain, intake_key)`` with the ephemeral key from :func:`_random_bytes`.

    Byte for byte libsodium's sealed box (``epk ‖ crypto_box_easy(plain, BLAKE2b-192(epk ‖ pk),
    pk, esk)``; :class:`nacl.public.SealedBox` opens it), written out only so that a seeded
    ``rng`` (known-answer vectors) reproduces it; without one the ephemeral seed comes from
    the OS like every onion key.
    """
    epk, esk = _b.crypto_box_seed_keypair(_random_bytes(32, rng))
    nonce = hashlib.blake2b(epk + intake_key, digest_size=_b.crypto_box_NONCEBYTES).digest()
    try:
        return epk + _b.crypto_box_easy(plain, nonce, intake_key, esk)
    except nacl.exceptions.CryptoError as exc:  # libsodium refuses small-order keys
        raise InvalidEncoding(f"intake key refused by crypto_box: {exc}") from None


def seal_payload(
    intake_key: bytes,
    round_id: int,
    redemption: Redemption | None,
    report: bytes | None,
    rng: np.random.Generator | None = None,
) -> bytes:
    """The ``PAYLOAD_SIZE``-byte sealed box of ``(redemption, report)`` (cover when both are None)
    for ``round_id``, sealed to the aggregator's X25519 ``intake_key``: what the last hop of
    :func:`build_packet`'s path peels out and forwards, and what :func:`open_payload` opens.

    :class:`InvalidEncoding` for a key that is not a canonical non-zero X25519 value, a round id
    outside [0, 2^64), or a report over :data:`MAX_REPORT_SIZE` (with the largest slot).
    """
    intake_key = _ensure_bytes(intake_key, "intake key", size=32)
    if int.from_bytes(intake_key, "little") >= 2**255 - 19 or not any(intake_key):
        raise InvalidEncoding("intake key is not a canonical, non-zero X25519 public key")
    if not isinstance(round_id, int) or isinstance(round_id, bool) or not 0 <= round_id < 2**64:
        raise InvalidEncoding(f"round id must be an integer in [0, 2^64), got {round_id!r}")
    # _SEALED_PLAIN bytes of padded plaintext + SEAL_OVERHEAD = PAYLOAD_SIZE for every input accepted
    # above (test_packet_size_is_constant_at_every_hop checks it over slots, reports and path lengths)
    return _seal(_encode_payload(round_id, redemption, report), intake_key, rng)


def open_payload(identity: Identity, sealed: bytes, *, round_id: int) -> Payload:
    """Open a delivered sealed payload with the aggregator's identity and check it.

    Raises :class:`InvalidPacket` naming what is wrong: not ``PAYLOAD_SIZE`` bytes, a box that
    does not open with this identity's intake key (tampered, or sealed to another key), a
    payload of another version (:class:`UnsupportedVersion`), a malformed layout, or a round id
    other than ``round_id`` (the packet's, which the exit relay forwards beside it).
    """
    sealed = _ensure_bytes(sealed, "sealed payload")
    if len(sealed) != PAYLOAD_SIZE:
        raise InvalidPacket(f"sealed payload must be {PAYLOAD_SIZE} bytes, got {len(sealed)}")
    try:
        payload = _decode_payload(identity.open_sealed(sealed))
    except InvalidPacket:
        raise
    except InvalidEncoding as exc:  # a field the layout admits but Redemption does not
        raise InvalidPacket(f"sealed payload malformed: {exc}") from exc
    if payload.round_id != round_id:
        raise InvalidPacket(f"sealed payload is for round {payload.round_id}, delivered as round {round_id}")
    return payload


def _command(kind: int, node_id: bytes, delay_ms: int, gamma: bytes) -> bytes:
    return _i2osp(kind, 1) + node_id + _i2osp(delay_ms, 4) + gamma


def build_packet(
    path: Sequence[Hop],
    redemption: Redemption | None,
    report: bytes | None,
    *,
    round_id: int,
    destination: bytes,
    intake_key: bytes,
    rng: np.random.Generator | None = None,
) -> bytes:
    """Build a 1,280-byte packet that ``path`` (1..4 hops) peels and whose last hop delivers
    ``(redemption, report)``, sealed to ``intake_key`` (the aggregator's X25519 intake key), to
    ``destination`` (a node id). ``redemption=None`` builds a cover packet, identical in form at
    every hop: only the holder of the intake secret can tell it from a report.
    """
    k = len(path)
    if not 1 <= k <= MAX_HOPS:
        raise InvalidEncoding(f"a path has 1..{MAX_HOPS} hops, got {k}")
    for hop in path:
        if not isinstance(hop, Hop):
            raise InvalidEncoding(f"path entries must be Hop, not {type(hop).__name__}")
    destination = _ensure_bytes(destination, "destination", size=NODE_ID_SIZE)
    if not isinstance(round_id, int) or isinstance(round_id, bool) or not 0 <= round_id < 2**64:
        raise InvalidEncoding(f"round id must be an integer in [0, 2^64), got {round_id!r}")
    ad = _ad(round_id)
    plain = seal_payload(intake_key, round_id, redemption, report, rng)

    # Blinding chain: α_i and s_i for every hop, replaying the relays' multiplications.
    x = _random_bytes(32, rng)
    alpha = _b.crypto_scalarmult_base(x)
    alphas, keys, blinds = [], [], []
    for i, hop in enumerate(path):
        shared = x25519(x, hop.public_key)
        for b in blinds:
            shared = x25519(b, shared)
        hk = _hop_keys(shared, alpha)
        alphas.append(alpha)
        keys.append(hk)
        blinds.append(hk.blind)
        if i < k - 1:
            alpha = x25519(hk.blind, alpha)
    streams = [_keystream(hk.stream) for hk in keys]

    # Filler: what hops 0..k-2 append to β, as the last hop will see it.
    filler = b""
    for i in range(k - 1):
        filler = _xor(filler + bytes(_CMD), streams[i][_BETA - i * _CMD : _BETA + _CMD])

    # Payload layers, innermost (last hop) first.
    deltas = [b""] * k
    delta = plain
    for i in reversed(range(k)):
        delta = _xor(delta, streams[i][_BETA + _CMD :])
        deltas[i] = delta

    last = path[-1]
    tail = _command(_DELIVER, destination, last.delay_ms, bytes(_GAMMA))
    tail += _random_bytes(_BETA - k * _CMD, rng)  # random, not zeros: hides k from the exit
    beta = _xor(tail, streams[k - 1][: _BETA - (k - 1) * _CMD]) + filler
    gamma = _mac(keys[k - 1].mac, ad, alphas[k - 1], beta, deltas[k - 1])
    for i in reversed(range(k - 1)):
        cmd = _command(_RELAY, path[i + 1].node_id, path[i].delay_ms, gamma)
        beta = _xor(cmd + beta[: _BETA - _CMD], streams[i][:_BETA])
        gamma = _mac(keys[i].mac, ad, alphas[i], beta, deltas[i])
    # _AD + _ALPHA + _BETA + _GAMMA + PAYLOAD_SIZE = PACKET_SIZE: each part is fixed-length
    return ad + alphas[0] + beta + gamma + deltas[0]


def build_cover_packet(
    path: Sequence[Hop],
    *,
    round_id: int,
    destination: bytes,
    intake_key: bytes,
    rng: np.random.Generator | None = None,
) -> bytes:
    """A cover packet: a real packet along ``path`` whose sealed payload the aggregator finds empty."""
    return build_packet(
        path, None, None, round_id=round_id, destination=destination, intake_key=intake_key, rng=rng
    )


class ReplayCache:
    """Replay tags seen under one round key (thread-safe, in memory, dropped with the key)."""

    def __init__(self) -> None:
        self._tags: set[bytes] = set()
        self._lock = threading.Lock()

    def add(self, tag: bytes) -> None:
        """Record ``tag``; :class:`ReplayedPacket` if it was already recorded."""
        with self._lock:
            if tag in self._tags:
                raise ReplayedPacket("packet already processed in this round (replay)")
            self._tags.add(tag)

    def discard(self, tag: bytes) -> None:
        """Forget ``tag`` (a relay that could not keep the packet it came with: it may come again)."""
        with self._lock:
            self._tags.discard(tag)

    def clear(self) -> None:
        with self._lock:
            self._tags.clear()

    def __len__(self) -> int:
        return len(self._tags)


class SphinxRelay:
    """A relay's packet processor for one round: its round key and replay cache.

    Every failure raises :class:`InvalidPacket` (or its subclass
    :class:`ReplayedPacket`); nothing is cached unless the MAC verified.
    """

    def __init__(self, key: RoundRelayKey, replay_cache: ReplayCache | None = None) -> None:
        self.key = key
        self.replay_cache = replay_cache if replay_cache is not None else ReplayCache()

    def process(self, packet: bytes) -> Forward | Deliver:
        """Peel one layer: verify, check replay, decrypt, and return what to do next."""
        packet = _ensure_bytes(packet, "packet")
        if len(packet) != PACKET_SIZE:
            raise InvalidPacket(f"packet must be {PACKET_SIZE} bytes, got {len(packet)}")
        ad, rest = packet[:_AD], packet[_AD:]
        if ad[0] != VERSION:
            raise UnsupportedVersion(
                f"unsupported packet version {ad[0]}: this relay speaks AnonSphinx-v{VERSION} "
                "(reports sealed to the aggregator)"
            )
        round_id = int.from_bytes(ad[1:], "big")
        if round_id != self.key.round_id:
            raise InvalidPacket(
                f"packet is for round {round_id}, this relay key is for round {self.key.round_id}"
            )
        alpha, beta = rest[:_ALPHA], rest[_ALPHA : _ALPHA + _BETA]
        gamma = rest[_ALPHA + _BETA : _ALPHA + _BETA + _GAMMA]
        delta = rest[_ALPHA + _BETA + _GAMMA :]
        if not any(alpha):
            raise InvalidPacket("α is all zeros")
        if self.key.destroyed:
            raise InvalidPacket(f"relay key of round {round_id} was destroyed")
        try:
            shared = self.key.exchange(alpha)
        except InvalidEncoding as exc:
            raise InvalidPacket(f"α rejected: {exc}") from exc
        hk = _hop_keys(shared, alpha)
        if not hmac.compare_digest(_mac(hk.mac, ad, alpha, beta, delta), gamma):
            raise InvalidPacket("packet MAC does not verify")
        self.replay_cache.add(hk.replay)

        stream = _keystream(hk.stream)
        opened = _xor(beta + bytes(_CMD), stream[: _BETA + _CMD])
        cmd, next_beta = opened[:_CMD], opened[_CMD:]
        kind, node_id = cmd[0], cmd[1 : 1 + NODE_ID_SIZE]
        delay = int.from_bytes(cmd[1 + NODE_ID_SIZE : 5 + NODE_ID_SIZE], "big")
        next_gamma = cmd[5 + NODE_ID_SIZE :]
        next_delta = _xor(delta, stream[_BETA + _CMD :])
        if kind == _RELAY:
            next_alpha = x25519(hk.blind, alpha)
            return Forward(node_id, delay, ad + next_alpha + next_beta + next_gamma + next_delta)
        if kind == _DELIVER:  # the sealed box goes on as it is: this relay cannot open it
            return Deliver(node_id, delay, round_id, next_delta)
        raise InvalidPacket(f"unknown routing command {kind}")

    def close(self) -> None:
        """End of round: destroy the round key and forget the replay tags."""
        self.key.destroy()
        self.replay_cache.clear()
