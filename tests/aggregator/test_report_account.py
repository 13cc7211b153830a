"""No silent loss: every problem's status and model say how many reports were expected, received and
lost, and why; past the loss threshold a problem ends ``degraded``; the demo says when it fell short."""

from __future__ import annotations

import time

import numpy as np
import pytest
import requests

from aggregator.state import (
    CALIBRATION_REFUSAL,
    DROPPED_COVER,
    DUPLICATE_COPY,
    INTAKE_REFUSAL,
    MEDIAN_REFUSAL,
    reject_counts,
)
from aggregator.training import account_reports
from anonml.crypto import Redemption
from anonml.protocol import IntakeDelivery, ModelDocument, ProblemStatus, ReportAccount
from tests.aggregator.helpers import (
    ADMIN,
    LONG_GRACE_SECONDS,
    draft,
    post,
    random_deliveries,
    report_for,
    sealed_delivery,
    slots,
    status,
    wait_phase,
)
from tests.aggregator.test_tokens_intake import Round, _open_round
from tests.waiting import wait_until


def test_refused_answers_are_shown_but_never_explain_a_lost_report() -> None:
    rows = [
        (INTAKE_REFUSAL + "late", 2),
        (INTAKE_REFUSAL + DUPLICATE_COPY, 5),
        (MEDIAN_REFUSAL + "late", 3),  # a median answer after its step closed: no report was lost
        (CALIBRATION_REFUSAL + "late", 4),
        (DROPPED_COVER, 7),
    ]
    merged, intake = reject_counts(rows)
    assert intake == {"late": 2, DUPLICATE_COPY: 5}
    assert merged == {"late": 9}


def test_the_account_attributes_losses_late_first_then_refusals_then_not_arrived() -> None:
    a = account_reports(10, 3, 24, late=2, refused={"bad token": 1, "duplicate token": 5, "malformed": 9})
    assert (a.expected, a.received, a.lost) == (30, 24, 6)
    # Repeats of stored reports are no loss; refusals explain at most the loss.
    assert a.late == 2 and a.refused == {"bad token": 1, "malformed": 3} and a.not_arrived == 0
    assert a.lost_fraction == pytest.approx(0.2)
    b = account_reports(10, 3, 30, late=4, refused={"bad token": 2})
    assert (b.lost, b.late, b.refused, b.not_arrived) == (0, 0, {}, 0)
    c = account_reports(4, 1, 1, late=0, refused={})
    assert (c.lost, c.not_arrived, c.pending) == (3, 3, 0)
    assert c.describe() == "3 of 4 reports lost (75.0%): 3 not arrived"
    # The delivery window still open: what is missing is pending, nothing is lost nor explained yet.
    d = account_reports(10, 3, 24, late=0, refused={"bad token": 1}, window_open=True, cover=2)
    assert (d.expected, d.received, d.pending, d.lost, d.refused, d.not_arrived) == (30, 24, 6, 0, {}, 0)
    assert d.describe() == (
        "24 of 30 reports received, 6 pending (the delivery window is open); 2 cover packets dropped"
    )
    assert account_reports(10, 3, 30, 0, {}, window_open=True).pending == 0


def test_pending_is_written_only_while_open_so_a_signed_settled_account_keeps_its_bytes() -> None:
    settled = account_reports(4, 1, 1, late=0, refused={})
    assert "pending" not in settled.model_dump_json()
    live = account_reports(4, 1, 1, late=0, refused={}, window_open=True)
    assert '"pending":3' in live.model_dump_json()
    assert ReportAccount.model_validate_json(live.model_dump_json()) == live


def test_the_delivery_window_is_open_in_the_round_phases_until_t_r_plus_grace() -> None:
    from aggregator.training import delivery_window_open

    t_r, grace = 1000.0, 1.0
    opened = (("medians", None, 5e9), ("witnessing", None, 0.0), ("reporting", t_r, t_r + grace))
    for phase, end, now in opened:
        assert delivery_window_open(phase, end, grace, now), (phase, now)
    for phase, now in (("reporting", t_r + grace + 0.01), ("training", 0.0), ("done", 0.0), ("failed", 0.0),
                       ("degraded", 0.0), ("registration", 0.0)):
        assert not delivery_window_open(phase, t_r, grace, now), (phase, now)


