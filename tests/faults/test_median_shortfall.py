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

from tests.aggregator.helpers import aggregator_settings, close_registration, propose, status, wait_phase
from tests.faults.helpers import CuttingProxy, Killable, fault_draft, write_hosts
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
    agg = Killable(aggregator_settings(tmp_path, port=0), tmp_path / "aggregator.db").start()
    proxy = CuttingProxy(agg.url, b"never-requested", lambda: None, drop=drop)
    host, _ = write_hosts(tmp_path, {"h": IDENTITIES}, [proxy.url], log=True)["h"]
    host.start()
    try:
        d = fault_draft().model_copy(deep=True)
        d = d.model_copy(update={
            "median": d.median.model_copy(update={"pool_fraction": 0.25, "steps": 1}),
            "schedule": d.schedule.model_copy(update={"median_step_seconds": 3.0}),
        })
        problem = propose(agg.url, d)
        wait_until(
            lambda: status(agg.url, problem.id).registered == IDENTITIES, 120, "every identity to register"
        )
        close_registration(agg.url, problem.id)
        final = wait_phase(agg.url, problem.id, ("done", "degraded", "failed"), timeout=300)
        wait_until(
            lambda: all(r[0] in ("done", "degraded", "partial", "aborted", "failed")
                        for r in host.rows("SELECT phase FROM peer_participations")),
            120,
            "every participation to end",
        )
        rows = host.rows("SELECT phase, reason FROM peer_participations")
    finally:
        host.stop()
        proxy.close()
        if agg.current is not None:
            agg.current.stop()
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
