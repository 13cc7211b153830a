"""Relay posts only roster members can make: a per-round authenticator and a per-member quota.

The roster is public, so anyone can build valid onion packets to a member
from its round certificate. A relay's capacity is therefore spent only
through *authenticated posts*: every ``POST /relay/{node}[/batch]`` of a round
whose relay knows its roster carries, before the packets, an envelope

    round id (8 bytes, big-endian) ‖ poster's node id (16) ‖ MAC (32)

with ``MAC = BLAKE2b-256(key = K, message = "anonml relay post v1" ‖ round id ‖
relay node id ‖ poster node id ‖ packet count (4) ‖ BLAKE2b-256(packet_1) ‖ …)``
and ``K = BLAKE2b-256(key = X25519(a, B), person = "anonml-relaypost")`` for
the poster's round relay secret ``a`` and the relay's round relay public key
``B`` — both public keys are in the aggregator-signed roster (each member's
certificate), so poster and relay derive the same ``K`` (static–static
Diffie–Hellman, as in a Noise ``KK`` handshake's ``ss`` term) and nobody else
can. The MAC binds the round, the relay it is addressed to and the exact
packets, so a post cannot be replayed to another node or grafted onto other
packets; a replay of the same post meets the relay's replay cache.

What the relay learns: which member made the post — the connection's
source, which a first hop sees anyway — and nothing about the packets: the
same member posts its own first-hop packets in the send window and the
packets it forwards as a relay afterwards, under one key and one quota, so
the envelope says nothing of the poster's position on any route or of what
a packet carries.

Quota (:func:`member_quota`): what one member can honestly bring one node in
a round, by the arithmetic of :func:`peer.relay.packet_cap`. With ``n``
members, ``s`` slots each and routes of ``h`` distinct relays drawn uniformly
among the sender's ``n − 1`` others, member ``M`` posts to node ``N`` (a) as
a sender, each of its ``s`` packets with first hop ``N``: probability
``1/(n−1)``; (b) as a relay, each packet of each of the ``n − 2`` other
senders with ``M`` at position ``j`` and ``N`` at ``j + 1`` (``j < h``):
probability ``1/((n−1)(n−2))`` per ``j``. So ``μ = s/(n−1) + s(h−1)/(n−1) =
s·h/(n−1)``, a sum of independent Bernoulli draws of variance at most ``μ``,
and the quota ``⌈μ + 8√μ + 16⌉`` is passed by an honest member with
probability below 1e-12 (Chernoff). Each member's quota is its own: one
member (or an outsider, who has none) spending everything it may leaves
every other member's allowance at that node untouched.

With sender-only members (no relay: :mod:`peer.roster`) routes are drawn
among the ``r ≤ n`` members that relay, so the same count is larger: a first
hop is ``N`` with probability at most ``1/(r−1)``, and each of the ``n − 2``
other senders' ``s`` packets has ``M`` at ``j`` and ``N`` at ``j + 1`` with
probability at most ``1/((r−1)(r−2))``: ``μ ≤ s/(r−1) + (n−2)·s·(h−1)/((r−1)(r−2))``,
which is ``s·h/(n−1)`` again when ``r = n``.

Sender-only members have no round relay key; they post under the long-term
X25519 key of their identity (in the signed roster), ``K = BLAKE2b-256(key =
X25519(identity secret, B), …)``: the same derivation with another static key
(:func:`identity_post_key`). They post only their own first-hop packets.
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
    (``relays``; None: every member relays, and ``μ = s·h/(n−1)``) (module docstring)."""
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
    round key ``their_public`` (module docstring); ``post_key(b, A_identity)`` on the relay's side."""
    return _post_key(own.relay_exchange(their_public))


def _post_key(shared: bytes) -> bytes:
    return hashlib.blake2b(shared, digest_size=32, person=b"anonml-relaypost").digest()


def post_mac(key: bytes, round_id: int, relay: bytes, poster: bytes, packets: list[bytes]) -> bytes:
    """The MAC of a post of ``packets`` by ``poster`` to ``relay`` in ``round_id`` (module docstring)."""
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
