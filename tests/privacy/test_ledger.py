"""Budget ledger: totals, eq. 7.4 breakdown, caps, persistence, atomicity."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from datetime import UTC

import numpy as np
import pytest
from sqlalchemy import create_engine, inspect

from anonml.errors import BudgetExceeded
from anonml.privacy import (
    OUE,
    PER_ATTRIBUTE_LABEL,
    BinaryRandomizedResponse,
    PrivacyLedger,
    ReleaseSpec,
)
from anonml.privacy.budget import problem_budget
from anonml.privacy.ledger import releases_within_cap


@pytest.fixture
def ledger(database_url):
    with PrivacyLedger(database_url) as book:
        yield book


def _spend(
    book: PrivacyLedger,
    problem: str,
    epsilon: float,
    peer: str = "alice",
    *,
    round_: int = 0,
    attributes: Sequence[str] = ("a",),
    mechanism: str = "oue",
    pool: str | None = None,
) -> None:
    """Record one release of ``epsilon`` by name (an OUE report on attribute ``a`` in round 0 unless told)."""
    book.record(
        peer=peer,
        problem=problem,
        round=round_,
        attributes=attributes,
        mechanism=mechanism,
        epsilon=epsilon,
        pool=pool,
    )


def _thesis_problem(book: PrivacyLedger, peer: str = "alice") -> None:
    # Medians of a, b, c at 0.1 each; two histogram reports at 0.5 over
    # (a, label) and (b, c, label).
    for round_, attr in enumerate(["a", "b", "c"]):
        book.record(
            peer=peer,
            problem="p1",
            round=round_,
            attributes=[attr],
            mechanism=BinaryRandomizedResponse(0.1),
            pool="median",
        )
    _spend(book, "p1", 0.5, peer, round_=3, attributes=["a", "label"], pool="reports")
    _spend(
        book, "p1", 0.5, peer, round_=3, attributes=["b", "c", "label"], mechanism="subset", pool="reports"
    )


def test_headline_is_sequential_and_breakdown_is_eq_7_4(ledger):
    _thesis_problem(ledger)
    report = ledger.budget("alice", "p1")
    assert report.total == pytest.approx(1.3)  # 3 x 0.1 + 2 x 0.5
    assert report.n_releases == 5
    assert dict(report.per_attribute) == pytest.approx({"a": 0.6, "b": 0.6, "c": 0.6, "label": 1.0})
    # eq. 7.4: max(max_i eps_h(i) + eps_e^i, sum_j eps_h^j) = max(0.6, 1.0)
    assert report.per_attribute_total == pytest.approx(1.0)
    assert report.per_attribute_label == PER_ATTRIBUTE_LABEL
    assert "independent" in report.per_attribute_label
    assert report.cap is None and report.remaining is None
    # Other peers and problems are separate accounts.
    assert ledger.budget("bob", "p1").total == 0.0
    assert ledger.budget("alice", "p2").total == 0.0


def test_releases_are_recorded_with_every_field(ledger):
    release = ledger.record(
        peer="alice",
        problem="p1",
        round=2,
        attributes=["x", "y", "x"],
        mechanism=OUE.from_epsilon(0.7, 8),
        pool="reports",
    )
    assert release.epsilon == pytest.approx(0.7) and release.mechanism == "oue"
    assert release.attributes == ("x", "y")  # repeated names counted once
    assert release.recorded_at.tzinfo is UTC or release.recorded_at.utcoffset().total_seconds() == 0
    (stored,) = ledger.releases(peer="alice")
    assert stored == release


def test_refuses_a_release_past_the_cap_and_records_nothing(ledger):
    ledger.set_cap("p1", 1.0)
    for round_ in range(10):  # ten releases of 0.1 fit a cap of 1.0 exactly
        _spend(ledger, "p1", 0.1, round_=round_, attributes=["age"], mechanism="binary_rr")
    with pytest.raises(BudgetExceeded, match=r"'alice'.*'p1'.*past the cap 1"):
        _spend(ledger, "p1", 0.1, round_=10, attributes=["age"], mechanism="binary_rr")
    assert len(ledger.releases(peer="alice")) == 10
    report = ledger.budget("alice", "p1")
    assert report.cap == 1.0 and report.remaining == pytest.approx(0.0, abs=1e-12)
    # Another peer has its own allowance under the problem-wide cap.
    ledger.record(peer="bob", problem="p1", round=0, attributes=["age"], mechanism="binary_rr", epsilon=0.9)


def test_cap_precedence_peer_then_problem_then_default(database_url):
    with PrivacyLedger(database_url, default_cap=2.0) as book:
        assert book.cap("alice", "p1") == 2.0
        book.set_cap("p1", 1.0)
        assert book.cap("alice", "p1") == 1.0
        book.set_cap("p1", 0.5, peer="alice")
        assert book.cap("alice", "p1") == 0.5 and book.cap("bob", "p1") == 1.0
        book.set_cap("p1", None, peer="alice")
        assert book.cap("alice", "p1") == 1.0
        with pytest.raises(ValueError):
            book.set_cap("p1", -1.0)


def test_batch_is_all_or_nothing(ledger):
    ledger.set_cap("p1", 1.0)
    specs = [
        ReleaseSpec("alice", "p1", 0, ("a", "label"), "oue", 0.4),
        ReleaseSpec("alice", "p1", 0, ("b", "label"), "oue", 0.4),
        ReleaseSpec("alice", "p1", 0, ("c", "label"), "oue", 0.4),
    ]
    with pytest.raises(BudgetExceeded):
        ledger.record_many(specs)
    assert ledger.releases() == []
    assert len(ledger.record_many(specs[:2])) == 2


def test_survives_a_restart(database_url):
    url = database_url
    with PrivacyLedger(url) as book:
        _thesis_problem(book)
        book.set_cap("p1", 1.5)
        before = book.releases()
    with PrivacyLedger(url) as book:
        assert book.releases() == before
        assert book.budget("alice", "p1").total == pytest.approx(1.3)
        assert book.cap("alice", "p1") == 1.5
        with pytest.raises(BudgetExceeded):
            book.record(peer="alice", problem="p1", round=9, attributes=["a"], mechanism="oue", epsilon=0.3)
    engine = create_engine(url)
    tables = set(inspect(engine).get_table_names())
    engine.dispose()
    assert {"privacy_releases", "privacy_release_attributes", "privacy_caps"} <= tables


def test_default_location_is_ledger_db_in_anonml_home(tmp_path, monkeypatch):
    monkeypatch.setenv("ANONML_HOME", str(tmp_path))
    with PrivacyLedger() as book:
        book.record(peer="a", problem="p", round=0, attributes=["x"], mechanism="oue", epsilon=1.0)
        assert book.url == f"sqlite:///{tmp_path / 'ledger.db'}"
    assert (tmp_path / "ledger.db").exists()


def test_problem_budget_composes_pools_in_parallel(ledger):
    # Median pool and report pool are disjoint: the problem's guarantee is the
    # largest peer total, not the sum over pools.
    for peer in ("m1", "m2"):
        _spend(ledger, "p1", 0.5, peer, attributes=["age"], mechanism="binary_rr", pool="median")
    for peer in ("r1", "r2", "r3"):
        _spend(ledger, "p1", 1.0, peer, round_=1, attributes=["age", "label"], pool="reports")
    summary = ledger.problem_budget("p1")
    assert summary.headline == pytest.approx(1.0)
    assert {p.pool: (p.peers, p.epsilon) for p in summary.pools} == {"median": (2, 0.5), "reports": (3, 1.0)}
    assert summary.shared_peers == 0
    # A peer in both pools composes sequentially.
    _spend(ledger, "p1", 1.0, "m1", round_=1, attributes=["age", "label"], pool="reports")
    summary = ledger.problem_budget("p1")
    assert summary.headline == pytest.approx(1.5) and summary.shared_peers == 1
    assert summary.per_peer["m1"] == pytest.approx(1.5)


def _race(url: str, problem_of: Callable[[int], str]) -> list[str]:
    """Eight ledgers on ``url`` each try, at once, to spend 0.3 for alice in ``problem_of(i)``."""
    outcomes: list[str] = []
    barrier = threading.Barrier(8)

    def spend(i: int) -> None:
        with PrivacyLedger(url) as book:
            barrier.wait()
            try:
                _spend(book, problem_of(i), 0.3)
                outcomes.append("ok")
            except BudgetExceeded:
                outcomes.append("refused")

    threads = [threading.Thread(target=spend, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(outcomes)


def test_concurrent_writers_cannot_overspend(database_url):
    # Eight ledgers on one database race to spend 0.3 each under a cap of 1.0:
    # exactly three may succeed (BEGIN IMMEDIATE makes check+insert atomic on
    # SQLite; SERIALIZABLE with retries on PostgreSQL).
    url = database_url
    with PrivacyLedger(url) as setup:
        setup.set_cap("p1", 1.0)
    assert _race(url, lambda i: "p1") == ["ok"] * 3 + ["refused"] * 5
    with PrivacyLedger(url) as book:
        assert book.budget("alice", "p1").total == pytest.approx(0.9)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"attributes": []}, ValueError),
        ({"attributes": [""]}, ValueError),
        ({"peer": ""}, ValueError),
        ({"round": -1}, ValueError),
        ({"epsilon": 0.0}, ValueError),
        ({"epsilon": None}, ValueError),  # a name needs an epsilon
        ({"mechanism": OUE.from_epsilon(1.0, 4), "epsilon": 2.0}, ValueError),
        ({"mechanism": 3}, TypeError),
    ],
)
def test_bad_releases_are_refused(ledger, kwargs, error):
    base = {
        "peer": "alice",
        "problem": "p1",
        "round": 0,
        "attributes": ["a"],
        "mechanism": "oue",
        "epsilon": 1.0,
    }
    with pytest.raises(error):
        ledger.record(**{**base, **kwargs})
    assert ledger.releases() == []


def test_lifetime_cap_holds_across_problems_and_restarts(database_url):
    url = database_url
    with PrivacyLedger(url) as book:
        book.set_lifetime_cap("alice", 1.5)
        _spend(book, "p1", 1.0)
    with PrivacyLedger(url) as book:  # another process opening the same file, no policy in hand
        assert book.lifetime_cap("alice") == 1.5
        with pytest.raises(BudgetExceeded, match="lifetime total to 2, past its lifetime cap 1.5"):
            _spend(book, "p2", 1.0)  # its own problem has no cap at all
        _spend(book, "p2", 0.5)  # exactly up to the cap
        with pytest.raises(BudgetExceeded):
            _spend(book, "p3", 1e-6)
        _spend(book, "p3", 0.5, peer="bob")  # another peer's total is its own
        assert book.lifetime_total("alice") == pytest.approx(1.5)
        assert [r.problem for r in book.releases(peer="alice")] == ["p1", "p2"]
        book.set_lifetime_cap("alice", None)
        _spend(book, "p3", 1.0)
        assert book.lifetime_total("alice") == pytest.approx(2.5)


def test_lifetime_cap_is_atomic_across_concurrent_writers(database_url):
    # Eight ledgers on one database spend 0.3 each in eight different problems under a lifetime
    # cap of 1.0: exactly three may succeed, whatever the interleaving.
    url = database_url
    with PrivacyLedger(url) as setup:
        setup.set_lifetime_cap("alice", 1.0)
    assert _race(url, lambda i: f"p{i}") == ["ok"] * 3 + ["refused"] * 5
    with PrivacyLedger(url) as book:
        assert book.lifetime_total("alice") == pytest.approx(0.9)


def _specs(rng: np.random.Generator, n: int) -> list[ReleaseSpec]:
    """``n`` releases by 1–6 peers in two problems and three pools, ε from 0.05 to 0.5."""
    return [
        ReleaseSpec(
            peer=f"peer-{rng.integers(6)}",
            problem=f"p{rng.integers(2)}",
            round=int(rng.integers(3)),
            attributes=tuple(f"a{j}" for j in rng.choice(4, size=int(rng.integers(1, 4)), replace=False)),
            mechanism=str(rng.choice(["oue", "krr", "binary_rr"])),
            epsilon=float(rng.choice([0.05, 0.1, 0.25, 0.5])),
            pool=str(rng.choice(["median", "report", "calibration"])),
        )
        for _ in range(n)
    ]


@pytest.mark.parametrize("seed", range(12))
def test_releases_within_cap_is_what_a_new_ledger_records(seed: int) -> None:
    # The simulation's accounting skips the database; it must compose and refuse exactly as a
    # ledger does: the same releases in the same order, the same totals, the same refusal.
    rng = np.random.default_rng(seed)
    specs, cap = _specs(rng, int(rng.integers(1, 12))), float(rng.choice([0.5, 1.0, 2.0]))
    with PrivacyLedger("sqlite://", default_cap=cap) as book:
        try:
            recorded = book.record_many(specs)
        except BudgetExceeded as refused:
            with pytest.raises(BudgetExceeded) as also:
                releases_within_cap(specs, cap)
            assert str(also.value) == str(refused)
            return
    released = releases_within_cap(specs, cap)
    stored = [dataclasses.replace(r, recorded_at=None) for r in recorded]  # the clock differs, nothing else
    assert [dataclasses.replace(r, recorded_at=None) for r in released] == stored
    for problem in ("p0", "p1"):
        mine = [r for r in released if r.problem == problem]
        theirs = [r for r in recorded if r.problem == problem]
        assert problem_budget(mine, problem) == problem_budget(theirs, problem)


def test_releases_within_cap_checks_each_spec_as_the_ledger_does() -> None:
    good = ReleaseSpec("alice", "p1", 0, ("a",), "oue", 0.5)
    with pytest.raises(ValueError, match="attribute"):
        releases_within_cap([good, ReleaseSpec("alice", "p1", 0, (), "oue", 0.5)], 1.0)
    with pytest.raises(ValueError, match="round"):
        releases_within_cap([ReleaseSpec("alice", "p1", -1, ("a",), "oue", 0.5)], 1.0)
    with pytest.raises(BudgetExceeded, match="past the cap 0.75"):
        releases_within_cap([good, good], 0.75)
    assert [r.epsilon for r in releases_within_cap([good, good], 1.0)] == [0.5, 0.5]
