"""The aggregator dies late in the release window and comes back after ``t_r`` (issue 26, item 3).

Real processes: one aggregator (``python -m aggregator``, on a fixed port so the restarted process is
where the relays deliver) with an intake grace of :data:`GRACE` seconds, and one peer host (``python -m
peer.simulate``) of :data:`IDENTITIES` identities relaying for each other. The aggregator is SIGKILLed in
the release window while the last hops still hold deliveries for it (read from the host's state DB: held
rows for the intake), stays down until ``t_r`` has passed, and a new process starts on the same
database; the time from its start to ``/healthz`` answering is measured (printed with the figures).

What must hold: the last hops kept retrying past ``t_r`` (the bins carry the grace) and delivered once
the aggregator was back — every report is received, none lost or late; what the intake stored before the
kill is still there; the relays lost nothing ("delivered lost" 0) and delivered after retries.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from anonml.serving import free_port
from tests.aggregator.helpers import aggregator_settings, status, wait_phase
from tests.faults.helpers import Killable, fault_draft, open_round, write_hosts
from tests.waiting import answers_ok, wait_until

IDENTITIES = 6
#: The intake's grace after t_r: room for a restart on a loaded machine (15–35 s at load 14–17).
GRACE = 40.0
HELD_DELIVERIES = "SELECT count(*) FROM peer_held_packets WHERE what = 'delivered'"


@pytest.mark.slow
def test_relays_deliver_to_an_aggregator_restarted_after_t_r_within_the_grace(tmp_path: Path):
    settings = aggregator_settings(tmp_path, port=free_port(), intake_grace_seconds=GRACE)
    agg = Killable(settings, tmp_path / "aggregator.db").start()
    host, _ = write_hosts(tmp_path, {"h": IDENTITIES}, [agg.url], log=True)["h"]
    host.start()
    url = agg.url
    try:
        d = fault_draft(send_window_seconds=8.0, release_window_seconds=9.0)
        problem, bins = open_round(url, d, IDENTITIES)
        assert bins is not None and bins.grace == GRACE  # signed into the bins: the relays read it there
        # In the release window, with deliveries to the intake still held by the last hops: kill.
        # Some reports already stored (what the restart must keep), others still held for the intake.
        def kill_point() -> bool:
            if time.time() < bins.t_s + bins.delta or host.rows(HELD_DELIVERIES)[0][0] == 0:
                return False
            reports = status(url, problem.id).reports
            return reports is not None and reports.received >= 1

        what = "stored reports and held deliveries in the release window"
        wait_until(kill_point, 120 + bins.t_r - time.time(), what)
        before = status(url, problem.id).reports
        agg.kill()
        killed_at = time.time()
        assert killed_at < bins.t_r, "the deliveries were all made before the kill point"
        assert before is not None and 1 <= before.received < before.expected
        wait_until(lambda: time.time() > bins.t_r, 60, "t_r to pass with the aggregator down")
        started = time.monotonic()
        agg.start()
        # A restarted process answers late on a loaded machine: a read timing out is "not yet".
        wait_until(lambda: answers_ok(f"{url}/healthz", timeout=5), 60, "/healthz")
        restart_seconds = time.monotonic() - started
        back_at = time.time()
        assert back_at < bins.t_r + GRACE, "the restart took longer than the grace"
        final = wait_phase(url, problem.id, ("done", "degraded", "failed"), timeout=GRACE + 120)
        wait_until(
            lambda: all(r[0] in ("done", "degraded", "partial", "failed")
                        for r in host.rows("SELECT phase FROM peer_participations")),
            120,
            "every participation to end",
        )
        counters = host.status()["relay"]
    finally:
        host.stop()
        if agg.current is not None:
            agg.current.stop()
    account = final.reports
    assert account is not None
    print(json.dumps({
        "restart_seconds": round(restart_seconds, 2),
        "load_1min": os.getloadavg()[0],
        "killed_before_t_r": round(bins.t_r - killed_at, 2),
        "back_after_t_r": round(back_at - bins.t_r, 2),
        "received_at_kill": before.received,
        "account": account.model_dump(),
        "relay": counters,
    }))
    assert final.phase == "done", (final.message, counters)
    assert account.received == account.expected == IDENTITIES * d.kh and account.lost == 0, account.describe()
    assert account.late == 0
    assert counters.get("delivered lost", 0) == 0, counters
    # The relays retried through the outage. (Not one retry per report missing at the kill: on a loaded
    # machine a release can come due only after the restart and go through at its first try.)
    assert counters["delivered after retry"] >= 1 and counters["delivered retried"] >= 1, counters
    assert counters.get("reports lost in transit", 0) == 0
    assert counters["reports delivered"] == account.expected
