"""One node's relay state for one round (:class:`RelayRound`): its keys and routes, the round's
windows, the quota and cap of its posts, and where its held packets are sealed — what
:class:`~peer.relay.RelayService` keeps per (node, round) and :mod:`peer.releases` draws release
times against (docs/protocol.md, "Relays")."""

from __future__ import annotations

from dataclasses import dataclass

from anonml.crypto import SphinxRelay, WindowSchedule
from peer.vault import Vault

__all__ = ["RelayRound", "default_guard"]


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
