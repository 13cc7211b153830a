"""What the aggregator and a peer say about a problem's progress: the report and median accounts,
the shuffle statement and the status documents.

The protocol as a whole: docs/protocol.md.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    Field,
)

from anonml.phases import ProblemPhase
from anonml.protocol.messages import WireMessage
from anonml.protocol.problems import Schedule

__all__ = [
    "ReportAccount",
    "MedianAccount",
    "ShuffleStatement",
    "ProblemStatus",
    "PeerStatus",
]


class _Shortfall(WireMessage):
    """What the aggregator expected and received, and why the rest did not count.

    ``late``, ``refused`` (by reason) and ``not_arrived`` split the shortfall
    (:attr:`ReportAccount.lost`, :attr:`MedianAccount.missing`); refusals are
    attributed to it up to its size, late first.
    """

    expected: int = Field(ge=0)
    received: int = Field(ge=0)
    late: int = Field(default=0, ge=0)
    refused: dict[str, int] = {}
    not_arrived: int = Field(default=0, ge=0)

    def _why(self, refused_as: str) -> str:
        """``": 1 late, 2 refused … (reason: n), 3 not arrived"`` (the parts that are not zero), or ``""``."""
        parts = []
        if self.late:
            parts.append(f"{self.late} late")
        if sum(self.refused.values()):
            reasons = ", ".join(f"{k}: {v}" for k, v in sorted(self.refused.items()))
            parts.append(f"{sum(self.refused.values())} {refused_as} ({reasons})")
        if self.not_arrived:
            parts.append(f"{self.not_arrived} not arrived")
        return ": " + ", ".join(parts) if parts else ""


class ReportAccount(_Shortfall):
    """Reports expected, received, pending and lost, and why, as far as the aggregator can know.

    ``expected = report_peers × slots_per_peer`` (every report peer of the
    roster fills each of its slots once); ``received`` counts stored reports
    (staged while the round is open, settled after). A report not received
    is ``pending`` while it may still arrive — the round's delivery window is
    open (until ``t_r`` + the intake's grace, or the round leaves
    ``reporting``) — and ``lost`` only once it closed: while open, ``pending
    = max(0, expected − received)`` and nothing is lost; once closed,
    ``pending = 0`` and ``lost = max(0, expected − received)``, split into
    ``late`` (deliveries refused after ``t_r`` +
    grace), ``refused`` (other intake refusals, by reason) and ``not_arrived``
    (the rest: dropped on the route, never sent, or never redeemed). Refusal
    counts are attributed to the loss up to its size, late first. ``cover``
    counts the cover payloads the intake opened and dropped (relays cannot
    tell them from reports, so only the aggregator drops them): neither
    received nor lost, and not in :attr:`expected`. Each report travels as
    ``routes`` identical copies (redundant delivery, :func:`route_count`); the
    intake keeps the first and refuses the others as a spent token, counted as
    ``duplicates`` — neither received nor lost — so the relays' deliveries
    add up to ``received + duplicates`` (+ cover and refusals).
    """

    lost: int = Field(ge=0)
    cover: int = Field(default=0, ge=0)
    #: Not received yet, the delivery window still open: written only when not 0, so a settled
    #: account (the one a model document signs) keeps the bytes it had before the field existed.
    pending: int = Field(default=0, ge=0, exclude_if=lambda pending: pending == 0)
    #: Routes each report travelled over (:func:`route_count`), and how many the problem asked for
    #: (fewer fit a small roster); written only when not 1, like :attr:`pending`.
    routes: int = Field(default=1, ge=1, exclude_if=lambda routes: routes == 1)
    routes_asked: int = Field(default=1, ge=1, exclude_if=lambda routes: routes == 1)
    #: Redundant copies of a stored report the intake refused as a spent token: neither received
    #: nor lost (each report is sent ``routes`` times and kept once).
    duplicates: int = Field(default=0, ge=0, exclude_if=lambda duplicates: duplicates == 0)

    @property
    def lost_fraction(self) -> float:
        return self.lost / self.expected if self.expected else 0.0

    def describe(self) -> str:
        """One line: ``"12 of 75 reports lost (16.0 %): 2 late, 1 refused (bad token: 1), 9 not arrived"``.

        While the delivery window is open: ``"60 of 75 reports received, 15 pending (the delivery
        window is open)"``.
        """
        cover = f"; {self.cover} cover packets dropped" if self.cover else ""
        extra = cover + self._redundancy()
        if self.pending:
            return (
                f"{self.received} of {self.expected} reports received, {self.pending} pending "
                f"(the delivery window is open){extra}"
            )
        why = self._why("refused at intake")
        return f"{self.lost} of {self.expected} reports lost ({self.lost_fraction:.1%}){why}{extra}"

    def _redundancy(self) -> str:
        """``"; each report over 2 routes (3 asked; the roster fits 2), 9 duplicate copies dropped"``."""
        if self.routes == 1 and self.routes_asked == 1 and not self.duplicates:
            return ""
        asked = ""
        if self.routes_asked > self.routes:
            asked = f" ({self.routes_asked} asked; the roster fits {self.routes})"
        plural = "" if self.routes == 1 else "s"
        duplicates = f", {self.duplicates} duplicate copies dropped" if self.duplicates else ""
        return f"; each report over {self.routes} route{plural}{asked}{duplicates}"


class MedianAccount(_Shortfall):
    """Median answers expected, received and missing, and why, as far as the aggregator can know.

    ``expected`` counts the median-pool members the search's queries named
    (each is named at most once: disjoint groups, DESIGN §6); ``received``
    the answers stored; ``missing = max(0, expected − received)``, split into
    ``late`` (refused because the query had closed or the search had moved
    on), ``refused`` (other refusals of an answer, by reason) and
    ``not_arrived`` (the rest: never sent, or lost on the way). Refusals are
    attributed to the shortfall up to its size, late first, as in
    :class:`ReportAccount`. Members of the pool a search never reached (it
    stopped early) are not expected.
    """

    missing: int = Field(ge=0)

    def describe(self) -> str:
        """One line: ``"3 of 10 median answers missing: 1 late, 2 not arrived"``."""
        why = self._why("refused")
        return f"{self.missing} of {self.expected} median answers missing{why}"


class CalibrationAccount(_Shortfall):
    """The calibration pool's answers, and whether they calibrated the published model.

    ``expected`` counts the pool members the question named, ``received`` the answers stored,
    ``missing = expected − received`` (``late``: refused after the deadline; ``refused`` by
    reason; ``not_arrived`` the rest). ``calibrated`` is False while the answers are awaited and
    when too few arrived to carry a signal
    (:func:`anonml.learn.simulation.calibration_pool_size` of the answers received is 0): the
    model is then published as trained, uncalibrated, and ``describe`` says so.
    """

    missing: int = Field(ge=0)
    calibrated: bool = False

    def describe(self) -> str:
        """One line: ``"calibrated by 600 of 610 answers: 10 not arrived"`` or the uncalibrated case."""
        why = self._why("refused")
        if self.calibrated:
            return f"calibrated by {self.received} of {self.expected} answers{why}"
        return f"not calibrated: {self.received} of {self.expected} calibration answers, too few{why}"


class ShuffleStatement(WireMessage):
    """The conditional central (ε, δ) of the aggregator's view by shuffling, beside the local ε.

    Feldman, McMillan & Talwar (FOCS 2021), numerical clone bound
    (:class:`anonml.privacy.amplification.ShuffleBound`): each report pool's
    reports are unlinkable among at least ``smallest_group`` of them. It holds
    only under ``assumptions`` (unlinkability, honest members); the local ε
    (``local_epsilon``, each peer's total) is the guarantee that needs neither.
    ``planned`` is True while the figure rests on the roster's partition sizes
    (before the reports arrived), False once it rests on the reports received.
    ``pools`` names the peer pools whose reports it covers and ``peers_outside``
    counts the peers it does not (the median peers who answered: their answers
    are signed, DESIGN §11); None before the median round has run.
    """

    local_epsilon: float = Field(gt=0)
    epsilon: float = Field(ge=0)
    delta: float = Field(gt=0, lt=1)
    smallest_group: int = Field(ge=1)
    assumptions: str = Field(max_length=2000)
    planned: bool = False
    pools: tuple[Annotated[str, Field(max_length=32)], ...] = Field(default=(), max_length=8)
    peers_outside: int | None = Field(default=None, ge=0)


class ProblemStatus(WireMessage):
    """What anyone may know about a problem's progress."""

    id: str
    title: str
    phase: ProblemPhase
    registered: int
    roster_size: int
    median_answers: int
    tokens_issued: int
    reports_accepted: int
    rejects: dict[str, int]
    model_available: bool
    message: str = ""
    phase_seconds: dict[str, float] = {}
    median_pool: int = 0
    calibration_pool: int = 0
    report_peers: int = 0
    slots_per_peer: int = 0
    reports: ReportAccount | None = None  # once the roster is out
    medians: MedianAccount | None = None  # once the roster is out
    calibration: CalibrationAccount | None = None  # once the calibration question is asked
    #: The schedule the round keeps — the proposal's, raised to floors sized for the roster — once
    #: the roster is out (the bins carry its absolute report windows).
    schedule: Schedule | None = None
    #: The conditional shuffle bound beside the local ε, once the roster fixes the partitions.
    shuffle: ShuffleStatement | None = None


# --- registration and roster ---------------------------------------------------


class PeerStatus(WireMessage):
    """A peer daemon's local status (its own user only): identities, problems, relay counters."""

    identities: int
    problems: dict[str, dict[str, int]]
    relay: dict[str, int]
