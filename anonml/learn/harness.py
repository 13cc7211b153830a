"""The Adult experiment: test AUC and F1 of AnonML's modes against ε_T, with baselines.

Methods (each trial trains on ``adult.data`` and scores on ``adult.test``):

* ``default`` — :class:`~anonml.learn.model.AnonMLClassifier` in default mode
  (one single-feature partition per feature unless ``kp/ks/kh`` are given);
* ``paper`` — paper mode, by default at both thesis settings
  (k_p, k_s, k_h) = (5, 3, 2) and (20, 1, 2), one row each;
* ``central`` — two non-private logistic-regression ceilings: ``central_raw``
  on the raw features (numeric standardised, categorical one-hot; one
  deterministic fit, ``epsilon = None``) and ``central_binned`` on the same
  private bins the default mode published in that trial;
* ``majority`` — always predicts the training majority (AUC 0.5, F1 0);
* ``ldp_nb`` — the plain LDP naive-Bayes baseline
  (:mod:`anonml.learn.baselines`): one peer group per feature, k-RR or OUE at
  the full ε_T, counts clipped and smoothed; same data, same ε_T;
* ``ldp_lr_pm`` / ``ldp_lr_hm`` — LDP logistic regression by stochastic
  gradient, one clipped gradient per peer through the Piecewise / Hybrid
  Mechanism with k-of-d sampling (Wang et al., ICDE 2019;
  :class:`~anonml.learn.baselines.LdpLogisticRegression`);
* ``marginal_nb`` / ``marginal_tan`` — marginal-based learning (CALM, Zhang et
  al., CCS 2018): one (feature, label) or (feature, feature, label) marginal per
  peer, debiased, Norm-Sub and overlap consistency, then naive Bayes or a
  tree-augmented naive Bayes (:class:`~anonml.learn.baselines.LdpMarginalClassifier`).

Every private method of a trial sees the same split at the same ε_T.

Every row also reports calibration of ``predict_proba`` on the test set: the
Brier score (the base-rate predictor's is in ``brier_base``), the log loss
(the base rate's in ``log_loss_base``) and the expected
calibration error over 10 equal-width probability bins,
``ECE = Σ_b (n_b/n)·|ȳ_b − p̄_b|``; and, for AnonML's modes, the conditional
central ε by shuffling (:mod:`anonml.privacy.amplification`) beside the local ε_T.

The harness runs on any split with ``X_train, y_train, X_test, y_test`` and
``features`` (:class:`TabularSplit`), not only Adult: ``run_benchmark(adult.load(), ...)``
runs it on Adult's fixed split (:func:`anonml.datasets.adult.load`).

ε_T is every peer's total privacy loss under sequential composition: report
peers spend it over their k_h reports, median-pool peers on their one answer
(see :class:`~anonml.learn.simulation.PrivacyAccounting`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss, f1_score, log_loss, roc_auc_score
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from anonml.learn.baselines import LdpLogisticRegression, LdpMarginalClassifier, fit_ldp_naive_bayes
from anonml.learn.binning import Binning
from anonml.learn.model import AnonMLClassifier
from anonml.learn.plotting import require_pyplot
from anonml.model import FeatureKind, FeatureSpec

__all__ = [
    "METHODS",
    "THESIS_PAPER_PLANS",
    "ResultRow",
    "MethodPlan",
    "expand_methods",
    "count_trials",
    "raw_design",
    "binned_design",
    "write_results",
    "plot_results",
    "run_benchmark",
    "TabularSplit",
    "expected_calibration_error",
]

METHODS = (
    "default",
    "paper",
    "central",
    "majority",
    "ldp_nb",
    "ldp_lr_pm",
    "ldp_lr_hm",
    "marginal_nb",
    "marginal_tan",
)
#: The ε-dependent methods built from :mod:`anonml.learn.baselines` estimators.
BASELINE_ESTIMATORS: dict[str, Callable[[float, Sequence[FeatureSpec], np.random.Generator], Any]] = {
    "ldp_lr_pm": lambda e, f, r: LdpLogisticRegression(
        epsilon=e, features=list(f), mechanism="piecewise", random_state=r
    ),
    "ldp_lr_hm": lambda e, f, r: LdpLogisticRegression(
        epsilon=e, features=list(f), mechanism="hybrid", random_state=r
    ),
    "marginal_nb": lambda e, f, r: LdpMarginalClassifier(
        epsilon=e, features=list(f), order=1, random_state=r
    ),
    "marginal_tan": lambda e, f, r: LdpMarginalClassifier(
        epsilon=e, features=list(f), order=2, random_state=r
    ),
}
#: Methods fitted once per trial at every ε_T.
PRIVATE_METHODS: tuple[str, ...] = ("default", "paper", "central_binned", "ldp_nb", *BASELINE_ESTIMATORS)
#: The thesis's census settings as (k_p, k_s, k_h).
THESIS_PAPER_PLANS: tuple[tuple[int, int, int], ...] = ((5, 3, 2), (20, 1, 2))


class ResultRow(BaseModel):
    """One line of ``benchmarks/results/adult.json``: a method at one ε_T over its trials."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: str
    epsilon: float | None
    auc_mean: float
    auc_std: float
    f1_mean: float
    f1_std: float
    trials: int
    kp: int | None
    ks: int | None
    kh: int | None
    fit_seconds: float
    auc_se: float = 0.0
    brier_mean: float | None = None
    brier_base: float | None = None
    ece_mean: float | None = None
    ece_se: float | None = None
    shuffle_epsilon: float | None = None
    dataset: str = "adult"
    brier_se: float | None = None
    log_loss_mean: float | None = None
    log_loss_se: float | None = None
    log_loss_base: float | None = None


