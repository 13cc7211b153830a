"""A numeric target learned as ordered bins: a fare, a duration, a grade.

Every AnonML report carries the label, so a numeric target is cut into K
ordered bins inside a *public* range ``[low, high]`` (fixed before any data
is seen, like a feature's range) and each peer reports its bin index as a
K-class label (:class:`~anonml.learn.model.AnonMLClassifier` in default mode,
label domain K in every histogram).

*Where the bins are cut* (``target_bins``). ``"quantile"`` (default): a
separate target pool (``target_fraction`` of the peers, each answering one
question with the full ε_T, like the features' median pool) runs the private
quantile search (thesis algorithm 1, :func:`~anonml.learn.simulation.private_binning`)
for the K − 1 cut points, so the bins hold about equal shares of the peers.
Then no bin has a tiny true mass that the privacy noise can inflate, and the
classifier's fallback when the noise dominates — the uniform class prior — is
the target's own (private) distribution, whose median is the median of the
data. ``"uniform"``: K equal-width bins over the range (no pool; what a
protocol problem's binned label uses, :meth:`AnonMLRegressor.from_classifier`).

*The prediction* (``point``). With ``P̂_k = P̂(bin k | x)`` and the bin edges
``e_0 < … < e_K``, treating the target as uniform inside a bin:
``"median"`` (default) the predictive median, the ``ŷ`` where the
interpolated distribution function reaches 1/2 (the minimiser of the
expected absolute error); ``"mean"`` the predictive mean ``Σ_k P̂_k·c_k``
with ``c_k`` the bin midpoints. Both stay inside ``[low, high]``. Values
outside the range are clipped into the end bins (one row at a time, no
privacy cost).

*The fallback when the noise dominates*. The classifier tempers its terms toward its prior as far as
the noise says (:func:`~anonml.learn.ensemble.shrinkage_factor`, a Wiener / James–Stein factor), and
that prior is shrunk toward uniform over the bins: over bins the quantile search could not move (low
ε, a skewed target) that is the middle of the range, not the median. So the predictive distribution
is re-based by Bayes' rule on the target's own private distribution: ``P̃(k|x) ∝ P̂(k|x)·π̃_k/π_k``,
with ``π`` the classifier's prior and ``π̃`` the unbiased pooled label shares of every report
(:attr:`AnonMLClassifier.label_shares_`, no further privacy cost) clipped at
:data:`TARGET_SHARE_FLOOR`. Where the terms vanish the prediction is then the private median ``m̂``
(the median of ``π̃`` over the bins), not the range's middle. Why the raw, unshrunk shares: the
excess MAE of a constant ``c`` is ``∫_m^c (2F(t) − 1) dt ≈ f(m)·(c − m)²``, so an unbiased noisy
median costs its variance, while a fallback biased toward the middle costs its squared bias.

*The temperature of the terms* (``temper_fraction``). Features that carry the same evidence add it
once each, so the predictive distribution is too sharp and its median too extreme. A temper pool
(``temper_fraction`` of the peers the target pool leaves) measures, by a halving search of one private
bit per peer, whether the classifier's terms scaled by ``T/2`` predict its members' targets better than
by ``T`` (:mod:`anonml.learn.temperature`); the fitted classifier keeps the terms scaled by the
temperature found (``temperature_``, 1 when the pool did not move it or did not form).

Privacy: each peer is in exactly one of the disjoint pools (target, temper, median,
report, calibration) and spends at most ε_T; the target and temper pools' signed answers,
like the median pool's, get no shuffle amplification, and are counted in
``privacy_.median_peers`` and ``privacy_.shuffle.peers_outside``.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any, Literal

import numpy as np
from scipy import sparse
from scipy.special import expit
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_consistent_length, check_is_fitted, column_or_1d

from anonml.learn.inputs import fit_matrix
from anonml.learn.model import AnonMLClassifier
from anonml.learn.params import Interval, Options, check_params, store_params
from anonml.learn.selection import SelectionAware
from anonml.learn.simulation import PrivacyAccounting, private_binning
from anonml.learn.temperature import (
    TEMPER_STEPS,
    halving_temperature,
    temper_group_size,
    temper_step_cap,
    temperature_steps,
)
from anonml.model import FeatureSpec
from anonml.randomness import generator_from

__all__ = ["AnonMLRegressor", "target_edges", "target_bins", "predictive_median"]


#: Questions per cut point of the target's quantile search. The search moves a cut from its
#: equal-width start by halving steps, so 3 (the features' default) cannot reach the quartiles of a
#: skewed target (on an exponential target over [0, 60] two of three cuts met); 6 reach 1/64 of the range.
TARGET_STEPS = 6

#: Smallest private share of a target bin in the re-based prior (module docstring): an unbiased
#: estimate can be ≤ 0, and a bin at 0 could never be predicted whatever the features say.
TARGET_SHARE_FLOOR = 1e-3


def target_edges(low: float, high: float, n_bins: int, *, name: str = "target_range") -> np.ndarray:
    """The K + 1 edges of ``n_bins`` equal-width bins over the public range ``[low, high]``."""
    low, high = float(low), float(high)
    if not (np.isfinite(low) and np.isfinite(high) and high > low):
        raise ValueError(f"{name} must be two finite numbers low < high, got ({low}, {high})")
    return np.linspace(low, high, int(n_bins) + 1)


def target_bins(y: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin index of each target value; values outside the range are clipped into the end bins."""
    return np.clip(np.searchsorted(edges[1:-1], y, side="right"), 0, len(edges) - 2)


