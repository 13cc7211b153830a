"""Multiparty private-learning baselines: the issue's reproduction targets.

Three experiments, all through :func:`anonml.learn.multiparty.run_multiparty_benchmark`:

1. **Rajkumar & Agarwal (2012), fig. 2** — breast cancer (scikit-learn's
   bundled Wisconsin diagnostic set, 569 × 30), 5 folds ("5 parts × 5
   train/validation splits") × ``--trials``, δ = 0.05, K = 5, 10, 15 equal
   parties and the skewed split [0.01, 0.29, 0.2, 0.25, 0.25]: GOP, PSGD and
   parameter averaging (Pathak et al. 2010) beside the batch / indiv / central
   references, the Xie et al. methods and AnonML's default mode. Our errors
   are printed next to the values read off their figure (±0.02), and the
   noise-to-signal diagnostics say why they differ.
2. **Hamm, Cao & Belkin (2016)**, qualitative, on Adult: M = 1,000 … 20,000
   parties of a few records each, 10 % auxiliary data, λ = 1e-4; majority
   vote against soft labels, with the noise-free ERM of each for reference.
3. The same on scikit-learn's digits (10 classes, 1,797 rows, so M ≤ ~1,300).

Error ratios are against ``batch`` (non-private pooled logistic regression)
measured in the same run. Results go to ``benchmarks/results/multiparty.json``.

Run from the repository root: ``python benchmarks/multiparty.py`` (a few
minutes on two cores; ``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from anonml.learn.multiparty import (  # noqa: E402
    Preprocessor,
    ResultRow,
    compute_slack,
    gaussian_sigma,
    load_dataset,
    margin_loss,
    run_multiparty_benchmark,
    split_public,
)

RESULTS = Path(__file__).resolve().parent / "results" / "multiparty.json"
SKEW = (0.01, 0.29, 0.2, 0.25, 0.25)
READING_ERROR = 0.02

#: Test errors read off Rajkumar & Agarwal's fig. 2 (the issue's targets):
#: (method, K, skew, ε) -> (low, high).
PAPER = {
    ("gop", "uniform", 0.1): (0.11, 0.11),
    ("psgd", "uniform", 0.1): (0.12, 0.14),
    ("gop", "uniform", 0.2): (0.07, 0.08),
    ("psgd", "uniform", 0.2): (0.07, 0.08),
    ("pathak", "skew", 0.1): (0.41, 0.41),
}


def _rows_dicts(rows: list[ResultRow]) -> list[dict]:
    return [
        {k: v for k, v in r.to_dict().items() if k != "errors"} | {"n_errors": len(r.errors)} for r in rows
    ]


def _diagnostics(eps_values: list[float], lam: float, delta: float, seed: int) -> list[dict]:
    """Noise against signal in the GOP objective on the first breast-cancer split.

    The perturbation adds ηᵀw/n with η ~ N(0, σ*² I); the data term's gradient at
    w = 0 is -(1/2n) Σ y_i x_i, of norm at most 1/2. When E‖η‖/n ≈ σ*√d/n is many
    times that norm the released direction is mostly noise.
    """
    data = load_dataset("breast_cancer")
    rng = np.random.default_rng(seed)
    public, private = split_public(data.y, 0.1, rng)
    prep = Preprocessor(None, 0.5).fit(data.X[public])
    X = prep.transform(data.X[private])
    n, d = X.shape
    y = np.where(data.y[private] == 1, 1.0, -1.0)
    signal = float(np.linalg.norm(X.T @ y) / (2 * n))
    out = []
    for eps in eps_values:
        slack = compute_slack(eps, lam, int(n * 0.8), margin_loss("logistic").curvature)  # 4 of 5 folds train
        sigma = gaussian_sigma(slack.epsilon, delta, d)
        noise = sigma * math.sqrt(d) / (n * 0.8)
        out.append(
            {
                "epsilon": eps,
                "epsilon_tilde": slack.epsilon,
                "extra_reg": slack.extra_reg,
                "sigma_star": sigma,
                "noise_over_n": noise,
                "data_gradient_at_0": signal,
                "noise_to_signal": noise / signal,
            }
        )
    return out


def _compare(rows: list[ResultRow]) -> list[dict]:
    table = []
    for (method, skew, eps), (low, high) in PAPER.items():
        mine = [
            r
            for r in rows
            if r.method == method and r.epsilon == eps and (r.skew == "uniform") == (skew == "uniform")
        ]
        for r in mine:
            gap = (
                0.0 if low <= r.error_mean <= high else min(abs(r.error_mean - low), abs(r.error_mean - high))
            )
            table.append(
                {
                    "method": method,
                    "parties": r.parties,
                    "skew": r.skew,
                    "epsilon": eps,
                    "paper": [low, high],
                    "ours": round(r.error_mean, 4),
                    "ours_sem": round(r.error_sem, 4),
                    "beyond_reading_error": gap > READING_ERROR,
                }
            )
    return table


def _eps_to_reach(rows: list[ResultRow], method: str, target: float) -> dict[str, float | None]:
    """Smallest ε of the grid at which ``method`` (K=5, uniform) is within 0.02 of ``target``."""
    series = sorted(
        (r for r in rows if r.method == method and r.parties == 5 and r.skew == "uniform"),
        key=lambda r: r.epsilon or 0.0,
    )
    hit = next((r.epsilon for r in series if r.error_mean <= target + READING_ERROR), None)
    return {"method": method, "target_error": target, "first_epsilon_on_grid": hit}


def rajkumar(trials: int, quick: bool, seed: int) -> dict:
    eps = [0.1, 0.2, 1.0] if quick else [0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0]
    methods = ["batch", "indiv", "public", "central", "pathak", "psgd", "gop", "xie_feature", "xie_average"]
    lam, delta = 1e-2, 0.05
    start = time.perf_counter()
    rows = run_multiparty_benchmark(
        "breast_cancer",
        methods,
        [5] if quick else [5, 10, 15],
        [None, SKEW],
        eps,
        trials,
        folds=5,
        delta=delta,
        lam=lam,
        public_fraction=0.1,
        norm_quantile=0.5,
        seed=seed,
    )
    anonml = _anonml_rows("breast_cancer", eps, trials, seed, lam)
    return {
        "config": {
            "dataset": "breast_cancer",
            "eps": eps,
            "trials": trials,
            "folds": 5,
            "delta": delta,
            "lam": lam,
            "public_fraction": 0.1,
            "norm_quantile": 0.5,
            "skew": list(SKEW),
        },
        "seconds": time.perf_counter() - start,
        "rows": _rows_dicts(rows),
        "anonml": anonml,
        "comparison_with_paper": _compare(rows),
        "epsilon_to_reach_paper": [_eps_to_reach(rows, "gop", 0.11), _eps_to_reach(rows, "psgd", 0.13)],
        "diagnostics": _diagnostics(eps, lam, delta, seed),
    }


def _anonml_rows(dataset: str, eps: list[float], trials: int, seed: int, lam: float) -> dict:
    """AnonML's default mode on the same splits (one peer per record), beside batch."""
    rows = run_multiparty_benchmark(
        dataset,
        ["batch", "anonml"],
        [1],
        [None],
        eps,
        trials,
        folds=5,
        lam=lam,
        public_fraction=0.1,
        seed=seed,
    )
    return {"status": "ok", "rows": _rows_dicts(rows)}