def test_the_round_ends_at_t_r_once_every_report_is_in_else_at_t_r_plus_grace() -> None:
    from aggregator.training import report_round_over

    t_r, grace, asked = 1000.0, 5.0, []

    def complete() -> bool:
        asked.append(True)
        return True

    # Before t_r never, and the intake is not even asked; past t_r + grace always.
    assert not report_round_over(None, grace, 5e9, complete)
    assert not report_round_over(t_r, grace, t_r, complete) and not asked
    assert report_round_over(t_r, grace, t_r + grace + 0.01, lambda: False)
    # Inside the grace: only when every expected report is stored.
    assert not report_round_over(t_r, grace, t_r + 1.0, lambda: False)
    assert report_round_over(t_r, grace, t_r + 1.0, complete) and asked


def test_a_complete_round_trains_at_t_r_not_after_the_grace(long_grace_aggregator) -> None:
    """Every report in: the problem trains just past ``t_r``, not ten minutes later at ``t_r`` + grace;
    the account is complete and nothing is lost or pending."""
    round_ = Round.open(long_grace_aggregator, draft(kh=2, kp=1, min_peers=4, send_window=10.0,
                                                     release_window=1.0), 4, "reporting")
    _send_all(round_, 4, np.random.default_rng(3))
    st = wait_phase(round_.url, round_.problem.id, ("done", "degraded", "failed"), timeout=120.0)
    assert st.phase == "done", st.message
    assert time.time() < round_.bins.t_r + LONG_GRACE_SECONDS  # ended long before t_r + grace
    assert (st.reports.expected, st.reports.received, st.reports.lost) == (8, 8, 0)
    assert st.reports.pending == 0


def test_a_live_round_reports_missing_reports_as_pending_until_its_window_closes(aggregator) -> None:
    """A real server mid-round: before ``t_r`` the status says lost 0 and pending > 0; once the
    window closed (the round trains at ``t_r`` + grace) the same reports are lost, none pending."""
    round_ = Round.open(aggregator, draft(kh=2, kp=1, min_peers=4, send_window=3.0, release_window=1.0),
                        6, "reporting")
    _send_all(round_, 4, np.random.default_rng(8))
    seen_open = 0

    def ended_checking_the_account() -> ProblemStatus | None:
        """The status once the round ended; each read on the way has the account right for its time."""
        nonlocal seen_open
        asked = time.time()
        st = status(round_.url, round_.problem.id)
        assert st.reports is not None and st.reports.expected == 12 and st.reports.received == 8
        if asked < round_.bins.t_r:
            assert (st.reports.lost, st.reports.pending) == (0, 4), st.reports
            seen_open += 1
        return st if st.phase in ("done", "degraded", "failed") else None

    st = wait_until(ended_checking_the_account, 60, "the round to end")
    assert seen_open > 0  # the status was read inside the window at least once
    assert (st.reports.lost, st.reports.pending, st.reports.not_arrived) == (4, 0, 4)


def test_a_count_read_while_the_round_settles_counts_each_report_once(database_url: str) -> None:
    """The race CI met: the status counted staged reports, settlement moved them all in one commit,
    then it counted the settled ones: 16 received of 12 expected. Here the settlement commits right
    after the count's first statement ran; the count must still be the reports there are."""
    from sqlalchemy import event
    from sqlalchemy.orm import Session

    from aggregator.db import StagedReportRow, count_reports, create_tables, settle_reports
    from anonml.database import make_engine

    engine = make_engine(database_url)
    try:
        create_tables(engine)
        n = 5
        with Session(engine) as s, s.begin():
            s.add_all(
                StagedReportRow(id=bytes([i]) * 16, problem_id="p-x", key_id=bytes(32), slot=b"p-x/p0/r0",
                                nonce=bytes([i]) * 32, partition=0, subset=0, mechanism_json="{}",
                                bits=b"\x80")
                for i in range(n)
            )
        settled: list[int] = []

        @event.listens_for(engine, "after_cursor_execute")
        def _settle_between(conn, cursor, statement, parameters, context, executemany):  # noqa: ANN001
            if not settled and statement.lstrip().upper().startswith("SELECT"):
                settled.append(0)  # once, and before settling so its own SELECT does not recurse
                with Session(engine) as writer, writer.begin():
                    settled[0] = settle_reports(writer, "p-x")

        with Session(engine) as reader:
            assert count_reports(reader, "p-x") == n
        assert settled == [n]  # the settlement did commit in the middle of the read
        with Session(engine) as s:
            assert count_reports(s, "p-x") == n
    finally:
        engine.dispose()


