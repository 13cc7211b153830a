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
:class:`LdpMarginalClassifier`; for a numeric target, :class:`LdpLinearRegression`). The
one-dimensional mechanisms they rest on (:func:`piecewise_perturb`, :func:`duchi_perturb`,
:func:`hybrid_perturb`, :func:`perturb_vector`) and their variance formulas live in
:mod:`anonml.learn.ldp_mechanisms` and are importable from here too.

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
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from anonml.learn.binning import Binning, auto_n_bins
from anonml.learn.histograms import domain_size, estimate_histogram, report_values
from anonml.learn.ldp_mechanisms import (
    EPSILON_STAR,
    ScalarMechanism,
    duchi_bound,
    duchi_perturb,
    duchi_variance,
    hybrid_alpha,
    hybrid_perturb,
    hybrid_variance,
    hybrid_worst_variance,
    perturb_vector,
    piecewise_bound,
    piecewise_perturb,
    piecewise_variance,
    sampled_dimensions,
    vector_variance,
)
from anonml.learn.params import RANDOM_STATE, Interval, Options, check_params, store_params
from anonml.model import FeatureKind, FeatureSpec
from anonml.privacy import OUE, Mechanism, RandomizedResponse, estimate_counts, project_to_simplex
from anonml.privacy._checks import MAX_EPSILON
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
    "LdpLinearRegression",
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


# --- LDP stochastic gradient (Wang et al. 2019, sec. V) ----------------------------------------

#: The constraints of the LDP-SGD hyperparameters (:func:`_ldp_sgd`), shared by its estimators.
_SGD_CHECKS: dict[str, tuple[Any, ...]] = {
    "mechanism": (Options(frozenset({"hybrid", "piecewise"})),),
    "group_size": (Interval(numbers.Integral, 1, None, closed="left"), Options(frozenset({"auto"}))),
    "min_rounds": (Interval(numbers.Integral, 1, None, closed="left"),),
    "learning_rate": (Interval(numbers.Real, 0, None, closed="neither"),),
    "l2": (Interval(numbers.Real, 0, None, closed="left"),),
}


