"""A verified roster, parsed once per process and shared by the identities it hosts.

:meth:`RosterView.verify` checks what is the same for every member: the
aggregator's signature (with the key pinned from the signed proposal), the
problem and round ids, that every relay certificate names its entry's
identity, and that the median pool has the size the proposal promised. It
computes the fingerprint peers compare through each other's relays — the roster
stage's whole transcript (:func:`anonml.protocol.transcript_hash`: the Problem with
its declared witnesses and schedule, the Roster with the token key and seed), so
two peers shown different copies of the Problem disagree even when their rosters
are the same — and the routing table (node id → relay URL) of the members that relay.
Each identity then checks its own entry and assignment itself (:mod:`peer.participant`).

Sender-only members (no relay URL, no relay certificate: behind NAT, they accept no
connection) are on the roster like any other — in the plan, in the partitions — but not
in :attr:`RosterView.relay_capable` nor the routing table: routes are drawn among the
members that relay. They authenticate their posts to a first hop with the long-term
X25519 key of their identity (:meth:`RosterView.poster_keys`), as relaying members
do with their round key.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from anonml.crypto import CryptoError, PublicIdentity, RelayKeyCertificate
from anonml.errors import ProtocolError
from anonml.protocol import Problem, Roster, transcript_hash, verify_message

__all__ = ["RosterView"]


@dataclass(frozen=True, eq=False)
class RosterView:
    """A roster whose common checks passed, with what peers derive from it."""

    roster: Roster
    fingerprint: str
    keys: tuple[bytes, ...]
    node_ids: tuple[bytes, ...]
    routes: dict[bytes, str]  # node id -> relay URL, of the members that relay
    index_of: dict[bytes, int]
    relay_capable: tuple[int, ...] = ()  # roster indices of the members that relay (signed in their entries)
    _memo: dict[Hashable, Any] = field(default_factory=dict, repr=False)
    _memo_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def memo(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per ``key`` for this roster, shared by the identities of the process.

        For what every member derives identically from the same verified
        roster — the transcript hash, the partition plan, the relay URL check
        — each O(n) in the roster size: computed once per process instead of
        once per hosted identity (O(n²) per host at 10,000 members).
        """
        with self._memo_lock:
            if key not in self._memo:
                self._memo[key] = compute()
            return self._memo[key]

    def relay_keys(self) -> dict[bytes, bytes]:
        """Node id → round relay public key of every relaying member whose certificate verifies
        (once per process).

        What a sender builds onion layers for and derives its post keys to a
        first hop from (:mod:`peer.relayauth`); a member whose certificate does
        not verify is left out (nobody can route through it). Sender-only
        members have none.
        """
        return self.memo(("relay keys",), self._verified_relay_keys)

    def poster_keys(self) -> dict[bytes, bytes]:
        """Node id → the X25519 key each member authenticates its posts with (once per process).

        A relaying member's round relay key (:meth:`relay_keys`); a sender-only
        member's long-term X25519 key from its identity in the signed roster
        (it has no round key). What a relay checks posts against: every member
        may post, only relaying members are posted to.
        """
        relaying = self.relay_keys()  # memo's lock is not reentrant: not from inside the computation
        return self.memo(("poster keys",), lambda: self._poster_keys(relaying))

    def _poster_keys(self, relaying: dict[bytes, bytes]) -> dict[bytes, bytes]:
        keys = dict(relaying)
        for node, entry in zip(self.node_ids, self.roster.entries, strict=True):
            if not entry.relays:
                keys[node] = PublicIdentity.from_bytes(bytes(entry.identity)).relay_key
        return keys

    def _verified_relay_keys(self) -> dict[bytes, bytes]:
        keys: dict[bytes, bytes] = {}
        for node, entry in zip(self.node_ids, self.roster.entries, strict=True):
            if entry.relay_certificate is None:
                continue
            try:
                cert = RelayKeyCertificate.from_bytes(bytes(entry.relay_certificate))
                keys[node] = cert.verify(round_id=self.roster.round_id)
            except CryptoError:
                continue
        return keys

    @classmethod
    def verify(cls, roster: Roster, problem: Problem) -> RosterView:
        """Check ``roster`` against the signed ``problem``; :class:`ProtocolError` naming what failed."""
        try:
            verify_message(roster, bytes(problem.aggregator))
        except CryptoError as exc:
            raise ProtocolError(f"roster of {problem.id} is not signed by the aggregator: {exc}") from None
        if bytes(roster.aggregator) != bytes(problem.aggregator):
            raise ProtocolError(
                f"roster names aggregator {bytes(roster.aggregator).hex()[:16]}…, the proposal "
                f"{bytes(problem.aggregator).hex()[:16]}…"
            )
        if roster.problem_id != problem.id or roster.round_id != problem.round_id:
            raise ProtocolError(
                f"roster is for problem {roster.problem_id} round {roster.round_id}, "
                f"expected {problem.id} round {problem.round_id}"
            )
        n = len(roster.entries)
        if roster.median_pool_size != problem.draft.median_pool_size(n):
            raise ProtocolError(
                f"roster sets a median pool of {roster.median_pool_size}; the proposal's pool_fraction "
                f"gives {problem.draft.median_pool_size(n)} of {n}"
            )
        keys, node_ids, relaying = [], [], []
        for i, entry in enumerate(roster.entries):
            if entry.relay_certificate is None:  # sender-only: its node id from its identity
                try:
                    node_ids.append(PublicIdentity.from_bytes(bytes(entry.identity)).node_id)
                except CryptoError as exc:
                    raise ProtocolError(f"roster entry {i}: not a valid public identity: {exc}") from None
            else:
                cert = RelayKeyCertificate.from_bytes(bytes(entry.relay_certificate))
                if cert.identity != bytes(entry.identity)[:32] or cert.round_id != problem.round_id:
                    raise ProtocolError(f"roster entry {i}: relay certificate does not belong to the entry")
                node_ids.append(cert.node_id)
                relaying.append(i)
            keys.append(bytes(entry.identity))
        if len(set(keys)) != n:
            raise ProtocolError("roster lists an identity twice")
        routes = {
            node_ids[i]: url for i in relaying if (url := roster.entries[i].relay_url) is not None
        }
        return cls(
            roster=roster,
            fingerprint=transcript_hash("roster", problem, roster).hex(),
            keys=tuple(keys),
            node_ids=tuple(node_ids),
            routes=routes,
            index_of={key: i for i, key in enumerate(keys)},
            relay_capable=tuple(relaying),
        )
