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
from anonml.protocol import Bins, ModelDocument, Problem, ProblemStatus, verify_message
from anonml.serving import free_port
from peer.relay import default_guard, retry_delay
from tests.aggregator.helpers import (
    aggregator_settings,
    bins_of,
    wait_phase,
)
from tests.faults.helpers import Killable, PeerProcess, fault_draft, propose_and_close, write_hosts
from tests.waiting import wait_for_clock, wait_until

OUTAGE = 3.0  # seconds at least between the kill and the restart
#: The relay counters the test prints, summed over the hosts.
RELAY_COUNTS = ("delivered", "delivered after retry", "delivered retried", "delivered lost")


def _kill_in_the_last_stage(
    agg: Killable, peers: list[PeerProcess], bins: Bins
) -> tuple[float, float, float]:
    """SIGKILL the aggregator just before the last hops deliver; start it again once the relays felt it.

    Relays release in one stage per hop (peer.relay): the last hops deliver to the intake in
    the last third of (t_s + δ, t_r − guard). Kill just before it, when the send window is
    long closed; restart once the relays have felt it (a delivery retried) and OUTAGE passed.
    Returns when it was killed, how long it was down and when it was up again.
    """
    start = bins.t_s + bins.delta
    end = bins.t_r - default_guard(WindowSchedule(bins.t_s, bins.delta, bins.t_r))
    wait_for_clock(start + 2 * (end - start) / 3 - 1.0, bins.t_r - time.time(), "the last release stage")
    agg.kill()
    killed = time.time()
    wait_for_clock(killed + OUTAGE, OUTAGE + 1, "the outage")
    wait_until(
        lambda: sum(p.status()["relay"].get("delivered retried", 0) for p in peers) > 0,
        bins.t_r - time.time(),
        "a relay to retry a delivery to the dead intake",
    )
    down = time.time() - killed
    agg.start()  # same database, identity and port
    up = time.time()
    timing = f"down {down:.1f} s, up {up - killed - down:.1f} s later, {bins.t_r - up:.1f} s before t_r"
    assert up < bins.t_r - 2 * retry_delay(8), f"the machine is too slow: {timing}"
    return killed, down, up


def _wait_for_the_peers(peers: list[PeerProcess], final: ProblemStatus) -> None:
    """Until every participation of every host ended as the problem did (each fetched the model)."""
    statuses = "SELECT phase, reason FROM peer_participations"
    for p in peers:
        try:
            wait_until(lambda p=p: {r[0] for r in p.rows(statuses)} == {final.phase}, 90, "the models")
        except AssertionError:
            seen = f"{p.rows(statuses)}, {p.status()}"
            raise AssertionError(f"{final.phase} ({final.message}) but the peers: {seen}") from None


def _check_the_account(final: ProblemStatus, model: ModelDocument, problem: Problem, limit: float) -> None:
    """The restarted aggregator closed the round and says, in its status and model, what was lost."""
    account = final.reports
    # The round went on: the restarted aggregator closed it and trained on what it stored.
    assert final.phase in ("done", "degraded"), final.message
    assert account.expected == 10 * problem.draft.kh and account.received == final.reports_accepted
    assert account.lost == account.expected - account.received
    assert account.lost == account.late + sum(account.refused.values()) + account.not_arrived
    assert final.phase == ("degraded" if account.lost_fraction > limit else "done"), (final.phase, account)
    if account.lost:
        assert final.message.startswith(account.describe()), final.message
    verify_message(model, bytes(problem.aggregator))
    assert model.reports == account  # the published model says what was lost, as the status does


def _check_the_relays(relays: list[dict[str, int]], final: ProblemStatus) -> None:
    """The relays' and senders' counts agree with what the aggregator stored and lost."""

    def total(what: str) -> int:
        return sum(r.get(what, 0) for r in relays)

    # The relays felt the outage and retried; what they finally could not deliver is counted lost.
    assert total("delivered retried") > 0, relays
    # Back more than two retry intervals before t_r: every delivery still retrying got through.
    assert total("delivered after retry") > 0, relays
    # A delivery the intake stored as the kill hit was never acknowledged: its retry is refused
    # (the token is spent), so the relays may count fewer deliveries than were stored, never more.
    # Each report travels over `routes` copies (redundant delivery): the intake stores one and
    # refuses the others as duplicates, which the relays count as delivered (already processed).
    account, routes = final.reports, final.reports.routes
    refused = sum(v for r in relays for k, v in r.items() if k.startswith("delivered refused"))
    assert total("delivered") <= final.reports_accepted + account.duplicates
    assert final.reports_accepted <= total("delivered") + refused
    # A lost report lost every copy; a stored one at most routes − 1 of them.
    assert total("delivered lost") <= routes * account.lost + (routes - 1) * final.reports_accepted + refused
    # Each sender counts its own losses from the aggregator's receipts.
    assert total("reports delivered") == final.reports_accepted
    assert total("reports lost in transit") == final.tokens_issued - final.reports_accepted


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
        problem = propose_and_close(agg.url, d, 10)
        wait_phase(agg.url, problem.id, ("reporting",), timeout=120)
        bins = bins_of(agg.url, problem.id)
        killed, down, up = _kill_in_the_last_stage(agg, peers, bins)
        final = wait_phase(agg.url, problem.id, ("done", "degraded", "failed"), timeout=180)
        _wait_for_the_peers(peers, final)
        relays = [p.status()["relay"] for p in peers]
        # Back in time to take every retried delivery: nothing forces a failed round, so one says why.
        timing = f"killed t_r − {bins.t_r - killed:.1f} s, down {down:.1f} s, up t_r − {bins.t_r - up:.1f} s"
        # The restarted intake's admission figures: its mean service time says how cold it came back.
        intake = requests.get(f"{agg.url}/healthz", timeout=30).json()["admission"]["classes"].get("intake")
        if final.phase == "failed":
            raise AssertionError(f"{final.message}; {timing}; {final.reports}; {relays}; intake {intake}")
        model = ModelDocument.model_validate_json(
            requests.get(f"{agg.url}/problems/{problem.id}/model", timeout=30).content
        )
    finally:
        for p in peers:
            p.stop()
        if agg.current is not None:
            agg.current.stop()
    _check_the_account(final, model, problem, settings.max_loss_fraction)
    _check_the_relays(relays, final)
    total = {what: sum(r.get(what, 0) for r in relays) for what in RELAY_COUNTS}
    print(
        json.dumps(
            {
                "phase": final.phase,
                "message": final.message,
                "reports": final.reports.model_dump(),
                "tokens": final.tokens_issued,
                "killed_after_release_start": round(killed - (bins.t_s + bins.delta), 2),
                "down_before_restart": round(down, 2),
                "up_before_t_r": round(bins.t_r - up, 2),
                "intake_after_restart": intake,
                **{what.replace(" ", "_"): n for what, n in total.items()},
            }
        )
    )
