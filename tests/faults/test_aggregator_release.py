"""The aggregator down during the release window: SIGKILLed after the send window, restarted seconds later.

Real processes: the aggregator (``python -m aggregator``, on a fixed port so
the restarted one has the URL the roster and the peers know) and two peer
hosts (``python -m peer.simulate``) of six and four identities. Once the send
window has closed and the relays hold every packet of the round, the
aggregator is SIGKILLed in the release window just before the last hops
start delivering, and started again on the same database once the relays
have retried a delivery (at least three seconds later). What must hold: the last hops retry their
deliveries with backoff until ``t_r`` (what reaches the restarted intake in
time survives); every report is accounted for — by the aggregator (expected
/ received / lost and why, in the status and in the signed model) and by each
sender from the receipts; and the problem ends ``done`` or ``degraded``
exactly as its loss threshold says.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import requests

from anonml.crypto import WindowSchedule
from anonml.protocol import ModelDocument, verify_message
from peer.relay import default_guard, retry_delay
from tests.adversary.malicious import wait_until
from tests.aggregator.helpers import ADMIN, aggregator_settings, bins_of, propose, status, wait_phase
from tests.faults.helpers import Killable, fault_draft, free_port, write_hosts

OUTAGE = 3.0  # seconds at least between the kill and the restart


def _wait_for(moment: float) -> None:
    """Until the wall clock passes ``moment`` (a schedule time of the round, not a guess at progress)."""
    while time.time() < moment:
        time.sleep(min(0.05, max(0.0, moment - time.time())))


@pytest.mark.slow
def test_the_aggregator_down_in_the_release_window_loses_only_what_missed_t_r_and_says_so(tmp_path: Path):
    settings = aggregator_settings(tmp_path, port=free_port())
    agg = Killable(settings, tmp_path / "aggregator.db").start()
    hosts = write_hosts(tmp_path, {"a": 6, "b": 4}, [agg.url])
    peers = [hosts["a"][0], hosts["b"][0]]
    for p in peers:
        p.start()
    try:
        d = fault_draft(send_window_seconds=12.0, release_window_seconds=60.0)
        problem = propose(agg.url, d)
        wait_until(lambda: status(agg.url, problem.id).registered == 10, "every identity to register", 120)
        assert requests.post(f"{agg.url}/problems/{problem.id}/close", headers=ADMIN, timeout=30).ok
        wait_phase(agg.url, problem.id, ("reporting",), timeout=120)
        bins = bins_of(agg.url, problem.id)
        # Relays release in one stage per hop (peer.relay): the last hops deliver to the intake in
        # the last third of (t_s + δ, t_r − guard). Kill just before it, when the send window is
        # long closed; restart once the relays have felt it (a delivery retried) and OUTAGE passed.
        start = bins.t_s + bins.delta
        end = bins.t_r - default_guard(WindowSchedule(bins.t_s, bins.delta, bins.t_r))
        _wait_for(start + 2 * (end - start) / 3 - 1.0)
        agg.kill()
        killed = time.time()
        _wait_for(killed + OUTAGE)
        wait_until(
            lambda: sum(p.status()["relay"].get("delivered retried", 0) for p in peers) > 0,
            "a relay to retry a delivery to the dead intake",
            bins.t_r - time.time(),
        )
        down = time.time() - killed
        agg.start()  # same database, identity and port
        up = time.time()
        timing = f"down {down:.1f} s, up {up - killed - down:.1f} s later, {bins.t_r - up:.1f} s before t_r"
        assert up < bins.t_r - 2 * retry_delay(8), f"the machine is too slow: {timing}"
        final = wait_phase(agg.url, problem.id, ("done", "degraded", "failed"), timeout=180)
        statuses = "SELECT status, reason FROM peer_participations"
        for p in peers:
            try:
                wait_until(lambda p=p: {r[0] for r in p.rows(statuses)} == {final.phase}, "the models", 90)
            except AssertionError:
                seen = f"{p.rows(statuses)}, {p.status()}"
                raise AssertionError(f"{final.phase} ({final.message}) but the peers: {seen}") from None
        relays = [p.status()["relay"] for p in peers]
        model = ModelDocument.model_validate_json(
            requests.get(f"{agg.url}/problems/{problem.id}/model", timeout=30).content
        )
    finally:
        for p in peers:
            p.stop()
        if agg.current is not None:
            agg.current.stop()

    def total(what: str) -> int:
        return sum(r.get(what, 0) for r in relays)

    account = final.reports
    # The round went on: the restarted aggregator closed it and trained on what it stored.
    assert final.phase in ("done", "degraded"), final.message
    assert account.expected == 10 * d.kh and account.received == final.reports_accepted
    assert account.lost == account.expected - account.received
    assert account.lost == account.late + sum(account.refused.values()) + account.not_arrived
    limit = settings.max_loss_fraction
    assert final.phase == ("degraded" if account.lost_fraction > limit else "done"), (final.phase, account)
    if account.lost:
        assert final.message.startswith(account.describe()), final.message
    verify_message(model, bytes(problem.aggregator))
    assert model.reports == account  # the published model says what was lost, as the status does
    # The relays felt the outage and retried; what they finally could not deliver is counted lost.
    assert total("delivered retried") > 0, relays
    # Back more than two retry intervals before t_r: every delivery still retrying got through.
    assert total("delivered after retry") > 0, relays
    # A delivery the intake stored as the kill hit was never acknowledged: its retry is refused
    # (the token is spent), so the relays may count fewer deliveries than were stored, never more.
    refused = sum(v for r in relays for k, v in r.items() if k.startswith("delivered refused"))
    assert total("delivered") <= final.reports_accepted <= total("delivered") + refused
    assert total("delivered lost") <= account.lost + refused
    # Each sender counts its own losses from the aggregator's receipts.
    assert total("reports delivered") == final.reports_accepted
    assert total("reports lost in transit") == final.tokens_issued - final.reports_accepted
    print(
        json.dumps(
            {
                "phase": final.phase,
                "message": final.message,
                "reports": account.model_dump(),
                "tokens": final.tokens_issued,
                "killed_after_release_start": round(killed - start, 2),
                "down_before_restart": round(down, 2),
                "up_before_t_r": round(bins.t_r - up, 2),
                "delivered": total("delivered"),
                "delivered_after_retry": total("delivered after retry"),
                "delivered_retried": total("delivered retried"),
                "delivered_lost": total("delivered lost"),
            }
        )
    )
