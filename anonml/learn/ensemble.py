"""From subset histograms to one classifier: paper mode (thesis eq. 6.2) and default mode.

Both modes produce an :class:`Ensemble` of :class:`Component` lookup tables, one
per feature subset: every subset's inputs are binned, so any partition
classifier is fully described by its output on each of the subset's cells. An
ensemble is therefore plain numbers (JSON-able, see :mod:`anonml.learn.model`)
and scoring a row is ``intercept + Σ_i w_i · table_i[cell_i(x)]``.

*Paper mode* (Cyphers 2017, ch. 6, eq. 6.2) — per (partition, subset): draw a synthetic
sample of the partition's size from the estimated histogram, fit a partition
classifier, score it by k-fold cross-validation on that noisy sample, and let
each classifier cast a ±1 vote weighted by its score (eq. 6.2)::

    f(x) = Σ_i s_i · h_i(x) / Σ_i s_i,   h_i(x) ∈ {−1, +1},   ŷ = 1  iff  f(x) > 0.

*Default mode* — no sampling and no cross-validation on noise: each subset's
histogram (pooled over the partitions that reported it) gives the smoothed
posterior of every cell,
``P̂(y=1 | c) = (ĉ₁ + a·π̂) / (ĉ₀ + ĉ₁ + a)``, the closed-form maximum-likelihood
fit of the saturated logistic model on the cells weighted by their
pseudo-count-smoothed estimated counts; ``a = α·σ̂`` is ``smoothing`` times the
predicted standard deviation of a cell count, so a cell is trusted only as far
as the privacy noise allows. The subsets are combined additively around the
pooled prior ``π̂``:

* ``combine="logit"``: ``logit P̂(y|x) = logit π̂ + Σ_S [logit P̂(y=1|x_S) − logit π̂]``,
  naive Bayes over subsets (exact when subsets are conditionally independent
  given the label);
* ``combine="linear"`` (default): the same sum with each term replaced by its
  tangent at the prior, ``(P̂(y=1|x_S) − π̂) / (π̂(1−π̂))``. The terms stay
  bounded, so a rare cell whose noisy estimate says "never positive" cannot
  dominate the sum, and correlated features (sex, marital status,
  relationship) are double-counted less. On Adult (benchmarks.adult
  ``--ablation``, 20 trials, same seeds) it beats ``"logit"`` at every ε_T:
  test AUC 0.835 vs 0.832 at 0.5, 0.864 vs 0.857 at 1, 0.876 vs 0.871 at 2,
  0.883 vs 0.881 at 4. The consistency step matters less: Norm-Sub, Norm-Mul
  and IBU agree to 0.0003; Base-Cut loses 0.013 at ε_T = 0.5.

A feature that appears in several distinct subsets would be counted several
times; each subset's term is weighted by the mean over its features of
``1 / (number of subsets holding the feature)``.

*Discriminant weights* (``weighting="lda"``, binary, opt-in): each subset's term
``t_S`` is further weighted by its diagonal-LDA coefficient (Fisher 1936; the
"independence rule" of Bickel & Levina 2004),
``w_S = max(μ₁ − μ₀, 0) / (π̂·σ₁² + (1 − π̂)·σ₀²)`` with ``μ_y``, ``σ_y²`` the mean
and variance of ``t_S`` over its cells under ``P̂(cell | y)`` read off the same
histogram, rescaled to mean 1, then pulled toward equal weights by the
:func:`shrinkage_factor` λ, ``1 + λ·(w_S − 1)``: noisy tables give noisy
coefficients. It uses only what the reports already give (no extra ε), so it
cannot see the features' correlation. Off by default (docs/model-quality.md, issue 25: figures
in ``benchmarks/results/public_sets_variant_weighting-lda*.md``).

*Noise-aware shrinkage* (default mode): the prior ``π̂`` is the pooled label
distribution shrunk toward uniform as far as its noise says
(:func:`~anonml.learn.histograms.shrunk_label_distribution`), and every
weight is multiplied by one :func:`shrinkage_factor` ``λ ∈ (0, 1]`` from the
subsets' signal and noise energies, so that when the privacy noise dominates
the model's probabilities fall back to the (shrunk) prior instead of being
confidently wrong (benchmarks/trivial_floors.py).

*K > 2 classes* (default mode only): every cell gets a posterior per class,
``P̂(c | cell) = (ĉ_c + a·π̂_c)/(Σ_c' ĉ_c' + a)``, and the subsets combine in
log space, ``log P̂(c|x) ∝ log π̂_c + Σ_S w_S·t_S(c, x_S)`` with
``t = log P̂(c|x_S) − log π̂_c`` (``"logit"``) or its tangent at the prior
``(P̂(c|x_S) − π̂_c)/π̂_c`` (``"linear"``); probabilities are the softmax.

*Calibration*: the combined score is a ranking, not a probability (naive
Bayes over correlated subsets is over-confident; votes are a share). An
ensemble may carry a Platt map ``(a, b)``, ``P(y=1|x) = σ(a·f(x) + b)``,
fitted on a separate calibration histogram (:func:`platt_from_histogram`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
from scipy.optimize import minimize, minimize_scalar
from scipy.special import expit, logit, logsumexp, softmax
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score, make_scorer, roc_auc_score
from sklearn.model_selection import StratifiedKFold, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder
from sklearn.tree import DecisionTreeClassifier

from anonml.learn.histograms import (
    SubsetHistogram,
    dependence_and_noise,
    pool_histograms,
    shrunk_label_distribution,
)
from anonml.randomness import resolve_rng

__all__ = [
    "Component",
    "Ensemble",
    "vote_ensemble",
    "paper_ensemble",
    "default_ensemble",
    "cell_posteriors",
    "class_posteriors",
    "platt_from_histogram",
    "platt_objective",
    "shrinkage_factor",
    "discriminant_weights",
]

_PRIOR_CLIP = 1e-4
_MIN_PSEUDO = 0.5
_MIN_SLOPE = 0.01  # Jeffreys-style floor so an empty cell of exact counts is not 0/0


@dataclass(frozen=True, eq=False)
class Component:
    """One subset's contribution: a value per cell and a weight.

    Attributes
    ----------
    features : tuple of int
        Column indices of the subset.
    shape : tuple of int
        Bins of each feature.
    table : ndarray of shape (Π shape,)
        Value of each cell, cells raveled in C order.
    weight : float
    """

    features: tuple[int, ...]
    shape: tuple[int, ...]
    table: np.ndarray
    weight: float

    def __post_init__(self) -> None:
        cells = int(np.prod(self.shape, dtype=np.int64))
        if self.table.shape[:1] != (cells,) or self.table.ndim not in (1, 2):
            raise ValueError(f"component {self.features}: table {self.table.shape} vs shape {self.shape}")
        if not np.all(np.isfinite(self.table)) or not np.isfinite(self.weight):
            raise ValueError(f"component {self.features}: table and weight must be finite")

    def values(self, codes: np.ndarray) -> np.ndarray:
        """Table value of each row of binned codes (all features, column order).

        Shape (n,) for a binary table, (n, K) for a per-class table.
        """
        sub = codes[:, list(self.features)]
        if np.any(sub >= np.asarray(self.shape)) or np.any(sub < 0):
            raise ValueError(f"codes outside the bins {self.shape} of features {self.features}")
        return self.table[np.ravel_multi_index(sub.T, self.shape)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "features": list(self.features),
            "shape": list(self.shape),
            "table": self.table.tolist(),
            "weight": float(self.weight),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Component:
        return cls(
            tuple(int(f) for f in data["features"]),
            tuple(int(s) for s in data["shape"]),
            np.asarray(data["table"], dtype=float),  # (cells,) or (cells, K)
            float(data["weight"]),
        )


@dataclass(frozen=True, eq=False)
class Ensemble:
    """A weighted sum of component tables.

    ``kind="vote"``: tables hold ±1 votes, weights sum to 1 (eq. 6.2); the
    uncalibrated probability of the positive class is the weighted share of
    positive votes, ``(1 + f)/2``. ``kind="logit"``: the decision function is a
    log-odds and the probability is its logistic. ``kind="softmax"``: K > 2
    classes, per-class tables and intercepts, probabilities by softmax.
    ``calibration = (a, b)`` (binary kinds): ``P(y=1|x) = σ(a·f(x) + b)``.
    ``class_map`` (softmax): a K × K row-stochastic matrix ``Q``, ``Q[ĉ, y] = P̂(y | ĉ)`` with
    ``ĉ(x)`` the argmax of the decision function, mixed in with weight ``map_weight = t ∈ (0, 1]``:
    ``P(y|x) ∝ softmax(f(x))_y^(1−t) · Q[ĉ(x), y]^t`` (``t = 1``: the predicted class's row)
    (:func:`~anonml.learn.calibration.calibrate_classes`).
    """

    kind: Literal["vote", "logit", "softmax"]
    intercept: float | np.ndarray
    components: tuple[Component, ...]
    calibration: tuple[float, float] | None = None
    class_map: np.ndarray | None = None
    map_weight: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in ("vote", "logit", "softmax"):
            raise ValueError(f"unknown ensemble kind {self.kind!r}")
        if not self.components:
            raise ValueError("an ensemble needs at least one component")
        per_class = self.kind == "softmax"
        k = np.asarray(self.intercept).size
        if per_class != (np.ndim(self.intercept) == 1 and k >= 3):
            raise ValueError(
                f"a {self.kind} ensemble needs {'K >= 3 intercepts' if per_class else 'one intercept'}"
            )
        for c in self.components:
            if (c.table.ndim == 2) != per_class or (per_class and c.table.shape[1] != k):
                raise ValueError(
                    f"component {c.features}: table {c.table.shape} does not fit a {self.kind} ensemble"
                )
        if self.calibration is not None and (
            per_class or len(self.calibration) != 2 or not np.all(np.isfinite(self.calibration))
        ):
            raise ValueError(
                f"calibration must be two finite numbers (a, b) of a binary ensemble: {self.calibration}"
            )
        if self.class_map is not None:
            q = np.asarray(self.class_map, dtype=float)
            if (
                not per_class
                or q.shape != (k, k)
                or not np.all(np.isfinite(q))
                or np.any(q <= 0)
                or not np.allclose(q.sum(axis=1), 1.0, atol=1e-9)
            ):
                raise ValueError(
                    f"class_map must be a {k} x {k} matrix of positive rows summing to 1 of a softmax "
                    f"ensemble, got shape {q.shape} for a {self.kind} ensemble"
                )
        if not (0.0 < self.map_weight <= 1.0):
            raise ValueError(f"map_weight must be in (0, 1], got {self.map_weight}")

    @property
    def n_classes(self) -> int:
        return int(np.asarray(self.intercept).size) if self.kind == "softmax" else 2

    def decision_function(self, codes: np.ndarray) -> np.ndarray:
        """``intercept + Σ w_i·table_i[cell_i(x)]``: shape (n,), or (n, K) for softmax."""
        if self.kind == "softmax":
            out = np.tile(np.asarray(self.intercept, dtype=float), (codes.shape[0], 1))
        else:
            out = np.full(codes.shape[0], float(self.intercept))
        for c in self.components:
            out += c.weight * c.values(codes)
        return out

    def proba(self, codes: np.ndarray) -> np.ndarray:
        """Class probabilities, shape (n, K), columns in class-index order."""
        if self.kind == "softmax":
            f = self.decision_function(codes)
            if self.class_map is None:
                return softmax(f, axis=1)
            mapped = np.asarray(self.class_map, dtype=float)[np.argmax(f, axis=1)]
            t = self.map_weight
            return softmax((1.0 - t) * (f - logsumexp(f, axis=1, keepdims=True)) + t * np.log(mapped), axis=1)
        p1 = self.positive_proba(codes)
        return np.column_stack([1.0 - p1, p1])

    def calibrated_decision(self, codes: np.ndarray) -> np.ndarray:
        """The decision function through the calibration map: ``a·f + b`` (a log-odds) when calibrated.

        Softmax with a ``class_map``: the log of the mapped probabilities (their argmax is the prediction).
        """
        if self.class_map is not None:
            return np.log(self.proba(codes))
        f = self.decision_function(codes)
        if self.calibration is None:
            return f
        a, b = self.calibration
        return a * f + b

    def positive_proba(self, codes: np.ndarray) -> np.ndarray:
        """Binary kinds: P(y = 1 | x), through the calibration map when there is one."""
        if self.kind == "softmax":
            raise ValueError("a softmax ensemble has K > 2 classes: use proba()")
        f = self.decision_function(codes)
        if self.calibration is not None:
            a, b = self.calibration
            return expit(a * f + b)
        if self.kind == "vote":
            return np.clip((1.0 + f) / 2.0, 0.0, 1.0)
        return expit(f)

    def with_calibration(self, calibration: tuple[float, float] | None) -> Ensemble:
        return Ensemble(
            self.kind, self.intercept, self.components, calibration, self.class_map, self.map_weight
        )

    def with_class_map(self, class_map: np.ndarray | None, weight: float = 1.0) -> Ensemble:
        return Ensemble(self.kind, self.intercept, self.components, self.calibration, class_map, weight)

    def with_temperature(self, temperature: float) -> Ensemble:
        """Every component's weight times ``temperature`` ∈ (0, 1]: the terms pulled toward the
        intercepts, whose prior stays (:mod:`anonml.learn.temperature`)."""
        t = float(temperature)
        if not (np.isfinite(t) and 0.0 < t <= 1.0):
            raise ValueError(f"temperature must be in (0, 1], got {temperature!r}")
        components = tuple(replace(c, weight=c.weight * t) for c in self.components)
        return Ensemble(
            self.kind, self.intercept, components, self.calibration, self.class_map, self.map_weight
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "intercept": np.asarray(self.intercept, dtype=float).tolist(),
            "components": [c.to_dict() for c in self.components],
        }
        if self.calibration is not None:
            out["calibration"] = [float(v) for v in self.calibration]
        if self.class_map is not None:
            out["class_map"] = np.asarray(self.class_map, dtype=float).tolist()
            out["map_weight"] = float(self.map_weight)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Ensemble:
        intercept = data["intercept"]
        calibration = data.get("calibration")
        class_map = data.get("class_map")
        return cls(
            data["kind"],
            np.asarray(intercept, dtype=float) if isinstance(intercept, list) else float(intercept),
            tuple(Component.from_dict(c) for c in data["components"]),
            None if calibration is None else (float(calibration[0]), float(calibration[1])),
            None if class_map is None else np.asarray(class_map, dtype=float),
            float(data.get("map_weight", 1.0)),
        )


def vote_ensemble(
    subsets: Sequence[Sequence[int]],
    shapes: Sequence[Sequence[int]],
    votes: Sequence[np.ndarray],
    scores: Sequence[float],
) -> Ensemble:
    """Thesis eq. 6.2: score-weighted ±1 votes, ``f(x) = Σ s_i h_i(x) / Σ s_i``.

    Parameters
    ----------
    subsets, shapes : per classifier, its features and their bins.
    votes : per classifier, an array of ±1 over its cells (C order).
    scores : per classifier, its cross-validated score ``s_i ≥ 0``.

    Raises
    ------
    ValueError
        On a vote other than ±1, a negative or non-finite score, or all scores 0.
    """
    s = np.asarray(scores, dtype=float)
    if s.ndim != 1 or len(s) != len(votes) or not np.all(np.isfinite(s)) or np.any(s < 0):
        raise ValueError(f"scores must be finite, non-negative, one per classifier: {scores}")
    if s.sum() <= 0:
        raise ValueError("every classifier scored 0: eq. 6.2 has no weights")
    components = []
    for features, shape, vote, score in zip(subsets, shapes, votes, s, strict=True):
        v = np.asarray(vote, dtype=float).ravel()
        if not np.all(np.isin(v, (-1.0, 1.0))):
            raise ValueError(f"votes of subset {tuple(features)} must be ±1")
        components.append(
            Component(tuple(int(f) for f in features), tuple(int(b) for b in shape), v, score / s.sum())
        )
    return Ensemble("vote", 0.0, tuple(components))


def _synthetic_sample(
    h: SubsetHistogram, size: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Rows drawn from the histogram: ``size`` draws of (cell, label) ∝ its counts."""
    flat = np.clip(h.counts.ravel(), 0.0, None)
    total = flat.sum()
    if total <= 0:
        return np.empty((0, len(h.shape)), dtype=np.int64), np.empty(0, dtype=np.int64)
    drawn = rng.multinomial(size, flat / total)
    values = np.repeat(np.arange(flat.size), drawn)
    unravelled = np.unravel_index(values, (*h.shape, h.n_classes))
    return np.column_stack(unravelled[:-1]).astype(np.int64), unravelled[-1].astype(np.int64)


def _partition_classifier(kind: str, shape: Sequence[int], class_weight: str | None, seed: int) -> Any:
    if kind == "tree":
        return DecisionTreeClassifier(class_weight=class_weight, random_state=seed)
    if kind == "logistic":
        encoder = OneHotEncoder(categories=[np.arange(b) for b in shape], sparse_output=False)
        return make_pipeline(encoder, LogisticRegression(class_weight=class_weight, max_iter=1000))
    raise ValueError(f"unknown partition classifier {kind!r}; use 'tree' or 'logistic'")


def _scorer(scoring: str) -> Any:
    if scoring == "f1":
        return make_scorer(f1_score, zero_division=0.0)
    if scoring == "roc_auc":
        return make_scorer(roc_auc_score, response_method=("predict_proba", "decision_function"))
    raise ValueError(f"unknown scoring {scoring!r}; use 'f1' or 'roc_auc'")


def paper_ensemble(
    histograms: Sequence[SubsetHistogram],
    sizes: Sequence[int],
    *,
    classifier: Literal["tree", "logistic"] = "tree",
    scoring: Literal["f1", "roc_auc"] = "f1",
    class_weight: Literal["balanced"] | None = "balanced",
    cv: int = 3,
    rng: np.random.Generator | None = None,
) -> Ensemble:
    """Paper mode (Cyphers 2017, §6): sample, fit, cross-validate, vote by eq. 6.2.

    Parameters
    ----------
    histograms : sequence of SubsetHistogram
        One per (partition, subset), not pooled: each partition trains its own
        classifier, as in the thesis.
    sizes : sequence of int
        The partition size behind each histogram (the synthetic sample size).
    classifier : {"tree", "logistic"}, default="tree"
        Partition classifier; the thesis's reference code uses a decision tree.
    scoring : {"f1", "roc_auc"}, default="f1"
        Cross-validated score used as the vote weight.
    class_weight : {"balanced"} or None, default="balanced"
        As in the thesis's code.
    cv : int, default=3
        Folds (the thesis's code uses 3).
    rng : numpy.random.Generator, optional
        Sampling and fold randomness; ``None`` seeds from the OS CSPRNG.

    Notes
    -----
    A classifier whose synthetic sample holds a single class cannot be fitted
    or scored and gets no vote.
    """
    rng = resolve_rng(rng)
    if any(h.n_classes != 2 for h in histograms):
        raise ValueError("paper mode is binary: eq. 6.2 casts ±1 votes; use mode='default' for K > 2 classes")
    if len(histograms) != len(sizes):
        raise ValueError(f"{len(histograms)} histograms but {len(sizes)} partition sizes")
    scorer = _scorer(scoring)
    subsets, shapes, votes, scores = [], [], [], []
    for h, size in zip(histograms, sizes, strict=True):
        X, y = _synthetic_sample(h, int(size), rng)
        counts = np.bincount(y, minlength=2)
        if counts.min() < cv:
            continue
        seed = int(rng.integers(2**31 - 1))
        model = _partition_classifier(classifier, h.shape, class_weight, seed)
        folds = StratifiedKFold(n_splits=cv, shuffle=True, random_state=seed)
        score = float(np.mean(cross_val_score(model, X, y, scoring=scorer, cv=folds)))
        model.fit(X, y)
        vote = np.where(model.predict(h.cells) == 1, 1.0, -1.0)
        subsets.append(h.features)
        shapes.append(h.shape)
        votes.append(vote)
        scores.append(max(score, 0.0))
    if not votes or sum(scores) <= 0:
        raise ValueError("no partition classifier could be trained: every synthetic sample was one-class")
    return vote_ensemble(subsets, shapes, votes, scores)


def cell_posteriors(h: SubsetHistogram, prior: float, smoothing: float) -> np.ndarray:
    """Smoothed ``P̂(y=1 | cell) = (ĉ₁ + a·π̂)/(ĉ₀ + ĉ₁ + a)`` for every cell (C order).

    ``a = max(smoothing · σ̂, 0.5)`` with ``σ̂`` the root-mean predicted variance
    of the subset's raw count estimates: a pseudo-count of about one noise
    standard deviation, shared out by the prior.
    """
    counts = np.clip(h.flat_counts(), 0.0, None)
    sigma = float(np.sqrt(np.mean(h.variance))) if h.variance.size else 0.0
    a = max(smoothing * sigma, _MIN_PSEUDO)
    return (counts[:, 1] + a * prior) / (counts.sum(axis=1) + a)


def class_posteriors(h: SubsetHistogram, prior: np.ndarray, smoothing: float) -> np.ndarray:
    """K classes: ``P̂(c | cell) = (ĉ_c + a·π̂_c)/(Σ ĉ + a)``, shape (cells, K).

    ``a`` is the pseudo-count of :func:`cell_posteriors`.
    """
    counts = np.clip(h.flat_counts(), 0.0, None)
    sigma = float(np.sqrt(np.mean(h.variance))) if h.variance.size else 0.0
    a = max(smoothing * sigma, _MIN_PSEUDO)
    return (counts + a * prior[None, :]) / (counts.sum(axis=1, keepdims=True) + a)


def _softmax_ensemble(
    pooled: Sequence[SubsetHistogram], smoothing: float, combine: str, coverage: Counter
) -> Ensemble:
    """Default mode with K > 2 classes (module docstring): log-space sum, softmax."""
    prior = np.clip(shrunk_label_distribution(pooled), _PRIOR_CLIP, 1.0)
    prior = prior / prior.sum()
    weights = _component_weights(pooled, coverage)
    components = []
    for h in pooled:
        post = np.clip(class_posteriors(h, prior, smoothing), _PRIOR_CLIP, 1.0)
        table = np.log(post) - np.log(prior) if combine == "logit" else (post - prior) / prior
        components.append(Component(h.features, h.shape, table, weights[h.features]))
    return Ensemble("softmax", np.log(prior), tuple(components))


#: The smallest shrinkage factor: it keeps the ranking (AUC, argmax among classes of equal prior) where
#: the noise estimate would erase it, at a cost in probability too small to see (≤ 1e-3 of a term).
MIN_SHRINKAGE = 1e-3
#: The signal energy counts only beyond this many standard deviations of its estimate under noise alone:
#: one for two classes (a Brier score is bounded, and a weak coherent signal — breast cancer at ε_T = 1,
#: 30 groups of 12 reports — still beats the base rate), three for K ≥ 3, whose log loss punishes a sum
#: of noisy terms without bound (wine at ε_T ≤ 2 went above the prior with one, and with two one
#: digits split of ten at ε_T = 1 reached 6.6 nats: a one-sided false alarm of 2 % per fit).
SIGNAL_NOISE_SDS = {2: 1.0}
SIGNAL_NOISE_SDS_MULTICLASS = 3.0


def shrinkage_factor(histograms: Sequence[SubsetHistogram]) -> float:
    """How far to trust the sum of the subsets' terms, from their signal and noise: a temperature in (0, 1].

    With ``D_S`` and ``E₀[D_S]`` each subset's label dependence and its
    expectation under privacy and sampling noise alone, both about the label
    shares pooled over every histogram
    (:func:`~anonml.learn.histograms.dependence_and_noise`, with each mechanism's
    cell covariances), ``S = max(0, Σ D_S − Σ E₀[D_S])``
    is the estimated signal energy and ``N = Σ E₀[D_S]`` the noise energy of
    the F subsets. A sum of F terms whose signals were unrelated would be
    trusted ``S/(S + N)`` (the Wiener factor); one whose signals all point the
    same way, ``F·S/(F·S + N)``, since coherent signals add linearly and noise
    only in quadrature. The factor takes the geometric middle,

        λ = √F·S / (√F·S + N),

    floored at :data:`MIN_SHRINKAGE`, with ``S`` counted only beyond
    :data:`SIGNAL_NOISE_SDS` standard deviations of ``Σ D_S`` under noise;
    exact histograms (no noise) give 1. It
    multiplies every subset's weight: the score is then ``prior + λ·Σ terms``,
    tempered toward the prior as far as the noise dominates. A common factor
    leaves a binary model's ranking (AUC) exactly as it was. Without it, noisy
    subsets summed as if exact make confident, wrong predictions: on
    scikit-learn's digits at ε_T ≤ 2 a log loss of 8–10 nats against the prior's 2.30.
    """
    if not any(np.any(h.variance > 0) for h in histograms):
        return 1.0
    # The pooled label shares (every report carries the label) as the known π of each D: a
    # histogram's own shares would absorb part of its noise (dependence_and_noise).
    pooled = np.clip(sum(h.unbiased_counts().sum(axis=0) for h in histograms), 0.0, None)
    prior = pooled / pooled.sum() if pooled.sum() > 0 else None
    stats = [dependence_and_noise(h, prior) for h in histograms]
    noise = sum(n for _, n, _ in stats)
    spread = float(np.sqrt(sum(sd**2 for _, _, sd in stats)))
    sds = SIGNAL_NOISE_SDS.get(histograms[0].n_classes, SIGNAL_NOISE_SDS_MULTICLASS)
    signal = max(sum(d for d, _, _ in stats) - noise - sds * spread, 0.0) * np.sqrt(len(histograms))
    factor = signal / (signal + noise) if signal + noise > 0 else 0.0
    return float(max(factor, MIN_SHRINKAGE))


def _component_weights(pooled: Sequence[SubsetHistogram], coverage: Counter) -> dict[tuple[int, ...], float]:
    """Each subset's weight: its share of its features' subsets, times the :func:`shrinkage_factor`."""
    factor = shrinkage_factor(pooled)
    return {h.features: factor * float(np.mean([1.0 / coverage[f] for f in h.features])) for h in pooled}


def discriminant_weights(
    histograms: Sequence[SubsetHistogram], tables: Sequence[np.ndarray], prior: float
) -> np.ndarray:
    """Diagonal-LDA weight of each binary subset's term, rescaled to mean 1.

    For subset ``S`` with cell values ``t_v`` and estimated counts ``ĉ_vy`` (clipped at 0),
    ``P̂(v | y) = ĉ_vy / Σ_v' ĉ_v'y``, ``μ_y = Σ_v P̂(v|y)·t_v``, ``σ_y² = Σ_v P̂(v|y)·t_v² − μ_y²`` and

        w_S = max(μ₁ − μ₀, 0) / (π·σ₁² + (1 − π)·σ₀²),

    Fisher's discriminant of the terms under the independence rule (a diagonal within-class
    covariance; Bickel & Levina 2004). A term whose table is flat (no within-class variance) or
    ranks the classes the wrong way gets 0. The weights are divided by their mean so that the
    ensemble's overall scale (and the :func:`shrinkage_factor` read on it) stays that of equal
    weights; if every weight is 0 they are all 1.

    Raises
    ------
    ValueError
        On a histogram that is not binary, or a table whose length is not its cell count.
    """
    weights = np.zeros(len(histograms))
    for i, (h, table) in enumerate(zip(histograms, tables, strict=True)):
        t = np.asarray(table, dtype=float)
        counts = np.clip(h.flat_counts(), 0.0, None)
        if h.n_classes != 2 or t.shape != (counts.shape[0],):
            raise ValueError(
                f"discriminant weights need a binary histogram and one value per cell: features "
                f"{h.features} have {h.n_classes} classes, {counts.shape[0]} cells, table {t.shape}"
            )
        totals = counts.sum(axis=0)
        if np.any(totals <= 0):
            continue
        given = counts / totals  # P̂(v | y), one column per class
        mean = given.T @ t
        var = np.clip(given.T @ t**2 - mean**2, 0.0, None)
        within = prior * var[1] + (1.0 - prior) * var[0]
        if within > 0:
            weights[i] = max(mean[1] - mean[0], 0.0) / within
    if weights.sum() <= 0:
        return np.ones(len(histograms))
    return weights / weights.mean()


def default_ensemble(
    histograms: Sequence[SubsetHistogram],
    *,
    smoothing: float = 1.0,
    combine: Literal["linear", "logit"] = "linear",
    weighting: Literal["equal", "lda"] = "equal",
) -> Ensemble:
    """Default mode: smoothed cell posteriors combined additively around the prior.

    See the module docstring for the formulas. Histograms of the same subset
    are pooled first (:func:`~anonml.learn.histograms.pool_histograms`).

    Parameters
    ----------
    histograms : sequence of SubsetHistogram
    smoothing : float, default=1.0
        ``α``: pseudo-count per cell in units of the count noise's standard deviation.
    combine : {"linear", "logit"}, default="linear"
    weighting : {"equal", "lda"}, default="equal"
        ``"lda"`` (two classes only): each term also carries its :func:`discriminant_weights` factor.
    """
    if smoothing < 0 or not np.isfinite(smoothing):
        raise ValueError(f"smoothing must be a finite number >= 0, got {smoothing}")
    if combine not in ("linear", "logit"):
        raise ValueError(f"unknown combine {combine!r}; use 'linear' or 'logit'")
    if weighting not in ("equal", "lda"):
        raise ValueError(f"unknown weighting {weighting!r}; use 'equal' or 'lda'")
    pooled = pool_histograms(histograms)
    coverage = Counter(f for h in pooled for f in h.features)
    if pooled[0].n_classes > 2:
        if weighting != "equal":
            raise ValueError(
                f"weighting={weighting!r} is defined for two classes; these histograms have "
                f"{pooled[0].n_classes}: use weighting='equal'"
            )
        return _softmax_ensemble(pooled, smoothing, combine, coverage)
    prior = float(np.clip(shrunk_label_distribution(pooled)[1], _PRIOR_CLIP, 1 - _PRIOR_CLIP))
    weights = _component_weights(pooled, coverage)
    tables = []
    for h in pooled:
        post = np.clip(cell_posteriors(h, prior, smoothing), _PRIOR_CLIP, 1 - _PRIOR_CLIP)
        if combine == "logit":
            tables.append(logit(post) - logit(prior))
        else:
            tables.append((post - prior) / (prior * (1 - prior)))
    factors = np.ones(len(pooled))
    if weighting == "lda":
        # Trust the estimated coefficients as far as the sum of terms is trusted: noisy tables
        # make noisy coefficients (unshrunk, AUC fell by 0.01-0.21 at ε_T = 0.5).
        trust = shrinkage_factor(pooled)
        factors = 1.0 + trust * (discriminant_weights(pooled, tables, prior) - 1.0)
    components = tuple(
        Component(h.features, h.shape, table, weights[h.features] * float(f))
        for h, table, f in zip(pooled, tables, factors, strict=True)
    )
    return Ensemble("logit", float(logit(prior)), components)


def platt_objective(
    a: float,
    b: float,
    scores: np.ndarray,
    counts: np.ndarray,
    variance: np.ndarray,
    prior_strength: float = 1.0,
) -> float:
    """The corrected least-squares objective :func:`platt_from_histogram` minimises, at the map ``(a, b)``.

    ``Σ_B [r_B² − v_B1(1 − s_B)² − v_B0·s_B²] + prior_strength·((a − 1)² + b²)`` with
    ``s_B = σ(a·f_B + b)`` and ``r_B = ĉ_B1(1 − s_B) − ĉ_B0·s_B``: unbiased, up to the ridge, for the
    same sum on the exact counts.
    """
    s = expit(a * scores + b)
    r = counts[:, 1] * (1 - s) - counts[:, 0] * s
    noise = variance[:, 1] * (1 - s) ** 2 + variance[:, 0] * s**2
    return float(np.sum(r**2 - noise) + prior_strength * ((a - 1.0) ** 2 + b**2))


def platt_from_histogram(
    scores: np.ndarray,
    counts: np.ndarray,
    variance: np.ndarray | None = None,
    *,
    prior_strength: float = 1.0,
    intercept_of: Callable[[float], float] | None = None,
) -> tuple[float, float]:
    """Platt scaling ``P(y=1|f) = σ(a·f + b)`` fitted to a noisy histogram of (score bin, label).

    Parameters
    ----------
    scores : ndarray of shape (B,)
        A representative decision value of each score bin.
    counts : ndarray of shape (B, 2)
        Unbiased estimates of the counts of label 0 and 1 per bin. LDP
        estimates may be negative, so they are not plugged into a
        log-likelihood (which a negative count makes unbounded) but into
        least squares on ``r_B = ĉ_B1(1 − s_B) − ĉ_B0 s_B`` with
        ``s_B = σ(a f_B + b)``, which has mean zero at the true map.
    variance : ndarray of shape (B, 2), optional
        Predicted variances of the count estimates. ``E[r_B²]`` adds
        ``v_B1(1 − s_B)² + v_B0 s_B²`` of pure noise, smallest at ``s = 1/2``:
        left in, it flattens the slope; subtracting it makes the objective
        unbiased (corrected least squares).
    prior_strength : float, default=1.0
        Weight, in reports², of a ridge towards the identity ``a = 1, b = 0``.
    intercept_of : callable slope → intercept, optional
        Fit the slope alone, with ``b = intercept_of(a)`` (the calibration pool's mean-preserving
        intercept, :func:`~anonml.learn.calibration.mean_preserving_intercept`).

    Returns
    -------
    (a, b) : with ``a ≥ 0.01`` so that the map never reverses the model's ranking.
    """
    f = np.asarray(scores, dtype=float)
    c = np.asarray(counts, dtype=float)
    v = np.zeros_like(c) if variance is None else np.asarray(variance, dtype=float)
    if (
        f.ndim != 1
        or c.shape != (f.size, 2)
        or v.shape != c.shape
        or not np.all(np.isfinite(f))
        or not np.all(np.isfinite(c))
    ):
        raise ValueError(
            f"need finite scores (B,), counts and variances (B, 2), got {f.shape}, {c.shape}, {v.shape}"
        )

    def objective(theta: np.ndarray) -> float:
        return platt_objective(float(theta[0]), float(theta[1]), f, c, v, prior_strength)

    if intercept_of is not None:
        # one parameter: the slope, with the intercept the given function of it
        fit = minimize_scalar(
            lambda a: objective(np.array([a, intercept_of(a)])), bounds=(_MIN_SLOPE, 50.0), method="bounded"
        )
        return float(fit.x), float(intercept_of(float(fit.x)))
    best = min(
        (
            minimize(
                objective, x0=np.array(x0), method="L-BFGS-B", bounds=[(_MIN_SLOPE, 50.0), (-50.0, 50.0)]
            )
            for x0 in ((1.0, 0.0), (0.5, -1.0), (2.0, 0.0))
        ),
        key=lambda r: r.fun,
    )
    return float(best.x[0]), float(best.x[1])