class AnonMLRegressor(SelectionAware, RegressorMixin, BaseEstimator):
    """Regression from locally private histograms of (features, target bin).

    Parameters
    ----------
    target_range : tuple (low, high)
        Public bounds of the target.
    n_target_bins : int, default=5
        K, the bins of the target inside ``target_range``.
    target_bins : {"quantile", "uniform"}, default="quantile"
        Cut points from a private quantile search of a target pool, or K
        equal-width bins (module docstring).
    target_fraction : float, default=0.1
        ``"quantile"``: the share of the peers in the target pool (none, and
        equal-width bins, when it would hold fewer than K − 1 peers).
    point : {"median", "mean"}, default="median"
        The predictive median or mean of the binned target (module docstring).
    classifier_params : dict, optional
        Parameters of the underlying :class:`AnonMLClassifier` (``epsilon``,
        ``features``, ``ranges``, ``random_state``, ``median_steps``,
        ``median_confidence`` …; its mode is "default"). Its
        ``calibration_fraction`` is 0 unless given here: the class map of a
        K ≥ 3 classifier (:func:`~anonml.learn.calibration.calibrate_classes`)
        keys on the most probable bin, which for a numeric target is a poor
        summary of the prediction (on the synthetic target of the tests it
        raised the MAE at ε_T = 1 from 2.6 to 3.5).
    temper_fraction : float, default=0.1
        The share of the peers left by the target pool that measure the temperature of the
        classifier's terms (module docstring); none when its groups could not move the search
        (:func:`~anonml.learn.temperature.temperature_steps`), and 0 turns it off.
    central_epsilon : tuple (ε, δ) or None, default=None
        A central target for the unlinkable pools instead of a local ε: the
        classifier's ``central_epsilon`` (the largest local ε whose shuffle bound
        for its groups meets it), and the target pool answers with that same
        local ε (its signed answers are outside the bound, like the median
        pool's). ``privacy_.central_target`` states both figures.

    Attributes
    ----------
    classifier_ : AnonMLClassifier
        Fitted on the bin indices.
    edges_ : ndarray of shape (K + 1,)
        The target bins' edges, ``edges_[0] = low`` and ``edges_[-1] = high``
        (fewer bins if private cut points coincide).
    centres_ : ndarray of shape (K,)
        Midpoint of each target bin.
    temperature_ : float
        The scale in (0, 1] of the classifier's terms, which its ensemble already carries
        (module docstring).
    temper_answers_ : int
        Peers of the temper pool that answered a question (the groups of the steps taken and the one
        that stopped the search; 0 without a pool).
    privacy_ : PrivacyAccounting
        The classifier's, with the target and temper pools' peers among ``median_peers``.
    """

    param_checks: dict[str, tuple[Any, ...]] = {
        "target_range": (tuple, list),
        "n_target_bins": (Interval(numbers.Integral, 2, None, closed="left"),),
        "target_bins": (Options(frozenset({"quantile", "uniform"})),),
        "target_fraction": (Interval(numbers.Real, 0, 0.5, closed="both"),),
        "point": (Options(frozenset({"median", "mean"})),),
        "temper_fraction": (Interval(numbers.Real, 0, 0.5, closed="both"),),
        "classifier_params": (dict, None),
        "central_epsilon": (tuple, list, None),
    }

    def __init__(
        self,
        target_range: tuple[float, float] = (0.0, 1.0),
        n_target_bins: int = 5,
        target_bins: Literal["quantile", "uniform"] = "quantile",
        target_fraction: float = 0.1,
        point: Literal["median", "mean"] = "median",
        classifier_params: dict[str, Any] | None = None,
        central_epsilon: tuple[float, float] | None = None,
        temper_fraction: float = 0.1,
    ) -> None:
        store_params(self, locals())

    def __sklearn_tags__(self):  # noqa: D105 - scikit-learn protocol
        tags = super().__sklearn_tags__()
        # R² > 0.5 on scikit-learn's 200-row check data is out of reach: the target is cut into
        # K bins and every row is one peer's locally private report, median pool apart.
        tags.regressor_tags.poor_score = True
        tags.non_deterministic = (self.classifier_params or {}).get("random_state") is None
        tags.input_tags.string = True
        tags.input_tags.categorical = True
        return tags

    def _edges(self) -> np.ndarray:
        low, high = self.target_range
        return target_edges(low, high, int(self.n_target_bins))

    @classmethod
    def from_classifier(
        cls, classifier: AnonMLClassifier, target_range: tuple[float, float], n_target_bins: int
    ) -> AnonMLRegressor:
        """A fitted regressor around a K-class classifier of the target bins built elsewhere.

        The aggregator trains the bin classifier from protocol reports (classes
        ``0..K−1``, K = ``n_target_bins``); this wraps it so that ``predict``
        gives ``Σ_k P̂(bin k | x)·c_k`` as a fitted regressor does.
        """
        check_is_fitted(classifier, ("binning_", "ensemble_"))
        classes = np.asarray(classifier.classes_)
        if classes.dtype.kind not in "iu" or not set(classes.tolist()) <= set(range(int(n_target_bins))):
            raise ValueError(
                f"the classifier's classes {classes.tolist()} are not bins 0..{n_target_bins - 1}"
            )
        model = cls(target_range=tuple(target_range), n_target_bins=int(n_target_bins), target_bins="uniform")
        edges = model._edges()
        model.classifier_ = classifier
        model.edges_ = edges
        model.centres_ = 0.5 * (edges[:-1] + edges[1:])
        model.n_features_in_ = classifier.n_features_in_
        model.temperature_, model.temper_answers_ = 1.0, 0
        model.privacy_ = classifier.privacy_
        return model

    def fit(self, X: Any, y: Any) -> AnonMLRegressor:
        """Cut the target into bins (privately, ``"quantile"``) and fit the K-class classifier on them."""
        check_params(self)
        edges = self._edges()
        if y is None:
            raise ValueError("AnonMLRegressor requires y to be passed, but the target y is None")
        target = column_or_1d(np.asarray(y, dtype=np.float64), warn=True)
        if not np.all(np.isfinite(target)):
            raise ValueError("y must be a 1-D array of finite numbers")
        check_consistent_length(X, target)
        params = {"calibration_fraction": 0.0, **(self.classifier_params or {})}
        if params.get("mode", "default") != "default":
            raise ValueError("a binned target needs the default mode (K classes); paper mode is binary")
        central = self.central_epsilon if self.central_epsilon is not None else params.get("central_epsilon")
        if self.central_epsilon is not None and params.get("central_epsilon") is not None:
            raise ValueError("give central_epsilon to the regressor or in classifier_params, not both")
        if central is not None:
            params["central_epsilon"] = tuple(central)
            params["epsilon"] = self._central_local_epsilon(X, target.size, params)
        rows, answered = np.arange(target.size), 0
        if self.target_bins == "quantile":
            edges, rows, answered = self._private_edges(target, edges, params)
        rng = _own_generator(params.get("random_state"), 2)
        epsilon = float(params.get("epsilon", 1.0))
        pool, rows = self._temper_pool(rows, _n_columns(X), epsilon, rng)
        classifier = AnonMLClassifier(**params)
        context = getattr(self, "_anonml_selection", None)
        if context is not None:  # this regressor is a model-selection clone: so is its classifier
            classifier._anonml_selection = context
        self.classifier_ = classifier.fit(_take(X, rows), target_bins(target[rows], edges))
        shares = np.clip(np.asarray(self.classifier_.label_shares_, dtype=float), TARGET_SHARE_FLOOR, None)
        self.target_shares_ = shares / shares.sum()
        self.edges_ = edges
        self.centres_ = 0.5 * (edges[:-1] + edges[1:])
        self.n_features_in_ = self.classifier_.n_features_in_
        self.temperature_, self.temper_answers_ = self._measure_temperature(
            _take(X, pool), target[pool], epsilon, rng
        )
        self.privacy_ = _with_signed_pools(self.classifier_.privacy_, answered + self.temper_answers_)
        return self

    def _temper_pool(
        self, rows: np.ndarray, n_features: int, epsilon: float, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """The temper pool's rows and the rows left for the classifier (no pool: none, all)."""
        n_pool = self._temper_pool_size(rows.size, n_features, epsilon)
        if not n_pool:
            return rows[:0], rows
        order = rng.permutation(rows.size)
        return np.sort(rows[order[:n_pool]]), np.sort(rows[order[n_pool:]])

    def _temper_pool_size(self, n_rows: int, n_features: int, epsilon: float) -> int:
        """The temper pool of the ``n_rows`` the target pool leaves: :meth:`_temper_candidates`, at most
        :func:`~anonml.learn.temperature.temper_group_size` per step, or 0 when its groups could not
        move the search (:func:`~anonml.learn.temperature.temperature_steps`)."""
        n_pool = self._temper_candidates(n_rows, n_features)
        if not n_pool or n_pool >= n_rows:
            return 0
        cap = temper_step_cap(n_features)
        n_pool = min(n_pool, cap * temper_group_size(epsilon))
        return n_pool if temperature_steps(n_pool, epsilon, cap) else 0

    def _temper_candidates(self, n_rows: int, n_features: int) -> int:
        """``temper_fraction/TEMPER_STEPS`` of ``n_rows`` per step of :func:`temper_step_cap`; none
        for fewer than two features (one term counts its evidence once)."""
        if n_features < 2:
            return 0
        steps = temper_step_cap(n_features)
        return int(round(float(self.temper_fraction) * n_rows * steps / TEMPER_STEPS))

    def _measure_temperature(
        self, X_pool: Any, y_pool: np.ndarray, epsilon: float, rng: np.random.Generator
    ) -> tuple[float, int]:
        """The temper pool's halving search; the classifier keeps its terms scaled by the result."""
        steps = temperature_steps(y_pool.size, epsilon, temper_step_cap(self.n_features_in_))
        if not steps:
            return 1.0, 0
        ensemble = self.classifier_.ensemble_
        codes = self.classifier_._codes(X_pool)

        def errors(rows: np.ndarray, temperature: float) -> np.ndarray:
            proba = ensemble.with_temperature(temperature).proba(codes[rows])
            return np.abs(y_pool[rows] - self._point(proba))

        temperature, answered = halving_temperature(errors, y_pool.size, epsilon, rng, steps)
        if temperature < 1.0:
            self.classifier_.ensemble_ = ensemble.with_temperature(temperature)
        return temperature, answered

    def _target_pool_size(self, n_rows: int) -> int:
        """Peers of the target pool: ``round(target_fraction·n)``; none below K − 1 or for uniform bins."""
        n_pool = int(round(float(self.target_fraction) * n_rows))
        return n_pool if self.target_bins == "quantile" and n_pool >= int(self.n_target_bins) - 1 else 0

    def _central_local_epsilon(self, X: Any, n_rows: int, params: dict[str, Any]) -> float:
        """The local ε the classifier will choose for its central target on the rows the target pool leaves.

        The pools' sizes do not depend on which rows the target pool takes, so
        the choice is made before the pool answers (with that same ε).
        """
        probe = AnonMLClassifier(**params)
        labels = np.zeros(n_rows, dtype=np.int64)
        _, _, features, _ = fit_matrix(probe, X, labels, probe.features, probe.ranges)
        left = n_rows - self._target_pool_size(n_rows)
        # the temper pool taken as formed: fewer peers in the bound's groups, a local ε no larger
        left -= self._temper_candidates(left, len(features))
        return probe.local_epsilon(left, features, int(self.n_target_bins))

    def _private_edges(
        self, target: np.ndarray, edges: np.ndarray, params: dict[str, Any]
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """The target pool's private cut points, the rows left for the classifier, and the pool's answers."""
        k = int(self.n_target_bins)
        n_pool = self._target_pool_size(target.size)
        if not n_pool:
            return edges, np.arange(target.size), 0
        rng = _own_generator(params.get("random_state"), 1)
        order = rng.permutation(target.size)
        pool, rest = np.sort(order[:n_pool]), np.sort(order[n_pool:])
        low, high = float(edges[0]), float(edges[-1])
        binning, answered, _ = private_binning(
            np.clip(target[pool], low, high)[:, None],
            [FeatureSpec(name="target", low=low, high=high)],
            k,
            epsilon=float(params.get("epsilon", 1.0)),
            n_steps=TARGET_STEPS,
            confidence=float(params.get("median_confidence", 0.5)),
            rng=rng,
        )
        cuts = np.unique(np.asarray(binning.features[0].thresholds, dtype=float))
        return np.concatenate([[low], cuts[(cuts > low) & (cuts < high)], [high]]), rest, int(answered)

    def predict(self, X: Any) -> np.ndarray:
        """The predictive median (or mean) of the binned target (module docstring)."""
        check_is_fitted(self, "classifier_")
        return self._point(self.classifier_.predict_proba(X))

    def _point(self, proba: np.ndarray) -> np.ndarray:
        """The point prediction of the classifier's probabilities (columns its ``classes_``)."""
        seen = np.asarray(self.classifier_.classes_, dtype=np.int64)
        full = np.zeros((proba.shape[0], self.centres_.size))
        shares = getattr(self, "target_shares_", None)
        if shares is not None:  # re-based on the target's private distribution (module docstring)
            proba = proba * (shares / self._classifier_prior())
            proba /= proba.sum(axis=1, keepdims=True)
        full[:, seen] = proba  # bins never seen in training have probability 0
        if self.point == "mean":
            return full @ self.centres_
        return predictive_median(full, self.edges_)

    def _classifier_prior(self) -> np.ndarray:
        """The classifier's prior over its classes: its probabilities when every term is 0."""
        ensemble = self.classifier_.ensemble_
        if ensemble.kind == "softmax":
            log = np.asarray(ensemble.intercept, dtype=float)
            prior = np.exp(log - log.max())
            return prior / prior.sum()
        positive = float(expit(float(ensemble.intercept))) if ensemble.kind == "logit" else 0.5
        return np.array([1.0 - positive, positive])


def predictive_median(proba: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Per row, the ``ŷ`` where ``F(ŷ) = 1/2`` for bin probabilities spread uniformly inside each bin.

    With ``C_k = Σ_{j<k} P_j`` and ``k`` the bin where the cumulative passes 1/2,
    ``ŷ = e_k + (1/2 − C_k)/P_k · (e_{k+1} − e_k)``.
    """
    cumulative = np.cumsum(proba, axis=1)
    total = cumulative[:, -1:]
    half = 0.5 * total
    k = np.minimum(np.sum(cumulative < half, axis=1), proba.shape[1] - 1)
    rows = np.arange(proba.shape[0])
    before = np.where(k > 0, cumulative[rows, np.maximum(k - 1, 0)], 0.0)
    mass = np.maximum(proba[rows, k], 1e-12)
    share = np.clip((half[:, 0] - before) / mass, 0.0, 1.0)
    return edges[k] + share * (edges[k + 1] - edges[k])


def _take(X: Any, rows: np.ndarray) -> Any:
    """Rows of a frame (by position) or of an array."""
    if hasattr(X, "iloc"):
        return X.iloc[rows]
    if sparse.issparse(X):  # refused by the classifier's checks, with scikit-learn's message
        return sparse.csr_matrix(X)[rows]
    return np.asarray(X, dtype=object if np.asarray(X).dtype.kind in "OUS" else None)[rows]


def _n_columns(X: Any) -> int:
    """Columns of a frame or of a 2-D array-like (the features the classifier will see); 0 for any
    other shape, which the classifier's own checks then refuse."""
    shape = X.shape if hasattr(X, "shape") else np.shape(np.asarray(X, dtype=object))
    return int(shape[1]) if len(shape) == 2 else 0


def _own_generator(seed: Any, stream: int) -> np.random.Generator:
    """A pool's generator: an int seed gets its own stream, not a copy of the classifier's."""
    own = isinstance(seed, numbers.Integral) and not isinstance(seed, bool)
    return np.random.default_rng([int(seed), stream]) if own else generator_from(seed)


def _with_signed_pools(accounting: PrivacyAccounting | None, answered: int) -> PrivacyAccounting | None:
    """The classifier's accounting with the target and temper pools' peers among the signed,
    unshuffled ones."""
    if accounting is None or not answered:
        return accounting
    shuffle = accounting.shuffle
    if shuffle is not None:
        shuffle = dataclasses.replace(shuffle, peers_outside=(shuffle.peers_outside or 0) + answered)
    return dataclasses.replace(accounting, median_peers=accounting.median_peers + answered, shuffle=shuffle)
