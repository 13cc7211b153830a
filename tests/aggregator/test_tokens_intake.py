"""Token issuance and the anonymous intake: each abuse gets its own 4xx and nothing is lost."""

from __future__ import annotations

import numpy as np
import pytest
import requests
from sqlalchemy.exc import OperationalError

from anonml.crypto import Identity, Redemption, TokenKey, request_tokens
from anonml.protocol import (
    PrivateReport,
    TokenBatchRequest,
    TokenSlotRequest,
    report_slot,
    sign_message,
)
from tests.aggregator.helpers import (
    ADMIN,
    OpenRound,
    WirePeer,
    assignment_of,
    delivery,
    draft,
    post,
    propose,
    report_for,
    roster_document,
    sealed_delivery,
    slots,
    status,
    wait_phase,
)
from tests.databases import sqlite_only


class Round(OpenRound):
    def tokens_url(self) -> str:
        return f"{self.url}/problems/{self.problem.id}/tokens"

    def report_peer(self, i: int = 0) -> WirePeer:
        peer = self.peers[i]
        peer.assignment = assignment_of(self.url, self.problem.id, peer)
        return peer

    def settle(self) -> None:
        """End the report round now (admin ``train``): staged reports move to ``reports``."""
        assert post(f"{self.url}/problems/{self.problem.id}/train", b"", ADMIN).status_code == 200
        wait_phase(self.url, self.problem.id, ("training", "done", "degraded", "failed"))


def _open_round(aggregator, n: int = 6, kh: int = 2, pool_fraction: float = 0.0) -> Round:
    d = draft(
        kh=kh,
        kp=1,
        min_peers=4,
        pool_fraction=pool_fraction,
        n_numeric=2,
        send_window=20.0,
        release_window=1.0,
    )
    return Round.open(aggregator, d, n, "reporting" if pool_fraction == 0 else "medians")


@pytest.fixture
def round_(aggregator) -> Round:
    return _open_round(aggregator)


def test_one_evaluation_per_peer_and_slot(round_):
    peer = round_.report_peer()
    tokens = peer.tokens(round_.url, round_.problem, round_.roster, slots(round_.problem))
    assert [t.slot for t in tokens] == slots(round_.problem)
    batch, _ = peer.token_batch(round_.problem, round_.roster, slots(round_.problem)[:1])
    second = post(round_.tokens_url(), batch)
    assert second.status_code == 409 and "already issued" in second.json()["detail"]
    # The refused batch recorded nothing new: one row per slot of the first batch.
    assert round_.rows("SELECT COUNT(*) FROM token_issuance") == [(2,)]


def test_a_failed_batch_issues_nothing(round_):
    peer = round_.report_peer()
    peer.tokens(round_.url, round_.problem, round_.roster, slots(round_.problem)[1:])
    batch, _ = peer.token_batch(round_.problem, round_.roster, slots(round_.problem))  # slot 0 new, 1 not
    assert post(round_.tokens_url(), batch).status_code == 409
    # All or nothing: slot 0 was not recorded, so it can still be asked for.
    assert len(peer.tokens(round_.url, round_.problem, round_.roster, slots(round_.problem)[:1])) == 1


def test_token_requests_from_strangers_forgers_and_for_other_slots_are_refused(round_):
    stranger = WirePeer()
    batch, _ = stranger.token_batch(round_.problem, round_.roster, slots(round_.problem))
    r = post(round_.tokens_url(), batch)
    assert r.status_code == 403 and "not on the roster" in r.json()["detail"]

    member = round_.peers[1]
    forged, _ = member.token_batch(
        round_.problem, round_.roster, slots(round_.problem), signer=Identity.generate()
    )
    r = post(round_.tokens_url(), forged)
    assert r.status_code == 403 and "signature" in r.json()["detail"]

    foreign, _ = member.token_batch(round_.problem, round_.roster, [report_slot("p-other", 0, 0)])
    r = post(round_.tokens_url(), foreign)
    assert r.status_code == 422 and "not a report slot" in r.json()["detail"]

    beyond, _ = member.token_batch(round_.problem, round_.roster, [report_slot(round_.problem.id, 0, 2)])
    assert post(round_.tokens_url(), beyond).status_code == 422

    assert round_.rows("SELECT COUNT(*) FROM token_issuance") == [(0,)]
    rejects = requests.get(f"{round_.url}/problems/{round_.problem.id}/status").json()["rejects"]
    assert rejects == {"not a member": 1, "bad signature": 1, "unknown slot": 2}


