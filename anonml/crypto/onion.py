"""AnonSphinx-v1: constant-size onion packets for reports routed through peers' relays.

A packet is 1,280 bytes (the IPv6 minimum MTU) at every hop::

    AD (9) = version 0x01 ‖ round id (u64, big-endian)     unchanged along the path
    α  (32) X25519 public value, re-blinded at each hop
    β  (148) routing information: 4 encrypted command blocks of 37 bytes
    γ  (16) MAC of this hop over AD ‖ α ‖ β ‖ δ
    δ  (1075) payload, one XChaCha20 layer per hop

A command block is ``type (1) ‖ next node id (16) ‖ delay ms (u32) ‖ next γ (16)``;
type 0x01 = relay to the next node, 0x02 = deliver to the destination node.

Per hop (Danezis & Goldberg 2009, "Sphinx", §3, with the payload MAC of this
design): ``s = X25519(sk, α)``; keys = BLAKE2b(key=s, personal
``AnonSphinx-v1``; label ‖ α) for labels ``mac``, ``stream``, ``blind``,
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

import nacl.bindings as _b
import numpy as np

from anonml.crypto._util import _ensure_bytes, _i2osp, _random_bytes
from anonml.crypto.exceptions import InvalidEncoding, InvalidPacket, ReplayedPacket
from anonml.crypto.identity import NODE_ID_SIZE, RelayKeyCertificate, RoundRelayKey, x25519
from anonml.crypto.tokens import MAC_SIZE, NONCE_SIZE, SLOT_MAX_SIZE, Redemption

__all__ = [
    "VERSION",
    "PACKET_SIZE",
    "MAX_HOPS",
    "PAYLOAD_SIZE",
    "MAX_REPORT_SIZE",
    "Hop",
    "Forward",
    "Deliver",
    "ReplayCache",
    "SphinxRelay",
    "build_packet",
    "build_cover_packet",
]

VERSION = 0x01
PACKET_SIZE = 1280
MAX_HOPS = 4
_AD = 1 + 8
_ALPHA = 32
_GAMMA = 16
_CMD = 1 + NODE_ID_SIZE + 4 + _GAMMA
_BETA = MAX_HOPS * _CMD
_HEADER = _AD + _ALPHA + _BETA + _GAMMA
PAYLOAD_SIZE = PACKET_SIZE - _HEADER
MAX_REPORT_SIZE = PAYLOAD_SIZE - 1 - (1 + SLOT_MAX_SIZE + NONCE_SIZE + MAC_SIZE) - 2
_RELAY, _DELIVER = 0x01, 0x02
_COVER, _REPORT = 0x00, 0x01
_PERSON = b"AnonSphinx-v1"
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
    """Processing result at the final hop: a report for ``destination``, or a cover packet."""

    destination: bytes
    delay_ms: int
    redemption: Redemption | None
    report: bytes | None

    @property
    def is_cover(self) -> bool:
        return self.redemption is None


def _encode_payload(redemption: Redemption | None, report: bytes | None) -> bytes:
    if redemption is None:
        return bytes(PAYLOAD_SIZE)
    if not isinstance(redemption, Redemption):
        raise InvalidEncoding(f"redemption must be a Redemption, not {type(redemption).__name__}")
    report = _ensure_bytes(report, "report")
    body = _i2osp(_REPORT, 1) + bytes(redemption) + _i2osp(len(report), 2) + report
    if len(body) > PAYLOAD_SIZE:
        raise InvalidEncoding(
            f"report of {len(report)} bytes does not fit the {PAYLOAD_SIZE}-byte payload "
            f"(at most {PAYLOAD_SIZE - len(body) + len(report)} with this slot)"
        )
    return body + bytes(PAYLOAD_SIZE - len(body))


def _decode_payload(plain: bytes) -> tuple[Redemption | None, bytes | None]:
    kind = plain[0]
    if kind == _COVER:
        if any(plain[1:]):
            raise InvalidPacket("cover payload is not zero-padded")
        return None, None
    if kind != _REPORT:
        raise InvalidPacket(f"unknown payload kind {kind}")
    n = plain[1]
    end = 2 + n + NONCE_SIZE + MAC_SIZE
    if not 1 <= n <= SLOT_MAX_SIZE or end + 2 > len(plain):
        raise InvalidPacket("payload slot length out of range")
    redemption = Redemption(
        plain[2 : 2 + n], plain[2 + n : 2 + n + NONCE_SIZE], plain[2 + n + NONCE_SIZE : end]
    )
    size = int.from_bytes(plain[end : end + 2], "big")
    if end + 2 + size > len(plain) or any(plain[end + 2 + size :]):
        raise InvalidPacket("payload report length or padding is malformed")
    return redemption, plain[end + 2 : end + 2 + size]


def _command(kind: int, node_id: bytes, delay_ms: int, gamma: bytes) -> bytes:
    return _i2osp(kind, 1) + node_id + _i2osp(delay_ms, 4) + gamma


def build_packet(
    path: Sequence[Hop],
    redemption: Redemption | None,
    report: bytes | None,
    *,
    round_id: int,
    destination: bytes,
    rng: np.random.Generator | None = None,
) -> bytes:
    """Build a 1,280-byte packet that ``path`` (1..4 hops) peels and whose last hop delivers
    ``(redemption, report)`` to ``destination`` (a node id). ``redemption=None`` builds a cover
    packet, identical in form up to the last hop's decrypted payload.
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
    plain = _encode_payload(redemption, report)

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
    tail += bytes(_BETA - k * _CMD)
    beta = _xor(tail, streams[k - 1][: _BETA - (k - 1) * _CMD]) + filler
    gamma = _mac(keys[k - 1].mac, ad, alphas[k - 1], beta, deltas[k - 1])
    for i in reversed(range(k - 1)):
        cmd = _command(_RELAY, path[i + 1].node_id, path[i].delay_ms, gamma)
        beta = _xor(cmd + beta[: _BETA - _CMD], streams[i][:_BETA])
        gamma = _mac(keys[i].mac, ad, alphas[i], beta, deltas[i])
    packet = ad + alphas[0] + beta + gamma + deltas[0]
    assert len(packet) == PACKET_SIZE
    return packet


def build_cover_packet(
    path: Sequence[Hop], *, round_id: int, destination: bytes, rng: np.random.Generator | None = None
) -> bytes:
    """A cover packet: a real packet along ``path`` whose last hop finds an empty payload."""
    return build_packet(path, None, None, round_id=round_id, destination=destination, rng=rng)


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
            raise InvalidPacket(f"unsupported packet version {ad[0]}")
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
        if kind == _DELIVER:
            try:
                redemption, report = _decode_payload(next_delta)
            except InvalidEncoding as exc:
                raise InvalidPacket(f"final payload malformed: {exc}") from exc
            return Deliver(node_id, delay, redemption, report)
        raise InvalidPacket(f"unknown routing command {kind}")

    def close(self) -> None:
        """End of round: destroy the round key and forget the replay tags."""
        self.key.destroy()
        self.replay_cache.clear()
