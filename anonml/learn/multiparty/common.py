"""Pieces every multiparty method shares, written once.

* :class:`PrivacyUnit` and :class:`PrivacyGuarantee`: what a method protects
  (one record, one party's whole data set, one individual's report) and with
  which (ε, δ). Equal ε across different units is *not* a like-for-like
  comparison, and every guarantee says so in its text.
* :class:`NormBallScaler`: maps feature vectors into the unit ball with a bound
  fixed in advance, the intercept counted inside the norm.
* :func:`to_pm1`: binary labels to {-1, +1}.
* :func:`sample_norm_noise`: draws from the density ∝ exp(-β‖η‖₂).

Every method in :mod:`anonml.learn.multiparty` assumes ``‖x‖₂ ≤ 1`` (the
intercept a coordinate of ``x``) and labels in {-1, +1}; these are the
conditions of the sensitivity bounds of Chaudhuri, Monteleoni & Sarwate (2011),
which Pathak et al. (2010), Hamm et al. (2016), Xie et al. (2017) and Rajkumar &
Agarwal (2012) all build on.
"""

from __future__ import annotations

import enum
import math
import numbers
from dataclasses import dataclass

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from anonml.errors import AnonMLError
from anonml.learn.params import store_params
from anonml.randomness import resolve_rng

__all__ = [
    "MultipartyError",
    "PrivacyUnit",
    "PrivacyGuarantee",
    "NormBallScaler",
    "to_pm1",
    "sample_norm_noise",
    "check_unit_ball",
    "check_parties",
]

# Slack for floating-point round-off when checking ‖x‖ ≤ 1.
_NORM_TOLERANCE = 1e-9


class MultipartyError(AnonMLError, ValueError):
    """Bad data or parameters given to a multiparty method (says what and where)."""


class PrivacyUnit(enum.StrEnum):
    """What one application of a method's (ε, δ) guarantee protects."""

    #: Neighbouring inputs differ in one record of one party.
    RECORD = "record"
    #: Neighbouring inputs differ in one party's entire data set.
    PARTY = "party"
    #: Local DP: everything one individual reports (AnonML: one peer's reports,
    #: composed) is (ε, δ)-DP on its own, before any aggregation.
    REPORT = "report"
    #: No differential-privacy guarantee (non-private reference).
    NONE = "none"


@dataclass(frozen=True)
class PrivacyGuarantee:
    """The differential-privacy statement a trained model carries.

    Attributes
    ----------
    unit : PrivacyUnit
        What neighbouring data sets differ in.
    epsilon : float
        ``math.inf`` for a non-private reference.
    delta : float
        0 for pure ε-DP.
    mechanism : str
        The noise mechanism and the source of its calibration.
    """

    unit: PrivacyUnit
    epsilon: float
    delta: float
    mechanism: str

    @property
    def is_private(self) -> bool:
        return self.unit is not PrivacyUnit.NONE and math.isfinite(self.epsilon)

    def describe(self) -> str:
        """One line for reports: unit, (ε, δ) and the caveat on comparisons."""
        if not self.is_private:
            return f"non-private ({self.mechanism})"
        return (
            f"({self.epsilon:g}, {self.delta:g})-DP per {self.unit.value} via {self.mechanism}; "
            "equal ε across different privacy units is not a like-for-like comparison"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "unit": self.unit.value,
            "epsilon": self.epsilon if math.isfinite(self.epsilon) else None,
            "delta": self.delta,
            "mechanism": self.mechanism,
        }


NON_PRIVATE = PrivacyGuarantee(PrivacyUnit.NONE, math.inf, 0.0, "no noise")


def sample_norm_noise(
    dim: int, beta: float, size: int | None = None, rng: np.random.Generator | None = None
) -> np.ndarray:
    """Draw η ∈ R^dim with density p(η) ∝ exp(-β‖η‖₂).

    Parameters
    ----------
    dim : int
        Dimension d of η.
    beta : float
        Rate β > 0: ε divided by the L2 sensitivity of the released vector.
    size : int, optional
        Number of independent draws; ``None`` returns one vector of shape (dim,).
    rng : numpy.random.Generator, optional
        ``None`` seeds from the OS CSPRNG.

    Returns
    -------
    ndarray of shape (dim,) or (size, dim)

    Notes
    -----
    In polar coordinates the density of r = ‖η‖ is ∝ r^{d-1} e^{-βr}, a
    Gamma(shape d, scale 1/β), and the direction is uniform on the sphere and
    independent of r; a uniform direction is a standard normal vector divided
    by its norm (Chaudhuri, Monteleoni & Sarwate 2011, sec. 5; Pathak et al.
    2010, sec. 3). Hence E‖η‖ = d/β.
    """
    if dim < 1:
        raise MultipartyError(f"noise dimension must be >= 1, got {dim}")
    if not (beta > 0 and math.isfinite(beta)):
        raise MultipartyError(f"noise rate beta must be positive and finite, got {beta}")
    gen = resolve_rng(rng)
    shape = (1 if size is None else size,)
    radius = gen.gamma(shape=dim, scale=1.0 / beta, size=shape)
    direction = gen.standard_normal(size=shape + (dim,))
    norms = np.linalg.norm(direction, axis=1, keepdims=True)
    # A zero Gaussian vector has probability zero; guard anyway so we never divide by 0.
    norms[norms == 0.0] = 1.0
    draws = direction / norms * radius[:, None]
    return draws[0] if size is None else draws


