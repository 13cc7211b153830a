"""A central (ε, δ) target instead of a local ε: the local ε_T a fit uses, and its record.

With ``central_epsilon=(ε, δ)`` the classifier does not take its local ε_T
from the ``epsilon`` hyperparameter: it uses the largest local ε₀ whose
shuffle-amplified bound (FMT 2021, :mod:`anonml.privacy.amplification`) over
the unlinkable pools the fit will have (report and calibration) is at most ε
at δ (:func:`local_epsilon_for_target`, bisection to :data:`CENTRAL_TOLERANCE`).
After the fit, :func:`with_central_target` checks the groups the fit really
had against the target and records both figures in the accounting. The median
pool's signed answers are outside the bound: their peers keep the local ε.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from anonml.learn.accounting import PrivacyAccounting
from anonml.learn.partition import PartitionPlan
from anonml.learn.simulation import planned_pools
from anonml.learn.simulation_config import SimulationConfig
from anonml.model import FeatureSpec
from anonml.privacy.amplification import (
    CentralTarget,
    CentralTargetUnmet,
    largest_local_epsilon,
    unlinkable_pools_bound,
)

__all__ = ["CENTRAL_TOLERANCE", "check_central_target", "local_epsilon_for_target", "with_central_target"]

#: Width of the bisection for a central target's local ε: the chosen ε meets the target, ε + this does not.
CENTRAL_TOLERANCE = 1e-3


def check_central_target(central_epsilon: Any) -> tuple[float, float] | None:
    """``central_epsilon`` checked: (ε, δ) with ε > 0 finite and 0 < δ < 1, or None.

    Raises
    ------
    ValueError
        Naming the value, when it is not such a pair.
    """
    if central_epsilon is None:
        return None
    target = tuple(central_epsilon)
    if len(target) != 2 or not all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) for v in target
    ):
        raise ValueError(f"central_epsilon must be a pair (epsilon, delta), got {central_epsilon!r}")
    eps, delta = float(target[0]), float(target[1])
    if not (eps > 0 and np.isfinite(eps)) or not 0 < delta < 1:
        raise ValueError(
            f"central_epsilon must be (epsilon > 0, 0 < delta < 1), got ({eps}, {delta})"
        )
    return eps, delta


def local_epsilon_for_target(
    target: tuple[float, float],
    config_at: Callable[[float], SimulationConfig],
    n_rows: int,
    features: Sequence[FeatureSpec],
    plan: PartitionPlan | None = None,
) -> float:
    """The largest local ε₀ whose fit on ``n_rows`` rows meets the central ``target`` = (ε, δ).

    Each candidate ε₀ fixes the run (``config_at(ε₀)``), hence the pools the fit
    will have (:func:`~anonml.learn.simulation.planned_pools`: the calibration
    pool's size depends on ε₀) and their shuffle bound at δ
    (:func:`~anonml.privacy.amplification.unlinkable_pools_bound`);
    :func:`~anonml.privacy.amplification.largest_local_epsilon` bisects for the
    largest ε₀ whose bound is at most ε.

    Raises
    ------
    CentralTargetUnmet
        Naming the rows and the target, when no local ε ≥ the floor meets it.
    """
    eps, delta = target

    def central_of(e0: float) -> float | None:
        bound = unlinkable_pools_bound(planned_pools(config_at(e0), n_rows, features, plan), delta=delta)
        return None if bound is None else bound.epsilon

    return largest_local_epsilon(
        central_of,
        eps,
        tol=CENTRAL_TOLERANCE,
        what=f"n={n_rows} rows (δ={delta:g}, {len(features)} features)",
    )


def with_central_target(
    accounting: PrivacyAccounting, target: tuple[float, float] | None, epsilon: float
) -> PrivacyAccounting:
    """The accounting with the central target's record; refuses a fit whose groups missed it.

    Raises
    ------
    CentralTargetUnmet
        When the fit's groups give no shuffle bound, or a central ε above the target, at local ``epsilon``.
    """
    if target is None:
        return accounting
    eps, delta = target
    shuffle = accounting.shuffle
    record = None if shuffle is None else CentralTarget.of(eps, delta, epsilon, shuffle)
    if record is None or not record.met:
        got = "no shuffle bound" if record is None else f"central ε {record.central_epsilon:.4g}"
        raise CentralTargetUnmet(
            f"the fit's groups give {got} at local ε={epsilon:g}, above the central target "
            f"ε={eps:g}, δ={delta:g}"
        )
    return dataclasses.replace(accounting, central_target=record)
