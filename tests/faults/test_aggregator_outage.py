"""The aggregator dies right after the roster is co-signed and stays down a while (issue 26, item 1).

Real processes: one aggregator (``python -m aggregator``) behind a loopback
:class:`~tests.faults.helpers.CuttingProxy`, and one peer host
(``python -m peer.simulate``) of six identities. The proxy SIGKILLs the
aggregator at the first assignment request — the step right after the
roster's cosignatures, where each identity fetches its signed assignment —
so the outage meets every identity at that step, not at a moment guessed by a
sleep. The aggregator stays down for :data:`OUTAGE_SECONDS` and until the peers
have found it unreachable again and again (counted by the proxy), then a new
process starts on the same database. The bins (and so the send window) were
fixed before the kill, so the window (45 s) is wide enough for the outage and a
restart on a loaded machine (which took up to ~30 s at load 12 on two cores).
What must hold: no identity aborts (a transient error is retried, never the
end of a participation), every identity downloads the model, and no report is
lost (the account's ``received`` is ``expected``).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.aggregator.helpers import wait_phase
from tests.faults.helpers import fault_draft, host_behind_proxy, propose_and_close
from tests.waiting import wait_until

IDENTITIES = 6
#: The outage: at least this long, and until the peers found the aggregator dead this many times.
OUTAGE_SECONDS = 5.0
OUTAGE_REQUESTS = 3


@pytest.mark.slow
def test_an_outage_right_after_the_roster_costs_no_participation_and_no_report(tmp_path: Path):
    with host_behind_proxy(tmp_path, IDENTITIES, b"/assignments") as (agg, proxy, host):
        d = fault_draft(send_window_seconds=45.0)
        problem = propose_and_close(agg.url, d, IDENTITIES)
        wait_until(proxy.cut.is_set, 120, "the first assignment request (which kills the aggregator)")
        killed_at = time.monotonic()
        assert agg.current is None and len(agg.killed) == 1
        wait_until(
            lambda: proxy.refused >= OUTAGE_REQUESTS and time.monotonic() >= killed_at + OUTAGE_SECONDS,
            120,
            "the outage to last its time and be met by the peers",
        )
        agg.start()
        proxy.target = agg.url
        final = wait_phase(agg.url, problem.id, ("done", "degraded", "failed"), timeout=240)
        wait_until(
            lambda: all(r[0] in ("done", "degraded", "aborted", "failed")
                        for r in host.rows("SELECT phase FROM peer_participations")),
            120,
            "every participation to end",
        )
        rows = host.rows("SELECT phase, reason FROM peer_participations")
        counters = host.status()["relay"]
    assert final.phase == "done", (final.message, counters, rows)
    assert [r for r in rows if r[0] != "done"] == [], rows
    assert len(rows) == IDENTITIES
    assert final.reports is not None
    assert final.reports.expected == IDENTITIES * d.kh
    assert final.reports.received == final.reports.expected, final.reports.describe()
    # The outage was met by retries: the host says how many calls it tried again.
    assert counters.get("host aggregator calls retried", 0) >= 1, counters
