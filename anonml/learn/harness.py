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
* ``majority`` — always predicts the training majority (AUC 0.5, F1 0).

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

import numpy as np
from pydantic import BaseModel, ConfigDict
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score, roc_auc_score
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from anonml.datasets import adult
from anonml.errors import AnonMLError
from anonml.learn.model import AnonMLClassifier
from anonml.model import FeatureKind

__all__ = [
    "METHODS",
    "THESIS_PAPER_PLANS",
    "ResultRow",
    "MethodPlan",
    "expand_methods",
    "run_adult_benchmark",
    "count_trials",
    "raw_design",
    "write_results",
    "plot_results",
]

METHODS = ("default", "paper", "central", "majority")
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
            plans.append(MethodPlan("majority"))
    return plans


def raw_design(data: adult.AdultDataset) -> tuple[np.ndarray, np.ndarray]:
    """Design matrices of the ``central_raw`` ceiling: numeric standardised, categorical one-hot."""
    numeric = [j for j, f in enumerate(data.features) if f.kind is FeatureKind.NUMERIC]
    categorical = [j for j, f in enumerate(data.features) if f.kind is FeatureKind.CATEGORICAL]
    scaler = StandardScaler().fit(data.X_train[:, numeric])
    encoder = OneHotEncoder(
        categories=[np.arange(len(data.features[j].categories)) for j in categorical], sparse_output=False
    ).fit(data.X_train[:, categorical])

    def design(X: np.ndarray) -> np.ndarray:
        return np.hstack([scaler.transform(X[:, numeric]), encoder.transform(X[:, categorical])])

    return design(data.X_train), design(data.X_test)


def _binned_lr_scores(model: AnonMLClassifier, data: adult.AdultDataset) -> tuple[np.ndarray, np.ndarray]:
    """Non-private LR on the one-hot of the model's published bins: (test scores, test predictions)."""
    bins = model.binning_
    encoder = OneHotEncoder(categories=[np.arange(b) for b in bins.n_bins], sparse_output=False)
    train = encoder.fit_transform(bins.transform(data.X_train))
    test = encoder.transform(bins.transform(data.X_test))
    lr = LogisticRegression(max_iter=2000).fit(train, data.y_train)
    return lr.decision_function(test), lr.predict(test)


def _summarise(plan: MethodPlan, epsilon: float | None, rows: list[tuple[float, float, float]]) -> ResultRow:
    """Mean and sample sd over trials of (AUC, F1, fit seconds)."""
    arr = np.asarray(rows, dtype=float)
    return ResultRow(
        method=plan.method,
        epsilon=epsilon,
        auc_mean=float(arr[:, 0].mean()),
        auc_std=float(arr[:, 0].std(ddof=1)) if len(arr) > 1 else 0.0,
        f1_mean=float(arr[:, 1].mean()),
        f1_std=float(arr[:, 1].std(ddof=1)) if len(arr) > 1 else 0.0,
        trials=len(arr),
        kp=plan.kp,
        ks=plan.ks,
        kh=plan.kh,
        fit_seconds=float(arr[:, 2].mean()),
    )


