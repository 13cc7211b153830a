"""The default model against the paper baselines on public sets chosen before any tuning.

The sets and when they were chosen are in ``benchmarks/PUBLIC_SETS.md`` (2026-11-27, before any
tuning): scikit-learn's ``breast_cancer`` and statsmodels' ``anes96``, ``fair`` and ``randhie``, all
binary, read from the installed packages (nothing is copied into the repository). Public ranges are
each published column's min/max widened by 5 % (:func:`benchmarks.trivial_floors._padded_specs`);
0/1 columns are booleans.

Per set, ε ∈ {0.5, 1, 2, 4} and ``--splits`` stratified 70/30 splits
(:func:`anonml.datasets.tabular.random_split`, seed = split index), every method sees the same split
at the same ε (:func:`anonml.learn.harness.run_benchmark`):

* ``majority`` — the trivial predictor (AUC 0.5; its Brier and log loss are the base rate's);
* ``central_raw`` / ``central_binned`` — non-private logistic regression on the raw features and on
  the bins the default model published in that split;
* ``default`` — ``AnonMLClassifier(epsilon=ε, features=specs)`` with every other parameter at its
  default (the README pattern);
* ``ldp_nb`` — the plain LDP naive Bayes; ``ldp_lr_pm`` / ``ldp_lr_hm`` — LDP-SGD logistic
  regression with the Piecewise / Hybrid Mechanism (Wang et al., ICDE 2019); ``marginal_nb`` /
  ``marginal_tan`` — CALM-style marginals then naive Bayes / tree-augmented naive Bayes (Zhang et
  al., CCS 2018) (:mod:`anonml.learn.baselines`).

Every row gives mean ± standard error over the splits of the test AUC, Brier score and log loss
(with the base rate's), and ECE. Run from the repository root (needs statsmodels: the ``bench`` extra):
``python -m benchmarks.public_sets [--splits 10] [--sets fair,randhie]``; writes
``benchmarks/results/public_sets.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from anonml.datasets.tabular import TabularData, random_split
from anonml.learn.harness import ResultRow, run_benchmark
from anonml.learn.notices import DataWarning, SmallGroupWarning
from anonml.model import FeatureKind, FeatureSpec
from benchmarks.reporting import RESULTS, machine, now, write_json
from benchmarks.trivial_floors import _padded_specs

EPSILONS = (0.5, 1.0, 2.0, 4.0)
# "default" before "central": central_binned then reuses the reported default model's bins (one fit).
METHODS = (
    "default",
    "majority",
    "central",
    "ldp_nb",
    "ldp_lr_pm",
    "ldp_lr_hm",
    "marginal_nb",
    "marginal_tan",
)
#: When and where the sets were chosen (before any tuning on them).
CHOSEN = "2026-11-27 05:40 UTC, before any tuning; see benchmarks/PUBLIC_SETS.md"

# Per statsmodels set: the binary target (column, threshold: y = column > threshold) and the columns left out.
_STATSMODELS: dict[str, tuple[str, float, tuple[str, ...]]] = {
    "anes96": ("vote", 0.5, ("logpopul",)),
    "fair": ("affairs", 0.0, ()),
    "randhie": ("mdvis", 0.0, ()),
}


def _specs(X: np.ndarray, names: list[str]) -> tuple[FeatureSpec, ...]:
    """Padded public ranges for numeric columns; 0/1 columns as booleans."""
    padded = _padded_specs(X, names)
    return tuple(
        FeatureSpec(name=spec.name, kind=FeatureKind.BOOL) if set(np.unique(X[:, j])) <= {0.0, 1.0} else spec
        for j, spec in enumerate(padded)
    )


def _statsmodels_set(name: str) -> TabularData:
    try:
        from statsmodels import datasets  # noqa: PLC0415 - optional (the bench extra)
    except ImportError as exc:
        raise SystemExit(f"set {name!r} needs statsmodels: pip install 'anonml[bench]'") from exc
    target, threshold, dropped = _STATSMODELS[name]
    frame = getattr(datasets, name).load_pandas().data
    y = (frame[target].to_numpy(dtype=float) > threshold).astype(np.int64)
    columns = [c for c in frame.columns if c != target and c not in dropped]
    X = frame[columns].to_numpy(dtype=float)
    return TabularData(name, X, y, _specs(X, columns))


def _breast_cancer() -> TabularData:
    from sklearn.datasets import load_breast_cancer  # noqa: PLC0415

    bunch = load_breast_cancer()
    X = np.asarray(bunch.data, dtype=float)
    names = [str(n).replace(" ", "_") for n in bunch.feature_names]
    return TabularData("breast_cancer", X, np.asarray(bunch.target, dtype=np.int64), _specs(X, names))


def load_sets(names: list[str]) -> list[TabularData]:
    """The named sets (module docstring)."""
    makers: dict[str, Callable[[], TabularData]] = {
        "breast_cancer": _breast_cancer,
        **{n: (lambda n=n: _statsmodels_set(n)) for n in _STATSMODELS},
    }
    unknown = [n for n in names if n not in makers]
    if unknown:
        raise SystemExit(f"unknown set(s) {unknown}; known: {sorted(makers)}")
    return [makers[n]() for n in names]


def run_set(data: TabularData, splits: int, epsilons: tuple[float, ...] = EPSILONS) -> list[ResultRow]:
    """Every method at every ε over ``splits`` shared splits of one set."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SmallGroupWarning)  # the small sets are expected to be noisy
        warnings.simplefilter("ignore", DataWarning)
        return run_benchmark(
            lambda t: random_split(data, seed=t),
            dataset=data.name,
            methods=METHODS,
            epsilons=epsilons,
            trials=splits,
        )