class TabularSplit(Protocol):
    """A train/test split with feature specs (an :class:`~anonml.datasets.adult.AdultDataset` is one)."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    features: tuple[FeatureSpec, ...]


def expected_calibration_error(y: np.ndarray, p: np.ndarray, n_bins: int = 10) -> float:
    """``Σ_b (n_b/n)·|ȳ_b − p̄_b|`` over ``n_bins`` equal-width bins of the predicted probability."""
    y = np.asarray(y, dtype=float)
    p = np.asarray(p, dtype=float)
    which = np.clip((p * n_bins).astype(np.int64), 0, n_bins - 1)
    total = 0.0
    for b in range(n_bins):
        inside = which == b
        if inside.any():
            total += inside.mean() * abs(y[inside].mean() - p[inside].mean())
    return float(total)


@dataclass(frozen=True)
class MethodPlan:
    """A method with its partition plan (None where the method has none)."""

    method: str
    kp: int | None = None
    ks: int | None = None
    kh: int | None = None


def expand_methods(
    methods: Sequence[str], *, kp: int | None = None, ks: int | None = None, kh: int | None = None
) -> list[MethodPlan]:
    """Turn method names into concrete plans (``paper`` → both thesis settings, ``central`` → two ceilings).

    Explicit ``kp``/``ks``/``kh`` override the plan of ``default`` and replace
    the thesis settings of ``paper``.
    """
    plans: list[MethodPlan] = []
    for name in methods:
        if name not in METHODS:
            raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS)}")
        if name == "default":
            plans.append(MethodPlan("default", kp, ks, kh))
        elif name == "paper":
            if kp is None and ks is None and kh is None:
                plans.extend(MethodPlan("paper", p, s, h) for p, s, h in THESIS_PAPER_PLANS)
            else:
                plans.append(MethodPlan("paper", kp or 5, ks or 3, kh or 2))
        elif name == "central":
            plans.extend([MethodPlan("central_raw"), MethodPlan("central_binned")])
        else:
            plans.append(MethodPlan(name))  # majority and the baselines: no plan
    return plans


def raw_design(data: TabularSplit) -> tuple[np.ndarray, np.ndarray]:
    """Design matrices of the ``central_raw`` ceiling: numeric and bool standardised, categorical one-hot."""
    numeric = [j for j, f in enumerate(data.features) if f.kind is not FeatureKind.CATEGORICAL]
    categorical = [j for j, f in enumerate(data.features) if f.kind is FeatureKind.CATEGORICAL]
    scaler = StandardScaler().fit(data.X_train[:, numeric]) if numeric else None
    encoder = (
        OneHotEncoder(
            categories=[np.arange(len(data.features[j].categories)) for j in categorical], sparse_output=False
        ).fit(data.X_train[:, categorical])
        if categorical
        else None
    )

    def design(X: np.ndarray) -> np.ndarray:
        parts = []
        if scaler is not None:
            parts.append(scaler.transform(X[:, numeric]))
        if encoder is not None:
            parts.append(encoder.transform(X[:, categorical]))
        return np.hstack(parts)

    return design(data.X_train), design(data.X_test)


def binned_design(binning: Binning, X_train: np.ndarray, X_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Design matrices of the ``central_binned`` ceiling: the one-hot of the published bins."""
    encoder = OneHotEncoder(categories=[np.arange(b) for b in binning.n_bins], sparse_output=False)
    return encoder.fit_transform(binning.transform(X_train)), encoder.transform(binning.transform(X_test))