def test_bad_blinded_element_is_refused_without_recording(round_):
    peer = round_.report_peer()
    key = TokenKey.generate().public_key
    good = request_tokens(key, slots(round_.problem)[0])
    batch = sign_message(
        TokenBatchRequest(
            problem_id=round_.problem.id,
            identity=peer.public,
            requests=(TokenSlotRequest(slot=good.slots[0], blinded=bytes(32)),),
            signature=bytes(64),
        ),
        peer.identity,
    )
    r = post(round_.tokens_url(), batch)
    assert r.status_code == 422 and "blinded element" in r.json()["detail"]
    assert round_.rows("SELECT COUNT(*) FROM token_issuance") == [(0,)]


def test_intake_stores_a_report_once_and_refuses_replays_and_forgeries(round_):
    rng = np.random.default_rng(3)
    peer = round_.report_peer()
    token0, token1 = peer.tokens(round_.url, round_.problem, round_.roster, slots(round_.problem))
    report = report_for(round_.problem, round_.bins, peer.assignment, np.array([3.0, 7.0, 1.0]), 1, rng=rng)
    good = delivery(token0, report)
    intake = f"{round_.url}/intake"
    assert post(intake, good).status_code == 201

    # A verified copy (the same delivery again, as a report's second route brings it): not stored
    # twice, counted as a duplicate, and answered as a stored report is — the last hop cannot tell.
    replay = post(intake, good)
    assert replay.status_code == 201 and replay.json() == {"accepted": True}
    assert round_.rows("SELECT COUNT(*) FROM report_staging") == [(1,)]
    st = status(round_.url, round_.problem.id)
    assert st.reports is not None and st.reports.duplicates == 1  # in the account: a copy, not a refusal
    assert "duplicate token" not in st.rejects

    # The same token with another report: the MAC binds the report.
    other = report_for(round_.problem, round_.bins, peer.assignment, np.array([9.0, 9.0, 0.0]), 0, rng=rng)
    altered = sealed_delivery(round_.problem, token0.redeem(report.to_bytes()), other.to_bytes())
    assert post(intake, altered).status_code == 403

    # A token for slot 1 presented as slot 0's (same nonce and MAC, other slot).
    r1 = token1.redeem(other.to_bytes())
    moved = Redemption(slots(round_.problem)[0], r1.nonce, r1.mac)
    assert post(intake, sealed_delivery(round_.problem, moved, other.to_bytes())).status_code == 403

    # A token of another problem's key (a foreign token) for a slot of this problem.
    foreign_key = TokenKey.generate()
    req = request_tokens(foreign_key.public_key, slots(round_.problem)[1])
    from anonml.crypto import MemoryIssuanceLedger, TokenIssuer, finalize_tokens

    forged_token = finalize_tokens(
        req, TokenIssuer(foreign_key, MemoryIssuanceLedger()).issue(b"x", req.slots[0], req.message())
    )[0]
    assert post(intake, delivery(forged_token, other)).status_code == 403

    # A token for a slot of another problem.
    elsewhere = Redemption(report_slot("p-elsewhere", 0, 0), r1.nonce, r1.mac)
    r = post(intake, sealed_delivery(round_.problem, elsewhere, other.to_bytes()))
    assert r.status_code == 403 and "another problem" in r.json()["detail"]

    # While the round is open each accepted report is staged with the token it spent.
    assert round_.rows("SELECT COUNT(*) FROM report_staging") == [(1,)]
    # Slot 1's token is for subset 1's report only...
    wrong_subset = post(intake, delivery(token1, other))
    assert wrong_subset.status_code == 403 and "another subset" in wrong_subset.json()["detail"]
    # ...and was never spent by the refused attempts: it still works once.
    other1 = other.model_copy(update={"subset": 1})
    assert post(intake, delivery(token1, other1)).status_code == 201
    assert round_.rows("SELECT COUNT(*) FROM report_staging") == [(2,)]
    round_.settle()
    assert round_.rows("SELECT COUNT(*) FROM reports") == [(2,)]
    assert round_.rows("SELECT COUNT(*) FROM spent_tokens") == [(2,)]
    assert round_.rows("SELECT COUNT(*) FROM report_staging") == [(0,)]