def _ldp_sgd(
    params: Any,
    design: np.ndarray,
    outputs: int,
    residual: Callable[[np.ndarray, np.ndarray], np.ndarray],
    rng: np.random.Generator,
    rate: float,
) -> tuple[np.ndarray, int, int]:
    """The LDP-SGD loop of :class:`LdpLogisticRegression` and :class:`LdpLinearRegression`.

    ``params`` holds ``epsilon``, ``mechanism``, ``group_size``, ``min_rounds`` and ``l2``; ``rate``
    is the step's ``η``. ``residual(group, θ)``
    gives the loss derivative per row of ``design[group]`` and output, so each user's gradient is
    ``x ⊗ residual``, clipped to ``[−1, 1]^D`` and sent once through :func:`perturb_vector`.
    Returns the tail-averaged parameters ``(d, outputs)``, the rounds run and the users per round.
    """
    n, d = design.shape
    dims = d * outputs
    epsilon = float(params.epsilon)
    if params.group_size == "auto":
        paper = math.ceil(dims * math.log(max(dims, 2)) / epsilon**2)
        size = max(1, min(paper, n // params.min_rounds))
    else:
        size = int(params.group_size)
    order = rng.permutation(n)
    groups = [order[i : i + size] for i in range(0, n, size)]
    theta = np.zeros((d, outputs))
    tail: list[np.ndarray] = []
    for t, group in enumerate(groups, start=1):
        x = design[group]
        gradients = np.clip(
            (x[:, :, None] * residual(group, theta)[:, None, :]).reshape(group.size, dims), -1.0, 1.0
        )
        noisy = perturb_vector(gradients, epsilon, rng, params.mechanism)
        step = noisy.mean(axis=0).reshape(d, outputs) + float(params.l2) * theta
        theta = theta - rate / math.sqrt(t) * step
        if 2 * t > len(groups):
            tail.append(theta)
    return np.mean(tail, axis=0), len(groups), size


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

    param_checks: dict[str, tuple[Any, ...]] = {**_ScoredClassifier.param_checks, **_SGD_CHECKS}

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
        outputs = 1 if self.classes_.size == 2 else self.classes_.size
        self.coef_, self.n_rounds_, self.group_size_ = _ldp_sgd(
            self,
            design,
            outputs,
            lambda group, theta: self._residual(design[group] @ theta, labels[group]),
            rng,
            float(self.learning_rate),
        )
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


class LdpLinearRegression(RegressorMixin, BaseEstimator):
    """Linear regression by LDP stochastic gradient (Wang et al., ICDE 2019, sec. V).

    The protocol of :class:`LdpLogisticRegression` with the squared loss: the target is mapped
    from its public ``target_range`` into ``[−1, 1]`` (clipped), so ``ỹ = 2(y − low)/(high − low) − 1``;
    every user of round ``t``'s group sends its gradient ``x·(θ·x − ỹ)`` of ``½(θ·x − ỹ)²``,
    clipped to ``[−1, 1]^d``, once through :func:`perturb_vector`, and the aggregator steps
    ``θ ← θ − η/√t · (ḡ + λθ)``. The prediction is ``θ·x`` clipped to ``[−1, 1]`` and mapped back
    into the range. Every user reports once: ε-LDP per user.

    Parameters
    ----------
    epsilon : float, default=1.0
    features : list of FeatureSpec
    target_range : tuple (low, high), default=(0.0, 1.0)
        Public bounds of the target.
    learning_rate : float or "auto", default="auto"
        ``η`` of the step ``η/√t``. ``"auto"``: ``1/d`` for a design of ``d`` columns (bias
        included), the inverse of the squared loss's curvature bound ``‖x‖² ≤ d`` on ``[−1, 1]^d``;
        the logistic loss's is four times flatter, so :class:`LdpLogisticRegression` steps with 1.
    mechanism, group_size, min_rounds, l2, random_state
        As :class:`LdpLogisticRegression`.

    Attributes
    ----------
    coef_ : ndarray of shape (d, 1)
        Row 0 is the bias, in the scaled design and the scaled target.
    learning_rate_ : float
        The ``η`` used.
    n_rounds_ : int
    group_size_ : int
    """

    param_checks: dict[str, tuple[Any, ...]] = {
        **_ScoredClassifier.param_checks,
        **_SGD_CHECKS,
        "target_range": (tuple, list),
        "learning_rate": (Interval(numbers.Real, 0, None, closed="neither"), Options(frozenset({"auto"}))),
    }

    def __init__(
        self,
        *,
        epsilon: float = 1.0,
        features: Sequence[FeatureSpec] | None = None,
        target_range: tuple[float, float] = (0.0, 1.0),
        mechanism: ScalarMechanism = "hybrid",
        group_size: int | Literal["auto"] = "auto",
        min_rounds: int = 20,
        learning_rate: float | Literal["auto"] = "auto",
        l2: float = 1e-3,
        random_state: int | np.random.Generator | None = None,
    ) -> None:
        store_params(self, locals())

    def _range(self) -> tuple[float, float]:
        values = tuple(self.target_range)
        if len(values) != 2:
            raise ValueError(
                f"LdpLinearRegression: target_range must be (low, high), got {self.target_range}"
            )
        low, high = float(values[0]), float(values[1])
        if not (np.isfinite(low) and np.isfinite(high) and high > low):
            raise ValueError(
                f"LdpLinearRegression: target_range must be finite low < high, got {self.target_range}"
            )
        return low, high

    def fit(self, X: ArrayLike, y: ArrayLike) -> LdpLinearRegression:
        """Run the protocol on ``(X, y)``, one user per row (class docstring)."""
        check_params(self)
        low, high = self._range()
        rows, self.features_ = _checked_rows(type(self).__name__, X, self.features, y)
        target = np.asarray(y, dtype=float)
        if not np.isfinite(target).all():
            raise ValueError(
                f"LdpLinearRegression: y has a non-finite value (row {int(np.argmin(np.isfinite(target)))})"
            )
        scaled = np.clip(2.0 * (target - low) / (high - low) - 1.0, -1.0, 1.0)
        design = _scaled_design(rows, self.features_)
        self.learning_rate_ = (
            1.0 / design.shape[1] if self.learning_rate == "auto" else float(self.learning_rate)
        )
        self.coef_, self.n_rounds_, self.group_size_ = _ldp_sgd(
            self,
            design,
            1,
            lambda group, theta: design[group] @ theta - scaled[group, None],
            generator_from(self.random_state),
            self.learning_rate_,
        )
        self.n_features_in_ = rows.shape[1]
        return self

    def predict(self, X: ArrayLike) -> np.ndarray:
        """``θ·x`` clipped to ``[−1, 1]``, mapped back into ``target_range``."""
        check_is_fitted(self, "coef_")
        low, high = self._range()
        rows = _checked_rows(type(self).__name__, X, self.features_)[0]
        scaled = np.clip(_scaled_design(rows, self.features_) @ self.coef_[:, 0], -1.0, 1.0)
        return low + (scaled + 1.0) / 2.0 * (high - low)


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