def binned_lr_scores(
    model: AnonMLClassifier, data: TabularSplit
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Non-private LR on the one-hot of the model's published bins: test scores, predictions, P(y=1)."""
    train, test = binned_design(model.binning_, data.X_train, data.X_test)
    lr = LogisticRegression(max_iter=2000).fit(train, data.y_train)
    return lr.decision_function(test), lr.predict(test), lr.predict_proba(test)[:, 1]


# auc, f1, seconds, brier, ece, shuffle ε, log loss
Measure = tuple[float, float, float, float, float, float, float]


def _measure(
    y: np.ndarray,
    scores: np.ndarray,
    pred: np.ndarray,
    proba: np.ndarray,
    seconds: float,
    shuffle: float = float("nan"),
) -> Measure:
    """One trial's test metrics: AUC of the scores, F1 of the predictions; Brier, ECE, log loss of P(y=1)."""
    return (
        float(roc_auc_score(y, scores)),
        float(f1_score(y, pred, zero_division=0.0)),
        float(seconds),
        float(brier_score_loss(y, proba)),
        expected_calibration_error(y, proba),
        float(shuffle),
        float(log_loss(y, np.clip(proba, 1e-15, 1 - 1e-15), labels=[0, 1])),
    )


def _summarise(
    plan: MethodPlan,
    epsilon: float | None,
    rows: list[Measure],
    brier_base: float,
    dataset: str,
    log_loss_base: float | None = None,
) -> ResultRow:
    """Mean, sample sd and standard error over trials."""
    arr = np.asarray(rows, dtype=float)
    n = len(arr)

    def sd(col: int) -> float:
        return float(arr[:, col].std(ddof=1)) if n > 1 else 0.0

    shuffle = arr[:, 5]
    return ResultRow(
        method=plan.method,
        epsilon=epsilon,
        auc_mean=float(arr[:, 0].mean()),
        auc_std=sd(0),
        f1_mean=float(arr[:, 1].mean()),
        f1_std=sd(1),
        trials=n,
        kp=plan.kp,
        ks=plan.ks,
        kh=plan.kh,
        fit_seconds=float(arr[:, 2].mean()),
        auc_se=sd(0) / np.sqrt(n),
        brier_mean=float(arr[:, 3].mean()),
        brier_base=float(brier_base),
        ece_mean=float(arr[:, 4].mean()),
        ece_se=sd(4) / np.sqrt(n),
        shuffle_epsilon=None if np.all(np.isnan(shuffle)) else float(np.nanmean(shuffle)),
        dataset=dataset,
        brier_se=sd(3) / np.sqrt(n),
        log_loss_mean=float(arr[:, 6].mean()),
        log_loss_se=sd(6) / np.sqrt(n),
        log_loss_base=log_loss_base,
    )


def _private_model(
    plan: MethodPlan, epsilon: float, seed: np.random.SeedSequence, data: TabularSplit
) -> AnonMLClassifier:
    mode = "paper" if plan.method == "paper" else "default"
    return AnonMLClassifier(
        mode=mode,
        epsilon=epsilon,
        n_partitions=plan.kp,
        subset_size=plan.ks,
        n_subsets=plan.kh,
        features=list(data.features),
        random_state=np.random.default_rng(seed),
    )


def _fixed_methods(plan: MethodPlan, data: TabularSplit) -> Measure:
    """The ε-free rows: the non-private raw-feature LR ceiling and the majority predictor."""
    if plan.method == "central_raw":
        start = time.perf_counter()
        train, test = raw_design(data)
        lr = LogisticRegression(max_iter=2000).fit(train, data.y_train)
        seconds = time.perf_counter() - start
        return _measure(
            data.y_test, lr.decision_function(test), lr.predict(test), lr.predict_proba(test)[:, 1], seconds
        )
    majority = int(np.mean(data.y_train) >= 0.5)
    pred = np.full(data.y_test.shape, majority)
    return _measure(
        data.y_test, pred.astype(float), pred, np.full(pred.shape, float(np.mean(data.y_train))), 0.0
    )


def _private_trial(
    plan: MethodPlan, epsilon: float, seq: np.random.SeedSequence, data: TabularSplit
) -> tuple[Measure, AnonMLClassifier | None]:
    """One trial of a private method: its metrics and, for AnonML's modes, the fitted model."""
    if plan.method in BASELINE_ESTIMATORS:
        estimator = BASELINE_ESTIMATORS[plan.method](epsilon, data.features, np.random.default_rng(seq))
        start = time.perf_counter()
        estimator.fit(data.X_train, data.y_train)
        seconds = time.perf_counter() - start
        proba = estimator.predict_proba(data.X_test)[:, 1]
        return _measure(
            data.y_test,
            estimator.decision_function(data.X_test),
            estimator.predict(data.X_test),
            proba,
            seconds,
        ), None
    if plan.method == "ldp_nb":
        start = time.perf_counter()
        nb = fit_ldp_naive_bayes(
            data.X_train, data.y_train, data.features, epsilon=epsilon, rng=np.random.default_rng(seq)
        )
        seconds = time.perf_counter() - start
        scores = nb.decision_function(data.X_test)
        return _measure(
            data.y_test, scores, (scores > 0).astype(int), nb.predict_proba(data.X_test)[:, 1], seconds
        ), None
    model = _private_model(plan, epsilon, seq, data)
    start = time.perf_counter()
    model.fit(data.X_train, data.y_train)
    seconds = time.perf_counter() - start
    shuffle = model.privacy_.shuffle.epsilon if model.privacy_.shuffle is not None else float("nan")
    measure = _measure(
        data.y_test,
        model.decision_function(data.X_test),
        model.predict(data.X_test),
        model.predict_proba(data.X_test)[:, 1],
        seconds,
        shuffle,
    )
    return measure, model


def _trial(
    plans: Sequence[MethodPlan],
    reported: list[MethodPlan],
    epsilon: float,
    seqs: Sequence[np.random.SeedSequence],
    data: TabularSplit,
    plan_override: tuple[int | None, int | None, int | None],
) -> dict[int, Measure]:
    """Every ε-dependent plan once on one split; ``reported`` gets the plan default mode used."""
    out: dict[int, Measure] = {}
    default_model: AnonMLClassifier | None = None
    for k, plan in enumerate(plans):
        if plan.method not in PRIVATE_METHODS:
            continue
        if plan.method == "central_binned":
            if default_model is None:  # bins as the default mode would publish them
                default_model = _private_model(MethodPlan("default", *plan_override), epsilon, seqs[k], data)
                default_model.fit(data.X_train, data.y_train)
            start = time.perf_counter()
            scores, pred, proba = binned_lr_scores(default_model, data)
            out[k] = _measure(data.y_test, scores, pred, proba, time.perf_counter() - start)
            continue
        out[k], model = _private_trial(plan, epsilon, seqs[k], data)
        if plan.method == "default" and model is not None:
            default_model = default_model or model
            # Report the plan actually used (the mode's default when not given).
            reported[k] = MethodPlan("default", model.n_partitions_, model.subset_size_, model.n_subsets_)
    return out


#: The methods and per-peer totals ε_T a benchmark runs unless told otherwise.
DEFAULT_METHODS: tuple[str, ...] = ("default", "paper", "central", "ldp_nb")
DEFAULT_EPSILONS: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)