def hamm(dataset: str, parties: list[int], eps: list[float], trials: int, seed: int) -> dict:
    methods = ["batch", "public", "indiv", "hamm_vote", "hamm_soft"]
    start = time.perf_counter()
    rows = run_multiparty_benchmark(
        dataset,
        methods,
        parties,
        [None],
        eps,
        trials,
        folds=5,
        lam=1e-4,
        hamm_lam=1e-4,
        public_fraction=0.1,
        norm_quantile=0.5,
        seed=seed,
    )
    return {
        "config": {
            "dataset": dataset,
            "parties": parties,
            "eps": eps,
            "trials": trials,
            "hamm_lam": 1e-4,
            "public_fraction": 0.1,
            "local_classifier": "LogisticRegression(C=100, liblinear)"
            if dataset == "adult"
            else "NearestCentroid",
        },
        "seconds": time.perf_counter() - start,
        "rows": _rows_dicts(rows),
    }


def _print_rajkumar(result: dict) -> None:
    print("\nRajkumar & Agarwal fig. 2 (breast cancer) — ours vs paper (test error)")
    for c in result["comparison_with_paper"]:
        flag = "  <-- beyond ±0.02" if c["beyond_reading_error"] else ""
        print(
            f"  {c['method']:7s} K={c['parties']:2d} {c['skew']:28s} eps={c['epsilon']:<5g} "
            f"paper={c['paper'][0]:.2f}-{c['paper'][1]:.2f} ours={c['ours']:.3f}±{c['ours_sem']:.3f}{flag}"
        )
    for hit in result["epsilon_to_reach_paper"]:
        print(
            f"  {hit['method']} reaches {hit['target_error']:.2f}±0.02 "
            f"first at eps={hit['first_epsilon_on_grid']}"
        )
    print("  noise-to-signal in the GOP objective (E||eta||/n over ||data gradient at 0||):")
    for d in result["diagnostics"]:
        print(f"    eps={d['epsilon']:<5g} sigma*={d['sigma_star']:8.1f} ratio={d['noise_to_signal']:6.2f}")


