"""Median answers that cannot reach the aggregator end their participations ``partial`` (issue 26, item 5).

Real processes: one aggregator and one peer host of eight identities, two of
them in the median pool, behind a :class:`~tests.faults.helpers.CuttingProxy`
that drops every median answer (the connection closes unanswered, as a dead
path would). Each median identity retries its answer until its step's
deadline, then notes the shortfall; the round goes on. What must hold: the
median identities end ``partial`` with the reason (never ``done`` with an
empty one), the report identities end ``done``, and the aggregator's median
account counts every named member as missing (not arrived), in the status and
in the problem's final message.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.aggregator.helpers import aggregator_settings, close_registration, propose, status, wait_phase
from tests.faults.helpers import CuttingProxy, Killable, fault_draft, write_hosts
from tests.waiting import wait_until

IDENTITIES = 8


@pytest.mark.slow
def test_undelivered_median_answers_end_partial_and_are_in_the_account(tmp_path: Path):
    agg = Killable(aggregator_settings(tmp_path, port=0), tmp_path / "aggregator.db").start()
    proxy = CuttingProxy(agg.url, b"never-requested", lambda: None, drop=b"/medians/answers")
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
    assert proxy.dropped >= final.medians.expected  # each named member tried at least once
    assert final.medians.received == 0 and final.medians.missing == final.medians.expected
    assert final.medians.not_arrived == final.medians.expected
    assert final.medians.describe() in final.message
    partial = [r for r in rows if r[0] == "partial"]
    assert len(partial) == final.medians.expected, rows
    for _, reason in partial:
        assert "median answer" in reason and "not delivered before the step's deadline" in reason, reason
    assert sorted(r[0] for r in rows if r[0] != "partial") == ["done"] * (IDENTITIES - len(partial)), rows
