"""Never worse than the trivial predictor: AnonML's defaults against the prior, the base rate and the median.

A private model whose noise swamps its signal must fall back to what needs no
features: the class prior (multiclass log loss, and the majority class for
accuracy), the base rate (binary Brier score), the training median
(regression MAE). This benchmark fits the README pattern — feature specs with
public ranges, ``AnonMLClassifier(epsilon=ε, features=specs)`` /
``AnonMLRegressor`` with defaults otherwise — on data sets that ship with
scikit-learn and on the synthetic sets the tests use, over seeded 70/30 splits
(stratified for classes), and reports per set and ε the model's figure, the
trivial predictor's, and their paired difference (model − trivial), each as
mean ± standard error over the splits.

Sets: multiclass ``wine`` (178 rows), ``iris`` (150), ``digits`` (1,797),
``synthetic3`` (the three-class generator of ``tests/learn/test_frames.py``,
12,000 rows); binary ``breast_cancer`` (569); regression ``diabetes`` (442)
and ``synthetic_reg`` (the generator of ``tests/learn/test_regression.py``,
30,000 rows). Ranges of the scikit-learn sets are the published data's min/max
widened by 5 % (as :func:`anonml.datasets.tabular.breast_cancer`; digits'
pixels are [0, 16] by construction), so they are public for a published data
set but read from the same rows.

Run from the repository root: ``python -m benchmarks.trivial_floors [--splits 10] [--sets wine,diabetes]``;
writes ``benchmarks/results/trivial_floors.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from sklearn.metrics import brier_score_loss, log_loss, mean_absolute_error, roc_auc_score
from sklearn.model_selection import train_test_split

from anonml.learn.model import AnonMLClassifier
from anonml.learn.notices import DataWarning, SmallGroupWarning
from anonml.learn.regression import AnonMLRegressor
from anonml.model import FeatureKind, FeatureSpec
from benchmarks.reporting import RESULTS, machine, now, write_json

EPSILONS = (0.5, 1.0, 2.0, 4.0)


@dataclass(frozen=True)
class FloorSet:
    """A data set, its feature specs, its task and (regression) the target's public range."""

    name: str
    X: np.ndarray
    y: np.ndarray
    specs: tuple[FeatureSpec, ...]
    task: str  # "multiclass" | "binary" | "regression"
    target_range: tuple[float, float] | None = None


def _padded_specs(X: np.ndarray, names: list[str]) -> tuple[FeatureSpec, ...]:
    low, high = X.min(axis=0), X.max(axis=0)
    pad = np.maximum(0.05 * (high - low), 1e-6)
    return tuple(
        FeatureSpec(name=n, low=float(lo - p), high=float(hi + p))
        for n, lo, hi, p in zip(names, low, high, pad, strict=True)
    )


def _sklearn_set(loader: Callable[..., Any], name: str, task: str) -> FloorSet:
    bunch = loader()
    X = np.asarray(bunch.data, dtype=float)
    names = [
        str(n).replace(" ", "_")
        for n in getattr(bunch, "feature_names", [f"x{j}" for j in range(X.shape[1])])
    ]
    if name == "digits":
        specs = tuple(FeatureSpec(name=n, low=0.0, high=16.0) for n in names)
    else:
        specs = _padded_specs(X, names)
    y = np.asarray(bunch.target)
    if task == "regression":
        y = y.astype(float)
        pad = 0.05 * (y.max() - y.min())
        return FloorSet(name, X, y, specs, task, (float(y.min() - pad), float(y.max() + pad)))
    return FloorSet(name, X, y.astype(np.int64), specs, task)


