"""A median step ends as soon as a quorum of its group answered, long before its deadline."""

from __future__ import annotations

import time

import pytest

from aggregator.medians import step_quorum
from tests.aggregator.helpers import median_round, post, status, wait_median_query, wait_phase


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
