"""A verified roster, parsed once per process and shared by the identities it hosts.

:meth:`RosterView.verify` checks what is the same for every member: the
aggregator's signature (with the key pinned from the signed proposal), the
problem and round ids, that every relay certificate names its entry's
identity, and that the median pool has the size the proposal promised. It
computes the fingerprint peers compare through each other's relays — the roster
stage's whole transcript (:func:`anonml.protocol.transcript_hash`: the Problem with
its declared witnesses and schedule, the Roster with the token key and seed), so
two peers shown different copies of the Problem disagree even when their rosters
are the same — and the routing table (node id → relay URL). Each identity then checks its
own entry and assignment itself (:mod:`peer.participant`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from anonml.crypto import CryptoError, RelayKeyCertificate
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
    routes: dict[bytes, str]
    index_of: dict[bytes, int]
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
        """Node id → round relay public key of every member whose certificate verifies (once per process).

        What a relay checks posts against and a poster derives its post keys
        from (:mod:`peer.relayauth`); a member whose certificate does not
        verify is left out (nobody can post as it, nor route through it).
        """
        return self.memo(("relay keys",), self._verified_relay_keys)

    def _verified_relay_keys(self) -> dict[bytes, bytes]:
        keys: dict[bytes, bytes] = {}
        for node, entry in zip(self.node_ids, self.roster.entries, strict=True):
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
        keys, node_ids = [], []
        for i, entry in enumerate(roster.entries):
            cert = RelayKeyCertificate.from_bytes(bytes(entry.relay_certificate))
            if cert.identity != bytes(entry.identity)[:32] or cert.round_id != problem.round_id:
                raise ProtocolError(f"roster entry {i}: relay certificate does not belong to the entry")
            keys.append(bytes(entry.identity))
            node_ids.append(cert.node_id)
        if len(set(keys)) != n:
            raise ProtocolError("roster lists an identity twice")
        routes = {node: entry.relay_url for node, entry in zip(node_ids, roster.entries, strict=True)}
        return cls(
            roster=roster,
            fingerprint=transcript_hash("roster", problem, roster).hex(),
            keys=tuple(keys),
            node_ids=tuple(node_ids),
            routes=routes,
            index_of={key: i for i, key in enumerate(keys)},
        )
