"""What the step modules read and change of one participation, named without importing it.

:class:`peer.participant.Participant` imports its steps (:mod:`peer.roster_checks`,
:mod:`peer.median_answer`, :mod:`peer.round_packets`, :mod:`peer.participation_store`); the
steps take a :class:`Participation`, the structural type of exactly the members they use, so
the imports run one way (participant → steps → this module) with no circle, not even through
``TYPE_CHECKING``. ``Participant`` is its one implementation;
``tests/peer/test_participation.py`` checks that it has every member listed here.

Members the steps assign are attributes (their types are the participant's own, since a
protocol attribute is invariant); members they only read and the participant computes are
properties.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from anonml.crypto import Hop, Redemption, Token
from anonml.protocol import AdmissionCredential, Bins, Problem
from peer.client import AggregatorClient
from peer.db import PeerDB
from peer.features import LocalExample
from peer.node import PeerNode
from peer.phases import Outcome, ParticipationPhase, Preparation, RelayKeys, RosterFacts
from peer.policy import PeerPolicy
from peer.relay import RelayService

__all__ = ["Comparisons", "Participation"]

T = TypeVar("T")


@dataclass
class Comparisons:
    """Progress of the fingerprint comparison (roster_checked → confirmed): members asked, agreeing."""

    confirmed: set[int] = field(default_factory=set)
    asked: set[int] = field(default_factory=set)


class Participation(Protocol):
    """One identity's part in one problem, as the step modules see it (module docstring)."""

    node: PeerNode
    problem: Problem
    client: AggregatorClient
    relay: RelayService
    roster_comparisons: int
    policy: PeerPolicy
    credentials: tuple[AdmissionCredential, ...]
    db: PeerDB | None
    phase: ParticipationPhase
    reason: str
    example: LocalExample | None
    standins: list[str]
    shortfall: list[str]
    keys: RelayKeys | None
    roster: RosterFacts | None
    comparisons: Comparisons
    preparation: Preparation | None
    bins: Bins | None
    window_end: float | None
    sent: int
    outcome: Outcome | None
    stored_calibration_answer: str | None
    _resumed_fingerprint: str | None
    _resumed_group: int | None
    _payloads: list[tuple[Redemption, bytes] | None] | None
    _avoid: set[bytes]
    _sent_slots: set[int]
    _resent: set[int]
    _copy_of: dict[int, int]
    _reroute_lock: threading.Lock
    _round_open: bool

    @property
    def built(self) -> bool: ...

    @property
    def relays(self) -> bool: ...

    @property
    def relaying(self) -> bool: ...

    @property
    def guard_nodes(self) -> frozenset[bytes]: ...

    @property
    def report_group(self) -> int | None: ...

    @property
    def relay_url(self) -> str | None: ...

    @property
    def in_median_pool(self) -> bool: ...

    @property
    def paths(self) -> tuple[tuple[Hop, ...], ...] | None: ...

    @property
    def tokens(self) -> tuple[Token, ...] | None: ...

    @property
    def lost(self) -> int | None: ...

    @property
    def prediction(self) -> float | None: ...

    def facts(self, record: T | None, what: str) -> T: ...

    def _move(self, new: ParticipationPhase, reason: str | None = None) -> None: ...

    def _into_round(self) -> None: ...

    def _standin(self, why: str) -> None: ...

    def _short(self, why: str) -> None: ...

    def compute_example(self) -> None: ...
