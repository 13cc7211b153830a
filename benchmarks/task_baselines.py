"""The default against the LDP baselines and the non-private ceilings on multiclass and regression sets.

:mod:`benchmarks.public_sets` compares every method on its binary sets through the Adult harness
(:func:`anonml.learn.harness.run_benchmark`, AUC and Brier); this module does the same for its
multiclass and regression sets, on the splits and fits of :mod:`benchmarks.trivial_floors`
(:func:`~benchmarks.trivial_floors.fit_default`), so the default's figures are those of the floors
table. Per split and ε every method sees the same training rows:

* multiclass — ``default`` (:class:`~anonml.learn.model.AnonMLClassifier`), ``prior`` (the training
  class shares; its argmax is the majority class), ``central_raw`` / ``central_binned`` (non-private
  multinomial logistic regression on the raw features and on the one-hot of the bins the default
  published), and the K-class LDP baselines ``ldp_lr_pm``, ``ldp_lr_hm`` (LDP-SGD, Wang et al.,
  ICDE 2019) and ``marginal_nb``, ``marginal_tan`` (CALM marginals, Zhang et al., CCS 2018);
  scored by accuracy, log loss, the multiclass Brier score ``mean Σ_c (p_c − 1[y = c])²`` and the
  top-label ECE (:func:`~anonml.learn.harness.expected_calibration_error` of "the argmax is right"
  against its probability). The plain LDP naive Bayes (``ldp_nb``) is binary only; ``marginal_nb``
  is its K-class form.
* regression — ``default`` (:class:`~anonml.learn.regression.AnonMLRegressor`), ``median`` (the
  training median), ``central_raw`` / ``central_binned`` (non-private least squares on the raw
  features and on the one-hot of the default classifier's bins) and ``ldp_linreg_pm`` /
  ``ldp_linreg_hm`` (LDP-SGD linear regression, :class:`~anonml.learn.baselines.LdpLinearRegression`,
  over the set's public target range); scored by MAE.

Each method's row holds mean ± standard error over the splits and, for the private baselines and
``central_binned``, the paired difference default − method of accuracy (multiclass) or method −
default of MAE (regression), so a positive difference always means the default did better; the
ε-free rows (``prior``, ``median``, ``central_raw``) are reported once per set, without one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.metrics import log_loss, mean_absolute_error

from anonml.learn.baselines import LdpLinearRegression
from anonml.learn.harness import BASELINE_ESTIMATORS, binned_design, expected_calibration_error, raw_design
from anonml.model import FeatureSpec
from benchmarks.trivial_floors import FloorSet, fit_default, split, split_scores, summarise

__all__ = [
    "MULTICLASS_METHODS",
    "REGRESSION_METHODS",
    "compare_split",
    "comparison_rows",
    "comparison_markdown",
]

#: The ε-free methods: one figure per split, reported once per set (ε "-").
FIXED_METHODS = ("prior", "median", "central_raw")
#: The K-class LDP baselines of the harness (:data:`anonml.learn.harness.BASELINE_ESTIMATORS`).
MULTICLASS_BASELINES = ("ldp_lr_pm", "ldp_lr_hm", "marginal_nb", "marginal_tan")
MULTICLASS_METHODS = ("default", "prior", "central_raw", "central_binned", *MULTICLASS_BASELINES)
#: LDP-SGD linear regression, by the scalar mechanism its gradients go through.
REGRESSION_BASELINES = {"ldp_linreg_pm": "piecewise", "ldp_linreg_hm": "hybrid"}
REGRESSION_METHODS = ("default", "median", "central_raw", "central_binned", *REGRESSION_BASELINES)


@dataclass(frozen=True)
class _Split:
    """One split in the shape :func:`~anonml.learn.harness.raw_design` reads."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    features: tuple[FeatureSpec, ...]


def _class_metrics(y: np.ndarray, proba: np.ndarray, classes: np.ndarray) -> dict[str, float]:
    """Accuracy, log loss, multiclass Brier score and top-label ECE of ``proba`` (columns: ``classes``)."""
    onehot = (y[:, None] == classes[None, :]).astype(float)
    top = np.argmax(proba, axis=1)
    correct = (classes[top] == y).astype(float)
    return {
        "accuracy": float(correct.mean()),
        "log_loss": float(log_loss(y, np.clip(proba, 1e-15, 1.0), labels=classes)),
        "brier": float(np.mean(np.sum((proba - onehot) ** 2, axis=1))),
        "ece": expected_calibration_error(correct, proba[np.arange(y.size), top]),
    }


def _seed(seed: int, epsilon: float, method: str) -> np.random.Generator:
    """A method's own generator for one split and ε (the default's seed is the split index)."""
    index = (*MULTICLASS_METHODS, *REGRESSION_METHODS).index(method)
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(int(round(epsilon * 100)), index)))


#: ``central_raw``'s figures per (set, split): they do not depend on ε, and on diamonds its
#: multinomial fit is most of a split's time.
_RAW_CEILINGS: dict[tuple[str, int], dict[str, float]] = {}


def _raw_ceiling(data: FloorSet, seed: int) -> dict[str, float]:
    """Non-private logistic (multiclass) or least-squares (regression) fit on the raw features."""
    key = (data.name, seed)
    if key not in _RAW_CEILINGS:
        X_tr, X_te, y_tr, y_te = split(data, seed)
        raw_tr, raw_te = raw_design(_Split(X_tr, y_tr, X_te, y_te, data.specs))
        if data.task == "regression":
            pred = LinearRegression().fit(raw_tr, y_tr).predict(raw_te)
            _RAW_CEILINGS[key] = {"mae": float(mean_absolute_error(y_te, pred))}
        else:
            proba = LogisticRegression(max_iter=2000).fit(raw_tr, y_tr).predict_proba(raw_te)
            _RAW_CEILINGS[key] = _class_metrics(y_te, proba, np.unique(y_tr))
    return _RAW_CEILINGS[key]


