"""Relay posts only roster members can make: a per-round authenticator and a per-member quota.

Every post to a relay whose round knows its roster carries an envelope (round id, poster's node
id, MAC) keyed by a static–static X25519 secret of poster and relay (:func:`post_key`,
:func:`identity_post_key` for a sender-only member); :func:`member_quota` is what one member can
honestly bring one node in a round. The derivations and the quota's arithmetic:
docs/protocol.md, "Relay posts: authenticator and quota".
"""

from __future__ import annotations

import hashlib
import hmac
import math
from dataclasses import dataclass

from anonml.crypto import NODE_ID_SIZE, PACKET_SIZE, Identity, RoundRelayKey

__all__ = [
    "AUTH_SIZE",
    "RELAY_POST_TYPE",
    "PostAuth",
    "chernoff_cap",
    "identity_post_key",
    "mac_matches",
    "member_quota",
    "open_post",
    "post_key",
    "post_mac",
    "relay_node_of",
    "seal_post",
]

#: Content type of an authenticated post: the envelope, then whole packets back to back.
RELAY_POST_TYPE = "application/vnd.anonml.relay-post"
_MAC_SIZE = 32
#: Bytes of the envelope before the packets: round id, poster node id, MAC.
AUTH_SIZE = 8 + NODE_ID_SIZE + _MAC_SIZE
_DOMAIN = b"anonml relay post v1"


@dataclass(frozen=True)
class PostAuth:
    """The envelope of one post: which round, which member posted, and its MAC over the packets."""

    round_id: int
    poster: bytes
    mac: bytes


def chernoff_cap(lam: float) -> int:
    """``⌈λ + 8√λ + 16⌉``: above a count of mean ``λ`` (variance ≤ λ) with probability < 1e-12."""
    return int(math.ceil(lam + 8.0 * math.sqrt(lam) + 16))


def member_quota(slots_per_peer: int, hops: int, members: int, relays: int | None = None) -> int:
    """Packets one member may post to one node in a round: ``chernoff_cap(μ)`` with
    ``μ = s/(r−1) + (n−2)·s·(h−1)/((r−1)(r−2))`` for ``n`` members of which ``r`` relay
    (``relays``; None: every member relays, and ``μ = s·h/(n−1)``) (docs/protocol.md, "Relay posts")."""
    if members < 2:
        raise ValueError(f"a roster of {members} member(s) has no relay to post to")
    r = members if relays is None else relays
    if not 2 <= r <= members:
        raise ValueError(f"{r} relaying member(s) of {members}: a post needs a relay other than its poster")
    if r == members:
        return chernoff_cap(slots_per_peer * hops / (members - 1))
    first = slots_per_peer / (r - 1)
    onward = 0.0 if hops < 2 or r < 3 else (members - 2) * slots_per_peer * (hops - 1) / ((r - 1) * (r - 2))
    return chernoff_cap(first + onward)


def post_key(own: RoundRelayKey, their_public: bytes) -> bytes:
    """``K`` for posts between this round key's holder and the member with round public key ``their_public``.

    Symmetric: ``post_key(a, B) == post_key(b, A)``. Raises
    :class:`~anonml.crypto.CryptoError` for a small-order public key or a destroyed round key.
    """
    return _post_key(own.exchange(their_public))


def identity_post_key(own: Identity, their_public: bytes) -> bytes:
    """``K`` for a sender-only member's posts: its identity's long-term X25519 key with the relay's
    round key ``their_public`` (docs/protocol.md); ``post_key(b, A_identity)`` on the relay's side."""
    return _post_key(own.relay_exchange(their_public))


def _post_key(shared: bytes) -> bytes:
    return hashlib.blake2b(shared, digest_size=32, person=b"anonml-relaypost").digest()


def post_mac(key: bytes, round_id: int, relay: bytes, poster: bytes, packets: list[bytes]) -> bytes:
    """The MAC of a post of ``packets`` by ``poster`` to ``relay`` in ``round_id`` (docs/protocol.md)."""
    mac = hashlib.blake2b(key=key, digest_size=_MAC_SIZE)
    mac.update(_DOMAIN + round_id.to_bytes(8, "big") + relay + poster + len(packets).to_bytes(4, "big"))
    for packet in packets:
        mac.update(hashlib.blake2b(packet, digest_size=32).digest())
    return mac.digest()


def seal_post(key: bytes, round_id: int, relay: bytes, poster: bytes, packets: list[bytes]) -> bytes:
    """The body of an authenticated post: the envelope, then ``packets`` back to back."""
    mac = post_mac(key, round_id, relay, poster, packets)
    return round_id.to_bytes(8, "big") + poster + mac + b"".join(packets)


def open_post(body: bytes) -> tuple[PostAuth, list[bytes]]:
    """Split an authenticated post into its envelope and packets (nothing verified yet).

    Raises :class:`ValueError` naming what is wrong when ``body`` is not an
    envelope followed by one or more whole packets.
    """
    if len(body) < AUTH_SIZE + PACKET_SIZE or (len(body) - AUTH_SIZE) % PACKET_SIZE:
        raise ValueError(
            f"an authenticated relay post is a {AUTH_SIZE}-byte envelope and whole packets of "
            f"{PACKET_SIZE} bytes, got {len(body)} bytes"
        )
    auth = PostAuth(
        round_id=int.from_bytes(body[:8], "big"),
        poster=bytes(body[8 : 8 + NODE_ID_SIZE]),
        mac=bytes(body[8 + NODE_ID_SIZE : AUTH_SIZE]),
    )
    packets = [bytes(body[i : i + PACKET_SIZE]) for i in range(AUTH_SIZE, len(body), PACKET_SIZE)]
    return auth, packets


def relay_node_of(url: str) -> bytes:
    """The node id a relay URL of the one form (:func:`anonml.protocol.check_relay_url`) ends with.

    Raises :class:`ValueError` when the URL does not end with a hex node id.
    """
    node = bytes.fromhex(url.rsplit("/", 1)[-1])
    if len(node) != NODE_ID_SIZE:
        raise ValueError(f"relay URL {url[:100]!r} does not end with a {NODE_ID_SIZE}-byte node id")
    return node


def mac_matches(expected: bytes, given: bytes) -> bool:
    """Constant-time comparison of two MACs."""
    return hmac.compare_digest(expected, given)
