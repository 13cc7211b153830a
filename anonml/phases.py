"""A problem's phases at the aggregator and the one table of moves between them (DESIGN.md §7).

Every role names a problem's phase through :class:`ProblemPhase`: the
aggregator stores and moves it (only through :func:`check_problem_transition`),
the status and the model document carry it, and peers, the CLI and the demo
read it. A :class:`~enum.StrEnum`, so a stored or transmitted phase is the
plain word (``"reporting"``) and compares equal to it.

::

    registration ─► witnessing ─► medians ─► reporting ─► training ─┬─► calibrating ─┬─► done | degraded
                                                                     └────────────────┘
    any phase before the model is published ─► failed
    done | degraded | failed ─► training   (an admin's "train again" on the stored reports)

``calibrating``: the problem has a calibration pool
(:meth:`anonml.protocol.ProblemDraft.calibration_pool_size`); the uncalibrated model and the
signed question are out, and the pool's answers are awaited until the question's deadline
(:mod:`aggregator.calibration`). Without a pool, training publishes the model at once.

A participation's phases at a peer are a different machine
(:class:`peer.phases.ParticipationPhase`).
"""

from __future__ import annotations

from enum import StrEnum

from anonml.errors import AnonMLError

__all__ = [
    "ProblemPhase",
    "PROBLEM_TRANSITIONS",
    "MODEL_PHASES",
    "ROUND_PHASES",
    "AFTER_ROUND_PHASES",
    "FINISHED_PHASES",
    "ACTIVE_PHASES",
    "RETRAINABLE_PHASES",
    "IllegalProblemTransition",
    "check_problem_transition",
]


class ProblemPhase(StrEnum):
    """Where a problem stands at the aggregator (module docstring)."""

    REGISTRATION = "registration"
    WITNESSING = "witnessing"
    MEDIANS = "medians"
    REPORTING = "reporting"
    TRAINING = "training"
    CALIBRATING = "calibrating"
    DONE = "done"
    DEGRADED = "degraded"
    FAILED = "failed"


P = ProblemPhase

#: The legal moves: phase → the phases it may go to next.
PROBLEM_TRANSITIONS: dict[ProblemPhase, frozenset[ProblemPhase]] = {
    P.REGISTRATION: frozenset({P.WITNESSING, P.FAILED}),
    P.WITNESSING: frozenset({P.MEDIANS, P.FAILED}),
    P.MEDIANS: frozenset({P.REPORTING, P.FAILED}),
    P.REPORTING: frozenset({P.TRAINING, P.FAILED}),
    P.TRAINING: frozenset({P.CALIBRATING, P.DONE, P.DEGRADED, P.FAILED}),
    P.CALIBRATING: frozenset({P.DONE, P.DEGRADED, P.FAILED}),
    P.DONE: frozenset({P.TRAINING}),
    P.DEGRADED: frozenset({P.TRAINING}),
    P.FAILED: frozenset({P.TRAINING}),
}

# Tuples in the enum's order: they also go into SQL ``IN`` lists.

#: The signed model is published (``degraded``: trained, but more reports lost than the limit allows).
MODEL_PHASES: tuple[ProblemPhase, ...] = (P.DONE, P.DEGRADED)
#: The round is under way: reports and median answers may still be sent.
ROUND_PHASES: tuple[ProblemPhase, ...] = (P.WITNESSING, P.MEDIANS, P.REPORTING)
#: The report round is over (its receipts are final): training, calibrating, or the model is out.
AFTER_ROUND_PHASES: tuple[ProblemPhase, ...] = (P.TRAINING, P.CALIBRATING, *MODEL_PHASES)
#: Nothing more happens unless an admin asks to train again.
FINISHED_PHASES: tuple[ProblemPhase, ...] = (P.DONE, P.DEGRADED, P.FAILED)
#: Phases the aggregator's loop looks at (``failed`` only when a retrain was asked for).
ACTIVE_PHASES: tuple[ProblemPhase, ...] = tuple(phase for phase in P if phase != P.FAILED)
#: Phases from which an admin ``train`` (re)trains on the stored reports.
RETRAINABLE_PHASES: tuple[ProblemPhase, ...] = tuple(
    phase for phase, moves in PROBLEM_TRANSITIONS.items() if P.TRAINING in moves
)


class IllegalProblemTransition(AnonMLError):
    """A move :data:`PROBLEM_TRANSITIONS` does not list."""


def check_problem_transition(current: str, new: str) -> ProblemPhase:
    """``new`` as a :class:`ProblemPhase` when the table allows ``current → new``.

    >>> check_problem_transition("reporting", "training")
    <ProblemPhase.TRAINING: 'training'>
    >>> check_problem_transition("done", "reporting")
    Traceback (most recent call last):
    ...
    anonml.phases.IllegalProblemTransition: a problem cannot go from done to reporting
    """
    try:
        source, target = ProblemPhase(current), ProblemPhase(new)
    except ValueError as exc:
        raise IllegalProblemTransition(f"unknown problem phase: {exc}") from None
    if target not in PROBLEM_TRANSITIONS[source]:
        raise IllegalProblemTransition(f"a problem cannot go from {source} to {target}")
    return target