def _private_model(
    plan: MethodPlan, epsilon: float, seed: np.random.SeedSequence, data: adult.AdultDataset
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


def run_adult_benchmark(
    *,
    methods: Sequence[str] = ("default", "paper", "central"),
    epsilons: Sequence[float] = (0.5, 1.0, 2.0, 4.0),
    trials: int = 20,
    kp: int | None = None,
    ks: int | None = None,
    kh: int | None = None,
    data: adult.AdultDataset | None = None,
    data_dir: str | Path | None = None,
    seed: int = 0,
    json_path: str | Path | None = None,
    on_trial: Callable[[str], None] | None = None,
) -> list[ResultRow]:
    """Run the Adult benchmark and return one :class:`ResultRow` per (method plan, ε_T).

    Parameters
    ----------
    methods : sequence of {"default", "paper", "central", "majority"}
    epsilons : sequence of float
        Per-peer totals ε_T.
    trials : int, default=20
        Independent simulations per (method, ε_T); trial ``t`` at ε index ``i``
        draws from ``SeedSequence(seed, spawn_key=(i, t, k))`` for plan ``k``.
    kp, ks, kh : int, optional
        Override the partition plan (see :func:`expand_methods`).
    data, data_dir : optional
        A loaded dataset, or the folder to load it from (else
        :func:`anonml.datasets.adult.load`'s search order).
    seed : int, default=0
    json_path : path, optional
        Where to write the rows as a JSON list.
    on_trial : callable, optional
        Called with a description after every fitted trial (progress bars).

    Returns
    -------
    list of ResultRow
    """
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    if not epsilons or any(not (e > 0) for e in epsilons):
        raise ValueError(f"epsilons must be positive numbers, got {list(epsilons)}")
    data = data if data is not None else adult.load(data_dir)
    plans = expand_methods(methods, kp=kp, ks=ks, kh=kh)
    reported = list(plans)  # the plans as run (default mode fills in its own)
    tick = on_trial or (lambda _description: None)
    results: list[ResultRow] = []

    majority = int(np.mean(data.y_train) >= 0.5)
    for plan in plans:
        if plan.method == "central_raw":
            start = time.perf_counter()
            train, test = raw_design(data)
            lr = LogisticRegression(max_iter=2000).fit(train, data.y_train)
            seconds = time.perf_counter() - start
            auc = roc_auc_score(data.y_test, lr.decision_function(test))
            f1 = f1_score(data.y_test, lr.predict(test))
            results.append(_summarise(plan, None, [(auc, f1, seconds)]))
            tick("central_raw")
        elif plan.method == "majority":
            pred = np.full(data.y_test.shape, majority)
            f1 = f1_score(data.y_test, pred, zero_division=0.0)
            results.append(
                _summarise(plan, None, [(roc_auc_score(data.y_test, pred.astype(float)), f1, 0.0)])
            )
            tick("majority")

    for i, epsilon in enumerate(epsilons):
        per_plan: dict[int, list[tuple[float, float, float]]] = {k: [] for k in range(len(plans))}
        for t in range(trials):
            default_model: AnonMLClassifier | None = None
            for k, plan in enumerate(plans):
                if plan.method not in ("default", "paper", "central_binned"):
                    continue
                seq = np.random.SeedSequence(seed, spawn_key=(i, t, k))
                if plan.method == "central_binned":
                    if default_model is None:  # bins as the default mode would publish them
                        default_model = _private_model(MethodPlan("default", kp, ks, kh), epsilon, seq, data)
                        default_model.fit(data.X_train, data.y_train)
                    start = time.perf_counter()
                    scores, pred = _binned_lr_scores(default_model, data)
                    seconds = time.perf_counter() - start
                else:
                    model = _private_model(plan, epsilon, seq, data)
                    start = time.perf_counter()
                    model.fit(data.X_train, data.y_train)
                    seconds = time.perf_counter() - start
                    scores, pred = model.decision_function(data.X_test), model.predict(data.X_test)
                    if plan.method == "default":
                        if default_model is None:
                            default_model = model
                        # Report the plan actually used (the mode's default when not given).
                        reported[k] = MethodPlan(
                            "default", model.n_partitions_, model.subset_size_, model.n_subsets_
                        )
                auc = roc_auc_score(data.y_test, scores)
                f1 = f1_score(data.y_test, pred, zero_division=0.0)
                per_plan[k].append((auc, f1, seconds))
                tick(f"{plan.method} ε={epsilon:g} trial {t + 1}/{trials}")
        for k in range(len(plans)):
            if per_plan[k]:
                results.append(_summarise(reported[k], float(epsilon), per_plan[k]))
    if json_path is not None:
        write_results(results, json_path)
    return results


def count_trials(plans: Sequence[MethodPlan], n_epsilons: int, trials: int) -> int:
    """How many times :func:`run_adult_benchmark` calls ``on_trial`` (for a progress total)."""
    once = sum(p.method in ("central_raw", "majority") for p in plans)
    repeated = sum(p.method in ("default", "paper", "central_binned") for p in plans)
    return once + repeated * n_epsilons * trials


def write_results(rows: Sequence[ResultRow], path: str | Path) -> Path:
    """Write rows as an indented JSON list (parent folders created)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps([r.model_dump() for r in rows], indent=2) + "\n", encoding="utf-8")
    return out


def plot_results(rows: Sequence[ResultRow], path: str | Path) -> Path:
    """Plot mean test AUC (± sd) against ε_T per method; needs the ``plot`` extra."""
    try:
        import matplotlib  # noqa: PLC0415 - optional dependency

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        raise AnonMLError("plotting needs matplotlib: pip install 'anonml[plot]'") from None
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