def synthetic_three_class(n: int = 12_000, seed: int = 7) -> FloorSet:
    """The three-class generator of tests/learn/test_frames.py (a categorical and a numeric feature)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, size=n)
    a = np.where(
        y == 0,
        rng.choice(3, n, p=[0.7, 0.2, 0.1]),
        np.where(y == 1, rng.choice(3, n, p=[0.15, 0.7, 0.15]), rng.choice(3, n, p=[0.1, 0.2, 0.7])),
    )
    b = np.clip(rng.normal(loc=y.astype(float), scale=1.0), -3, 5)
    specs = (
        FeatureSpec(name="a", kind=FeatureKind.CATEGORICAL, categories=("p", "q", "r")),
        FeatureSpec(name="b", low=-3.0, high=5.0),
    )
    return FloorSet(
        "synthetic3", np.column_stack([a, b]).astype(float), y.astype(np.int64), specs, "multiclass"
    )


def synthetic_correlated(n: int = 30_000, seed: int = 31) -> FloorSet:
    """Five ordered classes (shares 0.35 / 0.25 / 0.20 / 0.12 / 0.08) seen through six noisy copies of
    one latent score and two pure-noise features (public range [−5, 7]): a tuning set (2026-11-28)
    where summed per-feature terms count the same evidence six times, so a K ≥ 3 model without a
    calibration pool is overconfident — the case the class map exists for."""
    rng = np.random.default_rng(seed)
    y = rng.choice(5, size=n, p=[0.35, 0.25, 0.20, 0.12, 0.08])
    latent = rng.normal(loc=0.6 * y, scale=1.0)
    copies = latent[:, None] + rng.normal(scale=0.5, size=(n, 6))
    X = np.clip(np.column_stack([copies, rng.normal(size=(n, 2))]), -5.0, 7.0)
    specs = tuple(FeatureSpec(name=f"x{j}", low=-5.0, high=7.0) for j in range(8))
    return FloorSet("correlated5", X, y.astype(np.int64), specs, "multiclass")


def synthetic_independent(n: int = 53_940, seed: int = 41) -> FloorSet:
    """Five ordered classes (shares 0.30 / 0.25 / 0.20 / 0.15 / 0.10), eight features each drawn
    independently given the class as ``N(0.25·y, 1)`` (public range [−5, 6]): a tuning set (2026-11-28)
    where the summed per-feature terms are the right model, so a class map has little to correct and
    a K ≥ 3 calibration pool mostly costs its peers' feature reports — the opposite of
    :func:`synthetic_correlated`. 53,940 rows (the size of ``diamonds``, where that cost was seen at
    ε_T = 1), so both sets' pools are as large as that set's."""
    rng = np.random.default_rng(seed)
    y = rng.choice(5, size=n, p=[0.30, 0.25, 0.20, 0.15, 0.10])
    X = np.clip(rng.normal(loc=0.25 * y[:, None], scale=1.0, size=(n, 8)), -5.0, 6.0)
    specs = tuple(FeatureSpec(name=f"x{j}", low=-5.0, high=6.0) for j in range(8))
    return FloorSet("independent5", X, y.astype(np.int64), specs, "multiclass")


def synthetic_regression(n: int = 30_000, seed: int = 0) -> FloorSet:
    """The generator of tests/learn/test_regression.py: y = 5a + 1.5b + N(0, 2²)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = rng.uniform(0, 10, n)
    y = 5.0 * a + 1.5 * b + rng.normal(scale=2.0, size=n)
    specs = (
        FeatureSpec(name="a", kind=FeatureKind.CATEGORICAL, categories=("p", "q", "r")),
        FeatureSpec(name="b", low=0.0, high=10.0),
    )
    return FloorSet(
        "synthetic_reg", np.column_stack([a, b]).astype(float), y, specs, "regression", (-5.0, 30.0)
    )


def synthetic_correlated_regression(n: int = 6_000, seed: int = 5) -> FloorSet:
    """Eight features sharing one latent factor (each ``0.8·z + 0.6·noise``, pairwise correlation
    0.64, clipped to the public range [−4, 4]) and a linear target ``10 + Σ w_j x_j + N(0, 2²)``
    (public range [−20, 40]): a tuning set (2026-11-29) where summed per-feature terms count the
    same evidence eight times, the regression case of :func:`synthetic_correlated`."""
    rng = np.random.default_rng(seed)
    latent = rng.normal(size=n)
    X = 0.8 * latent[:, None] + 0.6 * rng.normal(size=(n, 8))
    y = 10.0 + X @ rng.uniform(0.5, 1.5, 8) + rng.normal(scale=2.0, size=n)
    specs = tuple(FeatureSpec(name=f"x{j}", low=-4.0, high=4.0) for j in range(8))
    return FloorSet("correlated_reg", np.clip(X, -4.0, 4.0), y, specs, "regression", (-20.0, 40.0))


#: Class shares of :func:`synthetic_skewed` (majority 0.45; the prior's log loss 1.24 nats, uniform's 1.39).
SKEWED_PRIOR = (0.45, 0.3, 0.15, 0.1)


def synthetic_skewed(n: int = 1_500, seed: int = 11) -> FloorSet:
    """Four skewed classes (:data:`SKEWED_PRIOR`), a weak numeric and a weak categorical feature.

    A tuning set added in the third pass: the scikit-learn multiclass sets all have near-uniform
    priors, where a prior shrunk toward uniform costs nothing, so they could not show that cost.
    """
    rng = np.random.default_rng(seed)
    y = rng.choice(len(SKEWED_PRIOR), size=n, p=SKEWED_PRIOR)
    a = np.where(rng.random(n) < 0.25, y % 3, rng.integers(0, 3, n))
    b = np.clip(rng.normal(loc=0.3 * y, scale=1.0), -4, 5)
    specs = (
        FeatureSpec(name="a", kind=FeatureKind.CATEGORICAL, categories=("p", "q", "r")),
        FeatureSpec(name="b", low=-4.0, high=5.0),
    )
    return FloorSet("skewed4", np.column_stack([a, b]).astype(float), y.astype(np.int64), specs, "multiclass")


