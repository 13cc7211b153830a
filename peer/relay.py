"""The relay: peel one onion layer, hold the packet, release it in the second window.

For each (node, round) a peer opens a :class:`RelayRound` when it has checked
the roster: its :class:`~anonml.crypto.SphinxRelay` (round key + replay
cache), the round's :class:`~anonml.crypto.WindowSchedule`, the roster's
routing table (node id → relay URL) and the aggregator's node id and intake
URL. :meth:`RelayService.handle` then, for one packet:

1. refuses anything but exactly ``PACKET_SIZE`` bytes (the HTTP route already
   refused oversized bodies with 413 before reading them) — before any crypto;
2. finds the round key by the packet's round id (404 if this node has none);
3. drops the packet if it arrives after ``t_r`` (410);
4. for a round whose relay knows its roster (:attr:`RelayRound.members`),
   takes the packet only from a post a roster member authenticated
   (:mod:`peer.relayauth`: the whole post is refused with 403 before any
   packet is looked at when its MAC is not a member's for this node and
   round; a bare packet gets 401), and refuses it with 429 once the posting
   member has spent its own :attr:`RelayRound.quota` at this node — so an
   outsider who builds valid packets from the public round keys in the roster
   spends nothing, and a member only its own allowance. It also refuses with
   429 once the node has accepted :attr:`RelayRound.max_packets` packets this
   round (:func:`packet_cap`; with a roster, the sum of the quotas). Both
   counts are kept in the state DB with the held packets
   (:meth:`peer.db.PeerDB.hold_many`), and a round reopened after a restart
   starts from them: killing the host does not grant a fresh cap or quota;
5. peels it (MAC, then the replay tag: 409 for a replay; 400 for anything
   else wrong) and schedules the release with :func:`~anonml.crypto.release_time`
   — to the next hop's relay, or, at the last hop, to the aggregator's intake
   as an :class:`~anonml.protocol.IntakeDelivery`: the packet's sealed payload
   as it came out of the last layer. The last hop cannot open it (it is sealed
   to the aggregator's intake key, :mod:`anonml.crypto.onion`), so it cannot
   read the report or its token, nor tell a cover packet from a report: it
   forwards both alike, and the aggregator drops cover after opening it. A
   packet of another AnonSphinx version (v1 carried reports in the clear) is
   refused with 400 and its version named, before any crypto.

Uniform answers. Whatever the packet turned out to be — held for the next
hop, held for the intake — the answer is
the same empty ``202``; and every refusal after peeling that could depend on
the node's position on the route (bad MAC, unknown next hop, unknown final
destination) is the same ``400 packet rejected``. The previous hop (the
sender, or a relay colluding with the aggregator) learns nothing about the
packet's position or kind from the answer. Counters kept for the node's own
user (:meth:`RelayService.count`) still tell the cases apart.

Batches. :meth:`RelayService.handle_many` takes the packets of one
``POST /relay/{node}/batch`` (:mod:`peer.routes.relay`): each is checked and
peeled on its own and gets the outcome it would have got alone, and the
replay tags and held packets of the whole batch are stored in one state-DB
transaction before any is answered.

Outbound. Only routes whose URL has the one relay form and a global host
(:func:`anonml.protocol.check_relay_url`) are kept when a round opens; a
next hop's name is resolved just before the packet leaves and the packet is
refused for good (:data:`REFUSED_ADDRESS`, counted ``"route refused: relay
address"``) when any address it resolves to is not global
(:func:`anonml.protocol.check_relay_address`), so no member can point the
relays at an internal service. A
release that falls due joins its destination's queue; one request at a time
per destination carries everything queued there (:meth:`RelayService._due`):
one packet as before (``POST /relay/{node}``, ``POST /intake``), several as
one batch (``POST …/batch``: packets back to back to a next hop, an
:class:`~anonml.protocol.IntakeBatch` to the intake) with a result per
item. A round with a roster forwards each request to a next hop as one post
authenticated under the node's own round key (one queue per destination and
poster). No release leaves before its time; under load many leave in one
request. Every request is one :func:`anonml.outbound.post` with a total
deadline and a size cap, on a kept-alive connection per destination
(:class:`anonml.outbound.KeepAlive`), so a next hop that answers slowly (or never) holds
one pool thread for at most :data:`~anonml.outbound.PACKET_DEADLINE` seconds.
Batching tells the next hop nothing it would not learn from arrival times:
the packets of one request were due at about the same moment. A release that
fails in a way that may pass (unreachable, 5xx, 404 from a next hop that has
not reloaded its round after a restart, 429) is retried with backoff
(:func:`retry_delay`) until ``t_r`` — a delivery to the intake until ``t_r``
plus the intake's grace (:attr:`RelayRound.grace`, from the signed bins), so
an aggregator killed late in the release window and back within its grace
still gets every report held for it; what is finally not delivered is counted
``"forwarded lost"`` / ``"delivered lost"`` on this (sending) side.

Release times. Every packet of the round is inside the relays before any
leaves (first hops hold until after ``t_s + δ``), so arrival order says nothing
about send order. The release window ``(t_s + δ, t_r − g)`` is cut into one
*stage* per hop of the problem's routes: a packet received in the send window
is released uniformly in stage 1; one received during stage ``k`` is released
uniformly in stage ``k + 1``; one received in the last stage, uniformly in
what is left of it; one received later still (within ``g`` of ``t_r``),
at once.

Deviation: the protocol rule draws every release uniformly in
``(max(now, t_s + δ), t_r)``. Chained over three hops that puts the last
hops' releases in the last eighth of the window on average, all the round's
traffic arrives together just before ``t_r``, and under load packets miss
``t_r`` and are dropped at the next relay. Stages keep each hop's releases
uniform over a fixed share of the window (the same mixing: every packet of a
stage leaves in random order within it) and spread the load evenly; the
guard ``g`` (:attr:`RelayRound.guard`, default a third of the release window,
at most 2 s) leaves the hops that follow network time before ``t_r``. Every
release still falls inside ``(t_s + δ, t_r)``.

Deliveries to the intake leave on a tick: a delivery's drawn release time
is rounded up to the next multiple of :data:`INTAKE_TICK` seconds (never past
``t_r − g``, nor earlier than drawn), so a last hop's deliveries due in the
same tick reach the intake in one batch request. The aggregator then learns
arrival times only to the tick, which is less than before; the order within
a tick is the order of the drawn times, which is independent of arrival.

At ``t_r`` the round is closed: its key is destroyed and its replay cache
dropped (:meth:`~anonml.crypto.SphinxRelay.close`), in memory and in the
state DB.

Restart. With a state DB (``db``) and a round with a vault, every held
packet is stored sealed with its release time and last chance, and deleted
once released or lost; the round key is stored sealed at registration and
deleted at ``t_r``; replay tags are stored (:class:`StoredReplayCache`). A
host killed and restarted schedules the held packets again
(:meth:`RelayService.resume_held`) and reopens the round with the same key
when its worker fetches the bins; meanwhile other relays retry (404 is
retriable) until ``t_r``. Nothing received is
unpickled or executed; packets are opaque bytes until the Sphinx MAC holds.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace

import numpy as np
from pydantic import ValidationError

from anonml.addresses import connect_check
from anonml.crypto import (
    PACKET_SIZE,
    PAYLOAD_VERSION,
    CryptoError,
    Deliver,
    InvalidPacket,
    ReplayCache,
    ReplayedPacket,
    SphinxRelay,
    UnsupportedVersion,
    WindowSchedule,
    release_time,
)
from anonml.errors import ProtocolError
from anonml.outbound import AddressCheck, KeepAlive, OutboundError, RefusedAddress, post
from anonml.protocol import (
    MAX_BATCH_ITEMS,
    BatchResults,
    IntakeDelivery,
    check_relay_address,
    check_relay_url,
)
from peer.client import backoff_delay
from peer.db import PeerDB
from peer.dispatch import Dispatcher
from peer.relayauth import (
    RELAY_POST_TYPE,
    PostAuth,
    chernoff_cap,
    mac_matches,
    post_key,
    post_mac,
    relay_node_of,
    seal_post,
)
from peer.vault import Vault

__all__ = [
    "StoredReplayCache",
    "RelayRound",
    "RelayService",
    "RelayOutcome",
    "RelayRefused",
    "default_guard",
    "packet_cap",
    "INTAKE_TICK",
    "retriable",
    "retry_delay",
    "REFUSED_ADDRESS",
]

#: The one refusal a previous hop sees for any packet that fails after peeling.
REJECTED = "packet rejected"


class StoredReplayCache(ReplayCache):
    """A round's replay tags in memory and in the state DB: a restarted relay still refuses replays.

    Without it, a relay killed and restarted mid-round would accept again a
    packet it already forwarded — a replay the aggregator could use to trace
    the packet's route by where its duplicate comes out.
    """

    def __init__(self, db: PeerDB, node_id: bytes, round_id: int) -> None:
        super().__init__()
        self._db, self._node, self._round = db, node_id.hex(), round_id
        self._local = threading.local()
        for tag in db.replay_tags(self._node, round_id):
            super().add(tag)

    def add(self, tag: bytes) -> None:
        super().add(tag)  # ReplayedPacket if seen before, in this run or an earlier one
        pending = getattr(self._local, "pending", None)
        if pending is None:
            self._db.add_replay_tag(self._node, self._round, tag)
        else:
            pending.append((self._node, self._round, tag))

    @contextmanager
    def deferred(self, into: list[tuple[str, int, bytes]]) -> Iterator[None]:
        """Within (this thread): new tags go to ``into`` as ``(node, round, tag)``, not to the DB.

        The caller stores them in the transaction that holds the batch's packets
        (:meth:`peer.db.PeerDB.hold_many`) before it answers for any packet.
        """
        self._local.pending = into
        try:
            yield
        finally:
            self._local.pending = None


@dataclass
class RelayRound:
    """One node's relay state for one round."""

    node_id: bytes
    round_id: int
    relay: SphinxRelay
    schedule: WindowSchedule
    routes: dict[bytes, str]  # node id -> relay URL of every relaying roster member
    destination: bytes  # the aggregator's node id
    intake_url: str
    guard: float | None = None  # seconds kept free before t_r (None: default_guard)
    stages: int = 1  # hops of the problem's routes: one release stage each
    max_packets: int | None = None  # packets this node accepts in the round (None: no cap)
    # node id -> the key each roster member posts under (a relaying member's verified round relay key, a
    # sender-only member's identity X25519 key: RosterView.poster_keys): posts must carry a member's
    # authenticator (peer.relayauth). None: an open relay, for a round without a roster.
    members: dict[bytes, bytes] | None = None
    quota: int | None = None  # packets one member may post to this node in the round (None: no quota)
    vault: Vault | None = None  # seals held packets in the state DB (None: held in memory only)
    owner: str | None = None  # the node's identity fingerprint (its round key row in the state DB)
    grace: float = 0.0  # seconds after t_r the intake still takes deliveries (the signed bins' grace)

    def release_end(self) -> float:
        """End of the interval release times are drawn from: ``t_r − guard``."""
        guard = self.guard if self.guard is not None else default_guard(self.schedule)
        return self.schedule.t_r - guard


