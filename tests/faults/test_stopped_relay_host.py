"""One of three peer hosts is frozen (SIGSTOP) in the send window and stays frozen past the round (issue 26,
"stop a relay"): every report is delivered over its other route or counted lost with a reason.

A stopped host is not a dead one: its port still accepts connections (the kernel completes the
handshake into the listen backlog), so the senders and relays posting to it get no refusal, only
silence until their packet deadline. Real processes as in :mod:`tests.faults.test_dead_relay_host`:
the aggregator and three hosts of :data:`PER_HOST` identities each, default redundancy. Host C is
SIGSTOPped halfway through the send window — not "once each of its identities sent a copy", which
comes at about 85 % of the window (the last of six uniform send times) and leaves a frozen first hop's
5 s post deadline no time to re-route — and continued (SIGCONT) only after the problem ended, so
that it can be stopped cleanly.

What must hold: the problem ends ``done`` or ``degraded`` with an exact account (received + lost =
expected, the loss split into late, refused and not arrived adds up) and small loss: at most C's
reports none of whose copies had left C when it froze (lost by any protocol), plus 15 % (a frozen
host, unlike a dead one, costs a sender its whole packet deadline per post); the live hosts found C
dead (their probes time out); their relays' deliveries are the intake's stored reports plus its
duplicates; each live sender accounts for every report (delivered or lost in transit), and what they
count lost is in the account's loss.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from anonml.protocol import route_count
from tests.aggregator.helpers import wait_phase
from tests.faults.helpers import (
    ALL_SENT_ONE,
    check_two_live_hosts_account,
    ended_relay_counters,
    fault_draft,
    open_round,
    three_hosts,
)
from tests.waiting import wait_until

PER_HOST = 6


@pytest.mark.slow
def test_a_relay_host_stopped_mid_round_loses_little_and_every_report_is_accounted(tmp_path: Path):
    with three_hosts(tmp_path, PER_HOST) as (aggregator, a, b, c):
        n = 3 * PER_HOST
        stopped = False
        try:
            d = fault_draft(send_window_seconds=16.0, release_window_seconds=10.0)
            url = aggregator.url
            problem, bins = open_round(url, d, n)
            half = bins.t_s + bins.delta / 2
            wait_until(lambda: time.time() >= half, 120 + half - time.time(), "half the send window")
            assert c.process is not None
            c.process.send_signal(signal.SIGSTOP)
            stopped, stopped_at = True, time.time()
            sent_before = c.rows(ALL_SENT_ONE)[0][0]  # read from its file: the frozen process holds no lock
            final = wait_phase(url, problem.id, ("done", "degraded", "failed"), timeout=240)
            live = ended_relay_counters([a, b])
        finally:
            if stopped and c.process is not None:
                c.process.send_signal(signal.SIGCONT)  # before the hosts are stopped
    account = final.reports
    assert account is not None, final.message
    routes = route_count(d.routes, d.hops, n)
    figures = {
        "load_1min": os.getloadavg()[0],
        "stopped_at_fraction_of_send_window": round((stopped_at - bins.t_s) / bins.delta, 2),
        "stopped_identities_with_a_copy_out": sent_before,
        "phase": final.phase,
        "account": account.model_dump(),
        "message": final.message,
        "live_counters": live,
    }
    print(json.dumps(figures))
    assert final.phase in ("done", "degraded"), figures
    check_two_live_hosts_account(account, live, d, PER_HOST)
    assert account.routes == routes
    # Nothing silently missing: every report is received or lost with its reason above, and the
    # loss stays small: C's reports that never left it, plus at most 15 % (a copy still routed
    # through C whose sender learns too late cannot be re-routed).
    assert account.lost <= (PER_HOST - sent_before) * d.kh + 0.15 * account.expected, figures