def synthetic_skewed_regression(n: int = 2_000, seed: int = 12) -> FloorSet:
    """A right-skewed target (lognormal, public range [0, 40]), one weak feature: a third-pass tuning set."""
    rng = np.random.default_rng(seed)
    b = rng.uniform(0, 10, n)
    y = np.clip(np.exp(rng.normal(loc=1.0 + 0.05 * b, scale=0.8)), 0.0, 40.0)
    specs = (FeatureSpec(name="b", low=0.0, high=10.0),)
    return FloorSet("skewed_reg", b[:, None], y, specs, "regression", (0.0, 40.0))


def synthetic_weak_binary(n: int = 20_000, seed: int = 21) -> FloorSet:
    """Nine standard-normal features (public range [−5, 5]), four of them weakly predictive (logistic,
    24 % positive): a third-pass tuning set for the calibration pool, where a weak signal meets a pool
    big enough to form (the scikit-learn binary set is too small for one)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 9))
    logit = -1.2 + X[:, :4] @ np.array([0.35, 0.25, 0.2, 0.15])
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int64)
    specs = tuple(FeatureSpec(name=f"x{j}", low=-5.0, high=5.0) for j in range(9))
    return FloorSet("weak_binary", X, y, specs, "binary")


def load_sets(names: list[str]) -> list[FloorSet]:
    """The named sets (module docstring)."""
    from sklearn import datasets  # noqa: PLC0415

    makers: dict[str, Callable[[], FloorSet]] = {
        "wine": lambda: _sklearn_set(datasets.load_wine, "wine", "multiclass"),
        "iris": lambda: _sklearn_set(datasets.load_iris, "iris", "multiclass"),
        "digits": lambda: _sklearn_set(datasets.load_digits, "digits", "multiclass"),
        "synthetic3": synthetic_three_class,
        "breast_cancer": lambda: _sklearn_set(datasets.load_breast_cancer, "breast_cancer", "binary"),
        "diabetes": lambda: _sklearn_set(datasets.load_diabetes, "diabetes", "regression"),
        "synthetic_reg": synthetic_regression,
        "skewed4": synthetic_skewed,
        "skewed_reg": synthetic_skewed_regression,
        "correlated_reg": synthetic_correlated_regression,
        "correlated5": synthetic_correlated,
        # correlated5's generator at independent5's (and diamonds') 53,940 rows: the K >= 3 pool rule
        # sees only (n, ε, K), so both tuning sets get the same pools at that size.
        "correlated5_large": lambda: replace(synthetic_correlated(n=53_940), name="correlated5_large"),
        "independent5": synthetic_independent,
        "weak_binary": synthetic_weak_binary,
    }
    unknown = [n for n in names if n not in makers]
    if unknown:
        raise SystemExit(f"unknown set(s) {unknown}; known: {sorted(makers)}")
    return [makers[n]() for n in names]


def split(data: FloorSet, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A seeded 70/30 split, stratified for classes."""
    stratify = None if data.task == "regression" else data.y
    return train_test_split(data.X, data.y, test_size=0.3, random_state=seed, stratify=stratify)


@contextmanager
def _expected_notices() -> Iterator[None]:
    """The notices these sets raise by design, silenced while a default fits and predicts."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SmallGroupWarning)  # tiny sets are expected to be noisy
        warnings.simplefilter("ignore", DataWarning)  # digits has blank pixels in every row
        yield


def fit_default(
    data: FloorSet, epsilon: float, seed: int, **params: Any
) -> AnonMLClassifier | AnonMLRegressor:
    """The README pattern on one split's training rows: specs with public ranges, ε, defaults otherwise
    (plus ``params``); a regressor for a regression set, over its public target range."""
    X_tr, _, y_tr, _ = split(data, seed)
    with _expected_notices():
        if data.task == "regression":
            assert data.target_range is not None
            return AnonMLRegressor(
                target_range=data.target_range,
                classifier_params={
                    "epsilon": epsilon,
                    "features": list(data.specs),
                    "random_state": seed,
                    **params,
                },
            ).fit(X_tr, y_tr)
        model = AnonMLClassifier(epsilon=epsilon, features=list(data.specs), random_state=seed, **params)
        return model.fit(X_tr, y_tr)


def evaluate_split(data: FloorSet, epsilon: float, seed: int, **params: Any) -> dict[str, float]:
    """The model's and the trivial predictor's figures on one split (README defaults plus ``params``)."""
    return split_scores(data, seed, fit_default(data, epsilon, seed, **params))


def split_scores(data: FloorSet, seed: int, model: AnonMLClassifier | AnonMLRegressor) -> dict[str, float]:
    """A fitted default's figures on split ``seed``'s test rows beside the trivial predictor's."""
    _, X_te, y_tr, y_te = split(data, seed)
    if data.task == "regression":
        median = float(np.median(y_tr))
        with _expected_notices():
            predicted = model.predict(X_te)
        return {
            "mae": mean_absolute_error(y_te, predicted),
            "mae_trivial": mean_absolute_error(y_te, np.full(y_te.size, median)),
        }
    classes = np.unique(y_tr)
    prior = np.array([np.mean(y_tr == c) for c in classes])
    with _expected_notices():  # prediction under the fit's filter, as when one function did both
        proba = model.predict_proba(X_te)
        predicted = model.predict(X_te) if data.task == "multiclass" else None
    if data.task == "binary":
        return {
            "brier": brier_score_loss(y_te, proba[:, 1]),
            "brier_trivial": brier_score_loss(y_te, np.full(y_te.size, prior[1])),
            "auc": roc_auc_score(y_te, proba[:, 1]),
        }
    return {
        "log_loss": log_loss(y_te, proba, labels=classes),
        "log_loss_trivial": log_loss(y_te, np.tile(prior, (y_te.size, 1)), labels=classes),
        "accuracy": float(np.mean(predicted == y_te)),
        "accuracy_trivial": float(np.mean(y_te == classes[np.argmax(prior)])),
    }