def _send_all(round_, senders: int, rng: np.random.Generator) -> None:
    for i in range(senders):
        peer = round_.report_peer(i)
        tokens = peer.tokens(
            round_.url, round_.problem, round_.roster, slots(round_.problem, peer.assignment.index)
        )
        for d in random_deliveries(round_.problem, round_.bins, peer.assignment, tokens, i, rng):
            assert post(f"{round_.url}/intake", d).status_code == 201


def _train(round_) -> None:
    assert post(f"{round_.url}/problems/{round_.problem.id}/train", b"", ADMIN).status_code == 200


def test_a_round_that_loses_past_the_threshold_ends_degraded_and_says_why(aggregator) -> None:
    round_ = _open_round(aggregator, n=6, kh=2)
    rng = np.random.default_rng(5)
    _send_all(round_, 4, rng)  # peers 4 and 5 send nothing: 4 of 12 reports lost
    # A forged delivery for peer 4's slot (its MAC does not verify): refused at intake, counted.
    peer = round_.report_peer(4)
    (token, _) = peer.tokens(round_.url, round_.problem, round_.roster, slots(round_.problem))
    report = report_for(round_.problem, round_.bins, peer.assignment, np.array([1.0, 2.0, 0.0]), 0, 0, rng)
    good = token.redeem(report.to_bytes())
    forged = Redemption(good.slot, good.nonce, bytes(32))
    intake = f"{round_.url}/intake"
    assert post(intake, sealed_delivery(round_.problem, forged, report.to_bytes())).status_code == 403
    # Cover the relays forwarded: opened, dropped and counted apart — answered like a stored report.
    for _ in range(3):
        assert post(intake, sealed_delivery(round_.problem, None, None)).status_code == 201
    # A sealed payload altered on the way (one ciphertext bit): refused, counted under the round.
    sealed = bytearray(sealed_delivery(round_.problem, good, report.to_bytes()).sealed)
    sealed[700] ^= 1
    tampered = IntakeDelivery(version=2, round_id=round_.problem.round_id, sealed=bytes(sealed))
    refused = post(intake, tampered)
    assert refused.status_code == 400 and "does not open" in refused.json()["detail"]

    asked = time.time()
    live = status(round_.url, round_.problem.id).reports
    assert live is not None and (live.expected, live.received, live.cover) == (12, 8, 3)
    if asked < round_.bins.t_r:  # read inside the delivery window: the 4 missing are pending, not lost
        assert (live.pending, live.lost, live.not_arrived) == (4, 0, 0)
    _train(round_)
    st = wait_phase(round_.url, round_.problem.id, ("degraded", "done", "failed"))
    assert st.phase == "degraded", st.message
    assert st.reports == ReportAccount(
        expected=12, received=8, lost=4, refused={"bad token": 1, "unsealable": 1}, not_arrived=2, cover=3,
        routes_asked=2,  # the default 2 routes; 6 members fit 1 route of 3 hops (route_count)
    )
    assert "4 of 12 reports lost" in st.message and "bad token: 1" in st.message and "10%" in st.message
    assert "3 cover packets dropped" in st.message
    # The status keeps naming refusals without their stage; cover is no refusal.
    assert st.rejects == {"bad token": 1, "unsealable": 1}
    # The model is still published, and carries the same account under the signature.
    doc = ModelDocument.model_validate_json(
        requests.get(f"{round_.url}/problems/{round_.problem.id}/model").content
    )
    assert doc.reports == st.reports


def test_a_round_without_loss_ends_done_with_an_empty_account(aggregator) -> None:
    round_ = _open_round(aggregator, n=6, kh=2)
    _send_all(round_, 6, np.random.default_rng(6))
    _train(round_)
    st = wait_phase(round_.url, round_.problem.id, ("degraded", "done", "failed"))
    assert st.phase == "done" and st.message == ""
    assert st.reports == ReportAccount(expected=12, received=12, lost=0, routes_asked=2)
    doc = ModelDocument.model_validate_json(
        requests.get(f"{round_.url}/problems/{round_.problem.id}/model").content
    )
    assert doc.reports == st.reports
