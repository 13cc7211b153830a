"""One fit at scale: ``AnonMLClassifier`` on 1,000,000 rows × 20 features, its time and peak memory.

Issue 25's target: the default fit on 1,000,000 rows × 20 features within 60 s and 4 GiB on 2 cores.
The rows are synthetic (seeded): 16 numeric features (standard normal, public range [−5, 5]) and 4
categorical ones (5 levels), the label drawn from a logistic model of 8 of them, so the fit has real
signal to find. One fit with the README defaults (``AnonMLClassifier(epsilon=1, features=specs)``),
timed by the wall clock (``time.perf_counter``) and measured by the process's peak resident set
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``, which includes the data itself, so it bounds what the
fit needed from above) and by ``tracemalloc``'s peak of the allocations made during the fit alone,
with the 1-minute load average before and after beside it (the machine is shared). The held-out AUC
on 100,000 further rows shows the fit learned. It is a benchmark, not a test: run it once, by hand.

Run from the repository root: ``python -m benchmarks.fit_scale [--rows 1000000]``; writes
``benchmarks/results/fit_scale.json``.
"""

from __future__ import annotations

import argparse
import os
import resource
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from anonml.learn.model import AnonMLClassifier
from anonml.model import FeatureKind, FeatureSpec
from benchmarks.reporting import RESULTS, machine, now, write_json

N_NUMERIC = 16
N_CATEGORICAL = 4
LEVELS = 5
HELD_OUT = 100_000


def synthetic(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, list[FeatureSpec]]:
    """``n`` rows of the module docstring's design, their labels and the public feature specs."""
    rng = np.random.default_rng(seed)
    numeric = rng.standard_normal((n, N_NUMERIC))
    categorical = rng.integers(0, LEVELS, size=(n, N_CATEGORICAL)).astype(float)
    X = np.hstack([numeric, categorical])
    logit = numeric[:, :6] @ np.array([0.9, -0.7, 0.5, 0.4, -0.3, 0.2]) + 0.4 * (categorical[:, 0] == 1)
    logit -= 0.3 * (categorical[:, 1] >= 3)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int64)
    specs = [FeatureSpec(name=f"x{j}", low=-5.0, high=5.0) for j in range(N_NUMERIC)]
    specs += [
        FeatureSpec(name=f"c{j}", kind=FeatureKind.CATEGORICAL, categories=[str(v) for v in range(LEVELS)])
        for j in range(N_CATEGORICAL)
    ]
    return X, y, specs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--out", default=str(RESULTS / "fit_scale.json"))
    args = parser.parse_args(argv)
    X, y, specs = synthetic(args.rows + HELD_OUT, seed=0)
    X_fit, y_fit, X_test, y_test = X[: args.rows], y[: args.rows], X[args.rows :], y[args.rows :]
    load_before = os.getloadavg()
    data_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the small-group notices are about privacy, not speed
        model = AnonMLClassifier(epsilon=args.epsilon, features=specs, random_state=0).fit(X_fit, y_fit)
    seconds = time.perf_counter() - started
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    peak_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    load_after = os.getloadavg()
    auc = float(roc_auc_score(y_test, model.predict_proba(X_test)[:, 1]))
    doc = {
        "benchmark": "fit_scale",
        "when": now(),
        "machine": machine(load_1min_before=load_before[0], load_1min_after=load_after[0]),
        "rows": args.rows,
        "features": len(specs),
        "epsilon": args.epsilon,
        "fit_seconds": round(seconds, 2),
        "peak_rss_gib": round(peak_rss_kib / 2**20, 3),
        "rss_before_fit_gib": round(data_rss_kib / 2**20, 3),
        "fit_traced_peak_gib": round(traced_peak / 2**30, 3),
        "held_out_auc": round(auc, 4),
        "note": "tracemalloc was on during the fit (it slows allocation-heavy Python a little); "
        "peak_rss includes the data (1.1M x 20 float64 = 0.18 GiB) and the interpreter",
        "targets": {"fit_seconds": 60, "peak_gib": 4},
    }
    print(doc)
    write_json(Path(args.out), doc)


if __name__ == "__main__":
    main()
