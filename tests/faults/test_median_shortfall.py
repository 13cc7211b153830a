"""Median answers that never reach the aggregator end their participations ``partial`` (issue 26, item 5).

Real processes: one aggregator and one peer host of eight identities, two of
them in the median pool, behind a :class:`~tests.faults.helpers.CuttingProxy`
that drops, in one case, every median answer (the connection closes
unanswered, as a dead path would): each median identity retries its answer
until its step's deadline, then notes the shortfall. In the other, it drops
every request for the open median queries, so the host never sees its
identities' question while it is open — as a host too slow to be ready in time
would not — and learns only afterwards, from the list of every query asked
(``GET …/medians/asked``), that they were named. Either way the round goes on,
and what must hold is: the median identities end ``partial`` with the reason
(never ``done`` with an empty one), the report identities end ``done``, and the
aggregator's median account counts every named member as missing (not
arrived), in the status and in the problem's final message.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.aggregator.helpers import wait_phase
from tests.faults.helpers import fault_draft, host_behind_proxy, propose_and_close
from tests.waiting import wait_until

IDENTITIES = 8


@pytest.mark.slow
@pytest.mark.parametrize(
    ("drop", "reason"),
    [
        (b"/medians/answers", "not delivered before the step's deadline"),
        (b"/medians HTTP", "the query closed before this identity's host was ready"),
    ],
    ids=["answers-dropped", "queries-unseen"],
)
def test_undelivered_median_answers_end_partial_and_are_in_the_account(
    tmp_path: Path, drop: bytes, reason: str
) -> None:
    with host_behind_proxy(  # nothing is killed; what ``drop`` names is dropped
        tmp_path, IDENTITIES, b"never-requested", kill=False, drop=drop
    ) as (agg, proxy, host):
        d = fault_draft().model_copy(deep=True)
        d = d.model_copy(update={
            "median": d.median.model_copy(update={"pool_fraction": 0.25, "steps": 1}),
            "schedule": d.schedule.model_copy(update={"median_step_seconds": 3.0}),
        })
        problem = propose_and_close(agg.url, d, IDENTITIES)
        final = wait_phase(agg.url, problem.id, ("done", "degraded", "failed"), timeout=300)
        wait_until(
            lambda: all(r[0] in ("done", "degraded", "partial", "aborted", "failed")
                        for r in host.rows("SELECT phase FROM peer_participations")),
            120,
            "every participation to end",
        )
        rows = host.rows("SELECT phase, reason FROM peer_participations")
    assert final.phase in ("done", "degraded"), final.message
    assert final.medians is not None and final.medians.expected >= 1
    assert proxy.dropped >= final.medians.expected  # each named member (or each poll) tried at least once
    assert final.medians.received == 0 and final.medians.missing == final.medians.expected
    assert final.medians.not_arrived == final.medians.expected
    assert final.medians.describe() in final.message
    partial = [r for r in rows if r[0] == "partial"]
    assert len(partial) == final.medians.expected, rows
    for _, said in partial:
        assert "median answer" in said and reason in said, said
    assert sorted(r[0] for r in rows if r[0] != "partial") == ["done"] * (IDENTITIES - len(partial)), rows
