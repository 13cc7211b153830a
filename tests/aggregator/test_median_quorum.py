"""A median step ends as soon as a quorum of its group answered, long before its deadline; the
first step is asked at once and also holds the members' roster check."""

from __future__ import annotations

import time

import pytest

from aggregator.medians import step_quorum
from anonml.protocol import verify_message
from tests.aggregator.helpers import (
    assignment_of,
    median_queries,
    median_round,
    post,
    status,
    wait_median_query,
    wait_phase,
)
from tests.waiting import wait_until


def test_step_quorum_is_the_ceiling_of_the_fraction_and_at_least_one() -> None:
    assert [step_quorum(5, q) for q in (1.0, 0.6, 0.5, 0.01)] == [5, 3, 3, 1]
    assert step_quorum(10, 0.3) == 3 and step_quorum(1, 0.5) == 1


@pytest.mark.parametrize("quorum", [0.6])
def test_a_step_closes_on_its_quorum_and_refuses_the_rest(aggregator, quorum: float) -> None:
    problem, member = median_round(aggregator.url, median_step=300.0, quorum=quorum)
    answers = f"{aggregator.url}/problems/{problem.id}/medians/answers"
    started = time.monotonic()
    for step in (0, 1):
        q = wait_median_query(aggregator.url, problem.id, step)
        assert len(q.members) == 5
        for i in q.members[:3]:  # 3 of 5 = the quorum of 0.6
            assert post(answers, member[i].answer(problem, 0, step, True)).status_code == 201
    wait_phase(aggregator.url, problem.id, ("reporting",), timeout=60)
    assert time.monotonic() - started < 300  # closed on the quorum, not at the 300 s step deadline
    # The two who did not answer in time are refused: the step is closed.
    late = post(answers, member[q.members[4]].answer(problem, 0, 1, True))
    assert late.status_code == 409
    assert status(aggregator.url, problem.id).median_answers == 6
    # Closed, the questions are no longer listed as open, but every one asked still is — signed —
    # so a member that never saw its question open can tell it was asked.
    assert median_queries(aggregator.url, problem.id) == []
    asked = median_queries(aggregator.url, problem.id, asked=True)
    assert [(a.feature, a.step) for a in asked if a.feature == 0] == [(0, 0), (0, 1)]
    assert asked[[a.step for a in asked].index(1)] == q
    for a in asked:
        verify_message(a, bytes(problem.aggregator))


def test_the_first_step_is_asked_at_once_and_holds_the_roster_wait_for_a_slow_member(aggregator) -> None:
    # A member still checking the roster when a step's own length has passed is not shut out: the
    # first question stays open for roster_seconds more. And the long roster wait costs nothing once
    # the group has answered: the step closes on its quorum (everyone, by default).
    problem, member = median_round(aggregator.url, median_step=2.0, roster_seconds=300.0)
    answers = f"{aggregator.url}/problems/{problem.id}/medians/answers"
    started = time.monotonic()
    q = wait_median_query(aggregator.url, problem.id, 0, timeout=120)  # not after the 300 s wait
    schedule = status(aggregator.url, problem.id).schedule
    assert schedule is not None and schedule.roster_seconds >= 300
    asked = time.monotonic()
    for i in q.members[:4]:
        assert post(answers, member[i].answer(problem, 0, 0, True)).status_code == 201
    # The slow one answers once the step's own length (the round's median_step_seconds) has passed.
    wait_until(lambda: time.monotonic() > asked + schedule.median_step_seconds + 1.0,
               schedule.median_step_seconds + 60, "the first step's own length to pass")
    assert post(answers, member[q.members[4]].answer(problem, 0, 0, True)).status_code == 201
    q1 = wait_median_query(aggregator.url, problem.id, 1, timeout=120)  # step 0 closed on its quorum
    for i in q1.members:
        assert post(answers, member[i].answer(problem, 0, 1, True)).status_code == 201
    wait_phase(aggregator.url, problem.id, ("reporting",), timeout=120)
    assert time.monotonic() - started < 300  # neither step waited out the roster wait
    assert status(aggregator.url, problem.id).median_answers == 10


def test_the_roster_wait_runs_from_the_last_host_to_begin_its_check(aggregator) -> None:
    # A host begins its roster check by fetching its members' assignments. One that begins late (a
    # loaded machine) still has the whole roster wait for its first question: the wait runs from
    # the last assignment served, not from the phase's start.
    problem, member = median_round(aggregator.url, median_step=2.0, roster_seconds=8.0)
    answers = f"{aggregator.url}/problems/{problem.id}/medians/answers"
    q = wait_median_query(aggregator.url, problem.id, 0, timeout=120)
    asked = time.monotonic()  # the phase began at most this late
    schedule = status(aggregator.url, problem.id).schedule
    assert schedule is not None
    roster, step = schedule.roster_seconds, schedule.median_step_seconds
    for i in q.members[:4]:
        assert post(answers, member[i].answer(problem, 0, 0, True)).status_code == 201
    late = member[q.members[4]]

    def past(t: float) -> bool:
        return time.monotonic() > t

    wait_until(lambda: past(asked + roster / 2 + step + 1), roster + step + 60, "half the roster wait")
    assignment_of(aggregator.url, problem.id, late)  # the late host begins its check only now
    # Past the phase's start + roster wait + step (where the step closed before), inside the wait
    # that runs from the late fetch:
    wait_until(lambda: past(asked + roster + step + 1), roster + step + 60, "the unanchored step's end")
    assert post(answers, late.answer(problem, 0, 0, True)).status_code == 201
    wait_median_query(aggregator.url, problem.id, 1, timeout=120)  # then closed on its quorum
