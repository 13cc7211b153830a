"""A participation's phases, the one table of moves between them, and each phase's facts.

One identity's part in one problem (:class:`~peer.participant.Participant`)
is always in exactly one :class:`ParticipationPhase`; it changes only
through :func:`check_transition`, which refuses any move the table
:data:`TRANSITIONS` does not list, and every change is persisted
(:class:`~peer.db.PeerDB`) before anything the new phase allows is released.

::

    accepted ─► registered ─► roster_checked ─► confirmed ─┬─► answered ─┐
                                                            └────────────┴─► relaying ─► reporting
    reporting ─► done | degraded | partial
    reporting ─► calibrated ─► done | degraded | partial   (a calibration-pool identity, asked)
    any phase before done ─► aborted (this peer stopped: a check failed) | failed (the problem failed)

``calibrated``: a calibration-pool identity drew its one calibration answer and saved it (it is
then recorded and sent; :mod:`peer.calibration_answer`). ``degraded``: the problem ended
``degraded`` at the aggregator (too many reports lost) and its model was downloaded all the
same. ``partial``: the model was downloaded, but this identity could not do all of its own part
(its median or calibration answer was not delivered or not counted, or could not be sent); the
reason says what (:attr:`~peer.participant.Participant.shortfall`).

What each phase established is one small immutable record (:class:`RelayKeys`
from registration, :class:`RosterFacts` from the roster check,
:class:`Preparation` for routes and tokens, :class:`Outcome` at the end);
a participation holds the records of the phases it passed, so "has this
identity checked the roster" is "does it hold :class:`RosterFacts`", read
through :meth:`~peer.participant.Participant.facts`, never a flag beside a
``None``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from anonml.crypto import Hop, RelayKeyCertificate, RoundRelayKey, Token
from anonml.errors import AnonMLError
from anonml.learn import PeerAssignment
from anonml.protocol import RosterWitness
from peer.roster import RosterView

__all__ = [
    "ParticipationPhase",
    "TRANSITIONS",
    "TERMINAL",
    "IllegalTransition",
    "check_transition",
    "RelayKeys",
    "RosterFacts",
    "Preparation",
    "Outcome",
    "READY",
    "Aborted",
]


class ParticipationPhase(StrEnum):
    """Where one identity stands in one problem (module docstring)."""

    ACCEPTED = "accepted"
    REGISTERED = "registered"
    ROSTER_CHECKED = "roster_checked"
    CONFIRMED = "confirmed"
    ANSWERED = "answered"
    RELAYING = "relaying"
    REPORTING = "reporting"
    CALIBRATED = "calibrated"
    DONE = "done"
    DEGRADED = "degraded"
    PARTIAL = "partial"
    ABORTED = "aborted"
    FAILED = "failed"


P = ParticipationPhase
_STOP = frozenset({P.ABORTED, P.FAILED})

#: The legal moves: phase → the phases it may go to next.
TRANSITIONS: dict[ParticipationPhase, frozenset[ParticipationPhase]] = {
    P.ACCEPTED: frozenset({P.REGISTERED}) | _STOP,
    P.REGISTERED: frozenset({P.ROSTER_CHECKED}) | _STOP,
    P.ROSTER_CHECKED: frozenset({P.CONFIRMED}) | _STOP,
    P.CONFIRMED: frozenset({P.ANSWERED, P.RELAYING}) | _STOP,
    P.ANSWERED: frozenset({P.RELAYING}) | _STOP,
    P.RELAYING: frozenset({P.REPORTING}) | _STOP,
    P.REPORTING: frozenset({P.CALIBRATED, P.DONE, P.DEGRADED, P.PARTIAL}) | _STOP,
    P.CALIBRATED: frozenset({P.DONE, P.DEGRADED, P.PARTIAL}) | _STOP,
    P.DONE: frozenset(),
    P.DEGRADED: frozenset(),
    P.PARTIAL: frozenset(),
    P.ABORTED: frozenset(),
    P.FAILED: frozenset(),
}

#: Phases nothing leaves.
TERMINAL = frozenset(p for p, nexts in TRANSITIONS.items() if not nexts)


class IllegalTransition(AnonMLError):
    """A move the table does not allow (a bug, or a state file edited by hand)."""


def check_transition(current: ParticipationPhase, new: ParticipationPhase) -> ParticipationPhase:
    """``new`` if ``current → new`` is in :data:`TRANSITIONS`, else :class:`IllegalTransition`."""
    if new not in TRANSITIONS[current]:
        raise IllegalTransition(f"a participation cannot go from {current} to {new}")
    return new


@dataclass(frozen=True)
class RelayKeys:
    """Registration: this identity's round relay key and the certificate the roster carries."""

    key: RoundRelayKey
    certificate: RelayKeyCertificate


@dataclass(frozen=True)
class RosterFacts:
    """The roster check: the verified roster, the re-derived assignment, the beacon, our witness."""

    view: RosterView
    assignment: PeerAssignment
    beacon: bytes
    witness: RosterWitness


@dataclass(frozen=True)
class Preparation:
    """Ahead of the round: one route per slot (certificates checked), and a report peer's tokens."""

    paths: tuple[tuple[Hop, ...], ...]
    tokens: tuple[Token, ...] | None  # None for a median-pool identity (it takes none)


@dataclass(frozen=True)
class Outcome:
    """The end: reports lost on the way (None: not known) and the local prediction."""

    lost: int | None
    prediction: float | None


#: Phases in which a confirmed roster lets the identity take part in the round.
READY = frozenset({ParticipationPhase.CONFIRMED, ParticipationPhase.ANSWERED, ParticipationPhase.RELAYING})


class Aborted(AnonMLError):
    """This identity stopped taking part in a problem; the message says why."""