def to_pm1(y: np.ndarray, where: str = "y") -> tuple[np.ndarray, np.ndarray]:
    """Binary labels as {-1, +1}, with the two original classes (sorted).

    The larger class value maps to +1 (so ``classes_[1]`` is the positive class,
    as in scikit-learn).
    """
    y = np.asarray(y)
    if y.ndim != 1:
        raise MultipartyError(f"{where} must be one-dimensional, got shape {y.shape}")
    check_classification_targets(y)  # a continuous target is refused as scikit-learn refuses it
    classes = np.unique(y)
    if classes.size != 2:
        raise MultipartyError(
            ("Only binary classification is supported. " if classes.size > 2 else "")
            + f"{where} must hold exactly two classes for a binary method, got {classes.size} "
            f"class{'es' if classes.size != 1 else ''}: {classes[:10].tolist()}"
        )
    return np.where(y == classes[1], 1.0, -1.0), classes


def check_unit_ball(X: np.ndarray, where: str = "X") -> np.ndarray:
    """``X`` as a float array whose rows have ‖x‖₂ ≤ 1 (raise naming the first bad row)."""
    X = check_array(X, dtype=np.float64)
    norms = np.linalg.norm(X, axis=1)
    bad = np.flatnonzero(norms > 1.0 + _NORM_TOLERANCE)
    if bad.size:
        raise MultipartyError(
            f"{where} row {int(bad[0])} has norm {norms[bad[0]]:.4g} > 1; the privacy "
            "calibration assumes ||x|| <= 1: scale with NormBallScaler(bound=...) first"
        )
    return X


def check_parties(parties: np.ndarray | None, n_samples: int) -> tuple[np.ndarray, np.ndarray]:
    """Party label of each row and the sorted party ids; every party must hold a row."""
    if parties is None:
        raise MultipartyError("parties is required: one party id per row of X")
    parties = np.asarray(parties)
    if parties.shape != (n_samples,):
        raise MultipartyError(
            f"parties must have one id per row of X ({n_samples}), got shape {parties.shape}"
        )
    ids = np.unique(parties)
    return parties, ids


class NormBallScaler(TransformerMixin, BaseEstimator):
    """Map x to x̃ = [x, c] / ‖[B, c]‖ so that ‖x̃‖₂ ≤ 1, with B fixed in advance.

    Rows with ‖x‖ > B are first shrunk radially to norm B (clipping one row at a
    time depends on that row alone, so it costs no privacy). The bound must come
    from public knowledge — declared feature ranges or public data — never from
    the private data's own maximum, whose value would itself leak.

    Parameters
    ----------
    bound : float, default=1.0
        B, the public bound on ‖x‖₂ of the raw rows.
    intercept : bool, default=True
        Append the constant coordinate c = B, so a linear model's intercept is
        a weight inside the norm (and is regularised with the rest).

    Attributes
    ----------
    n_features_in_ : int
    scale_ : float
        The divisor ‖[B, c]‖ (B√2 with the intercept, B without).

    Notes
    -----
    With the intercept, a row at the bound maps to norm exactly 1 and the
    intercept coordinate is always 1/√2. ``fit`` reads only the number of
    columns from its argument.
    """

    def __init__(self, bound: float = 1.0, intercept: bool = True) -> None:
        store_params(self, locals())

    def fit(self, X: np.ndarray, y: object = None) -> NormBallScaler:
        if not (isinstance(self.bound, numbers.Real) and self.bound > 0 and math.isfinite(self.bound)):
            raise MultipartyError(f"NormBallScaler bound must be positive and finite, got {self.bound!r}")
        validate_data(self, X, dtype=np.float64)
        self.scale_ = float(self.bound) * (math.sqrt(2.0) if self.intercept else 1.0)
        return self

    def transform(self, X: np.ndarray) -> np.ndarray:
        check_is_fitted(self, "scale_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        norms = np.linalg.norm(X, axis=1, keepdims=True)
        shrink = np.minimum(1.0, self.bound / np.maximum(norms, np.finfo(float).tiny))
        X = X * shrink
        if self.intercept:
            X = np.hstack([X, np.full((X.shape[0], 1), float(self.bound))])
        return X / self.scale_
