"""The regressor's temper pool against none, paired per split and seed.

``AnonMLRegressor`` with its defaults (``temper_fraction=0.1``, :mod:`anonml.learn.temperature`)
against the same regressor with ``temper_fraction=0`` on the same 70/30 split and seed, at
ε ∈ {0.5, 1, 2, 4}: test MAE of both, the training median's, the paired difference (pool − none,
mean ± s.e.; negative where the pool helps), and the temperatures the searches found.

Sets: the regression tuning sets of :mod:`benchmarks.trivial_floors` (``correlated_reg``,
``synthetic_reg``, ``diabetes``, ``skewed_reg``) and the held-out regression sets of
:mod:`benchmarks.public_sets` (``computers`` and ``vietnam``, whose look at the pool is a second one;
``wages`` and ``star``, chosen for a clean one: ``benchmarks/PUBLIC_SETS.md``).

Run from the repository root: ``python -m benchmarks.temper_pool [--splits 10] [--sets ...]``; writes
``benchmarks/results/temper_pool.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
from joblib import Parallel, delayed
from sklearn.metrics import mean_absolute_error

from anonml.learn import AnonMLRegressor
from benchmarks.public_sets import load_sets as load_public_sets
from benchmarks.reporting import RESULTS, machine, now, write_json
from benchmarks.trivial_floors import FloorSet, _expected_notices, split, summarise
from benchmarks.trivial_floors import load_sets as load_floor_sets

EPSILONS = (0.5, 1.0, 2.0, 4.0)
TUNING = ("correlated_reg", "synthetic_reg", "diabetes", "skewed_reg")
HELD_OUT = ("computers", "vietnam", "wages", "star")


def _sets(names: list[str]) -> list[FloorSet]:
    tuning = [n for n in names if n in TUNING]
    held_out = [n for n in names if n not in TUNING]
    loaded = {d.name: d for d in load_floor_sets(tuning) + load_public_sets(held_out)}
    sets = [loaded[n] for n in names]
    not_regression = [d.name for d in sets if not isinstance(d, FloorSet) or d.task != "regression"]
    if not_regression:
        raise SystemExit(f"not regression sets: {not_regression}")
    return sets


def paired_split(data: FloorSet, epsilon: float, seed: int) -> dict[str, float]:
    """Both fits on split ``seed``: their test MAE, the training median's, and the pool's outcome."""
    X_tr, X_te, y_tr, y_te = split(data, seed)
    out: dict[str, float] = {"median": mean_absolute_error(y_te, np.full(y_te.size, np.median(y_tr)))}
    for name, fraction in (("none", 0.0), ("pool", 0.1)):
        assert data.target_range is not None
        model = AnonMLRegressor(
            target_range=data.target_range,
            temper_fraction=fraction,
            classifier_params={"epsilon": epsilon, "features": list(data.specs), "random_state": seed},
        )
        with _expected_notices():
            model.fit(X_tr, y_tr)
            out[name] = mean_absolute_error(y_te, model.predict(X_te))
    out["temperature"] = float(model.temperature_)
    out["answers"] = float(model.temper_answers_)
    return out


def rows_of(data: FloorSet, splits: int, jobs: int) -> list[dict[str, Any]]:
    """One row per ε: both MAEs, the median's, the paired difference and the temperatures found."""
    rows = []
    for epsilon in EPSILONS:
        runs = Parallel(n_jobs=jobs)(delayed(paired_split)(data, epsilon, s) for s in range(splits))
        pick = {k: np.array([r[k] for r in runs]) for k in runs[0]}
        rows.append(
            {
                "set": data.name,
                "rows": int(data.y.size),
                "epsilon": epsilon,
                "splits": splits,
                "none": summarise(pick["none"]),
                "pool": summarise(pick["pool"]),
                "median": summarise(pick["median"]),
                "difference": summarise(pick["pool"] - pick["none"]),
                "temperatures": pick["temperature"].tolist(),
                "answers": summarise(pick["answers"]),
            }
        )
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| set (rows) | ε | without pool | with pool | pool − none (paired) | median | halved in "
        "| pool answers |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        moved = sum(t < 1.0 for t in r["temperatures"])

        def cell(s: dict[str, float]) -> str:
            return f"{s['mean']:.4g} ± {s['se']:.2g}"

        lines.append(
            f"| {r['set']} ({r['rows']}) | {r['epsilon']:g} | {cell(r['none'])} | {cell(r['pool'])} | "
            f"{r['difference']['mean']:+.4g} ± {r['difference']['se']:.2g} | {r['median']['mean']:.4g} | "
            f"{moved}/{r['splits']} | {r['answers']['mean']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=10)
    parser.add_argument("--sets", default=",".join(TUNING + HELD_OUT))
    parser.add_argument("--jobs", type=int, choices=(1, 2), default=2)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows = []
    for data in _sets(args.sets.split(",")):
        rows += rows_of(data, args.splits, args.jobs)
        print(f"{data.name} done ({time.perf_counter() - started:.0f} s)", flush=True)
    doc = {
        "benchmark": "temper_pool",
        "when": now(),
        "machine": machine(),
        "splits": args.splits,
        "seconds": round(time.perf_counter() - started, 1),
        "tuning_sets": [r for r in TUNING if r in args.sets.split(",")],
        "rows": rows,
    }
    write_json(RESULTS / "temper_pool.json", doc)
    table = markdown(rows)
    (RESULTS / "temper_pool.md").write_text(
        "# The regressor's temper pool against none (`python -m benchmarks.temper_pool`)\n\n"
        f"{args.splits} splits per set and ε, run {doc['when']} ({doc['seconds']} s); test MAE, mean ± s.e.; "
        "tuning sets: " + ", ".join(doc["tuning_sets"]) + ".\n\n" + table
    )
    print(table)


if __name__ == "__main__":
    main()
