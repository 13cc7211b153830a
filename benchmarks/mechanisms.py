"""Accuracy of every LDP mechanism under every consistency step, theory beside measurement.

For each domain size m in {4, 16, 64, 128} and epsilon in {0.5, 1, 2, 4}, ``--n``
peers (default 32,561, the size of Adult's training set) hold values drawn from
a Zipf(1) distribution over the m values (the counts are fixed per m). Each
mechanism perturbs all reports ``--repeats`` times; each time the bit sums are
debiased (raw) and post-processed by Norm-Sub, Norm-Mul, Base-Cut and IBU.

Reported per cell: the root mean squared L2 error of the estimated
distribution (counts / n), measured over the repeats, beside thesis eq. 7.2's
prediction for the raw estimate. The consistency steps have no closed form;
the table shows which one wins where (Wang et al., NDSS 2020: none wins
everywhere), and the summary counts the wins, from which the default is picked.

Results go to ``benchmarks/results/mechanisms.json``, a text table to stdout,
and a plot beside the JSON when matplotlib is importable.

Run from the repository root: ``python -m benchmarks.mechanisms``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from anonml.privacy import CANDIDATES, CONSISTENCY_METHODS, best_mechanism, estimate_counts
from benchmarks.reporting import RESULTS, machine, now, pyplot, save_figure, write_json_and_plot

#: The mechanisms both privacy benchmarks measure, in the order their tables list them: every
#: candidate of :func:`anonml.privacy.best_mechanism`, in its tie-break order.
KINDS = CANDIDATES
METHODS: tuple[str | None, ...] = (None, *CONSISTENCY_METHODS)


def _name(method: str | None) -> str:
    return "raw" if method is None else method


def zipf_counts(m: int, n: int) -> np.ndarray:
    """Counts of n values under f_i proportional to 1/(i+1), rounded to sum n."""
    weights = 1.0 / np.arange(1, m + 1)
    exact = n * weights / weights.sum()
    counts = np.floor(exact).astype(np.int64)
    counts[np.argsort(exact - counts)[::-1][: n - counts.sum()]] += 1
    return counts


def measure(mech, counts: np.ndarray, repeats: int, rng: np.random.Generator) -> dict:
    n, m = int(counts.sum()), counts.size
    values = np.repeat(np.arange(m), counts)
    squared = {_name(method): [] for method in METHODS}
    for _ in range(repeats):
        sums = mech.perturb(values, rng).sum(axis=0)
        for method in METHODS:
            est = estimate_counts(sums, mech, n, consistency=method)
            squared[_name(method)].append(float(((est.counts - counts) ** 2).sum()) / n**2)
    measured = {name: math.sqrt(float(np.mean(v))) for name, v in squared.items()}
    # Relative standard error of the RMS estimate, for reading the table.
    raw = np.array(squared["raw"])
    rse = float(raw.std(ddof=1) / raw.mean() / math.sqrt(repeats) / 2) if repeats > 1 else None
    return {"measured": measured, "raw_rms_relative_se": rse}


def run(domains: list[int], epsilons: list[float], n: int, repeats: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    cells = []
    started = time.perf_counter()
    for m in domains:
        counts = zipf_counts(m, n)
        for eps in epsilons:
            chosen = best_mechanism(eps, m, n)
            for kind in KINDS:
                mech = kind.from_epsilon(eps, m)
                result = measure(mech, counts, repeats, rng)
                cells.append(
                    {
                        "m": m,
                        "epsilon": eps,
                        "mechanism": kind.__name__,
                        "p": mech.p,
                        "q": mech.q,
                        "omega": getattr(mech, "omega", None),
                        "selected_by_best_mechanism": type(chosen) is kind,
                        "theory_raw_eq_7_2": mech.expected_l2_error(n),
                        **result,
                    }
                )
            print(f"m={m:<4d} eps={eps:<4g} done ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    wins: Counter[str] = Counter()
    for m in domains:
        for eps in epsilons:
            for cell in cells:
                if cell["m"] == m and cell["epsilon"] == eps:
                    best = min(cell["measured"], key=cell["measured"].get)
                    wins[best] += 1
    # How far each method is from the best one in the same cell (geometric
    # mean over cells of error / best error; 1.0 = always the best).
    regret = {
        _name(method): math.exp(
            float(
                np.mean([math.log(c["measured"][_name(method)] / min(c["measured"].values())) for c in cells])
            )
        )
        for method in METHODS
    }
    worst = {
        _name(method): max(c["measured"][_name(method)] / min(c["measured"].values()) for c in cells)
        for method in METHODS
    }
    raw_ratio = [c["measured"]["raw"] / c["theory_raw_eq_7_2"] for c in cells]
    return {
        "benchmark": "anonml.privacy mechanisms x consistency, L2 error of the distribution",
        "date": now(),
        "machine": machine(numpy=np.__version__),
        "n": n,
        "repeats": repeats,
        "seed": seed,
        "distribution": "zipf(1) over the m values, fixed counts",
        "error": "root mean squared L2 distance between estimated and true distribution",
        "cells": cells,
        "summary": {
            "best_method_wins_over_cells": dict(wins.most_common()),
            "error_over_best_geometric_mean": {k: round(v, 4) for k, v in regret.items()},
            "error_over_best_worst_cell": {k: round(v, 4) for k, v in worst.items()},
            "raw_measured_over_theory": {
                "min": min(raw_ratio),
                "max": max(raw_ratio),
                "mean": float(np.mean(raw_ratio)),
            },
            "seconds": round(time.perf_counter() - started, 1),
        },
    }


def table(result: dict) -> str:
    names = [_name(m) for m in METHODS]
    header = f"{'m':>4} {'eps':>4} {'mechanism':>18} {'theory':>8} " + " ".join(
        f"{name:>9}" for name in names
    )
    lines = [header, "-" * len(header)]
    for cell in result["cells"]:
        mark = "*" if cell["selected_by_best_mechanism"] else " "
        lines.append(
            f"{cell['m']:>4} {cell['epsilon']:>4g} {cell['mechanism'] + mark:>18} "
            f"{cell['theory_raw_eq_7_2']:8.4f} "
            + " ".join(f"{cell['measured'][name]:9.4f}" for name in names)
        )
    lines.append("(* = chosen by best_mechanism; theory = eq. 7.2 for the raw estimate)")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    domains = sorted({c["m"] for c in result["cells"]})
    fig, axes = plt.subplots(1, len(domains), figsize=(4.2 * len(domains), 4), sharey=False)
    for ax, m in zip(np.atleast_1d(axes), domains, strict=True):
        for i, kind in enumerate(KINDS):
            rows = [c for c in result["cells"] if c["m"] == m and c["mechanism"] == kind.__name__]
            eps = [c["epsilon"] for c in rows]
            color = f"C{i}"
            ax.plot(
                eps,
                [c["theory_raw_eq_7_2"] for c in rows],
                "-",
                color=color,
                label=f"{kind.__name__} eq. 7.2",
            )
            ax.plot(eps, [c["measured"]["raw"] for c in rows], "o", color=color)
            ax.plot(eps, [c["measured"]["norm_sub"] for c in rows], "x--", color=color, alpha=0.6)
        ax.set_yscale("log")
        ax.set_title(f"m = {m}")
        ax.set_xlabel("epsilon")
    first = np.atleast_1d(axes)[0]
    first.set_ylabel("L2 error of the distribution")
    first.legend(fontsize=7, title="line: theory, o: raw, x: norm_sub", title_fontsize=7)
    fig.suptitle(f"n = {result['n']:,}, Zipf(1), {result['repeats']} repeats")
    return save_figure(plt, fig, path)


def add_run_arguments(parser: argparse.ArgumentParser, *, repeats: int, output: str) -> None:
    """The options both privacy benchmarks take: ``--epsilons``, ``--repeats``, ``--seed``, ``--output``.

    ``repeats`` is the default number of repeats, ``output`` the default file name in ``RESULTS``.
    """
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1.0, 2.0, 4.0])
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--seed", type=int, default=2017)
    parser.add_argument("--output", type=Path, default=RESULTS / output)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", type=int, nargs="+", default=[4, 16, 64, 128])
    parser.add_argument("--n", type=int, default=32_561)
    add_run_arguments(parser, repeats=50, output="mechanisms.json")
    args = parser.parse_args(argv)
    result = run(args.domains, args.epsilons, args.n, args.repeats, args.seed)
    write_json_and_plot(args.output, result, plot)
    print(table(result))
    print(json.dumps(result["summary"]))
    return result


if __name__ == "__main__":
    main()
