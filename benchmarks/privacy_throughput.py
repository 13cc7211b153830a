"""Perturbation throughput of the LDP mechanisms against the raw cost of random bits.

Perturbs ``--n`` reports (default 10^6) over a domain of ``--m`` values (default
16) with every mechanism at several epsilons, and compares each with drawing the
same number (n * m) of uniform random bits with numpy in the same run:

* ``packed_bits``: ``n*m/64`` full-range ``uint64`` words unpacked to an
  ``(n, m)`` bool array (``np.unpackbits``) — the raw RNG cost, the strict baseline;
* ``numpy_bool_bits``: ``rng.integers(0, 2, size=(n, m), dtype=bool)`` — numpy's
  direct call for an array of uniform bits;
* ``float_compare_bits`` (information): ``rng.random((n, m)) < 0.5``.

Timing alternates one mechanism call with one call of each baseline, using the
thread's CPU time (a loaded machine's preemption is not counted); every pair
gives a ratio and the median over ``--repeats`` pairs is reported. The
target: ratio <= 3. Results go to ``benchmarks/results/privacy_throughput.json``
(and a bar chart beside it when matplotlib is importable).

Run from the repository root: ``python -m benchmarks.privacy_throughput``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from anonml.privacy import Mechanism, best_mechanism
from benchmarks.mechanisms import KINDS, add_run_arguments
from benchmarks.reporting import machine, now, pyplot, save_figure, write_json_and_plot

TARGET = 3.0


def _cpu_time(call: Callable[[], object]) -> float:
    start = time.thread_time()
    call()
    return time.thread_time() - start


def _baselines(rng: np.random.Generator, n: int, m: int) -> dict[str, Callable[[], object]]:
    words = -(-n * m // 64)

    def packed() -> np.ndarray:
        raw = rng.integers(0, np.iinfo(np.uint64).max, size=words, dtype=np.uint64, endpoint=True)
        return np.unpackbits(raw.view(np.uint8), count=n * m).view(bool).reshape(n, m)

    return {
        "packed_bits": packed,
        "numpy_bool_bits": lambda: rng.integers(0, 2, size=(n, m), dtype=bool),
        "float_compare_bits": lambda: rng.random((n, m)) < 0.5,
    }


def measure(
    mech: Mechanism,
    values: np.ndarray,
    rng: np.random.Generator,
    baselines: dict[str, Callable[[], object]],
    repeats: int,
) -> dict[str, float]:
    """Median CPU seconds of ``mech.perturb`` and its median ratio to each baseline."""
    own: list[float] = []
    ratios: dict[str, list[float]] = {name: [] for name in baselines}
    mech.perturb(values[:1000], rng)  # warm caches (subset tables)
    for _ in range(repeats):
        t = _cpu_time(lambda: mech.perturb(values, rng))
        own.append(t)
        for name, call in baselines.items():
            ratios[name].append(t / _cpu_time(call))
    result = {"seconds": statistics.median(own)}
    result.update({f"ratio_{name}": statistics.median(r) for name, r in ratios.items()})
    return result


def run(n: int, m: int, epsilons: list[float], repeats: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    values = rng.integers(0, m, size=n)
    baselines = _baselines(rng, n, m)
    base_times = {
        name: statistics.median(_cpu_time(call) for _ in range(repeats)) for name, call in baselines.items()
    }
    rows = []
    candidates: list[tuple[str, Mechanism]] = [
        (kind.__name__, kind.from_epsilon(eps, m)) for eps in epsilons for kind in KINDS
    ]
    candidates += [("best_mechanism", best_mechanism(eps, m, n)) for eps in epsilons]
    for label, mech in candidates:
        timing = measure(mech, values, rng, baselines, repeats)
        rows.append(
            {
                "mechanism": label,
                "kind": mech.kind,
                "epsilon": mech.epsilon,
                "p": mech.p,
                "q": mech.q,
                "omega": getattr(mech, "omega", None),
                "milliseconds": round(timing["seconds"] * 1e3, 3),
                "reports_per_second": round(n / timing["seconds"]),
                "ratio_packed_bits": round(timing["ratio_packed_bits"], 3),
                "ratio_numpy_bool_bits": round(timing["ratio_numpy_bool_bits"], 3),
                "ratio_float_compare_bits": round(timing["ratio_float_compare_bits"], 3),
            }
        )
        print(
            f"{label:>20s} eps={mech.epsilon:<4g} {rows[-1]['milliseconds']:8.2f} ms "
            f"{rows[-1]['reports_per_second']:>11,d} reports/s  "
            f"x{rows[-1]['ratio_packed_bits']:.2f} packed  "
            f"x{rows[-1]['ratio_numpy_bool_bits']:.2f} numpy-bool",
            file=sys.stderr,
        )
    return {
        "benchmark": "anonml.privacy perturbation throughput",
        "date": now(),
        "machine": machine(numpy=np.__version__),
        "method": (
            f"median over {repeats} alternating pairs of thread CPU time; n={n} "
            f"reports, m={m}; baselines draw n*m uniform random bits"
        ),
        "n": n,
        "m": m,
        "baseline_milliseconds": {k: round(v * 1e3, 3) for k, v in base_times.items()},
        "target_ratio": TARGET,
        "mechanisms": rows,
        "within_target_vs_packed_bits": sum(r["ratio_packed_bits"] <= TARGET for r in rows),
        "within_target_vs_numpy_bool_bits": sum(r["ratio_numpy_bool_bits"] <= TARGET for r in rows),
        "rows": len(rows),
    }


def plot(result: dict, path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    rows = result["mechanisms"]
    labels = [f"{r['mechanism']}\neps={r['epsilon']:g}" for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.45), 4.5))
    ax.bar(x - 0.2, [r["ratio_packed_bits"] for r in rows], 0.4, label="vs packed raw bits")
    ax.bar(
        x + 0.2, [r["ratio_numpy_bool_bits"] for r in rows], 0.4, label="vs rng.integers(0, 2, dtype=bool)"
    )
    ax.axhline(TARGET, color="k", linestyle="--", linewidth=1, label=f"target {TARGET:g}x")
    ax.set_xticks(x, labels, rotation=90, fontsize=7)
    ax.set_ylabel("time / time of n*m uniform bits")
    ax.set_title(f"perturbing {result['n']:,} reports, m={result['m']}")
    ax.legend(fontsize=8)
    return save_figure(plt, fig, path)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--m", type=int, default=16)
    add_run_arguments(parser, repeats=9, output="privacy_throughput.json")
    args = parser.parse_args(argv)
    result = run(args.n, args.m, args.epsilons, args.repeats, args.seed)
    write_json_and_plot(args.output, result, plot)
    print(
        json.dumps(
            {
                k: result[k]
                for k in (
                    "baseline_milliseconds",
                    "within_target_vs_packed_bits",
                    "within_target_vs_numpy_bool_bits",
                    "rows",
                )
            }
        )
    )
    return result


if __name__ == "__main__":
    main()