def default_guard(schedule: WindowSchedule) -> float:
    """A third of the release window, at most 2 s: network time for the hops that follow."""
    start, end = schedule.release_window
    return min(2.0, (end - start) / 3.0)


def retry_delay(attempt: int) -> float:
    """Seconds before retry ``attempt + 1`` of a release: ``min(2, 0.25 · 2^attempt)``."""
    return min(2.0, 0.25 * 2.0**attempt)


#: The status a sender gives itself for a packet it will not send because the relay's host is not
#: a global address (421 Misdirected Request, RFC 9110 §15.5.20; never on the wire): final, not
#: retried (:func:`retriable`).
REFUSED_ADDRESS = 421


#: The status a relay gives itself for a release its next hop or the intake answered "already processed"
#: (a replayed packet, a token already redeemed: 409 with that detail) — 208 Already Reported
#: (RFC 5842 §7.1; never on the wire): the copy an earlier try sent arrived, so it counts as taken.
ALREADY_PROCESSED = 208

#: What the 409 of a copy that arrived before says: a relay's replay refusal, the intake's spent token.
_ALREADY = ("already processed", "already redeemed")


def already_processed(status: int | None, detail: str) -> bool:
    """Whether an answer says this very packet or report was taken before (a replay, a spent token)."""
    return status == 409 and any(phrase in detail for phrase in _ALREADY)