def _print_hamm(name: str, result: dict) -> None:
    print(f"\nHamm et al. on {name} (error | AUC; noise-free ERM in brackets)")
    for r in sorted(result["rows"], key=lambda r: (r["parties"], r["method"], r["epsilon"] or 0)):
        if r["method"] not in ("hamm_vote", "hamm_soft") and r["epsilon"] is not None:
            continue
        auc = "" if r["auc_mean"] is None else f" | auc {r['auc_mean']:.3f}"
        free = (
            ""
            if r["noise_free_error_mean"] is None
            else f"  [err {r['noise_free_error_mean']:.3f}"
            + ("" if r["noise_free_auc_mean"] is None else f", auc {r['noise_free_auc_mean']:.3f}")
            + "]"
        )
        eps = "inf" if r["epsilon"] is None else f"{r['epsilon']:g}"
        print(f"  M={r['parties']:6d} {r['method']:9s} eps={eps:6s} err {r['error_mean']:.3f}{auc}{free}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trials", type=int, default=2, help="repetitions of the 5-fold split (breast cancer)"
    )
    parser.add_argument("--quick", action="store_true", help="small grids, for a smoke run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    result: dict = {
        "benchmark": "multiparty",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "processor": platform.machine()},
        "note": "error = 1 - test accuracy; ratios (error_vs_batch, time_vs_batch) are against the "
        "non-private "
        "pooled model in the same run; privacy units differ across methods (record / party / report), "
        "so equal epsilon is not a like-for-like comparison",
    }
    result["rajkumar_breast_cancer"] = rajkumar(1 if args.quick else args.trials, args.quick, args.seed)
    _print_rajkumar(result["rajkumar_breast_cancer"])
    adult_parties = [1000, 5000] if args.quick else [1000, 2000, 5000, 10000, 20000]
    # Adult has one fixed split, so its trials redraw the parties and the noise (3 runs per cell).
    result["hamm_adult"] = hamm(
        "adult",
        adult_parties,
        [1.0, 10.0] if args.quick else [0.1, 1.0, 10.0, 100.0],
        1 if args.quick else 3,
        args.seed,
    )
    result["hamm_adult"]["anonml"] = _anonml_rows(
        "adult", [0.1, 1.0, 10.0], 1 if args.quick else 3, args.seed, 1e-4
    )
    _print_hamm("Adult", result["hamm_adult"])
    digit_parties = [100, 300] if args.quick else [100, 300, 1000]
    result["hamm_digits"] = hamm(
        "digits", digit_parties, [100.0, 1e4] if args.quick else [10.0, 100.0, 1e3, 1e4], 1, args.seed
    )
    _print_hamm("digits", result["hamm_digits"])
    result["seconds"] = time.perf_counter() - start
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {args.out} in {result['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