def _check_runs(trials: int, epsilons: Sequence[float]) -> None:
    """Refuse fewer than one trial and an empty or non-positive list of ε_T."""
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    if not epsilons or any(not (e > 0) for e in epsilons):
        raise ValueError(f"epsilons must be positive numbers, got {list(epsilons)}")


def run_benchmark(
    data: TabularSplit | Callable[[int], TabularSplit],
    *,
    dataset: str = "adult",
    methods: Sequence[str] = DEFAULT_METHODS,
    epsilons: Sequence[float] = DEFAULT_EPSILONS,
    trials: int = 20,
    kp: int | None = None,
    ks: int | None = None,
    kh: int | None = None,
    seed: int = 0,
    on_trial: Callable[[str], None] | None = None,
) -> list[ResultRow]:
    """Every method at every ε_T over ``trials`` trials of one data set.

    Parameters
    ----------
    data : TabularSplit, or callable trial index → TabularSplit
        A fixed train/test split (Adult's), or a fresh split per trial (data
        sets without one); every method sees the same split in a trial.
    dataset : str
        Name written into every row.
    methods : sequence of str
        Names from :data:`METHODS`.
    epsilons : sequence of float
        Per-peer totals ε_T.
    trials : int, default=20
        Trial ``t`` at ε index ``i`` draws from ``SeedSequence(seed, spawn_key=(i, t, k))``
        for plan ``k``.
    kp, ks, kh : int, optional
        Override the partition plan (see :func:`expand_methods`).
    seed : int, default=0
    on_trial : callable, optional
        Called with a description after every fitted trial (progress bars).
    """
    _check_runs(trials, epsilons)
    split = data if callable(data) else (lambda _t: data)
    fixed_split = not callable(data)
    plans = expand_methods(methods, kp=kp, ks=ks, kh=kh)
    reported = list(plans)  # the plans as run (default mode fills in its own)
    tick = on_trial or (lambda _description: None)
    results: list[ResultRow] = []
    splits = [split(t) for t in range(1 if fixed_split else trials)]
    base = float(
        np.mean([brier_score_loss(d.y_test, np.full(d.y_test.shape, np.mean(d.y_train))) for d in splits])
    )
    base_log_loss = float(
        np.mean(
            [log_loss(d.y_test, np.full(d.y_test.shape, np.mean(d.y_train)), labels=[0, 1]) for d in splits]
        )
    )

    for plan in plans:
        if plan.method in ("central_raw", "majority"):
            measures = [_fixed_methods(plan, d) for d in splits]
            results.append(_summarise(plan, None, measures, base, dataset, base_log_loss))
            tick(plan.method)

    for i, epsilon in enumerate(epsilons):
        per_plan: dict[int, list[Measure]] = {k: [] for k in range(len(plans))}
        for t in range(trials):
            data_t = splits[0 if fixed_split else t]
            seqs = [np.random.SeedSequence(seed, spawn_key=(i, t, k)) for k in range(len(plans))]
            for k, measure in _trial(plans, reported, epsilon, seqs, data_t, (kp, ks, kh)).items():
                per_plan[k].append(measure)
                tick(f"{dataset} {plans[k].method} ε={epsilon:g} trial {t + 1}/{trials}")
        for k in range(len(plans)):
            if per_plan[k]:
                results.append(
                    _summarise(reported[k], float(epsilon), per_plan[k], base, dataset, base_log_loss)
                )
    return results