def _status_of(status: int, detail: str) -> int:
    return ALREADY_PROCESSED if already_processed(status, detail) else status


def retriable(status: int | None) -> bool:
    """Whether a failed send may pass if tried again: unreachable (None), 5xx, 404 or 429."""
    return status is None or status >= 500 or status in (404, 429)


def packet_cap(slots_per_peer: int, hops: int) -> int:
    """Packets one node accepts per round from all posters together: ``⌈λ + 8√λ + 16⌉``
    with ``λ = slots_per_peer · hops``.

    Each of the other ``n − 1`` members sends ``slots_per_peer`` packets over
    ``hops`` distinct relays chosen uniformly among its ``n − 1`` others, so
    the packets an honest round brings one node are a sum of Bernoulli draws
    of mean ``λ`` and variance at most ``λ``; the cap sits 8 standard
    deviations (plus 16) above the mean, which an honest round passes with
    probability below 1e-12 (Chernoff). A shared cap is spent by whoever
    posts first, so a round with a roster also gives each member its own
    quota (:func:`peer.relayauth.member_quota`) and sets the node's cap to
    what all members' quotas add up to (:meth:`peer.participant.Participant.open_round`).
    """
    return chernoff_cap(slots_per_peer * hops)


class RelayRefused(Exception):
    """A whole post refused before any of its packets is looked at: its authenticator does not hold."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


@dataclass(frozen=True)
class RelayOutcome:
    """What happened to one packet: an HTTP status and a reason."""

    status: int
    detail: str


#: What every accepted packet gets (module docstring: uniform answers).
_ACCEPTED = RelayOutcome(202, "")

#: Seconds a last hop's deliveries to the intake are gathered over (module docstring, release times).
INTAKE_TICK = 0.25

#: Bytes of a batch answer a relay reads: one short result per item, and room for details.
BATCH_REPLY_CAP = MAX_BATCH_ITEMS * 256 + 1024


@dataclass(frozen=True)
class _Release:
    """One packet due to leave: where to, what, until when, its held row, and the tries so far."""

    url: str
    data: bytes
    content_type: str
    what: str  # "forwarded" (to a next hop) or "delivered" (to the intake)
    deadline: float
    held: int | None = None
    attempt: int = 0
    poster: tuple[bytes, int] | None = None  # (node id, round) whose key authenticates a forwarded post


@dataclass(frozen=True)
class _Answer:
    """What one request of releases got back: a status per release (None: no answer) and the
    answer's Retry-After in seconds (None: it gave none)."""

    statuses: list[int | None]
    retry_after: float | None = None


