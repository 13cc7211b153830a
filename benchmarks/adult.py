"""AnonML on UCI Adult: test AUC/F1 against the per-peer budget ε_T, and the cost of one trial.

Part 1 — the accuracy benchmark (:func:`anonml.learn.harness.run_benchmark` on Adult's split):
default mode, paper mode at both thesis settings ((k_p, k_s, k_h) = (5, 3, 2)
and (20, 1, 2)), and the non-private logistic-regression ceilings on raw and on
binned features, at ε_T ∈ {0.5, 1, 2, 4} over ``--trials`` simulations each
(private medians included; ε_T is each peer's total under sequential
composition, median answers from a separate pool). Rows go to
``benchmarks/results/adult.json``.

Part 2 — speed: one full default-mode trial at n = 32,561 (plan, private
medians, perturbation with the best mechanism per report, estimation, ledger,
ensemble) against a baseline measured in the same run: fitting scikit-learn's
``LogisticRegression`` on the same rows (one-hot categoricals, standardised
numerics). Median over ``--repeats`` alternating pairs; wall-clock seconds are
reported beside the ratio (target: one trial ≤ 5 s). Written to
``benchmarks/results/adult_timing.json``.

Part 3 (``--ablation``) — why default mode is what it is: default mode with
``combine`` ∈ {linear, logit} × ``consistency`` ∈ {norm_sub, norm_mul, ibu,
base_cut} at every ε_T, same seeds for every variant, to
``benchmarks/results/adult_ablation.json``.

Part 4 (``--profile``) — what the default loses against ``central_binned``, per trial on the bins
the private fit published: the private default; the same ensemble from the *exact* histograms of
those bins (what the privacy noise costs); logistic regression on the exact ensemble's per-feature
terms (the best reweighting of those terms, which needs the features' joint distribution: what the
additive form costs beyond that); and logistic regression on the one-hot bins (``central_binned``).
Written to ``benchmarks/results/adult_profile.json``.

Part 5 (``--pools``) — what the side pools cost: the default mode with the calibration pool's
information target (:data:`~anonml.learn.simulation.TARGET_CALIBRATION_INFORMATION`) at 1500 / 1000 /
750 / no pool, and the median pool sized by a per-question answer sd
(:data:`~anonml.privacy.median.MEDIAN_ANSWER_SD`) against the fraction alone (sd ``None``); trial t
has the same seed in every variant (paired). Test AUC, Brier score and ECE, each as mean and the
paired difference from the first variant ± its standard error, with the pools' sizes. Written to
``benchmarks/results/adult_pools.json``; with ``--rows N`` the training rows are first drawn with
replacement to N peers (a large roster of Adult's population; test rows unchanged), written to
``adult_pools_N.json``.

Run from the repository root: ``python -m benchmarks.adult [--trials 20] [--ablation] [--profile] [--pools]``.
The data is found as :func:`anonml.datasets.adult.load` finds it (``--data``,
``$ANONML_ADULT_DIR``, else the gzip-compressed copy shipped in ``anonml/datasets/files/adult``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss, roc_auc_score

from anonml.datasets import adult
from anonml.learn import simulation
from anonml.learn.ensemble import default_ensemble
from anonml.learn.harness import (
    binned_lr_scores,
    expected_calibration_error,
    raw_design,
    run_benchmark,
    write_results,
)
from anonml.learn.histograms import exact_histogram
from anonml.learn.model import AnonMLClassifier

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def time_one_trial(data: adult.AdultDataset, repeats: int) -> dict[str, float]:
    """Median seconds of one default-mode fit at ε_T = 1 and of the LR baseline, alternating."""
    ratios, trial_s, base_s = [], [], []
    for r in range(repeats):
        model = AnonMLClassifier(epsilon=1.0, features=list(data.features), random_state=r)
        start = time.perf_counter()
        model.fit(data.X_train, data.y_train)
        t_trial = time.perf_counter() - start
        start = time.perf_counter()
        train, _ = raw_design(data)
        LogisticRegression(max_iter=2000).fit(train, data.y_train)
        t_base = time.perf_counter() - start
        trial_s.append(t_trial)
        base_s.append(t_base)
        ratios.append(t_trial / t_base)
    return {
        "n_peers": int(data.X_train.shape[0]),
        "trial_seconds_median": statistics.median(trial_s),
        "trial_seconds_max": max(trial_s),
        "baseline_seconds_median": statistics.median(base_s),
        "ratio_median": statistics.median(ratios),
        "repeats": repeats,
    }


ABLATION = [
    (combine, consistency)
    for combine in ("linear", "logit")
    for consistency in ("norm_sub", "norm_mul", "ibu", "base_cut")
]


def ablation(data: adult.AdultDataset, epsilons: list[float], trials: int, seed: int) -> list[dict]:
    """Mean ± sd test AUC of default-mode variants; trial t uses the same seed for every variant."""
    rows = []
    for eps in epsilons:
        for combine, consistency in ABLATION:
            aucs = []
            for t in range(trials):
                model = AnonMLClassifier(
                    epsilon=eps,
                    combine=combine,
                    consistency=consistency,
                    features=list(data.features),
                    random_state=np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(7, t))),
                )
                model.fit(data.X_train, data.y_train)
                aucs.append(roc_auc_score(data.y_test, model.decision_function(data.X_test)))
            rows.append(
                {
                    "epsilon": eps,
                    "combine": combine,
                    "consistency": consistency,
                    "auc_mean": float(np.mean(aucs)),
                    "auc_std": float(np.std(aucs, ddof=1)),
                    "trials": trials,
                }
            )
            print(
                f"  ablation ε={eps:g} {combine:<6} {consistency:<8} AUC {rows[-1]['auc_mean']:.4f}",
                flush=True,
            )
    return rows


def profile(data: adult.AdultDataset, epsilons: list[float], trials: int, seed: int) -> list[dict]:
    """Test AUC of the private default, its exact-histogram twin, the reweighted terms and LR on the bins."""
    rows = []
    for eps in epsilons:
        names = ("private", "exact_histograms", "reweighted", "binned_lr")
        aucs: dict[str, list[float]] = {k: [] for k in names}
        for t in range(trials):
            model = AnonMLClassifier(
                epsilon=eps,
                features=list(data.features),
                random_state=np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(7, t))),
            ).fit(data.X_train, data.y_train)
            aucs["private"].append(roc_auc_score(data.y_test, model.decision_function(data.X_test)))
            bins = model.binning_
            train, test = bins.transform(data.X_train), bins.transform(data.X_test)
            exact = default_ensemble(
                [exact_histogram(train[:, [j]], data.y_train, (j,), (b,)) for j, b in enumerate(bins.n_bins)]
            )
            aucs["exact_histograms"].append(roc_auc_score(data.y_test, exact.decision_function(test)))
            # one column per feature: its term of the exact ensemble
            terms_train = np.column_stack([c.values(train) for c in exact.components])
            terms_test = np.column_stack([c.values(test) for c in exact.components])
            lr = LogisticRegression(max_iter=2000).fit(terms_train, data.y_train)
            aucs["reweighted"].append(roc_auc_score(data.y_test, lr.decision_function(terms_test)))
            scores, _, _ = binned_lr_scores(model, data)
            aucs["binned_lr"].append(roc_auc_score(data.y_test, scores))
        row: dict = {"epsilon": eps, "trials": trials, "numeric_bins": int(model.n_bins_)}
        for name, values in aucs.items():
            se = float(np.std(values, ddof=1) / np.sqrt(trials))
            row[name] = {"mean": float(np.mean(values)), "se": se}
        rows.append(row)
        print(
            f"  profile ε={eps:g}: "
            + ", ".join(f"{k} {v['mean']:.4f}" for k, v in row.items() if isinstance(v, dict)),
            flush=True,
        )
    return rows


#: Part 5's variants: name → (calibration information target or None for no pool, median answer sd).
POOL_VARIANTS: dict[str, tuple[float | None, float | None]] = {
    "cal1500_median_fraction": (1500.0, None),
    "cal1000_median_fraction": (1000.0, None),
    "cal750_median_fraction": (750.0, None),
    "nocal_median_fraction": (None, None),
    "cal1500_median_sd0.03": (1500.0, 0.03),
    "cal1500_median_sd0.05": (1500.0, 0.05),
    "cal1500_median_sd0.1": (1500.0, 0.1),
    "cal1500_median_sd0.15": (1500.0, 0.15),
    "cal1500_median_sd0.2": (1500.0, 0.2),
}


@contextmanager
def pool_rules(target: float | None, answer_sd: float | None) -> Iterator[float]:
    """Set the pools' rules for a fit; yields the classifier's ``calibration_fraction`` (0: no pool)."""
    saved = simulation.TARGET_CALIBRATION_INFORMATION, simulation.MEDIAN_ANSWER_SD
    simulation.TARGET_CALIBRATION_INFORMATION = target if target is not None else saved[0]
    simulation.MEDIAN_ANSWER_SD = answer_sd
    try:
        yield AnonMLClassifier().calibration_fraction if target is not None else 0.0
    finally:
        simulation.TARGET_CALIBRATION_INFORMATION, simulation.MEDIAN_ANSWER_SD = saved


def pools(
    data: adult.AdultDataset, epsilons: list[float], trials: int, seed: int, variants: list[str]
) -> list[dict]:
    """AUC, Brier and ECE of the named :data:`POOL_VARIANTS`, paired with the first named per trial."""
    unknown = [v for v in variants if v not in POOL_VARIANTS]
    if unknown or not variants:
        raise ValueError(f"unknown pool variants {unknown}: choose from {list(POOL_VARIANTS)}")
    rows = []
    for eps in epsilons:
        scores: dict[str, dict[str, list[float]]] = {}
        sizes: dict[str, list[tuple[int, int, int]]] = {}
        for name in variants:
            target, answer_sd = POOL_VARIANTS[name]
            got = scores.setdefault(name, {"auc": [], "brier": [], "ece": []})
            for t in range(trials):
                with pool_rules(target, answer_sd) as fraction:
                    model = AnonMLClassifier(
                        epsilon=eps,
                        calibration_fraction=fraction,
                        features=list(data.features),
                        random_state=np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(7, t))),
                    ).fit(data.X_train, data.y_train)
                proba = model.predict_proba(data.X_test)[:, 1]
                got["auc"].append(roc_auc_score(data.y_test, model.decision_function(data.X_test)))
                got["brier"].append(brier_score_loss(data.y_test, proba))
                got["ece"].append(expected_calibration_error(data.y_test, proba))
                acc = model.privacy_
                median_pool = data.X_train.shape[0] - acc.calibration_peers - acc.report_peers
                sizes.setdefault(name, []).append((median_pool, acc.calibration_peers, acc.report_peers))
        first = variants[0]
        for name, got in scores.items():
            row: dict = {"epsilon": eps, "variant": name, "trials": trials}
            mean_sizes = np.mean(sizes[name], axis=0)
            row["median_pool"], row["calibration_peers"], row["report_peers"] = (float(v) for v in mean_sizes)
            for metric, values in got.items():
                diff = np.asarray(values) - np.asarray(scores[first][metric])
                row[metric] = float(np.mean(values))
                row[f"{metric}_diff"] = float(np.mean(diff))
                spread = float(np.std(diff, ddof=1) / np.sqrt(trials)) if trials > 1 else 0.0
                row[f"{metric}_diff_se"] = spread
            rows.append(row)
            shown = mean_sizes.round().astype(int).tolist()
            print(
                f"  pools ε={eps:g} {name:<24} pools {shown}  AUC {row['auc']:.4f} "
                f"({row['auc_diff']:+.4f}±{row['auc_diff_se']:.4f})  Brier {row['brier']:.4f} "
                f"({row['brier_diff']:+.4f}±{row['brier_diff_se']:.4f})  ECE {row['ece']:.4f}",
                flush=True,
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--eps", default="0.5,1,2,4")
    parser.add_argument("--methods", default="default,paper,central,ldp_nb")
    parser.add_argument("--repeats", type=int, default=5, help="timing pairs")
    parser.add_argument("--data", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-accuracy", action="store_true")
    parser.add_argument("--ablation", action="store_true", help="also run the default-mode ablation")
    parser.add_argument("--only-ablation", action="store_true")
    parser.add_argument("--profile", action="store_true", help="only the loss profile (Part 4)")
    parser.add_argument("--pools", action="store_true", help="only the side pools' costs (Part 5)")
    parser.add_argument(
        "--variants", default=",".join(POOL_VARIANTS), help="Part 5: variants, first = reference"
    )
    parser.add_argument("--rows", type=int, default=None, help="Part 5: training rows drawn with replacement")
    args = parser.parse_args(argv)

    data = adult.load(args.data)
    RESULTS.mkdir(parents=True, exist_ok=True)
    epsilons = [float(e) for e in args.eps.split(",")]
    if args.profile:
        path = RESULTS / "adult_profile.json"
        rows = profile(data, epsilons, args.trials, args.seed)
        path.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path}")
        return 0
    if args.pools:
        path = RESULTS / "adult_pools.json"
        if args.rows is not None:
            if args.rows < 1:
                parser.error(f"--rows must be a positive number of training rows, got {args.rows}")
            drawn = np.random.default_rng(args.seed).integers(0, data.X_train.shape[0], args.rows)
            data = dataclasses.replace(data, X_train=data.X_train[drawn], y_train=data.y_train[drawn])
            path = RESULTS / f"adult_pools_{args.rows}.json"
        rows = pools(data, epsilons, args.trials, args.seed, args.variants.split(","))
        path.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path}")
        return 0
    if args.only_ablation:
        rows = ablation(data, epsilons, args.trials, args.seed)
        path = RESULTS / "adult_ablation.json"
        path.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path}")
        return 0

    timing = time_one_trial(data, args.repeats)
    timing.update(
        {
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "cpus": os.cpu_count() or 0,
        }
    )
    (RESULTS / "adult_timing.json").write_text(json.dumps(timing, indent=2) + "\n", encoding="utf-8")
    print(
        f"one default-mode trial at n={timing['n_peers']}: {timing['trial_seconds_median']:.2f} s "
        f"(max {timing['trial_seconds_max']:.2f} s); LR baseline {timing['baseline_seconds_median']:.2f} s; "
        f"ratio {timing['ratio_median']:.2f}"
    )
    if args.skip_accuracy:
        return 0

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    start = time.perf_counter()
    done = [0]

    def tick(description: str) -> None:
        done[0] += 1
        if done[0] % 20 == 0:
            print(f"  {done[0]} fits, {time.perf_counter() - start:.0f} s ({description})", flush=True)

    rows = run_benchmark(
        data, methods=methods, epsilons=epsilons, trials=args.trials, seed=args.seed, on_trial=tick
    )
    path = write_results(rows, RESULTS / "adult.json")
    print(f"{'method':<16}{'kp/ks/kh':>10}{'eps':>6}{'AUC':>18}{'F1':>18}{'Brier':>8}{'ECE':>7}{'n':>4}")
    for r in rows:
        plan = "-" if r.kp is None else f"{r.kp}/{r.ks}/{r.kh}"
        eps = "-" if r.epsilon is None else f"{r.epsilon:g}"
        print(
            f"{r.method:<16}{plan:>10}{eps:>6}{r.auc_mean:>10.4f} ± {r.auc_std:.4f}"
            f"{r.f1_mean:>10.4f} ± {r.f1_std:.4f}{r.brier_mean:>8.4f}{r.ece_mean:>7.4f}{r.trials:>4}"
        )
    print(f"wrote {path} in {time.perf_counter() - start:.0f} s")
    if args.ablation:
        ablated = ablation(data, epsilons, args.trials, args.seed)
        (RESULTS / "adult_ablation.json").write_text(json.dumps(ablated, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {RESULTS / 'adult_ablation.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
