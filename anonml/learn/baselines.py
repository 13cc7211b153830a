"""The plain LDP naive-Bayes baseline every AnonML mode must beat.

What a practitioner would build without AnonML's machinery: the peers are
split at random into one group per feature; every peer of group ``j`` sends
one report of (bin of feature ``j``, label) at the full ε through k-ary
randomised response or optimised unary encoding, whichever has the smaller
variance for that domain (``k-RR`` iff ``m < 3e^ε + 2``, Wang et al. 2017);
the aggregator debiases the counts, clips them at 0, adds one to every cell
(Laplace smoothing) and scores a row by naive Bayes,

    log P(y=1|x)/P(y=0|x) = log π̂₁/π̂₀ + Σ_j log P̂(x_j | y=1)/P̂(x_j | y=0),

with ``π̂`` the pooled label shares. Numeric features are cut into
equal-width bins over their public range (no private quantiles: nothing is
spent on bins), as many as :func:`~anonml.learn.binning.auto_n_bins` allows for
the group size. Each peer releases one ε-LDP report: ε per peer in total.

Two stronger baselines from their papers, as scikit-learn estimators on the
same encoded rows and public feature specs (:class:`LdpLogisticRegression`,
:class:`LdpMarginalClassifier`), with the one-dimensional mechanisms they rest
on (:func:`piecewise_perturb`, :func:`duchi_perturb`, :func:`hybrid_perturb`,
:func:`perturb_vector`) and their variance formulas.

References
----------
Wang, Xiao, Yang, Zhao, Hu, Lin, Li & Yu, *Collecting and Analyzing
Multidimensional Data with Local Differential Privacy*, ICDE 2019 (Piecewise and
Hybrid Mechanisms, Algorithms 2-4, sec. V on LDP-SGD). Duchi, Jordan &
Wainwright, *Minimax optimal procedures for locally private estimation*, JASA
2018 (the one-dimensional mechanism the Hybrid Mechanism mixes in). Zhang,
Wang, Li, He & Chen, *CALM: Consistent Adaptive Local Marginal for Marginal
Release under Local Differential Privacy*, CCS 2018 (one marginal per user,
Norm-Sub, overlap consistency). Friedman, Geiger & Goldszmidt, *Bayesian
Network Classifiers*, Machine Learning 1997 (tree-augmented naive Bayes).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from itertools import combinations
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy.sparse.csgraph import minimum_spanning_tree
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from anonml.learn.binning import Binning, auto_n_bins
from anonml.learn.histograms import domain_size, estimate_histogram, report_values
from anonml.learn.params import RANDOM_STATE, Interval, Options, check_params, store_params
from anonml.model import FeatureKind, FeatureSpec
from anonml.privacy import OUE, Mechanism, RandomizedResponse, estimate_counts, project_to_simplex
from anonml.privacy._checks import MAX_EPSILON, check_epsilon
from anonml.randomness import generator_from

__all__ = [
    "LdpNaiveBayes",
    "fit_ldp_naive_bayes",
    "equal_width_binning",
    "piecewise_perturb",
    "piecewise_variance",
    "piecewise_bound",
    "duchi_perturb",
    "duchi_variance",
    "duchi_bound",
    "hybrid_perturb",
    "hybrid_variance",
    "hybrid_worst_variance",
    "hybrid_alpha",
    "EPSILON_STAR",
    "sampled_dimensions",
    "perturb_vector",
    "vector_variance",
    "make_consistent",
    "LdpLogisticRegression",
    "LdpMarginalClassifier",
]


class LdpNaiveBayes:
    """A fitted LDP naive-Bayes baseline: bins, per-feature log-likelihood ratios, prior."""

    def __init__(self, binning: Binning, tables: list[np.ndarray], log_prior_ratio: float) -> None:
        self.binning = binning
        self.tables = tables
        self.log_prior_ratio = log_prior_ratio

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """Log-odds of class 1 for raw rows (binned with the baseline's bins)."""
        codes = self.binning.transform(X)
        out = np.full(codes.shape[0], self.log_prior_ratio)
        for j, table in enumerate(self.tables):
            out += table[codes[:, j]]
        return out

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        p1 = 1.0 / (1.0 + np.exp(-self.decision_function(X)))
        return np.column_stack([1.0 - p1, p1])


def equal_width_binning(features: Sequence[FeatureSpec], n_bins: int) -> Binning:
    """``n_bins`` equal-width bins over every numeric feature's public range; categories as they are.

    Nothing private is spent: the cut points depend only on the public specs.
    """
    thresholds = {
        j: tuple(float(f.low) + (float(f.high) - float(f.low)) * k / n_bins for k in range(1, n_bins))
        for j, f in enumerate(features)
        if f.kind is FeatureKind.NUMERIC
    }
    return Binning.from_thresholds(features, thresholds)


def _mechanism(epsilon: float, m: int) -> Mechanism:
    return RandomizedResponse(epsilon, m) if m < 3.0 * math.exp(epsilon) + 2.0 else OUE(epsilon, m)


def fit_ldp_naive_bayes(
    X: np.ndarray, y: np.ndarray, features: Sequence[FeatureSpec], *, epsilon: float, rng: np.random.Generator
) -> LdpNaiveBayes:
    """Simulate the baseline on ``(X, y)``, one peer per row (module docstring).

    Parameters
    ----------
    X : ndarray of shape (n, F)
        Encoded rows (category indices, 0/1, numbers).
    y : ndarray of shape (n,), int in {0, 1}
    features : sequence of FeatureSpec
        Kinds and public ranges.
    epsilon : float
        Each peer's one report.
    rng : numpy.random.Generator
    """
    n, n_features = X.shape
    if len(features) != n_features:
        raise ValueError(f"{len(features)} feature specs for {n_features} columns")
    groups = np.array_split(rng.permutation(n), n_features)
    binning = equal_width_binning(features, auto_n_bins(epsilon, max(1, min(g.size for g in groups))))
    codes = binning.transform(X)
    tables: list[np.ndarray] = []
    class_counts = np.zeros(2)
    for j, rows in enumerate(groups):
        shape = (binning.n_bins[j],)
        m = domain_size(shape)
        values = report_values(codes[rows][:, [j]], y[rows], shape)
        mechanism = _mechanism(epsilon, m)
        bits = mechanism.perturb(values, rng)
        raw = np.asarray(estimate_counts(bits.sum(axis=0), mechanism, rows.size, consistency=None).raw)
        counts = np.clip(raw.reshape(shape[0], 2), 0.0, None) + 1.0
        class_counts += counts.sum(axis=0)
        likelihood = counts / counts.sum(axis=0, keepdims=True)
        tables.append(np.log(likelihood[:, 1]) - np.log(likelihood[:, 0]))
    return LdpNaiveBayes(binning, tables, float(np.log(class_counts[1] / class_counts[0])))


# --- One-dimensional mechanisms for a value in [-1, 1] (Wang et al., ICDE 2019) -------------------


def _unit_values(t: ArrayLike, where: str = "t") -> np.ndarray:
    """``t`` as a float array after checking every value is finite and in [-1, 1]."""
    arr = np.asarray(t, dtype=float)
    bad = ~np.isfinite(arr) | (np.abs(arr) > 1.0)
    if bad.any():
        first = np.flatnonzero(bad.reshape(-1))[0]
        raise ValueError(
            f"{where} must lie in [-1, 1]; value {arr.reshape(-1)[first]!r} at flat index {first}"
        )
    return arr


def piecewise_bound(epsilon: float) -> float:
    """The Piecewise Mechanism's output bound ``C = (e^{ε/2} + 1)/(e^{ε/2} − 1)``: outputs lie in [−C, C]."""
    half = math.exp(check_epsilon(epsilon) / 2.0)
    return (half + 1.0) / (half - 1.0)


def piecewise_perturb(t: ArrayLike, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """The Piecewise Mechanism (Wang et al. 2019, Algorithm 2): an unbiased ε-LDP report of ``t ∈ [−1, 1]``.

    With ``C = (e^{ε/2}+1)/(e^{ε/2}−1)``, ``l(t) = (C+1)/2·t − (C−1)/2`` and
    ``r(t) = l(t) + C − 1``, the report is uniform on ``[l(t), r(t)]`` with
    probability ``e^{ε/2}/(e^{ε/2}+1)``, else uniform on ``[−C, l(t)) ∪ (r(t), C]``.
    The density ratio between any two inputs is at most ``e^ε``; ``E[t*] = t``
    and ``Var[t*] = t²/(e^{ε/2}−1) + (e^{ε/2}+3)/(3(e^{ε/2}−1)²)`` (their Lemma 1).
    """
    values = _unit_values(t)
    half = math.exp(check_epsilon(epsilon) / 2.0)
    c = (half + 1.0) / (half - 1.0)
    left = (c + 1.0) / 2.0 * values - (c - 1.0) / 2.0
    right = left + c - 1.0
    inside = rng.random(values.shape) < half / (half + 1.0)
    u = rng.random(values.shape)
    # The outside set has length (l + C) + (C − r) = C + 1; lay it out as one interval.
    v = u * (c + 1.0)
    outside = np.where(v < left + c, v - c, right + (v - (left + c)))
    return np.where(inside, left + u * (c - 1.0), outside)


def piecewise_variance(t: ArrayLike, epsilon: float) -> np.ndarray:
    """``Var[t*|t] = t²/(e^{ε/2}−1) + (e^{ε/2}+3)/(3(e^{ε/2}−1)²)`` (Wang et al. 2019, Lemma 1)."""
    values = _unit_values(t)
    half = math.exp(check_epsilon(epsilon) / 2.0)
    return values**2 / (half - 1.0) + (half + 3.0) / (3.0 * (half - 1.0) ** 2)


def duchi_bound(epsilon: float) -> float:
    """Duchi et al.'s output magnitude ``B = (e^ε + 1)/(e^ε − 1)``: every report is ±B."""
    lam = math.exp(check_epsilon(epsilon))
    return (lam + 1.0) / (lam - 1.0)


def duchi_perturb(t: ArrayLike, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Duchi et al.'s one-dimensional mechanism: ``±B`` with ``P(+B) = 1/2 + t(e^ε−1)/(2(e^ε+1))``.

    ``B = (e^ε+1)/(e^ε−1)``; the two output probabilities differ across inputs
    by at most a factor ``e^ε``; ``E[t*] = t`` and ``Var[t*] = B² − t²``
    (Wang et al. 2019, sec. III-A, eq. 3).
    """
    values = _unit_values(t)
    b = duchi_bound(epsilon)
    positive = rng.random(values.shape) < 0.5 + values / (2.0 * b)
    return np.where(positive, b, -b)


def duchi_variance(t: ArrayLike, epsilon: float) -> np.ndarray:
    """``Var[t*|t] = ((e^ε+1)/(e^ε−1))² − t²``."""
    values = _unit_values(t)
    return duchi_bound(epsilon) ** 2 - values**2


#: ε* of Wang et al. 2019 (Lemma 4): below it the Hybrid Mechanism is Duchi et al.'s alone.
EPSILON_STAR: float = math.log(
    (
        -5.0
        + 2.0 * (6353.0 - 405.0 * math.sqrt(241.0)) ** (1 / 3)
        + 2.0 * (6353.0 + 405.0 * math.sqrt(241.0)) ** (1 / 3)
    )
    / 27.0
)


def hybrid_alpha(epsilon: float) -> float:
    """The Hybrid Mechanism's weight on the Piecewise Mechanism: ``1 − e^{−ε/2}`` if ``ε > ε*``, else 0."""
    epsilon = check_epsilon(epsilon)
    return 1.0 - math.exp(-epsilon / 2.0) if epsilon > EPSILON_STAR else 0.0


def hybrid_perturb(t: ArrayLike, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """The Hybrid Mechanism (Wang et al. 2019, sec. III-C): PM w.p. ``α``, else Duchi et al.'s, both at ε.

    ``α = hybrid_alpha(ε)``. Both parts are unbiased and ε-LDP, so the mixture is
    too, and ``Var = α·Var_PM + (1−α)·Var_Duchi`` (same mean). Its worst case
    over ``t`` is the paper's eq. 9 (:func:`hybrid_worst_variance`).
    """
    values = _unit_values(t)
    use_pm = rng.random(values.shape) < hybrid_alpha(epsilon)
    return np.where(use_pm, piecewise_perturb(values, epsilon, rng), duchi_perturb(values, epsilon, rng))


def hybrid_variance(t: ArrayLike, epsilon: float) -> np.ndarray:
    """``α·Var_PM(t) + (1−α)·Var_Duchi(t)`` with ``α = hybrid_alpha(ε)``."""
    alpha = hybrid_alpha(epsilon)
    return alpha * piecewise_variance(t, epsilon) + (1.0 - alpha) * duchi_variance(t, epsilon)


def hybrid_worst_variance(epsilon: float) -> float:
    """The Hybrid Mechanism's largest variance over ``t`` (Wang et al. 2019, Lemma 4 / eq. 9).

    For ``ε > ε*``: ``(e^{ε/2}+3)/(3e^{ε/2}(e^{ε/2}−1)) + (e^ε+1)²/(e^{ε/2}(e^ε−1)²)``
    (reached at ``t = 0``); else Duchi et al.'s ``((e^ε+1)/(e^ε−1))²``.
    """
    epsilon = check_epsilon(epsilon)
    if epsilon <= EPSILON_STAR:
        return duchi_bound(epsilon) ** 2
    half, lam = math.exp(epsilon / 2.0), math.exp(epsilon)
    return (half + 3.0) / (3.0 * half * (half - 1.0)) + (lam + 1.0) ** 2 / (half * (lam - 1.0) ** 2)


ScalarMechanism = Literal["piecewise", "hybrid"]
_SCALAR: dict[str, tuple[Callable[..., np.ndarray], Callable[..., np.ndarray]]] = {
    "piecewise": (piecewise_perturb, piecewise_variance),
    "hybrid": (hybrid_perturb, hybrid_variance),
    "duchi": (duchi_perturb, duchi_variance),
}


def sampled_dimensions(d: int, epsilon: float) -> int:
    """``k = max(1, min(d, ⌊ε/2.5⌋))`` coordinates a user reports (Wang et al. 2019, Algorithm 4)."""
    return max(1, min(int(d), math.floor(check_epsilon(epsilon) / 2.5)))


def perturb_vector(
    T: ArrayLike, epsilon: float, rng: np.random.Generator, mechanism: str = "hybrid"
) -> np.ndarray:
    """Algorithm 4 of Wang et al. 2019: one ε-LDP report of a tuple in ``[−1, 1]^d``.

    Each row samples ``k`` (:func:`sampled_dimensions`) of its ``d`` coordinates
    uniformly without replacement, reports each through ``mechanism`` at ``ε/k``
    scaled by ``d/k``, and sends 0 for the others. By composition the row's
    report is ε-LDP; each coordinate is unbiased with variance
    ``(d/k)(Var_M(t_j, ε/k) + t_j²) − t_j²`` (:func:`vector_variance`).
    """
    if mechanism not in _SCALAR:
        raise ValueError(f"mechanism must be one of {sorted(_SCALAR)}, got {mechanism!r}")
    values = _unit_values(T, "T")
    if values.ndim != 2 or values.shape[1] < 1:
        raise ValueError(f"T must be a 2-D array of shape (n, d) with d >= 1, got shape {values.shape}")
    n, d = values.shape
    k = sampled_dimensions(d, epsilon)
    perturb = _SCALAR[mechanism][0]
    chosen = np.argsort(rng.random((n, d)), axis=1)[:, :k]
    rows = np.repeat(np.arange(n), k)
    out = np.zeros((n, d))
    out[rows, chosen.reshape(-1)] = perturb(values[rows, chosen.reshape(-1)], epsilon / k, rng) * (d / k)
    return out


def vector_variance(T: ArrayLike, epsilon: float, mechanism: str = "hybrid") -> np.ndarray:
    """Per-coordinate variance of :func:`perturb_vector`: ``(d/k)(Var_M(t_j, ε/k) + t_j²) − t_j²``."""
    values = _unit_values(T, "T")
    d = values.shape[-1]
    k = sampled_dimensions(d, epsilon)
    return (d / k) * (_SCALAR[mechanism][1](values, epsilon / k) + values**2) - values**2


# --- Shared by the estimators -------------------------------------------------------------------


def _checked_rows(
    estimator: str, X: ArrayLike, features: Sequence[FeatureSpec] | None, y: ArrayLike | None = None
) -> tuple[np.ndarray, tuple[FeatureSpec, ...]]:
    """Encoded rows as floats, the specs they are read with; clear errors for what does not fit."""
    if features is None:
        raise ValueError(f"{estimator} needs `features` (FeatureSpec list with public ranges and categories)")
    specs = tuple(features)
    bad = [f for f in specs if not isinstance(f, FeatureSpec)]
    if bad:
        raise TypeError(f"{estimator}: every feature must be a FeatureSpec, got {type(bad[0]).__name__}")
    arr = np.asarray(X, dtype=float)
    if arr.ndim != 2 or arr.shape[1] != len(specs):
        raise ValueError(
            f"{estimator}: X must have shape (n, {len(specs)}) for its features, got {arr.shape}"
        )
    if not np.isfinite(arr).all():
        row, col = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(f"{estimator}: X has a non-finite value in column {specs[col].name!r} (row {row})")
    if y is not None and np.asarray(y).shape != (arr.shape[0],):
        raise ValueError(f"{estimator}: y must have shape ({arr.shape[0]},), got {np.asarray(y).shape}")
    return arr, specs


def _classes(estimator: str, y: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Sorted classes and each label's class index; at least two classes."""
    classes, index = np.unique(np.asarray(y), return_inverse=True)
    if classes.size < 2:
        raise ValueError(f"{estimator}: y has {classes.size} class; at least two are needed")
    return classes, index.astype(np.int64)


def _scaled_design(X: np.ndarray, features: Sequence[FeatureSpec]) -> np.ndarray:
    """Rows in ``[−1, 1]^d``: numeric mapped from its public range (clipped), categories one-hot, bias 1."""
    parts = [np.ones((X.shape[0], 1))]
    for j, f in enumerate(features):
        if f.kind is FeatureKind.CATEGORICAL:
            parts.append((X[:, [j]] == np.arange(len(f.categories))[None, :]).astype(float))
        elif f.kind is FeatureKind.BOOL:
            parts.append(np.where(X[:, [j]] > 0.5, 1.0, -1.0))
        else:
            low, high = float(f.low), float(f.high)
            parts.append(np.clip(2.0 * (X[:, [j]] - low) / (high - low) - 1.0, -1.0, 1.0))
    return np.hstack(parts)


def _softmax_proba(scores: np.ndarray) -> np.ndarray:
    shifted = scores - scores.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=1, keepdims=True)


class _ScoredClassifier(ClassifierMixin, BaseEstimator):
    """predict / predict_proba / decision_function from per-class scores (``_class_scores``).

    ``param_checks`` holds the constraints every subclass shares: ε (the per-user budget),
    the public feature specs and the random state.
    """

    param_checks: dict[str, tuple[Any, ...]] = {
        "epsilon": (Interval(numbers.Real, 0, MAX_EPSILON, closed="right"),),
        "features": (list, tuple, None),
        "random_state": RANDOM_STATE,
    }

    features: Sequence[FeatureSpec] | None
    random_state: int | np.random.Generator | None
    classes_: np.ndarray

    def _fit_inputs(self, X: ArrayLike, y: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.random.Generator]:
        """Check the hyperparameters and ``(X, y)`` and record ``features_`` and ``classes_``.

        Returns the encoded rows, each label's index in ``classes_`` and the fit's generator.
        """
        check_params(self)
        rows, self.features_ = _checked_rows(type(self).__name__, X, self.features, y)
        self.classes_, labels = _classes(type(self).__name__, y)
        return rows, labels, generator_from(self.random_state)

    def _class_scores(self, X: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _rows(self, X: ArrayLike) -> np.ndarray:
        check_is_fitted(self, "classes_")
        return _checked_rows(type(self).__name__, X, self.features_)[0]

    def decision_function(self, X: ArrayLike) -> np.ndarray:
        """Binary: log-odds of ``classes_[1]``, shape (n,); multiclass: per-class scores, shape (n, K)."""
        scores = self._class_scores(self._rows(X))
        return scores[:, 1] - scores[:, 0] if self.classes_.size == 2 else scores

    def predict_proba(self, X: ArrayLike) -> np.ndarray:
        """Class probabilities, columns in the order of ``classes_``."""
        return _softmax_proba(self._class_scores(self._rows(X)))

    def predict(self, X: ArrayLike) -> np.ndarray:
        return self.classes_[np.argmax(self._class_scores(self._rows(X)), axis=1)]


# --- LDP logistic regression by stochastic gradient (Wang et al. 2019, sec. V) -----------------


class LdpLogisticRegression(_ScoredClassifier):
    """Logistic regression by LDP stochastic gradient: one perturbed, clipped gradient per user.

    Wang et al. (ICDE 2019, sec. V): rows are mapped into ``[−1, 1]^d``
    (numeric features from their public range, categories one-hot, a bias
    coordinate 1). The users are shuffled and cut into groups of
    ``group_size``; in round ``t`` every user of group ``t`` computes the
    gradient of its own log loss at the current public parameters,
    ``g = x ⊗ (p(x) − e_y)`` (binary: one logit, ``g = x·(σ(θ·x) − y)``),
    clips it to ``[−1, 1]^D`` and sends it once through the multidimensional
    mechanism (:func:`perturb_vector`: ``k`` of ``D`` coordinates at ``ε/k``
    by the Piecewise or Hybrid Mechanism). The aggregator averages the group's
    reports (an unbiased gradient), adds the public L2 term ``λθ`` and steps
    ``θ ← θ − η/√t · (ḡ + λθ)``. The model returned is the average of the
    second half of the iterates (tail averaging against the gradient noise).
    Every user reports once: ε-LDP per user.

    Parameters
    ----------
    epsilon : float, default=1.0
        Each user's privacy loss.
    features : list of FeatureSpec
        Kinds, public ranges and categories of the columns of ``X`` (encoded:
        category indices, 0/1, numbers).
    mechanism : {"hybrid", "piecewise"}, default="hybrid"
    group_size : int or "auto", default="auto"
        Users per round. ``"auto"``: the paper's order ``⌈D·ln D/ε²⌉``
        (``D`` gradient coordinates), capped so that at least ``min_rounds``
        rounds run.
    min_rounds : int, default=20
    learning_rate : float, default=1.0
        ``η`` of the step ``η/√t``.
    l2 : float, default=1e-3
        ``λ``, applied by the aggregator (it needs no private data).
    random_state : None, int or Generator

    Attributes
    ----------
    classes_ : ndarray
    coef_ : ndarray of shape (d, 1) for two classes, (d, K) otherwise
        Row 0 is the bias, in the scaled design.
    n_rounds_ : int
    group_size_ : int
    """

    param_checks: dict[str, tuple[Any, ...]] = {
        **_ScoredClassifier.param_checks,
        "mechanism": (Options(frozenset({"hybrid", "piecewise"})),),
        "group_size": (Interval(numbers.Integral, 1, None, closed="left"), Options(frozenset({"auto"}))),
        "min_rounds": (Interval(numbers.Integral, 1, None, closed="left"),),
        "learning_rate": (Interval(numbers.Real, 0, None, closed="neither"),),
        "l2": (Interval(numbers.Real, 0, None, closed="left"),),
    }

    def __init__(
        self,
        *,
        epsilon: float = 1.0,
        features: Sequence[FeatureSpec] | None = None,
        mechanism: ScalarMechanism = "hybrid",
        group_size: int | Literal["auto"] = "auto",
        min_rounds: int = 20,
        learning_rate: float = 1.0,
        l2: float = 1e-3,
        random_state: int | np.random.Generator | None = None,
    ) -> None:
        store_params(self, locals())

    def fit(self, X: ArrayLike, y: ArrayLike) -> LdpLogisticRegression:
        """Run the protocol on ``(X, y)``, one user per row (class docstring)."""
        rows, labels, rng = self._fit_inputs(X, y)
        design = _scaled_design(rows, self.features_)
        n, d = design.shape
        outputs = 1 if self.classes_.size == 2 else self.classes_.size
        dims = d * outputs
        if self.group_size == "auto":
            paper = math.ceil(dims * math.log(max(dims, 2)) / float(self.epsilon) ** 2)
            size = max(1, min(paper, n // self.min_rounds))
        else:
            size = int(self.group_size)
        order = rng.permutation(n)
        groups = [order[i : i + size] for i in range(0, n, size)]
        theta = np.zeros((d, outputs))
        tail: list[np.ndarray] = []
        for t, group in enumerate(groups, start=1):
            x = design[group]
            residual = self._residual(x @ theta, labels[group])
            gradients = np.clip((x[:, :, None] * residual[:, None, :]).reshape(group.size, dims), -1.0, 1.0)
            noisy = perturb_vector(gradients, float(self.epsilon), rng, self.mechanism)
            step = noisy.mean(axis=0).reshape(d, outputs) + float(self.l2) * theta
            theta = theta - float(self.learning_rate) / math.sqrt(t) * step
            if 2 * t > len(groups):
                tail.append(theta)
        self.coef_ = np.mean(tail, axis=0)
        self.n_rounds_ = len(groups)
        self.group_size_ = size
        return self

    def _residual(self, logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """``p − e_y`` per row: one column for two classes (``σ − y``), K otherwise."""
        if logits.shape[1] == 1:
            return 1.0 / (1.0 + np.exp(-logits)) - labels[:, None]
        proba = _softmax_proba(logits)
        proba[np.arange(labels.size), labels] -= 1.0
        return proba

    def _class_scores(self, X: np.ndarray) -> np.ndarray:
        logits = _scaled_design(X, self.features_) @ self.coef_
        return np.hstack([np.zeros_like(logits), logits]) if logits.shape[1] == 1 else logits


# --- Marginal-based learning (CALM / PriView, Zhang et al. CCS 2018) ---------------------------


def _project(freq: np.ndarray, keep: tuple[int, ...]) -> np.ndarray:
    drop = tuple(a for a in range(freq.ndim) if a not in keep)
    return freq.sum(axis=drop) if drop else freq


def make_consistent(
    marginals: Sequence[tuple[tuple[int, ...], np.ndarray, np.ndarray]], rounds: int = 3
) -> list[np.ndarray]:
    """CALM's overlap consistency then Norm-Sub, ``rounds`` times (Zhang et al. 2018, sec. 4.4).

    ``marginals`` holds ``(attributes, frequencies, variance)`` with the label
    as the last attribute of every marginal (attribute ``−1``); frequencies sum
    to 1 and ``variance`` is the variance of each cell's frequency. For every
    attribute set ``A`` shared by several marginals (the label alone, then each
    (feature, label) pair), the target is the inverse-variance weighted mean
    of their projections onto ``A`` (a projected cell sums ``c`` cells, so its
    variance is the sum of theirs); each marginal then spreads the difference
    between target and its own projection evenly over the ``c`` cells it sums.
    Afterwards every table is projected back onto the simplex (Norm-Sub,
    :func:`~anonml.privacy.project_to_simplex`). Returns the new frequencies.
    """
    freqs = [np.array(f, dtype=float) for _, f, _ in marginals]
    attrs = [a for a, _, _ in marginals]
    shared: list[tuple[int, ...]] = [(-1,)]
    shared += sorted({(a, -1) for at in attrs for a in at if a != -1})
    for _ in range(rounds):
        for target_attrs in shared:
            holders = [i for i, at in enumerate(attrs) if set(target_attrs) <= set(at)]
            if len(holders) < 2:
                continue
            projections, weights, axes_of = [], [], {}
            for i in holders:
                axes = tuple(attrs[i].index(a) for a in target_attrs)
                axes_of[i] = axes
                projections.append(_project(freqs[i], axes))
                weights.append(1.0 / max(float(_project(marginals[i][2], axes).mean()), 1e-300))
            target = np.average(projections, axis=0, weights=weights)
            for i, proj in zip(holders, projections, strict=True):
                cells = freqs[i].size // proj.size
                shape = [freqs[i].shape[a] if a in axes_of[i] else 1 for a in range(freqs[i].ndim)]
                freqs[i] = freqs[i] + ((target - proj) / cells).reshape(shape)
        freqs = [project_to_simplex(f.reshape(-1), 1.0).reshape(f.shape) for f in freqs]
    return freqs


class LdpMarginalClassifier(_ScoredClassifier):
    """Marginal-based learning: one low-dimensional marginal per user, made consistent, then a model.

    CALM / PriView (Zhang et al., CCS 2018): the users are split at random
    into one group per marginal — every (feature, label) pair for
    ``order=1``, every (feature, feature, label) triple for ``order=2`` —
    and each user reports its cell of its group's marginal once at the full
    ε, by k-ary randomised response when the marginal has fewer than
    ``3e^ε + 2`` cells and by optimised unary encoding otherwise (the rule of
    Wang et al. 2017; OUE has exactly the variance of optimal local hashing,
    ``4e^ε/(e^ε−1)²`` per cell, so the choice is CALM's k-RR/OLH rule with
    the project's mechanisms). The aggregator debiases each marginal
    (:func:`~anonml.privacy.estimate_counts`, Norm-Sub), makes overlapping
    marginals agree (:func:`make_consistent`) and fits

    * ``order=1``: naive Bayes, ``log P(y) + Σ_j log P(x_j | y)``;
    * ``order=2``: a tree-augmented naive Bayes (Friedman et al. 1997): the
      maximum spanning tree of the conditional mutual information
      ``I(x_j; x_k | y)`` read off the triples, rooted at feature 0, and
      ``log P(y) + log P(x_r | y) + Σ_{j≠r} log P(x_j | x_pa(j), y)``.

    Conditional tables add ``smoothing`` pseudo-reports to every cell.
    Numeric features get equal-width bins over their public range, as many as
    :func:`~anonml.learn.binning.auto_n_bins` allows for the group size (or
    ``n_bins``). ε-LDP per user.

    Parameters
    ----------
    epsilon : float, default=1.0
    features : list of FeatureSpec
    order : {1, 2}, default=2
        Features per marginal (besides the label).
    n_bins : int or "auto", default="auto"
    consistency_rounds : int, default=3
    smoothing : float, default=1.0
        Pseudo-count added to every cell (in reports).
    random_state : None, int or Generator

    Attributes
    ----------
    classes_ : ndarray
    binning_ : Binning
    marginals_ : list of (tuple of int, ndarray)
        Each marginal's features and consistent frequencies, shaped ``(*bins, K)``.
    parents_ : ndarray of int
        The tree's parent of each feature (−1 for the root; all −1 at ``order=1``).
    """

    param_checks: dict[str, tuple[Any, ...]] = {
        **_ScoredClassifier.param_checks,
        "order": (Interval(numbers.Integral, 1, 2, closed="both"),),
        "n_bins": (Interval(numbers.Integral, 2, None, closed="left"), Options(frozenset({"auto"}))),
        "consistency_rounds": (Interval(numbers.Integral, 0, None, closed="left"),),
        "smoothing": (Interval(numbers.Real, 0, None, closed="neither"),),
    }

    def __init__(
        self,
        *,
        epsilon: float = 1.0,
        features: Sequence[FeatureSpec] | None = None,
        order: int = 2,
        n_bins: int | Literal["auto"] = "auto",
        consistency_rounds: int = 3,
        smoothing: float = 1.0,
        random_state: int | np.random.Generator | None = None,
    ) -> None:
        store_params(self, locals())

    def fit(self, X: ArrayLike, y: ArrayLike) -> LdpMarginalClassifier:
        """Simulate the protocol on ``(X, y)``, one user per row (class docstring)."""
        rows, labels, rng = self._fit_inputs(X, y)
        n, n_features = rows.shape
        k_classes = self.classes_.size
        order = min(int(self.order), n_features)
        subsets = (
            [(j,) for j in range(n_features)] if order == 1 else list(combinations(range(n_features), 2))
        )
        groups = np.array_split(rng.permutation(n), len(subsets))
        smallest = max(1, min(g.size for g in groups))
        b = (
            auto_n_bins(float(self.epsilon), smallest, subset_size=order)
            if self.n_bins == "auto"
            else self.n_bins
        )
        self.binning_ = equal_width_binning(self.features_, int(b))
        codes = self.binning_.transform(rows)
        estimated = []
        for subset, group in zip(subsets, groups, strict=True):
            shape = tuple(self.binning_.n_bins[j] for j in subset)
            if group.size == 0:  # fewer users than marginals: this one knows nothing
                full = (*shape, k_classes)
                estimated.append((subset, np.full(full, 1.0 / np.prod(full)), np.full(full, 1.0)))
                continue
            mechanism = _mechanism(float(self.epsilon), domain_size(shape, k_classes))
            bits = mechanism.perturb(
                report_values(codes[group][:, list(subset)], labels[group], shape, k_classes), rng
            )
            h = estimate_histogram(
                bits.sum(axis=0), mechanism, group.size, subset, shape, n_classes=k_classes
            )
            estimated.append((subset, h.counts / h.n, h.variance / h.n**2))
        tagged = [((*s, -1), f, v) for s, f, v in estimated]
        consistent = make_consistent(tagged, int(self.consistency_rounds))
        self.marginals_ = [(s, f) for (s, _, _), f in zip(estimated, consistent, strict=True)]
        self._fit_tables(n_features, [g.size for g in groups])
        return self

    def _fit_tables(self, n_features: int, group_sizes: list[int]) -> None:
        """Prior, per-feature P(x_j | y) and, at order 2, the tree and P(x_j | x_pa, y)."""
        alpha = float(self.smoothing)
        n_bins = self.binning_.n_bins
        sizes = dict(zip((s for s, _ in self.marginals_), group_sizes, strict=True))
        # Pooled pseudo-counts of (x_j, y): every marginal holding j, projected, weighted by its users.
        pair_counts = [np.zeros((n_bins[j], self.classes_.size)) for j in range(n_features)]
        prior = np.zeros(self.classes_.size)
        for subset, freq in self.marginals_:
            users = sizes[subset]
            prior += users * _project(freq, (freq.ndim - 1,))
            for axis, j in enumerate(subset):
                pair_counts[j] += users * _project(freq, (axis, freq.ndim - 1))
        self.log_prior_ = np.log((prior + alpha) / (prior + alpha).sum())
        self.parents_ = np.full(n_features, -1)
        self.tables_: list[np.ndarray] = []
        for j in range(n_features):
            cond = (pair_counts[j] + alpha) / (pair_counts[j] + alpha).sum(axis=0, keepdims=True)
            self.tables_.append(np.log(cond))  # (b_j, K): log P(x_j | y)
        if not any(len(s) == 2 for s, _ in self.marginals_):
            return
        triples = {s: freq for s, freq in self.marginals_}
        info = np.zeros((n_features, n_features))
        for (j, k), freq in triples.items():
            p = freq + 1e-12
            p_y = p.sum(axis=(0, 1), keepdims=True)
            p_jy = p.sum(axis=1, keepdims=True)
            p_ky = p.sum(axis=0, keepdims=True)
            info[j, k] = info[k, j] = float(np.sum(p * np.log(p * p_y / (p_jy * p_ky))))
        # Maximum spanning tree = minimum spanning tree of (max + 1 − I) on the complete graph.
        weights = np.triu(info.max() + 1.0 - info, k=1)
        tree = minimum_spanning_tree(weights).toarray()
        adjacency = (tree + tree.T) > 0
        seen, frontier = {0}, [0]
        while frontier:
            node = frontier.pop()
            for child in np.flatnonzero(adjacency[node]):
                if int(child) not in seen:
                    seen.add(int(child))
                    self.parents_[child] = node
                    frontier.append(int(child))
        for j in range(n_features):
            parent = int(self.parents_[j])
            if parent < 0:
                continue
            key = (min(j, parent), max(j, parent))
            counts = sizes[key] * triples[key]
            if key[0] != j:  # put the child first: (b_j, b_parent, K)
                counts = counts.transpose(1, 0, 2)
            cond = (counts + alpha) / (counts + alpha).sum(axis=0, keepdims=True)
            self.tables_[j] = np.log(cond)  # log P(x_j | x_parent, y)

    def _class_scores(self, X: np.ndarray) -> np.ndarray:
        codes = self.binning_.transform(X)
        scores = np.tile(self.log_prior_, (codes.shape[0], 1))
        for j, table in enumerate(self.tables_):
            parent = int(self.parents_[j])
            scores += table[codes[:, j]] if parent < 0 else table[codes[:, j], codes[:, parent]]
        return scores