def test_malformed_deliveries_are_refused_before_spending(round_):
    rng = np.random.default_rng(4)
    peer = round_.report_peer()
    token = peer.tokens(round_.url, round_.problem, round_.roster, slots(round_.problem))[0]
    intake = f"{round_.url}/intake"
    v1 = post(intake, b'{"redemption": "!!", "report": ""}')
    assert v1.status_code == 422 and "AnonSphinx-v1" in v1.text  # the old clear form, refused by name
    assert post(intake, b"not json").status_code in (400, 422)
    not_json = sealed_delivery(round_.problem, token.redeem(b"{}"), b"{}")
    assert post(intake, not_json).status_code == 422
    honest = report_for(round_.problem, round_.bins, peer.assignment, np.array([1.0, 2.0, 1.0]), 0, rng=rng)
    bad_partition = honest.model_copy(update={"partition": 5})
    r = post(intake, delivery(token, bad_partition))
    assert r.status_code == 422 and "partition" in r.json()["detail"]
    wrong_eps = PrivateReport.model_validate(
        {
            **honest.model_dump(mode="json"),
            "mechanism": {"kind": "oue", "m": 4, "p": 0.5, "q": 1 / (np.exp(0.5) + 1), "epsilon": 0.5},
        }
    )
    r = post(intake, delivery(token, wrong_eps))
    assert r.status_code == 422 and "ε" in r.json()["detail"]
    # Nothing was spent by malformed reports: the token still redeems the honest one.
    assert round_.rows("SELECT COUNT(*) FROM report_staging") == [(0,)]
    assert post(intake, delivery(token, honest)).status_code == 201


@sqlite_only  # PRAGMA table_info and rowid are SQLite's
def test_the_reports_table_holds_nothing_that_links_to_a_peer(round_):
    rng = np.random.default_rng(5)
    for i in range(3):
        peer = round_.report_peer(i)
        for k, token in enumerate(
            peer.tokens(round_.url, round_.problem, round_.roster, slots(round_.problem))
        ):
            report = report_for(
                round_.problem,
                round_.bins,
                peer.assignment,
                np.r_[rng.uniform(0, 10, 2), 1.0],
                i % 2,
                subset=k,
                rng=rng,
            )
            assert post(f"{round_.url}/intake", delivery(token, report)).status_code == 201
    round_.settle()
    columns = [row[1] for row in round_.rows("PRAGMA table_info(reports)")]
    assert columns == ["id", "problem_id", "partition", "subset", "mechanism_json", "bits"]
    rows = round_.rows("SELECT id, problem_id FROM reports")
    assert (
        len(rows) == 6 and {len(r[0]) for r in rows} == {16} and {r[1] for r in rows} == {round_.problem.id}
    )
    with pytest.raises(OperationalError):  # WITHOUT ROWID: no hidden insertion order
        round_.rows("SELECT rowid FROM reports")
    # Nothing else stored with a report mentions who sent it.
    identities = {p.public for p in round_.peers}
    for (blob,) in round_.rows("SELECT bits FROM reports"):
        assert all(ident not in blob for ident in identities)


def test_tokens_open_with_the_roster_but_not_for_the_median_pool(aggregator):
    problem = propose(aggregator.url, draft(kh=1, kp=1, min_peers=4, pool_fraction=0.5))
    early_bird = WirePeer()
    early_bird.register(aggregator.url, problem)
    fake_roster = roster_document(
        problem.id, (), round_id=problem.round_id, token_key=bytes(TokenKey.generate().public_key)
    )
    batch, _ = early_bird.token_batch(problem, fake_roster, slots(problem))
    early = post(f"{aggregator.url}/problems/{problem.id}/tokens", batch)
    assert early.status_code == 409 and "roster's publication" in early.json()["detail"]

    r = _open_round(aggregator, n=8, kh=1, pool_fraction=0.5)
    roles = {p.public: assignment_of(r.url, r.problem.id, p).role for p in r.peers}
    median_peer = next(p for p in r.peers if roles[p.public] == "median")
    report_peer = next(p for p in r.peers if roles[p.public] == "report")
    # During the median rounds a report peer already gets its token...
    assert len(report_peer.tokens(r.url, r.problem, r.roster, slots(r.problem))) == 1
    # ...and a median-pool peer never does.
    batch, _ = median_peer.token_batch(r.problem, r.roster, slots(r.problem))
    refused = post(r.tokens_url(), batch)
    assert refused.status_code == 403 and "median-pool" in refused.json()["detail"]
