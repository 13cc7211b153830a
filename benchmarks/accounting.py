"""A simulated fit's privacy accounting: composed in memory against a ledger in memory.

Every :meth:`AnonMLClassifier.fit` checks its releases against a cap of ε_T and composes the
headline (:func:`anonml.learn.accounting.account_releases`). It did so by recording them in a
:class:`~anonml.privacy.PrivacyLedger` on an in-memory SQLite database (its schema migrated at each
fit); it now runs the ledger's own checks and composition without a database
(:func:`anonml.privacy.ledger.releases_within_cap`). Both are timed here in the same process on
the releases of a default Adult fit at each ε (one representative per report partition and per
median step, as the accounting records them), and the default fit itself beside them.

Writes ``benchmarks/results/accounting.json``. Run: ``python -m benchmarks.accounting``.
"""

from __future__ import annotations

import os
import statistics
import time
import warnings
from collections.abc import Callable

from anonml.datasets import adult
from anonml.learn import AnonMLClassifier, accounting
from anonml.privacy import PrivacyLedger, ReleaseSpec
from anonml.privacy.budget import problem_budget
from anonml.privacy.ledger import releases_within_cap
from benchmarks.reporting import RESULTS, machine, now, write_json

REPEATS = 7


def _best(call: Callable[[], object], repeats: int = REPEATS) -> tuple[float, float]:
    """(median, best) seconds of ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times), min(times)


def _with_ledger(specs: list[ReleaseSpec], cap: float) -> float:
    """The previous accounting: record in a new in-memory ledger, read the headline back."""
    with PrivacyLedger("sqlite://", default_cap=cap) as ledger:
        ledger.record_many(specs)
        return ledger.problem_budget("simulation").headline


def _in_memory(specs: list[ReleaseSpec], cap: float) -> float:
    return problem_budget(releases_within_cap(specs, cap), "simulation").headline


def _fit_and_releases(model: AnonMLClassifier, data: adult.AdultDataset) -> list[ReleaseSpec]:
    """Fit ``model`` and return the releases its accounting checked (taken at that call)."""
    seen: list[list[ReleaseSpec]] = []

    def recording(specs: list[ReleaseSpec], cap: float) -> list:
        seen.append(list(specs))
        return releases_within_cap(specs, cap)

    accounting.releases_within_cap = recording
    try:
        model.fit(data.X_train, data.y_train)
    finally:
        accounting.releases_within_cap = releases_within_cap
    return seen[-1]


def _row(data: adult.AdultDataset, epsilon: float) -> dict:
    """Both accountings of one default fit's releases at ``epsilon``, and the fit itself."""

    def fit() -> AnonMLClassifier:
        return AnonMLClassifier(epsilon=epsilon, features=list(data.features), random_state=0).fit(
            data.X_train, data.y_train
        )

    model = AnonMLClassifier(epsilon=epsilon, features=list(data.features), random_state=0)
    releases = _fit_and_releases(model, data)
    headline = _in_memory(releases, epsilon)
    assert headline == _with_ledger(releases, epsilon) == model.privacy_.epsilon_total
    ledger_median, ledger_best = _best(lambda: _with_ledger(releases, epsilon))
    memory_median, memory_best = _best(lambda: _in_memory(releases, epsilon))
    fit_median, _ = _best(fit, repeats=3)
    return {
        "epsilon": epsilon,
        "releases_checked": len(releases),
        "ledger_in_memory_sqlite_s": {"median": round(ledger_median, 5), "best": round(ledger_best, 5)},
        "releases_within_cap_s": {"median": round(memory_median, 6), "best": round(memory_best, 6)},
        "speed_up_median": round(ledger_median / memory_median, 1),
        "default_fit_s_median": round(fit_median, 3),
        "old_fit_s_estimate": round(fit_median - memory_median + ledger_median, 3),
    }


def main() -> None:
    warnings.simplefilter("ignore")  # the fits' notices are not what is measured here
    data = adult.load()
    load_start = os.getloadavg()[0]
    rows = []
    for epsilon in (0.5, 1.0, 2.0, 4.0):
        rows.append(_row(data, epsilon))
        print(rows[-1])
    write_json(RESULTS / "accounting.json", {
        "benchmark": "accounting",
        "when": now(),
        "machine": machine(
            load_average_1m_at_start=round(load_start, 2), load_average_1m=round(os.getloadavg()[0], 2)
        ),
        "data": "UCI Adult train split (32,561 rows), default AnonMLClassifier with its public feature specs",
        "repeats": REPEATS,
        "note": "old_fit_s_estimate = this fit - releases_within_cap + the in-memory ledger (same releases)",
        "rows": rows,
    })


if __name__ == "__main__":
    main()