def _cell(row: ResultRow, mean: str, se: str) -> str:
    value, err = getattr(row, mean), getattr(row, se)
    return f"{value:.3f}±{err:.3f}" if value is not None else "-"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=10)
    parser.add_argument("--sets", default="breast_cancer,anes96,fair,randhie")
    parser.add_argument("--out", default=str(RESULTS / "public_sets.json"))
    args = parser.parse_args(argv)
    if args.splits < 1:
        raise SystemExit(f"--splits must be >= 1, got {args.splits}")
    started = time.perf_counter()
    rows: list[ResultRow] = []
    sizes: dict[str, dict[str, Any]] = {}
    for data in load_sets(args.sets.split(",")):
        sizes[data.name] = {
            "rows": int(data.X.shape[0]),
            "features": int(data.X.shape[1]),
            "positive_rate": float(data.y.mean()),
        }
        rows.extend(run_set(data, args.splits))
        print(f"{data.name} done ({time.perf_counter() - started:.0f} s)", flush=True)
    write_json(
        Path(args.out),
        {
            "benchmark": "public_sets",
            "sets_chosen": CHOSEN,
            "when": now(),
            "machine": machine(),
            "splits": args.splits,
            "split": "stratified 70/30, seed = split index (anonml.datasets.tabular.random_split)",
            "seconds": round(time.perf_counter() - started, 1),
            "sets": sizes,
            "rows": [r.model_dump() for r in rows],
        },
    )
    heads = ("AUC", "Brier", "base", "log loss", "base")
    print(
        f"{'set':14} {'method':14} {'ε':>4} "
        + " ".join(f"{h:>12}" if h != "base" else f"{h:>6}" for h in heads)
    )
    for r in rows:
        eps = "-" if r.epsilon is None else f"{r.epsilon:g}"
        print(
            f"{r.dataset:14} {r.method:14} {eps:>4} {_cell(r, 'auc_mean', 'auc_se'):>12} "
            f"{_cell(r, 'brier_mean', 'brier_se'):>12} {r.brier_base:6.3f} "
            f"{_cell(r, 'log_loss_mean', 'log_loss_se'):>12} {r.log_loss_base:6.3f}"
        )


if __name__ == "__main__":
    main()
