"""The relay: peel one onion layer, hold the packet, release it in the release window.

:class:`RelayService` keeps one :class:`RelayRound` per (node, round) a hosted identity relays:
:meth:`RelayService.handle_many` checks and peels each packet (size, round, ``t_r``, the post's
authenticator and quota, MAC and replay tag), answers uniformly, and holds it for release
(:class:`peer.releases.Releases`: staged release times, batches, retries). Counters
(:meth:`RelayService.count`) tell the person what happened. The rules, the uniform answers, the
release stages and restarts: docs/protocol.md, "Relays".
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import numpy as np

from anonml.crypto import (
    PACKET_SIZE,
    PAYLOAD_VERSION,
    CryptoError,
    Deliver,
    InvalidPacket,
    ReplayCache,
    ReplayedPacket,
    UnsupportedVersion,
)
from anonml.outbound import KeepAlive
from anonml.protocol import (
    IntakeDelivery,
    check_relay_url,
)
from peer.db import PeerDB
from peer.dispatch import Dispatcher
from peer.relay_round import RelayRound, default_guard
from peer.relayauth import (
    RELAY_POST_TYPE,
    PostAuth,
    chernoff_cap,
    mac_matches,
    post_key,
    post_mac,
)
from peer.releases import (
    REFUSED_ADDRESS,
    Releases,
    _Release,
    retriable,
    retry_delay,
)

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


#: What every accepted packet gets (docs/protocol.md, "Uniform answers").
_ACCEPTED = RelayOutcome(202, "")

#: Seconds a last hop's deliveries to the intake are gathered over (docs/protocol.md, "Release times").
INTAKE_TICK = 0.25

class RelayService(Releases):
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
        # Per (node, round): quota used per poster, and K per other member. Keyed by round first so
        # that closing a round drops its entries without a scan of every round the host relays.
        self._spent: dict[tuple[bytes, int], Counter[bytes]] = {}
        self._post_keys: dict[tuple[bytes, int], dict[bytes, bytes]] = {}
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
            self._spent[key] = Counter({bytes.fromhex(poster): n for poster, n in spent.items()})
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
            self._spent.pop((node_id, round_id), None)
            self._post_keys.pop((node_id, round_id), None)
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

    def quota_used(self, node_id: bytes, round_id: int, poster: bytes) -> int:
        """Packets of member ``poster`` this node accepted in the round (its quota used; 0 once closed)."""
        with self._lock:
            return self._spent.get((node_id, round_id), Counter())[poster]

    # -- packets ------------------------------------------------------------------
    def handle(self, node_id: bytes, packet: bytes, auth: PostAuth | None = None) -> RelayOutcome:
        """Process one packet addressed to ``node_id`` (docs/protocol.md, "Relays")."""
        return self.handle_many(node_id, [packet], auth)[0]

    def handle_many(
        self, node_id: bytes, packets: list[bytes], auth: PostAuth | None = None
    ) -> list[RelayOutcome]:
        """Process packets addressed to ``node_id``, each on its own; one outcome per packet, in order.

        ``auth``: the post's envelope (:mod:`peer.relayauth`), checked first:
        :class:`RelayRefused` (nothing looked at, nothing spent) when it does
        not hold. A round whose relay knows its roster takes packets only from
        authenticated posts, each counted under the poster's quota. Each
        packet then goes through the checks of docs/protocol.md, "Relays", as if it
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
                    if auth is not None and auth.poster in self._spent.get(key, ()):
                        self._spent[key][auth.poster] -= count
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
        key = (round_.node_id, round_.round_id)
        with self._lock:
            cached = self._post_keys.get(key, {}).get(other)
        if cached is not None:
            return cached
        try:
            derived = post_key(round_.relay.key, public)
        except CryptoError:  # a small-order key in the roster, or the round key already destroyed
            return None
        with self._lock:
            if key in self._rounds:  # not kept for a round closed meanwhile (its key is destroyed)
                self._post_keys.setdefault(key, {})[other] = derived
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
        spender = None if auth is None else auth.poster
        with self._lock:  # reserve a place under the quota and cap; given back if the packet is refused
            spent = self._spent.get(key, Counter())  # a throwaway if the round closed meanwhile
            if spender is not None and round_.quota is not None and spent[spender] >= round_.quota:
                full = "quota"
            elif round_.max_packets is not None and self._accepted[key] >= round_.max_packets:
                full = "cap"
            else:
                full = None
                self._accepted[key] += 1
                if spender is not None:
                    spent[spender] += 1
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
                if spender is not None and spender in self._spent.get(key, ()):
                    self._spent[key][spender] -= 1
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
        if release.what == "delivered":  # on the intake tick (docs/protocol.md, "Release times")
            when = max(when, min(math.ceil(when / INTAKE_TICK) * INTAKE_TICK, round_.release_end()))
        accepted.append((round_, when, release))
        return _ACCEPTED

    def _reject(self, reason: str, status: int, detail: str) -> RelayOutcome:
        self.count(f"rejected: {reason}")
        return RelayOutcome(status, detail)
