"""Receipts fetched again after an outage, so the counts agree (issue 26, item 7).

Real processes: one aggregator behind a :class:`~tests.faults.helpers.CuttingProxy`
and one peer host of six identities. The proxy SIGKILLs the aggregator at the
first receipts request — just after the model is published, when each host
compares its identities' tokens with the receipts — and a new process starts
on the same database once the host has found it down. What must hold: the
host waits for the receipts (retrying with backoff) instead of ending its
identities with "receipts unavailable", every identity ends ``done`` with 0
reports lost, and the host's count of delivered reports equals what the
aggregator stored.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.aggregator.helpers import wait_phase
from tests.faults.helpers import fault_draft, host_behind_proxy, propose_and_close
from tests.waiting import wait_until

IDENTITIES = 6


@pytest.mark.slow
def test_receipts_are_fetched_again_after_the_aggregator_comes_back(tmp_path: Path):
    with host_behind_proxy(tmp_path, IDENTITIES, b"/receipts") as (agg, proxy, host):
        d = fault_draft()
        problem = propose_and_close(agg.url, d, IDENTITIES)
        wait_until(proxy.cut.is_set, 240, "the first receipts request (which kills the aggregator)")
        wait_until(lambda: proxy.refused >= 3, 120, "the host to find the aggregator down")
        assert host.rows("SELECT DISTINCT phase FROM peer_participations") == [("reporting",)]
        agg.start()
        proxy.target = agg.url
        final = wait_phase(agg.url, problem.id, ("done", "degraded", "failed"), timeout=60)
        wait_until(
            lambda: {r[0] for r in host.rows("SELECT phase FROM peer_participations")} == {"done"},
            180,
            "every participation to end done",
        )
        counters = host.status()["relay"]
    assert final.phase == "done", final.message
    assert final.reports is not None and final.reports.received == IDENTITIES * d.kh
    assert counters.get("receipts unavailable", 0) == 0, counters
    assert counters.get("reports delivered", 0) == final.reports.received, counters
    assert counters.get("reports lost in transit", 0) == 0, counters
    assert counters.get("host receipts not fetched", 0) >= 1, counters  # the outage was met
