"""Attacks on the intake (5: wrong-partition tokens, out-of-support reports) and on stored order (10).

A real aggregator under uvicorn with its own database (``database_url``); the attacker is a
roster member speaking the wire protocol directly (tests/aggregator/helpers).
Each attack must be refused with its own counted reason and store nothing.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import requests
from sqlalchemy import event
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from aggregator.db import ReportRow, StagedReportRow, create_tables, settle_reports
from anonml.crypto import Identity, PublicIdentity, onion, seal_payload
from anonml.crypto.spent import SpentTokenRow
from anonml.database import make_engine
from anonml.privacy import RandomizedResponse, SubsetSelection, check_support
from anonml.protocol import (
    SEALED_PAYLOAD_SIZE,
    IntakeDelivery,
    PrivateReport,
    ReportReceipts,
    pack_bits,
    report_slot,
)
from tests.aggregator import helpers
from tests.aggregator.conftest import aggregator  # noqa: F401 - a fixture, registered by import
from tests.aggregator.helpers import (
    ADMIN,
    REPORT_COLUMNS,
    delivery,
    draft,
    post,
    report_for,
    sealed_delivery,
    status,
    wait_phase,
)
from tests.databases import sqlite_only


class OpenRound(helpers.OpenRound):
    def stored(self) -> int:
        return (
            self.rows("SELECT COUNT(*) FROM report_staging")[0][0]
            + self.rows("SELECT COUNT(*) FROM reports")[0][0]
        )

    def rejects(self) -> dict[str, int]:
        return status(self.url, self.problem.id).rejects

    def duplicates(self) -> int:
        """Verified copies of stored reports: counted in the account, never among the refusals."""
        st = status(self.url, self.problem.id)
        assert "duplicate token" not in st.rejects
        return 0 if st.reports is None else st.reports.duplicates


def _open(aggregator, *, n: int, kp: int, kh: int = 1) -> OpenRound:  # noqa: F811 - the fixture's value
    return OpenRound.open(aggregator, draft(kp=kp, kh=kh, min_peers=4, n_numeric=2, send_window=30.0), n)


def test_a_partition_0_token_on_a_partition_1_report_is_refused_and_nothing_is_stored(aggregator):  # noqa: F811
    r = _open(aggregator, n=8, kp=2)
    pid = r.problem.id
    attacker = next(p for p in r.peers if p.assignment.index == 0)
    victim_partition = next(p for p in r.peers if p.assignment.index == 1)
    # Issuance: only the slots of the member's own partition.
    batch, _ = attacker.token_batch(r.problem, r.roster, [report_slot(pid, 1, 0)])
    refused = post(f"{r.url}/problems/{pid}/tokens", batch)
    assert refused.status_code == 422 and "another partition" in refused.json()["detail"]
    assert r.rejects().get("wrong partition") == 1
    (token,) = attacker.tokens(r.url, r.problem, r.roster, [report_slot(pid, 0, 0)])
    # The intake: a partition-0 token on a report that claims partition 1.
    rng = np.random.default_rng(11)
    foreign = report_for(
        r.problem, r.bins, victim_partition.assignment, np.array([2.0, 8.0, 1.0]), 1, rng=rng
    )
    assert foreign.partition == 1
    answer = post(f"{r.url}/intake", delivery(token, foreign))
    assert answer.status_code == 403 and "another partition" in answer.json()["detail"]
    assert r.rejects().get("wrong partition") == 2
    assert r.stored() == 0 and r.rows("SELECT COUNT(*) FROM spent_tokens") == [(0,)]
    # The token was not burnt: it still carries the attacker's own partition-0 report, once.
    own = report_for(r.problem, r.bins, attacker.assignment, np.array([2.0, 8.0, 1.0]), 1, rng=rng)
    assert post(f"{r.url}/intake", delivery(token, own)).status_code == 201
    assert r.stored() == 1


def test_reports_outside_the_mechanisms_support_are_refused_before_spending(aggregator):  # noqa: F811
    r = _open(aggregator, n=6, kp=1)
    pid = r.problem.id
    peer = r.peers[0]
    (token,) = peer.tokens(r.url, r.problem, r.roster, [report_slot(pid, 0, 0)])
    m = 4  # (2 bins of one numeric feature) × label
    epsilon = r.problem.draft.report_epsilon
    krr = RandomizedResponse.from_epsilon(epsilon, m)
    # k-RR debiases each bit as (b − q)/(p − q): a crafted vector of ones adds (1 − q)/(p − q) to
    # EVERY cell (1.47 each here, 5.9 in all) where an honest report adds 1 in total on average.
    crafted = PrivateReport(
        problem_id=pid,
        partition=0,
        subset=0,
        mechanism=krr.descriptor(),
        bits=pack_bits(np.ones(m, dtype=bool)),
    )
    answer = post(f"{r.url}/intake", delivery(token, crafted))
    assert answer.status_code == 422 and "exactly one 1, got 4" in answer.json()["detail"]
    two = crafted.model_copy(update={"bits": pack_bits(np.array([1, 0, 1, 0], dtype=bool))})
    assert post(f"{r.url}/intake", delivery(token, two)).status_code == 422
    # Subset selection with ω = 2: a vector of weight 3 (or 1) is no output of it either.
    subset = SubsetSelection(epsilon=epsilon, m=m, omega=2).descriptor()
    for weight in ([1, 1, 1, 0], [0, 0, 1, 0], [0, 0, 0, 0]):
        wrong = PrivateReport(
            problem_id=pid,
            partition=0,
            subset=0,
            mechanism=subset,
            bits=pack_bits(np.array(weight, dtype=bool)),
        )
        bad = post(f"{r.url}/intake", delivery(token, wrong))
        assert bad.status_code == 422 and "omega=2" in bad.json()["detail"]
    assert r.rejects().get("out of support") == 5
    assert r.stored() == 0
    # An output of the mechanism is taken, with the same (unspent) token.
    fine = PrivateReport(
        problem_id=pid,
        partition=0,
        subset=0,
        mechanism=subset,
        bits=pack_bits(np.array([0, 1, 1, 0], dtype=bool)),
    )
    assert post(f"{r.url}/intake", delivery(token, fine)).status_code == 201
    assert r.stored() == 1


@pytest.mark.parametrize("kind", ["pq", "rappor", "oue", "krr", "subset"])
def test_every_honest_output_is_in_the_support(kind):
    from anonml.privacy import MECHANISMS, SubsetSelection

    m, rng = 6, np.random.default_rng(5)
    mechanism = (
        SubsetSelection.from_epsilon(1.0, m) if kind == "subset" else MECHANISMS[kind].from_epsilon(1.0, m)
    )
    for bits in mechanism.perturb(rng.integers(m, size=300), rng):
        check_support(mechanism.descriptor(), bits)
    with pytest.raises(ValueError, match="bits"):
        check_support(mechanism.descriptor(), np.zeros(m + 1, dtype=bool))


@sqlite_only  # PRAGMA table_info, rowid and the physical order are SQLite's
def test_the_stored_reports_and_spent_tokens_keep_no_arrival_order(aggregator):  # noqa: F811
    r = _open(aggregator, n=12, kp=1)
    pid = r.problem.id
    rng = np.random.default_rng(21)
    nonces = []
    for peer in r.peers:  # arrival order = this loop's order
        (token,) = peer.tokens(r.url, r.problem, r.roster, [report_slot(pid, 0, 0)])
        report = report_for(r.problem, r.bins, peer.assignment, np.r_[rng.uniform(0, 10, 2), 1.0], 1, rng=rng)
        assert post(f"{r.url}/intake", delivery(token, report)).status_code == 201
        nonces.append(token.nonce)
    assert status(r.url, pid).reports_accepted == 12  # counted while staged
    assert r.rows("SELECT COUNT(*) FROM reports") == [(0,)]
    assert requests.get(f"{r.url}/problems/{pid}/receipts", timeout=30).status_code == 409  # round open
    assert post(f"{r.url}/problems/{pid}/train", b"", ADMIN).status_code == 200
    wait_phase(r.url, pid, ("training", "done", "degraded", "failed"))
    assert r.rows("SELECT COUNT(*) FROM report_staging") == [(0,)]
    # No time, no counter: the columns are the token or the report, nothing else.
    assert [c[1] for c in r.rows("PRAGMA table_info(spent_tokens)")] == ["key_id", "slot", "nonce"]
    assert [c[1] for c in r.rows("PRAGMA table_info(reports)")] == REPORT_COLUMNS
    for table in ("reports", "spent_tokens", "report_staging"):
        with pytest.raises(OperationalError):  # WITHOUT ROWID: no hidden insertion counter
            r.rows(f"SELECT rowid FROM {table}")
    # The physical order is the order of random keys (report ids drawn at settling; token nonces).
    ids = [row[0] for row in r.rows("SELECT id FROM reports")]
    assert ids == sorted(ids) and len(set(ids)) == 12
    stored = [row[0] for row in r.rows("SELECT nonce FROM spent_tokens")]
    assert stored == sorted(nonces) and sorted(stored) == sorted(nonces)
    # Receipts: every sender finds its own nonce's digest; the list is sorted, not in arrival order.
    answer = requests.get(f"{r.url}/problems/{pid}/receipts", timeout=30)
    receipts = ReportReceipts.model_validate_json(answer.content)
    assert list(receipts.digests) == sorted(ReportReceipts.digest(n) for n in nonces)


def test_settling_inserts_in_an_order_drawn_independently_of_arrival(tmp_path: Path):
    """The worst case: staging ids ordered like arrival. Settling must insert in the shuffled order."""
    engine = make_engine(f"sqlite:///{tmp_path / 'a.db'}")
    create_tables(engine)
    n = 20
    with Session(engine) as s, s.begin():
        for i in range(n):  # arrival i: staging key i, subset i marks it
            s.add(
                StagedReportRow(
                    id=i.to_bytes(16, "big"),
                    problem_id="p-x",
                    key_id=bytes(32),
                    slot=b"p-x/p0/r0",
                    nonce=i.to_bytes(32, "big"),
                    partition=0,
                    subset=i,
                    mechanism_json="{}",
                    bits=b"\x80",
                )
            )
    inserted: list[int] = []

    @event.listens_for(engine, "before_cursor_execute")
    def _capture(conn, cursor, statement, parameters, context, executemany):  # noqa: ANN001
        if statement.startswith("INSERT INTO reports"):
            inserted.extend(p[3] for p in parameters)  # (id, problem_id, partition, subset, ...)

    with Session(engine) as s, s.begin():
        assert settle_reports(s, "p-x", rng=random.Random(7)) == n
    expected = list(range(n))
    random.Random(7).shuffle(expected)
    assert inserted == expected and inserted != list(range(n))
    with Session(engine) as s:
        assert s.query(ReportRow).count() == n and s.query(SpentTokenRow).count() == n
        assert s.query(StagedReportRow).count() == 0


def test_a_slot_names_problem_partition_and_index_and_fits_the_token_limit():
    from anonml.crypto.tokens import SLOT_MAX_SIZE

    assert report_slot("p-0123", 3, 1) == b"p-0123/p3/r1"
    longest = "p" * 64  # the longest id a Problem allows
    slots = {report_slot(longest, p, k) for p in range(1000) for k in range(64)}
    assert len(slots) == 64_000 and max(map(len, slots)) <= SLOT_MAX_SIZE
    assert report_slot(longest, 0, 0) != report_slot("q" * 64, 0, 0)
    with pytest.raises(ValueError, match="out of range"):
        report_slot("p-0123", -1, 0)


# --- sealed payloads (issue 24, item 4): what a relay or an outsider can post to the intake -------------


def test_the_intake_refuses_every_malformed_or_foreign_sealed_payload_with_a_counted_4xx(aggregator):  # noqa: F811
    """Old v1 bodies, wrong versions and sizes, payloads altered on the way, sealed to another key, of
    another payload version or another round: each a 4xx naming what is wrong, never a 500, counted
    under the round's problem where the round names one, and nothing stored or spent. Cover for a
    round no problem has is a 404; the honest report still goes through afterwards."""
    r = _open(aggregator, n=4, kp=1)
    pid, rid = r.problem.id, r.problem.round_id
    peer = r.peers[0]
    (token,) = peer.tokens(r.url, r.problem, r.roster, [report_slot(pid, peer.assignment.index, 0)])
    report = report_for(r.problem, r.bins, peer.assignment, np.array([2.0, 8.0, 1.0]), 1)
    data = report.to_bytes()
    good = delivery(token, report)
    intake = f"{r.url}/intake"
    wire = good.model_dump(mode="json")

    # Shapes pydantic refuses (422), each naming the field.
    v1 = post(intake, json.dumps({"redemption": wire["sealed"][:40], "report": "e30="}))
    assert v1.status_code == 422 and "AnonSphinx-v1" in v1.text
    for field, value, says in (
        ("version", 1, "version"),
        ("round_id", -1, "round_id"),
        ("round_id", 2**64, "round_id"),
        ("sealed", wire["sealed"][:-8], "1075 bytes"),
        ("sealed", "!!not base64!!", "sealed"),
    ):
        bad = post(intake, json.dumps({**wire, field: value}))
        assert bad.status_code == 422 and says in bad.text, (field, value, bad.text)

    # Well-formed deliveries whose sealed payload the aggregator refuses (400), counted.
    altered = bytearray(good.sealed)
    altered[-1] ^= 1
    stranger = Identity.generate().public.relay_key
    v1_inside = bytearray(onion._encode_payload(rid, token.redeem(data), data))
    v1_inside[0] = 1
    refused = {
        "altered": good.model_copy(update={"sealed": bytes(altered)}),
        "sealed to another key": IntakeDelivery(
            version=2, round_id=rid, sealed=seal_payload(stranger, rid, token.redeem(data), data)
        ),
        "payload version 1": IntakeDelivery(
            version=2, round_id=rid, sealed=onion._seal(bytes(v1_inside), _intake_key(r), None)
        ),
        "round relabelled": sealed_delivery(r.problem, token.redeem(data), data).model_copy(
            update={"round_id": rid ^ 1}
        ),
        "another round inside": sealed_delivery(r.problem, token.redeem(data), data, round_id=rid ^ 1),
    }
    for name, item in refused.items():
        answer = post(intake, item)
        assert 400 <= answer.status_code < 500, (name, answer.status_code, answer.text)
    rng = np.random.default_rng(8)
    for _ in range(20):  # random bytes of the right size, under the right round
        noise = IntakeDelivery(version=2, round_id=rid, sealed=rng.bytes(SEALED_PAYLOAD_SIZE))
        assert post(intake, noise).status_code == 400
    orphan = sealed_delivery(r.problem, None, None, round_id=rid ^ 1)  # cover of no problem's round
    assert post(intake, orphan).status_code == 404
    assert r.stored() == 0 and r.rows("SELECT COUNT(*) FROM spent_tokens") == [(0,)]
    # Counted under this problem when the delivery's round is its round, or the report inside names it
    # ("wrong round"); the relabelled one names no problem's round and is counted under none.
    assert r.rejects() == {"unsealable": 2 + 20, "unsupported version": 1, "wrong round": 1}
    assert post(intake, good).status_code == 201 and r.stored() == 1


def _intake_key(r: OpenRound) -> bytes:
    return PublicIdentity.from_bytes(bytes(r.problem.aggregator)).relay_key