def summarise(values: ArrayLike) -> dict[str, float]:
    """Mean and standard error over splits."""
    arr = np.asarray(values, dtype=float)
    se = float(arr.std(ddof=1) / np.sqrt(arr.size)) if arr.size > 1 else float("nan")
    return {"mean": float(arr.mean()), "se": se}


#: Per task, (metric, trivial metric, True when larger is better).
METRICS: dict[str, list[tuple[str, str, bool]]] = {
    "multiclass": [("log_loss", "log_loss_trivial", False), ("accuracy", "accuracy_trivial", True)],
    "binary": [("brier", "brier_trivial", False)],
    "regression": [("mae", "mae_trivial", False)],
}


def floor_rows(data: FloorSet, epsilon: float, seeds: range, **params: Any) -> list[dict[str, Any]]:
    """One row per metric: model and trivial mean ± s.e., their paired difference, splits below the floor."""
    return floor_rows_of(data, epsilon, [evaluate_split(data, epsilon, seed, **params) for seed in seeds])


def floor_rows_of(data: FloorSet, epsilon: float, runs: list[dict[str, float]]) -> list[dict[str, Any]]:
    """:func:`floor_rows` from the splits' :func:`split_scores`, already computed."""
    rows = []
    for metric, trivial, higher in METRICS[data.task]:
        diff = [r[metric] - r[trivial] for r in runs]
        worse = sum((d < 0) if higher else (d > 0) for d in diff)
        rows.append(
            {
                "set": data.name,
                "rows": int(data.X.shape[0]),
                "epsilon": epsilon,
                "metric": metric,
                "model": summarise([r[metric] for r in runs]),
                "trivial": summarise([r[trivial] for r in runs]),
                "difference": summarise(diff),
                "splits_worse": int(worse),
                "splits": len(runs),
                **({"auc": summarise([r["auc"] for r in runs])} if "auc" in runs[0] else {}),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=10)
    parser.add_argument(
        "--sets",
        default="wine,iris,digits,synthetic3,skewed4,breast_cancer,diabetes,synthetic_reg,skewed_reg,correlated_reg",
    )
    parser.add_argument("--out", default=str(RESULTS / "trivial_floors.json"))
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for data in load_sets(args.sets.split(",")):
        for epsilon in EPSILONS:
            rows.extend(floor_rows(data, epsilon, range(args.splits)))
            print(f"{data.name} ε={epsilon} done ({time.perf_counter() - started:.0f} s)", flush=True)
    write_json(
        Path(args.out),
        {
            "benchmark": "trivial_floors",
            "when": now(),
            "machine": machine(),
            "splits": args.splits,
            "seconds": round(time.perf_counter() - started, 1),
            "rows": rows,
        },
    )
    print(f"{'set':14} {'ε':>4} {'metric':9} {'model':>17} {'trivial':>17} {'model − trivial':>17} worse")
    for r in rows:
        cells = [f"{r[k]['mean']:.4f} ± {r[k]['se']:.4f}" for k in ("model", "trivial")]
        diff = f"{r['difference']['mean']:+.4f} ± {r['difference']['se']:.4f}"
        print(
            f"{r['set']:14} {r['epsilon']:>4g} {r['metric']:9} {cells[0]:>17} {cells[1]:>17} {diff:>17} "
            f"{r['splits_worse']}/{r['splits']}"
        )


if __name__ == "__main__":
    main()
