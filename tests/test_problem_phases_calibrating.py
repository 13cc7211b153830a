"""``calibrating`` in the one table of problem moves: after training, before the model, never retrained."""

from __future__ import annotations

import pytest

from anonml.phases import (
    ACTIVE_PHASES,
    AFTER_ROUND_PHASES,
    PROBLEM_TRANSITIONS,
    RETRAINABLE_PHASES,
    IllegalProblemTransition,
    ProblemPhase,
    check_problem_transition,
)

P = ProblemPhase


def test_calibrating_comes_after_training_and_ends_where_training_would():
    assert check_problem_transition("training", "calibrating") is P.CALIBRATING
    assert PROBLEM_TRANSITIONS[P.CALIBRATING] == {P.DONE, P.DEGRADED, P.FAILED}
    assert P.DONE in PROBLEM_TRANSITIONS[P.TRAINING]  # without a pool: published at once, as before
    for earlier in (P.REGISTRATION, P.WITNESSING, P.MEDIANS, P.REPORTING):
        with pytest.raises(IllegalProblemTransition, match=f"from {earlier} to calibrating"):
            check_problem_transition(earlier, P.CALIBRATING)
    with pytest.raises(IllegalProblemTransition, match="from calibrating to training"):
        check_problem_transition(P.CALIBRATING, P.TRAINING)  # an admin's retrain waits for the model


def test_the_derived_sets_place_calibrating():
    assert P.CALIBRATING in ACTIVE_PHASES and P.CALIBRATING not in RETRAINABLE_PHASES
    assert AFTER_ROUND_PHASES == (P.TRAINING, P.CALIBRATING, P.DONE, P.DEGRADED)
    assert len(P.CALIBRATING.value) <= 16  # the problems table's phase column