def count_trials(plans: Sequence[MethodPlan], n_epsilons: int, trials: int) -> int:
    """How many times :func:`run_benchmark` calls ``on_trial`` (for a progress total)."""
    once = sum(p.method in ("central_raw", "majority") for p in plans)
    repeated = sum(p.method in PRIVATE_METHODS for p in plans)
    return once + repeated * n_epsilons * trials


def write_results(rows: Sequence[ResultRow], path: str | Path) -> Path:
    """Write rows as an indented JSON list (parent folders created)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps([r.model_dump() for r in rows], indent=2) + "\n", encoding="utf-8")
    return out


def plot_results(rows: Sequence[ResultRow], path: str | Path) -> Path:
    """Plot mean test AUC (± sd) against ε_T per method; needs the ``plot`` extra."""
    plt = require_pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    series: dict[str, list[ResultRow]] = {}
    for row in rows:
        label = row.method if row.kp is None else f"{row.method} (kp={row.kp}, ks={row.ks}, kh={row.kh})"
        series.setdefault(label, []).append(row)
    eps_all = sorted({r.epsilon for r in rows if r.epsilon is not None})
    for label, items in series.items():
        flat = [r for r in items if r.epsilon is None]
        if flat and eps_all:
            ax.axhline(flat[0].auc_mean, linestyle="--", linewidth=1, label=label)
            continue
        items = sorted((r for r in items if r.epsilon is not None), key=lambda r: r.epsilon)
        ax.errorbar(
            [r.epsilon for r in items],
            [r.auc_mean for r in items],
            yerr=[r.auc_std for r in items],
            marker="o",
            capsize=3,
            label=label,
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("ε_T per peer (sequential composition, median queries included)")
    ax.set_ylabel("test ROC AUC (adult.test)")
    ax.set_title("AnonML on UCI Adult")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
