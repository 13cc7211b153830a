"""The aggregator's problem phases (:mod:`anonml.phases`): the one table of moves, and that the round
driver moves a problem only through it."""

from __future__ import annotations

import pytest

from anonml.phases import (
    ACTIVE_PHASES,
    AFTER_ROUND_PHASES,
    MODEL_PHASES,
    PROBLEM_TRANSITIONS,
    RETRAINABLE_PHASES,
    IllegalProblemTransition,
    ProblemPhase,
    check_problem_transition,
)

P = ProblemPhase
FORWARD = [P.REGISTRATION, P.WITNESSING, P.MEDIANS, P.REPORTING, P.TRAINING]


def test_the_round_moves_forward_one_phase_at_a_time() -> None:
    for here, there in zip(FORWARD, FORWARD[1:], strict=False):
        assert check_problem_transition(here, there) is there
    for i, here in enumerate(FORWARD):
        for skipped in FORWARD[i + 2:]:
            with pytest.raises(IllegalProblemTransition, match=f"from {here} to {skipped}"):
                check_problem_transition(here, skipped)
        for earlier in FORWARD[:i]:
            with pytest.raises(IllegalProblemTransition):
                check_problem_transition(here, earlier)


def test_every_phase_before_the_model_may_fail_and_only_a_retrain_leaves_the_end() -> None:
    for phase in FORWARD:
        assert P.FAILED in PROBLEM_TRANSITIONS[phase]
    for end in (P.DONE, P.DEGRADED, P.FAILED):
        assert PROBLEM_TRANSITIONS[end] == {P.TRAINING}
    with pytest.raises(IllegalProblemTransition):
        check_problem_transition(P.FAILED, P.FAILED)  # a failure is recorded once
    with pytest.raises(IllegalProblemTransition, match="unknown problem phase"):
        check_problem_transition("reporting", "finished")


def test_the_derived_sets_follow_the_table() -> None:
    assert set(RETRAINABLE_PHASES) == {P.REPORTING, P.DONE, P.DEGRADED, P.FAILED}
    assert set(ACTIVE_PHASES) == set(P) - {P.FAILED}
    assert set(MODEL_PHASES) == {P.DONE, P.DEGRADED}
    assert set(PROBLEM_TRANSITIONS) == set(P)  # every phase has its row
    # Stored and sent as the plain word: a StrEnum equals it.
    assert P.REPORTING == "reporting" and f"{P.REPORTING}" == "reporting"


def test_the_round_driver_refuses_a_move_the_table_does_not_list(tmp_path) -> None:
    """``RoundDriver._enter`` checks the table before it writes (the aggregator, not only the helper)."""
    from types import SimpleNamespace

    from aggregator.rounds import RoundDriver

    row = SimpleNamespace(phase="done", phase_seconds_json="{}", phase_started=0.0, message="")
    driver = RoundDriver.__new__(RoundDriver)  # no services: the check comes before any of them
    with pytest.raises(IllegalProblemTransition, match="from done to reporting"):
        driver._enter(row, P.REPORTING)
    assert row.phase == "done" and row.message == ""


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
