"""A full disk under a peer host during the roster check and the medians (issue 26, item 5), for real.

The host's state database lives on a real 8 MiB tmpfs (:func:`~tests.faults.helpers.tmpfs`;
skipped, saying why, where mounting is not permitted — CI runs as root). One host of
:data:`IDENTITIES` identities, two of them in the median pool (one median step), against a real
aggregator. Once every identity registered and saved its receipt, the tmpfs is filled to
``ENOSPC`` and registration closed: the roster check and the median answers meet a state
database that cannot write. The disk is freed once the aggregator has left the medians.

What must hold: the problem ends ``done`` or ``degraded`` and its median account names the
shortfall (missing = expected − received, as many missing as the median identities that could
not answer); no participation ends ``done`` without having done its part: every median identity
that did not answer ends with the reason (never ``done`` with an empty one), and every
participation that ended other than ``done`` says why.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from aggregator.app import start_server_process
from tests.aggregator.helpers import aggregator_settings, close_registration, propose, status, wait_phase
from tests.faults.helpers import fault_draft, fill, tmpfs, write_hosts
from tests.waiting import wait_until

IDENTITIES = 8
ENDED = ("done", "degraded", "partial", "aborted", "failed")
ROWS = "SELECT phase, reason FROM peer_participations"
REGISTERED = "SELECT count(*) FROM peer_participations WHERE phase = 'registered'"


@pytest.mark.slow
def test_a_full_state_disk_at_a_peer_ends_its_median_identities_with_the_reason(tmp_path: Path) -> None:
    aggregator = start_server_process(aggregator_settings(tmp_path, port=0))
    with tmpfs(tmp_path / "disk", "8m") as disk:
        host, _ = write_hosts(tmp_path, {"h": IDENTITIES}, [aggregator.url], log=True)["h"]
        manifest = json.loads(host.manifest.read_text())
        host.state = disk / "state.db"
        manifest["state_url"] = f"sqlite:///{host.state}"
        host.manifest.write_text(json.dumps(manifest))
        host.start()
        filler: Path | None = None
        try:
            d = fault_draft().model_copy(deep=True)
            d = d.model_copy(update={
                "median": d.median.model_copy(update={"pool_fraction": 0.25, "steps": 1}),
                "schedule": d.schedule.model_copy(update={"median_step_seconds": 3.0}),
            })
            url = aggregator.url
            problem = propose(url, d)
            registered = lambda: status(url, problem.id).registered == IDENTITIES  # noqa: E731
            wait_until(registered, 120, "every identity to register")
            # ... and to have recorded it (the receipt saved): the disk fills for what comes next.
            wait_until(lambda: host.rows(REGISTERED)[0][0] == IDENTITIES, 120, "every receipt to be saved")
            filler = fill(disk)
            close_registration(url, problem.id, or_deadline=True)
            wait_until(lambda: status(url, problem.id).phase not in ("registration", "witnessing", "medians"),
                       240, "the aggregator to leave the medians")
            filler.unlink()
            filler = None
            final = wait_phase(url, problem.id, ("done", "degraded", "failed"), timeout=240)
            ended = lambda: all(r[0] in ENDED for r in host.rows(ROWS))  # noqa: E731
            try:
                wait_until(ended, 120, "every participation to end")
            except AssertionError as exc:
                raise AssertionError(f"{exc}: {host.rows(ROWS)}\n{host.log()[-4000:]}") from None
            rows = host.rows(ROWS)
            log = host.log()
        finally:
            if filler is not None:
                filler.unlink()
            host.stop()
            aggregator.stop()
    medians = final.medians
    figures = {
        "load_1min": os.getloadavg()[0],
        "phase": final.phase,
        "message": final.message,
        "medians": None if medians is None else medians.model_dump(),
        "participations": rows,
    }
    print(json.dumps(figures, default=str))
    assert final.phase in ("done", "degraded"), figures
    assert medians is not None and medians.expected == 2, figures
    assert medians.received + medians.missing == medians.expected
    assert medians.missing >= 1, "the full disk cost no median answer: the fault was not met"
    # Every participation that did not end done says why; a median answer that was not given is
    # named in its identity's reason, and that identity did not end done.
    assert all(reason for st, reason in rows if st != "done"), rows
    short = [(st, reason) for st, reason in rows if "median answer" in reason]
    assert len(short) >= medians.missing, rows
    assert all(st != "done" for st, _ in short), rows
    assert "No space left on device" in log or "database or disk is full" in log, log[-3000:]