class RelayService:
    """Every relay round hosted by this process, and what they did (counters)."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        rng: np.random.Generator | None = None,
        *,
        allow_loopback_http: bool = False,
        db: PeerDB | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        self.db = db
        self.rng = rng
        self.allow_loopback_http = allow_loopback_http
        self._rounds: dict[tuple[bytes, int], RelayRound] = {}
        self._accepted: Counter[tuple[bytes, int]] = Counter()
        self._spent: Counter[tuple[bytes, int, bytes]] = Counter()  # per (node, round, poster): quota used
        self._post_keys: dict[tuple[bytes, int, bytes], bytes] = {}  # (node, round, other member) -> K
        self._closed: set[tuple[bytes, int]] = set()
        self._route_tables: dict[int, tuple[dict[bytes, str], dict[bytes, str]]] = {}  # _checked_routes
        self._lock = threading.Lock()
        # due, per (URL, content type, poster)
        self._outbound: dict[tuple[str, str, tuple[bytes, int] | None], list[_Release]] = {}
        self._sending: set[tuple[str, str, tuple[bytes, int] | None]] = set()  # a send under way to these
        self.keep_alive = KeepAlive()  # releases reuse their connections (anonml.outbound)
        self.counters: Counter[str] = Counter()

    def count(self, what: str, n: int = 1) -> None:
        with self._lock:
            self.counters[what] += n

    # -- rounds -------------------------------------------------------------------
    def open_round(self, round_: RelayRound) -> None:
        """Start relaying for ``round_``; it closes itself at ``t_r``.

        Routes whose URL is not of the one relay form are dropped (a packet
        naming such a hop is refused like any bad packet): nothing is ever
        sent to them.
        """
        key = (round_.node_id, round_.round_id)
        round_.routes = self._checked_routes(round_.routes)
        accepted = 0 if self.db is None else self.db.relay_count(round_.node_id.hex(), round_.round_id)
        spent = (
            {}
            if self.db is None or round_.members is None
            else self.db.relay_quotas(round_.node_id.hex(), round_.round_id)
        )
        with self._lock:
            if key in self._rounds:
                raise ValueError(f"node {round_.node_id.hex()} already relays round {round_.round_id}")
            self._rounds[key] = round_
            for poster, n in spent.items():
                self._spent[(*key, bytes.fromhex(poster))] = n
            self._accepted[key] = accepted  # what earlier runs of this host accepted counts too
        self.dispatcher.at(round_.schedule.t_r, lambda: self.close_round(round_.node_id, round_.round_id))

    def _checked_routes(self, routes: dict[bytes, str]) -> dict[bytes, str]:
        """``routes`` without the URLs not of the one relay form (each refusal counted).

        Every identity of a host relays with the same routing table (the
        host's verified roster): it is checked once per table, not once per
        identity (O(n) per identity, O(n²) per host at 10,000 members). The
        last few tables are kept, with the table itself, so an ``id`` reused by
        another table never matches.
        """
        with self._lock:
            hit = self._route_tables.get(id(routes))
        if hit is not None and hit[0] is routes:
            return hit[1]
        checked: dict[bytes, str] = {}
        for node, url in routes.items():
            try:
                checked[node] = check_relay_url(url, allow_loopback_http=self.allow_loopback_http)
            except ValueError:
                self.count("route refused: relay URL form")
        with self._lock:
            while len(self._route_tables) >= 4:
                self._route_tables.pop(next(iter(self._route_tables)))
            self._route_tables[id(routes)] = (routes, checked)
        return checked

    def close_round(self, node_id: bytes, round_id: int) -> None:
        """Destroy the round key and drop the replay cache (idempotent)."""
        with self._lock:
            round_ = self._rounds.pop((node_id, round_id), None)
            self._accepted.pop((node_id, round_id), None)
            for table in (self._spent, self._post_keys):
                for k in [k for k in table if k[:2] == (node_id, round_id)]:
                    del table[k]
            self._closed.add((node_id, round_id))
        if round_ is not None:
            round_.relay.close()
            if self.db is not None and round_.owner is not None:
                self.db.forget_round_key(round_.owner, round_id)
            if self.db is not None:
                self.db.forget_replay_tags(node_id.hex(), round_id)

    def has_round(self, node_id: bytes, round_id: int) -> bool:
        with self._lock:
            return (node_id, round_id) in self._rounds

    # -- packets ------------------------------------------------------------------
    def handle(self, node_id: bytes, packet: bytes, auth: PostAuth | None = None) -> RelayOutcome:
        """Process one packet addressed to ``node_id`` (see the module docstring)."""
        return self.handle_many(node_id, [packet], auth)[0]

    def handle_many(
        self, node_id: bytes, packets: list[bytes], auth: PostAuth | None = None
    ) -> list[RelayOutcome]:
        """Process packets addressed to ``node_id``, each on its own; one outcome per packet, in order.

        ``auth``: the post's envelope (:mod:`peer.relayauth`), checked first:
        :class:`RelayRefused` (nothing looked at, nothing spent) when it does
        not hold. A round whose relay knows its roster takes packets only from
        authenticated posts, each counted under the poster's quota. Each
        packet then goes through the checks of the module docstring as if it
        came alone. Then, in ONE state-DB transaction, the replay tags of the
        accepted packets, the packets held for release and the counts are
        stored (:meth:`peer.db.PeerDB.hold_many`), and only then are releases
        scheduled and outcomes returned: a packet answered 202 survives a
        restart, as with one packet per request.
        """
        if auth is not None:
            self._authenticate(node_id, packets, auth)
        outcomes: list[RelayOutcome] = []
        accepted: list[tuple[RelayRound, float, _Release]] = []
        tags: list[tuple[str, int, bytes]] = []
        caches: dict[int, StoredReplayCache] = {}
        admitted: Counter[tuple[bytes, int]] = Counter()  # packets answered 202, per (node, round)
        with ExitStack() as deferring:
            for packet in packets:
                outcomes.append(
                    self._admit(node_id, packet, auth, accepted, tags, admitted, deferring, caches)
                )
        try:
            self._keep(accepted, tags, admitted, None if auth is None else auth.poster)
        except Exception:
            # Nothing of the batch was stored and no packet is answered: the sender may send it
            # again (a 5xx is retried), so it must not meet its own tags or use up the cap.
            for cache in caches.values():
                for _, _, tag in tags:
                    cache.discard(tag)
            with self._lock:
                for key, count in admitted.items():
                    if key in self._accepted:
                        self._accepted[key] -= count
                    if auth is not None and (*key, auth.poster) in self._spent:
                        self._spent[(*key, auth.poster)] -= count
            raise
        return outcomes

    def _authenticate(self, node_id: bytes, packets: list[bytes], auth: PostAuth) -> None:
        """Check a post's envelope against the roster of its round; :class:`RelayRefused` if it fails.

        The same refusal (403) for a poster not on the roster and for a wrong
        MAC: an outsider learns nothing about who is a member from it.
        """
        key = (node_id, auth.round_id)
        with self._lock:
            round_ = self._rounds.get(key)
            closed = key in self._closed
        if round_ is None:
            self.count("rejected: unknown round" if not closed else "rejected: late", len(packets))
            if closed:
                raise RelayRefused(410, "the round is over; its relay key was destroyed")
            raise RelayRefused(404, "this node holds no relay key for that round")
        if round_.members is None:
            self.count("rejected: unauthenticated", len(packets))
            raise RelayRefused(400, "this node takes no authenticated posts for that round (no roster)")
        public = round_.members.get(auth.poster)
        mac_key = None if public is None else self._post_key(round_, auth.poster, public)
        expected = (
            None if mac_key is None else post_mac(mac_key, auth.round_id, node_id, auth.poster, packets)
        )
        if expected is None or not mac_matches(expected, auth.mac):
            self.count("rejected: unauthenticated", len(packets))
            raise RelayRefused(
                403, "the post's authenticator is not a roster member's for this node and round"
            )

    def _post_key(self, round_: RelayRound, other: bytes, public: bytes) -> bytes | None:
        """``K`` shared with member ``other`` for this round (cached); None if it cannot be derived."""
        key = (round_.node_id, round_.round_id, other)
        with self._lock:
            cached = self._post_keys.get(key)
        if cached is not None:
            return cached
        try:
            derived = post_key(round_.relay.key, public)
        except CryptoError:  # a small-order key in the roster, or the round key already destroyed
            return None
        with self._lock:
            self._post_keys[key] = derived
        return derived

    def _admit(
        self,
        node_id: bytes,
        packet: bytes,
        auth: PostAuth | None,
        accepted: list[tuple[RelayRound, float, _Release]],
        tags: list[tuple[str, int, bytes]],
        admitted: Counter[tuple[bytes, int]],
        deferring: ExitStack,
        caches: dict[int, StoredReplayCache],
    ) -> RelayOutcome:
        self.count("received")
        if len(packet) != PACKET_SIZE:
            return self._reject(
                "wrong size",
                413 if len(packet) > PACKET_SIZE else 400,
                f"a packet is exactly {PACKET_SIZE} bytes, got {len(packet)}",
            )
        round_id = int.from_bytes(packet[1:9], "big")
        if auth is not None and auth.round_id != round_id:
            return self._reject("wrong round", 400, "packet of another round than its post's authenticator")
        with self._lock:
            round_ = self._rounds.get((node_id, round_id))
            closed = (node_id, round_id) in self._closed
        if round_ is None:
            if closed:
                return self._reject("late", 410, "the round is over; its relay key was destroyed")
            return self._reject("unknown round", 404, "this node holds no relay key for that round")
        now = time.time()
        if now >= round_.schedule.t_r:
            return self._reject("late", 410, "the round's release window is over; packet dropped")
        key = (node_id, round_id)
        if round_.members is not None and auth is None:
            return self._reject(
                "unauthenticated", 401, "this round takes packets only in posts authenticated by a member"
            )
        spender = None if auth is None else (*key, auth.poster)
        with self._lock:  # reserve a place under the quota and cap; given back if the packet is refused
            if spender is not None and round_.quota is not None and self._spent[spender] >= round_.quota:
                full = "quota"
            elif round_.max_packets is not None and self._accepted[key] >= round_.max_packets:
                full = "cap"
            else:
                full = None
                self._accepted[key] += 1
                if spender is not None:
                    self._spent[spender] += 1
        if full == "quota":
            return self._reject(
                "over quota", 429, "the posting member's quota at this node for the round is spent"
            )
        if full == "cap":
            return self._reject("over cap", 429, "this node's packet cap for the round is reached")
        cache = round_.relay.replay_cache
        if isinstance(cache, StoredReplayCache) and id(cache) not in caches:
            caches[id(cache)] = cache
            deferring.enter_context(cache.deferred(tags))
        outcome = self._process(round_, packet, now, accepted)
        if outcome.status >= 300:
            with self._lock:
                if key in self._accepted:
                    self._accepted[key] -= 1
                if spender is not None and spender in self._spent:
                    self._spent[spender] -= 1
        else:
            admitted[key] += 1
        return outcome

    def _process(
        self,
        round_: RelayRound,
        packet: bytes,
        now: float,
        accepted: list[tuple[RelayRound, float, _Release]],
    ) -> RelayOutcome:
        try:
            result = round_.relay.process(packet)
        except ReplayedPacket:
            return self._reject("replay", 409, "packet already processed in this round (replay)")
        except UnsupportedVersion as exc:  # read off the clear AD before any crypto: says nothing of position
            return self._reject("version", 400, str(exc))
        except InvalidPacket:
            return self._reject("invalid", 400, REJECTED)
        deadline = round_.schedule.t_r  # the next hop drops what arrives after t_r
        if isinstance(result, Deliver):
            # The intake takes deliveries until t_r + its grace: a last hop keeps retrying (and keeps
            # the packet sealed in its state DB across a restart of its own) until then, so an
            # aggregator restarted within the grace still gets what was held for it.
            deadline += round_.grace
            if result.destination != round_.destination:
                return self._reject("unknown destination", 400, REJECTED)
            # Sealed to the aggregator: a report or cover, this relay cannot tell; both go on.
            body = IntakeDelivery(version=PAYLOAD_VERSION, round_id=result.round_id, sealed=result.sealed)
            release = _Release(
                round_.intake_url, body.model_dump_json().encode(), "application/json", "delivered", deadline
            )
        else:
            url = round_.routes.get(result.next_hop)
            if url is None:
                return self._reject("unknown hop", 400, REJECTED)
            if round_.members is None:
                release = _Release(url, result.packet, "application/octet-stream", "forwarded", deadline)
            else:  # posted under this node's own round key, to a next hop that checks it
                poster = (round_.node_id, round_.round_id)
                release = _Release(url, result.packet, RELAY_POST_TYPE, "forwarded", deadline, poster=poster)
        when = self._release_at(round_, now)
        if release.what == "delivered":  # on the intake tick (module docstring)
            when = max(when, min(math.ceil(when / INTAKE_TICK) * INTAKE_TICK, round_.release_end()))
        accepted.append((round_, when, release))
        return _ACCEPTED

    def _release_at(self, round_: RelayRound, now: float) -> float:
        """A uniform time in this packet's release stage (module docstring)."""
        schedule = round_.schedule
        start, end = schedule.t_s + schedule.delta, round_.release_end()
        if end <= start:
            start, end = schedule.release_window
        length = (end - start) / max(1, round_.stages)
        if now < start:
            lo, hi = start, start + length
        else:
            stage = int((now - start) // length)
            if stage + 1 < round_.stages:
                lo, hi = start + (stage + 1) * length, start + (stage + 2) * length
            else:
                lo, hi = now, end
        try:
            window = WindowSchedule(schedule.t_s, lo - schedule.t_s, hi)
        except ProtocolError:  # past the last stage: pass it on at once
            return now
        return release_time(window, self.rng)

    def _keep(
        self,
        accepted: list[tuple[RelayRound, float, _Release]],
        tags: list[tuple[str, int, bytes]],
        admitted: Counter[tuple[bytes, int]],
        poster: bytes | None = None,
    ) -> None:
        """Store the batch's replay tags, held packets (sealed, when the round has a vault) and its
        count under each node's cap (and ``poster``'s quota) in one transaction, then schedule each
        release at its time."""
        if self.db is not None and (accepted or tags or admitted):
            sealed = [(r, when, rel) for r, when, rel in accepted if r.vault is not None]
            rows = [
                (
                    r.node_id.hex(),
                    r.round_id,
                    when,
                    rel.deadline,
                    rel.url,
                    rel.content_type,
                    rel.what,
                    r.vault.seal(rel.data),
                )  # fmt: skip
                for r, when, rel in sealed
                if r.vault is not None
            ]
            counts = {(node.hex(), round_id): n for (node, round_id), n in admitted.items()}
            quotas = (
                {}
                if poster is None
                else {(node.hex(), round_id, poster.hex()): n for (node, round_id), n in admitted.items()}
            )
            held = self.db.hold_many(rows, tags, counts, quotas)
            ids = dict(zip((id(rel) for _, _, rel in sealed), held, strict=True))
            accepted = [(r, when, replace(rel, held=ids.get(id(rel)))) for r, when, rel in accepted]
        for _, when, release in accepted:
            self.dispatcher.at(when, lambda rel=release: self._due(rel))
        if accepted:
            self.count("held", len(accepted))

    def resume_held(self, node_id: bytes, vault: Vault) -> int:
        """After a restart: schedule the packets ``node_id`` held at their release times; how many.

        Those whose round ended meanwhile are counted ``"held lost at restart"``
        and dropped.
        """
        if self.db is None:
            return 0
        resumed, expired = 0, []
        for row in self.db.held(node_id.hex()):
            if row.deadline <= time.time():
                expired.append(row.id)
                self.count("held lost at restart")
                continue
            poster = (node_id, row.round_id) if row.content_type == RELAY_POST_TYPE else None
            data = vault.open(row.sealed)
            release = _Release(row.url, data, row.content_type, row.what, row.deadline, row.id, poster=poster)
            self.dispatcher.at(row.release_at, lambda rel=release: self._due(rel))
            resumed += 1
        self.db.unhold_many(expired)
        self.count("held resumed", resumed)
        return resumed

    # -- releases ---------------------------------------------------------------------
    def _due(self, release: _Release) -> None:
        """``release`` is due: queue it for its destination, and send that queue unless a send is under way.

        One request at a time per destination: what falls due while one is in
        flight leaves together in the next (at most
        :data:`~anonml.protocol.MAX_BATCH_ITEMS` per request), so no packet
        waits past its release time for more than the request before it, and
        under load one request carries many packets.
        """
        # One request carries one poster's packets: its authenticator covers them all.
        target = (release.url, release.content_type, release.poster)
        with self._lock:
            self._outbound.setdefault(target, []).append(release)
            if target in self._sending:
                return
            self._sending.add(target)
        try:
            while True:
                with self._lock:
                    queue = self._outbound.get(target)
                    if not queue:
                        self._outbound.pop(target, None)
                        self._sending.discard(target)
                        return
                    batch = queue[:MAX_BATCH_ITEMS]
                    del queue[:MAX_BATCH_ITEMS]
                self._settle(batch, self._post(release.url, release.content_type, batch, release.poster))
        except BaseException:
            with self._lock:
                self._sending.discard(target)
            raise

    def _post(
        self, url: str, content_type: str, batch: list[_Release], poster: tuple[bytes, int] | None = None
    ) -> _Answer:
        """Send ``batch`` to ``url``: one packet as one request, more to the batch route; a status each
        (None: no answer; :data:`REFUSED_ADDRESS`: a next hop whose host is not a global address) and
        the answer's Retry-After. ``poster``: the (node, round) whose key authenticates the post.

        A next hop's host is checked before, and its address again as the
        connection is made (:mod:`anonml.outbound`: a name rebound meanwhile
        reaches nothing internal)."""
        check = None
        if content_type in ("application/octet-stream", RELAY_POST_TYPE):  # a next hop: a member's relay URL
            try:
                check_relay_address(url, allow_loopback_http=self.allow_loopback_http)
            except ValueError:
                self.count("route refused: relay address", len(batch))
                return _Answer([REFUSED_ADDRESS] * len(batch))
            check = connect_check(allow_loopback=self.allow_loopback_http)
        try:
            return self._post_checked(url, content_type, batch, poster, check)
        except RefusedAddress:
            self.count("route refused: relay address", len(batch))
            return _Answer([REFUSED_ADDRESS] * len(batch))

    def _post_checked(
        self,
        url: str,
        content_type: str,
        batch: list[_Release],
        poster: tuple[bytes, int] | None,
        check: AddressCheck | None,
    ) -> _Answer:
        """:meth:`_post` once the host passed; :class:`RefusedAddress` when its address does not."""
        if poster is not None:
            return self._post_authenticated(url, batch, poster, check)
        if len(batch) == 1:
            try:
                reply = post(
                    url, batch[0].data, content_type, keep_alive=self.keep_alive, address_check=check
                )
            except RefusedAddress:
                raise
            except OutboundError:
                return _Answer([None])
            return _Answer([_status_of(reply.status, reply.text[:300])], reply.retry_after)
        if content_type == "application/json":  # intake deliveries: an IntakeBatch of the ready JSON
            body = b'{"deliveries":[' + b",".join(r.data for r in batch) + b"]}"
        else:  # onion packets, back to back
            body = b"".join(r.data for r in batch)
        try:
            reply = post(
                f"{url}/batch",
                body,
                content_type,
                max_bytes=BATCH_REPLY_CAP,
                keep_alive=self.keep_alive,
                address_check=check,
            )
        except RefusedAddress:
            raise
        except OutboundError:
            return _Answer([None] * len(batch))
        if reply.status != 200:
            return _Answer([reply.status] * len(batch), reply.retry_after)
        return _Answer(self._batch_statuses(reply.body, len(batch)))

    def _post_authenticated(
        self, url: str, batch: list[_Release], poster: tuple[bytes, int], check: AddressCheck | None
    ) -> _Answer:
        """Forward ``batch`` to the next hop at ``url`` in one post authenticated as ``poster``
        (:mod:`peer.relayauth`): to ``url`` for one packet, to ``url/batch`` for more.

        Without the round open here (closed, or not reopened yet after a
        restart) or the next hop's key in its roster, nothing is sent and the
        batch counts as unanswered (retried until its deadline).
        """
        node_id, round_id = poster
        with self._lock:
            round_ = self._rounds.get(poster)
        try:
            next_hop = relay_node_of(url)
        except ValueError:
            next_hop = b""
        public = None if round_ is None or round_.members is None else round_.members.get(next_hop)
        key = None if round_ is None or public is None else self._post_key(round_, next_hop, public)
        if key is None:
            self.count("forward not authenticated")
            return _Answer([None] * len(batch))
        packets = [r.data for r in batch]
        body = seal_post(key, round_id, next_hop, node_id, packets)
        single = len(batch) == 1
        try:
            reply = post(
                url if single else f"{url}/batch",
                body,
                RELAY_POST_TYPE,
                max_bytes=4096 if single else BATCH_REPLY_CAP,
                keep_alive=self.keep_alive,
                address_check=check,
            )
        except RefusedAddress:
            raise
        except OutboundError:
            return _Answer([None] * len(batch))
        if single:
            return _Answer([_status_of(reply.status, reply.text[:300])], reply.retry_after)
        if reply.status != 200:
            return _Answer([reply.status] * len(batch), reply.retry_after)
        return _Answer(self._batch_statuses(reply.body, len(batch)))

    def _batch_statuses(self, body: bytes, n: int) -> list[int | None]:
        """The per-item statuses of a batch answer; None each when it is not an answer for ``n`` items."""
        try:
            results = BatchResults.model_validate_json(body).results
        except ValidationError:
            results = ()
        if len(results) != n:  # not an answer for this batch: as if none came
            self.count("batch answer malformed")
            return [None] * n
        return [_status_of(r.status, r.detail) for r in results]

    def _settle(self, batch: list[_Release], answer: _Answer) -> None:
        """Count what was taken; retry what may pass with backoff until its deadline; drop the rest.

        A 409 "already processed" (:data:`ALREADY_PROCESSED`: a replay after a retry whose first copy
        arrived, a token already redeemed) counts as taken: the copy is there. Unreachable, 5xx, 404
        (a next hop that restarted and has not reloaded
        its round yet) and 429 are retried after ``min(2, 0.25 · 2^attempt)``
        seconds — or, when the answer carried ``Retry-After`` (an overloaded next hop or intake,
        :class:`anonml.serving.AdmissionGate`; a full disk), that long plus jittered backoff
        (:func:`peer.client.retry_wait`) — while that is before the deadline; any other refusal
        is final.
        What is finally not delivered is counted ``"<what> lost"``. The held
        rows of everything taken or lost are deleted in one transaction.
        """
        done: list[int] = []
        for release, status in zip(batch, answer.statuses, strict=True):
            what = release.what
            if status is not None and status < 300:  # ALREADY_PROCESSED too: an earlier copy arrived
                self.count(what)
                if release.attempt:
                    self.count(f"{what} after retry")
                if status == ALREADY_PROCESSED:
                    self.count(f"{what} (already processed)")
            else:
                wait = (
                    retry_delay(release.attempt)
                    if answer.retry_after is None
                    else answer.retry_after + backoff_delay(release.attempt)
                )
                when = time.time() + wait
                if retriable(status) and when < release.deadline:
                    self.count(f"{what} retried")
                    again = replace(release, attempt=release.attempt + 1)
                    self.dispatcher.at(when, lambda rel=again: self._due(rel))
                    continue
                self.count(f"{what} failed" if status is None else f"{what} refused ({status})")
                self.count(f"{what} lost")
            if release.held is not None:
                done.append(release.held)
        if self.db is not None:
            self.db.unhold_many(done)

    def _reject(self, reason: str, status: int, detail: str) -> RelayOutcome:
        self.count(f"rejected: {reason}")
        return RelayOutcome(status, detail)
