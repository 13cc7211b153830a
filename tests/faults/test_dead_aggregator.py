"""Two aggregators, one of them dead: a peer host configured with both takes part in the live one.

Real processes: one aggregator (``python -m aggregator``) and one peer host
(``python -m peer.simulate``) of five identities whose manifest names a dead
aggregator first (a loopback port nothing listens on) and the live one
second. What must hold: every identity registers with the live problem, the
round completes and each identity downloads the model; the dead aggregator
is backed off and said once in the host's log (no traceback, not a line per
poll); the state DB and the ledgers hold the live problem only.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from aggregator.app import start_server_process
from anonml.serving import free_port
from peer.discovery import poll_backoff
from tests.aggregator.helpers import aggregator_settings, wait_phase
from tests.faults.helpers import fault_draft, propose_and_close, releases, write_hosts
from tests.waiting import wait_until

IDENTITIES = 5


@pytest.mark.slow
def test_a_dead_aggregator_beside_a_live_one_is_backed_off_and_the_live_problem_completes(tmp_path: Path):
    dead = f"http://127.0.0.1:{free_port()}"
    live = start_server_process(aggregator_settings(tmp_path, port=0))
    host, ledgers = write_hosts(tmp_path, {"h": IDENTITIES}, [dead, live.url], log=True)["h"]
    started = time.monotonic()
    host.start()
    try:
        d = fault_draft()
        problem = propose_and_close(live.url, d, IDENTITIES)
        final = wait_phase(live.url, problem.id, ("done", "degraded", "failed"), timeout=180)
        assert final.phase == "done", final.message
        wait_until(
            lambda: {r[0] for r in host.rows("SELECT phase FROM peer_participations")} == {"done"},
            90,
            "every participation to download the model",
        )
        elapsed = time.monotonic() - started
        counters = host.status()["relay"]
    finally:
        host.stop()
        live.stop()
    # Everything the host knows is the live problem: proposals, participations, ledgers.
    assert host.rows("SELECT problem_id, aggregator_url FROM peer_proposals") == [(problem.id, live.url)]
    assert host.rows("SELECT DISTINCT problem_id FROM peer_participations") == [(problem.id,)]
    for ledger in ledgers:
        charged = releases(ledger)
        assert len(charged) == d.kh and {r[2] for r in charged} == {problem.id}
    assert final.reports.received == final.reports_accepted and final.reports.expected == IDENTITIES * d.kh
    # The dead aggregator was tried with backoff (doubling from one poll, at most 30 s) and said once.
    poll = 0.1  # SimulationManifest's default poll_seconds
    bound = 1 + next(k for k in range(64) if sum(poll_backoff(poll, j) for j in range(1, k + 1)) > elapsed)
    tries = counters.get("host aggregator unreachable", 0)
    assert 1 <= tries <= bound, (tries, bound, elapsed)
    log = host.log()
    assert "Traceback" not in log
    assert [line for line in log.splitlines() if dead in line] == [
        line for line in log.splitlines() if dead in line and "unreachable" in line
    ]
    assert sum(dead in line for line in log.splitlines()) == 1, log
