"""What :class:`~anonml.learn.model.AnonMLClassifier`'s hyperparameters accept and what they set.

* :data:`PARAM_CHECKS` — each hyperparameter's accepted values, checked at the
  top of ``fit`` (:func:`~anonml.learn.params.check_params`).
* :func:`config_from_params` — the simulated run they set
  (:class:`~anonml.learn.simulation_config.SimulationConfig`): the plan
  (k_p, k_h, k_s) each mode defaults to — default mode one single-feature
  partition per feature, paper mode the thesis's census setting k_p = 5,
  k_h = 2, k_s = 3 (Cyphers 2017, ch. 6) — shrunk to the number of features
  unless the hyperparameters set it.
* :func:`ensemble_from_params` — the ensemble they train from the debiased
  histograms: paper mode thesis eq. 6.2 votes of partition classifiers,
  default mode smoothed cell posteriors (:mod:`anonml.learn.ensemble`).

Every function takes the hyperparameters as ``get_params(deep=False)`` gives them.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from anonml.learn.ensemble import Ensemble, default_ensemble, paper_ensemble
from anonml.learn.histograms import SubsetHistogram
from anonml.learn.params import RANDOM_STATE, Interval, Options
from anonml.learn.simulation_config import SimulationConfig

__all__ = ["PARAM_CHECKS", "config_from_params", "ensemble_from_params"]

#: Hyperparameter name → accepted values (:func:`~anonml.learn.params.check_params`).
PARAM_CHECKS: dict[str, tuple[Any, ...]] = {
    "mode": (Options(frozenset({"default", "paper"})),),
    "epsilon": (Interval(numbers.Real, 0, None, closed="neither"),),
    "n_partitions": (Interval(numbers.Integral, 1, None, closed="left"), None),
    "n_subsets": (Interval(numbers.Integral, 1, None, closed="left"), None),
    "subset_size": (Interval(numbers.Integral, 1, None, closed="left"), None),
    "subsets": (list, tuple, np.ndarray, None),
    "n_bins": (Interval(numbers.Integral, 1, None, closed="left"), Options(frozenset({"auto"}))),
    "features": (list, tuple, None),
    "ranges": (Mapping, Options(frozenset({"from-data"})), None),
    "median_fraction": (Interval(numbers.Real, 0, 1, closed="left"),),
    "median_steps": (Interval(numbers.Integral, 1, None, closed="left"),),
    "median_confidence": (Interval(numbers.Real, 0, 1, closed="neither"),),
    "calibration_fraction": (Interval(numbers.Real, 0, 0.5, closed="both"),),
    "pilot_fraction": (Interval(numbers.Real, 0, 1, closed="left"),),
    "consistency": (Options(frozenset({"norm_sub", "norm_mul", "base_cut", "ibu"})), None),
    "smoothing": (Interval(numbers.Real, 0, None, closed="left"),),
    "combine": (Options(frozenset({"linear", "logit"})),),
    "weighting": (Options(frozenset({"equal", "lda"})),),
    "partition_classifier": (Options(frozenset({"tree", "logistic"})),),
    "partition_scoring": (Options(frozenset({"f1", "roc_auc"})),),
    "partition_class_weight": (Options(frozenset({"balanced"})), None),
    "partition_cv": (Interval(numbers.Integral, 2, None, closed="left"),),
    "random_state": RANDOM_STATE,
    "central_epsilon": (tuple, list, None),
}

#: Plan defaults per mode: (k_p, k_h, k_s); None = one partition per feature.
_MODE_PLANS: dict[str, tuple[int | None, int, int]] = {
    "default": (None, 1, 1),
    "paper": (5, 2, 3),  # the thesis's census setting
}


def config_from_params(
    params: Mapping[str, Any],
    n_features: int,
    n_classes: int,
    *,
    epsilon: float,
    shuffle_delta: float | None,
) -> SimulationConfig:
    """The run a classifier with hyperparameters ``params`` makes on ``n_features`` columns and K classes.

    ``params`` are :meth:`~sklearn.base.BaseEstimator.get_params` of an
    :class:`~anonml.learn.model.AnonMLClassifier`. An unset plan size takes its
    mode's default: ``k_s = min(k_s, F)``, ``k_h = max(1, min(k_h, ⌊F/k_s⌋))``
    and, for one partition per feature, ``k_p = max(1, ⌊F/(k_h·k_s)⌋)``.
    ``epsilon`` is the local ε_T of the run (the hyperparameter's, or the one
    chosen for a central target), ``shuffle_delta`` the δ of that target.
    """
    kp, kh, ks = _MODE_PLANS[params["mode"]]
    ks = params["subset_size"] if params["subset_size"] is not None else min(ks, n_features)
    kh = params["n_subsets"] if params["n_subsets"] is not None else max(1, min(kh, n_features // ks))
    if params["n_partitions"] is not None:
        kp = params["n_partitions"]
    elif kp is None:
        kp = max(1, n_features // (kh * ks))
    subsets = params["subsets"]
    return SimulationConfig(
        epsilon=float(epsilon),
        n_partitions=int(kp),
        n_subsets=int(kh),
        subset_size=int(ks),
        subsets=None if subsets is None else tuple(tuple(int(f) for f in s) for s in subsets),
        n_bins=params["n_bins"],
        median_fraction=float(params["median_fraction"]),
        median_steps=int(params["median_steps"]),
        median_confidence=float(params["median_confidence"]),
        consistency=params["consistency"],
        n_classes=int(n_classes),
        calibration_fraction=float(params["calibration_fraction"]),
        pilot_fraction=float(params["pilot_fraction"]),
        shuffle_delta=shuffle_delta,
    )


def ensemble_from_params(
    params: Mapping[str, Any],
    histograms: Sequence[SubsetHistogram],
    sizes: Sequence[int],
    rng: np.random.Generator,
) -> Ensemble:
    """The ensemble the hyperparameters ``params`` train from debiased histograms.

    Paper mode: thesis eq. 6.2 votes of partition classifiers
    (:func:`~anonml.learn.ensemble.paper_ensemble`, with ``partition_*``); default
    mode: smoothed cell posteriors (:func:`~anonml.learn.ensemble.default_ensemble`,
    with ``smoothing``, ``combine`` and ``weighting``).
    """
    if params["mode"] == "paper":
        return paper_ensemble(
            histograms,
            sizes,
            classifier=params["partition_classifier"],
            scoring=params["partition_scoring"],
            class_weight=params["partition_class_weight"],
            cv=params["partition_cv"],
            rng=rng,
        )
    return default_ensemble(
        histograms, smoothing=params["smoothing"], combine=params["combine"], weighting=params["weighting"]
    )