def compare_split(data: FloorSet, epsilon: float, seed: int) -> dict[str, Any]:
    """Every method's test figures on split ``seed`` at ``epsilon``, and the default's floor figures.

    Returns ``{"floor": split_scores(...), method: {metric: value}, ...}``.
    """
    if data.task not in ("multiclass", "regression"):
        raise ValueError(f"{data.name} is {data.task}: the binary sets go through the harness")
    X_tr, X_te, y_tr, y_te = split(data, seed)
    model = fit_default(data, epsilon, seed)
    out: dict[str, Any] = {"floor": split_scores(data, seed, model), "central_raw": _raw_ceiling(data, seed)}
    if data.task == "regression":
        assert data.target_range is not None
        binned_tr, binned_te = binned_design(model.classifier_.binning_, X_tr, X_te)

        def mae(pred: np.ndarray) -> dict[str, float]:
            return {"mae": float(mean_absolute_error(y_te, pred))}

        out["default"] = mae(model.predict(X_te))
        out["median"] = mae(np.full(y_te.size, float(np.median(y_tr))))
        out["central_binned"] = mae(LinearRegression().fit(binned_tr, y_tr).predict(binned_te))
        for name, mechanism in REGRESSION_BASELINES.items():
            baseline = LdpLinearRegression(
                epsilon=epsilon,
                features=list(data.specs),
                target_range=data.target_range,
                mechanism=mechanism,
                random_state=_seed(seed, epsilon, name),
            )
            out[name] = mae(baseline.fit(X_tr, y_tr).predict(X_te))
        return out
    classes = np.unique(y_tr)
    prior = np.array([np.mean(y_tr == c) for c in classes])
    binned_tr, binned_te = binned_design(model.binning_, X_tr, X_te)
    out["default"] = _class_metrics(y_te, model.predict_proba(X_te), classes)
    out["prior"] = _class_metrics(y_te, np.tile(prior, (y_te.size, 1)), classes)
    out["central_binned"] = _class_metrics(
        y_te, LogisticRegression(max_iter=2000).fit(binned_tr, y_tr).predict_proba(binned_te), classes
    )
    for name in MULTICLASS_BASELINES:
        baseline = BASELINE_ESTIMATORS[name](epsilon, data.specs, _seed(seed, epsilon, name))
        out[name] = _class_metrics(y_te, baseline.fit(X_tr, y_tr).predict_proba(X_te), classes)
    return out


def comparison_rows(
    data: FloorSet, epsilon: float, runs: list[dict[str, Any]], *, fixed: bool = True
) -> list[dict[str, Any]]:
    """One row per method at ``epsilon`` over the splits' :func:`compare_split` (module docstring).

    The ε-free methods (:data:`FIXED_METHODS`: the same figures at every ε, ``epsilon`` None and no
    paired difference; the floors table pairs the trivial predictor with the default) only with
    ``fixed``: a caller running several ε asks for them once.
    """
    methods = MULTICLASS_METHODS if data.task == "multiclass" else REGRESSION_METHODS
    key, sign = ("accuracy", 1.0) if data.task == "multiclass" else ("mae", -1.0)
    rows = []
    for method in methods:
        if method in FIXED_METHODS and not fixed:
            continue
        metrics = {m: summarise([r[method][m] for r in runs]) for m in runs[0][method]}
        row: dict[str, Any] = {
            "set": data.name,
            "task": data.task,
            "rows": int(data.X.shape[0]),
            "method": method,
            "epsilon": None if method in FIXED_METHODS else epsilon,
            "splits": len(runs),
            "metrics": metrics,
        }
        if method != "default" and method not in FIXED_METHODS:
            row["default_better_by"] = summarise([sign * (r["default"][key] - r[method][key]) for r in runs])
        rows.append(row)
    return rows


def comparison_markdown(rows: list[dict[str, Any]]) -> str:
    """The multiclass and the regression tables (mean ± s.e. over splits; the paired difference)."""
    lines: list[str] = []
    tables = (
        (
            "multiclass",
            "## Multiclass sets: every method (mean ± s.e. over splits)",
            ("accuracy", "log_loss", "brier", "ece"),
            "default − method, accuracy",
        ),
        (
            "regression",
            "## Regression sets: every method (mean ± s.e. over splits)",
            ("mae",),
            "method − default, MAE",
        ),
    )
    for task, title, metrics, diff in tables:
        mine = [r for r in rows if r["task"] == task]
        if not mine:
            continue
        header = ["set", "method", "ε", *(m.replace("_", " ") for m in metrics), f"{diff} (paired)"]
        lines += ["", title, "", "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
        for r in mine:
            digits = 2 if task == "regression" and r["metrics"]["mae"]["mean"] > 10 else 3
            cells = [
                f"{r['metrics'][m]['mean']:.{digits}f} ± {r['metrics'][m]['se']:.{digits}f}" for m in metrics
            ]
            better = r.get("default_better_by")
            gap = "-" if better is None else f"{better['mean']:+.{digits}f} ± {better['se']:.{digits}f}"
            eps = "-" if r["epsilon"] is None else f"{r['epsilon']:g}"
            lines.append(
                f"| {r['set']} ({r['rows']}) | {r['method']} | {eps} | " + " | ".join(cells) + f" | {gap} |"
            )
    return "\n".join(lines) + "\n"
