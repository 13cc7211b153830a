"""The trained AnonML model: a scikit-learn classifier on raw feature vectors, stored as JSON.

:class:`AnonMLClassifier` is what the aggregator publishes and a peer downloads:
the published bins plus an :class:`~anonml.learn.ensemble.Ensemble` of lookup
tables, applied to raw feature vectors (binning included). Its ``fit`` runs the
whole AnonML pipeline in simulation, one row = one peer
(:mod:`anonml.learn.simulation`): private medians from a separate peer pool,
binning, one LDP report per (peer, subset) with the least-error mechanism,
debiasing, consistency, and paper- or default-mode training. The aggregator
service, which gets real reports, builds the same object with
:meth:`AnonMLClassifier.from_ensemble`.

Models serialise to versioned JSON (:meth:`~AnonMLClassifier.to_json`), never
to pickle: the document holds only numbers, strings and lists, is validated on
load, and is byte-for-byte stable (sorted keys, fixed separators, shortest
round-trip float repr), so ``to_json(from_json(s)) == s``.
"""

from __future__ import annotations

import numbers
import secrets
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from anonml.errors import ProtocolError
from anonml.learn.binning import Binning
from anonml.learn.document import (
    MODEL_FORMAT,
    MODEL_VERSION,
    canonical_json,
    check_ensemble_fits_bins,
    decode_classes,
    encode_classes,
    parse_document,
)
from anonml.learn.ensemble import Ensemble, default_ensemble, paper_ensemble
from anonml.learn.simulation import PrivacyAccounting, SimulationConfig, simulate_training
from anonml.model import FeatureKind, FeatureSpec

__all__ = ["AnonMLClassifier", "MODEL_FORMAT", "MODEL_VERSION", "generator_from"]

#: Plan defaults per mode: (k_p, k_h, k_s); None = one partition per feature.
_MODE_PLANS: dict[str, tuple[int | None, int, int]] = {
    "default": (None, 1, 1),
    "paper": (5, 2, 3),  # the thesis's census setting
}


def generator_from(
    random_state: None | int | np.random.Generator | np.random.RandomState,
) -> np.random.Generator:
    """A numpy Generator from a ``random_state`` (None = seeded from the OS CSPRNG)."""
    if random_state is None:
        return np.random.default_rng(secrets.randbits(128))
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(0, 2**31 - 1, size=4))
    if isinstance(random_state, numbers.Integral):
        return np.random.default_rng(int(random_state))
    raise ValueError(f"random_state must be None, an int or a numpy generator, got {random_state!r}")


class AnonMLClassifier(ClassifierMixin, BaseEstimator):
    """Binary classifier trained from locally private histograms (Cyphers 2017, ch. 6).

    Parameters
    ----------
    mode : {"default", "paper"}, default="default"
        ``"paper"`` reproduces the thesis (synthetic samples, partition
        classifiers, eq. 6.2 votes); ``"default"`` combines smoothed cell
        posteriors (see :mod:`anonml.learn.ensemble`).
    epsilon : float, default=1.0
        ε_T, every peer's total privacy loss under sequential composition. A
        report peer spends ε_T/k_h on each of its k_h reports; a median-pool
        peer spends ε_T on its one answer.
    n_partitions, n_subsets, subset_size : int, optional
        k_p, k_h, k_s. Defaults: default mode one single-feature partition per
        feature (k_p = F, k_h = k_s = 1); paper mode k_p=5, k_h=2, k_s=3.
    subsets : list of lists of int, optional
        Feature subsets chosen by the data scientist (else random, balanced).
    n_bins : int or "auto", default="auto"
        Bins per numeric feature (private quantiles); ``"auto"`` picks them
        from ε and the partition size (:func:`~anonml.learn.binning.auto_n_bins`).
    features : list of FeatureSpec, optional
        Feature kinds and public ranges. ``None`` treats every column as numeric
        with its observed range — a simulation convenience that is *not*
        private (the range bounds the median search).
    median_fraction : float, default=0.15
        Share of the peers set apart to answer median queries (a separate
        pool, so report peers spend nothing on medians).
    median_steps : int, default=3
        Questions (fresh peer partitions) per private quantile search.
    median_confidence : float, default=0.5
        Confidence of each search's stopping margin (thesis algorithm 1).
    consistency : {"norm_sub", "norm_mul", "base_cut", "ibu"} or None, default="norm_sub"
        Consistency step of the histogram estimates.
    smoothing : float, default=1.0
        Default mode: pseudo-count per cell in units of the count noise's sd.
    combine : {"linear", "logit"}, default="linear"
        Default mode: how subset posteriors are summed.
    partition_classifier : {"tree", "logistic"}, default="tree"
    partition_scoring : {"f1", "roc_auc"}, default="f1"
    partition_class_weight : {"balanced"} or None, default="balanced"
    partition_cv : int, default=3
        Paper mode: the partition classifiers and their cross-validation.
    random_state : int, numpy Generator or None, default=None
        ``None`` draws every simulated report from the OS CSPRNG.

    Attributes
    ----------
    classes_ : ndarray of shape (2,)
    n_features_in_ : int
    binning_ : Binning
        The published bins.
    ensemble_ : Ensemble
        Component tables and weights.
    privacy_ : PrivacyAccounting
        What each peer spent (report pool, median pool), sound composition.
    n_partitions_, n_subsets_, subset_size_ : int
        The plan used (k_p, k_h, k_s).
    n_bins_ : int
        Bins asked for per numeric feature (fewer if private quantiles coincide).

    Notes
    -----
    Binary labels only: every report carries one label bit.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(4000, 3)); y = (X[:, 0] + X[:, 1] > 0).astype(int)
    >>> clf = AnonMLClassifier(epsilon=2.0, random_state=0).fit(X, y)
    >>> clone = AnonMLClassifier.from_json(clf.to_json())
    >>> bool((clone.predict(X) == clf.predict(X)).all())
    True
    """

    _parameter_constraints: dict = {
        "mode": [StrOptions({"default", "paper"})],
        "epsilon": [Interval(numbers.Real, 0, None, closed="neither")],
        "n_partitions": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "n_subsets": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "subset_size": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "subsets": ["array-like", None],
        "n_bins": [Interval(numbers.Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "features": [list, tuple, None],
        "median_fraction": [Interval(numbers.Real, 0, 1, closed="left")],
        "median_steps": [Interval(numbers.Integral, 1, None, closed="left")],
        "median_confidence": [Interval(numbers.Real, 0, 1, closed="neither")],
        "consistency": [StrOptions({"norm_sub", "norm_mul", "base_cut", "ibu"}), None],
        "smoothing": [Interval(numbers.Real, 0, None, closed="left")],
        "combine": [StrOptions({"linear", "logit"})],
        "partition_classifier": [StrOptions({"tree", "logistic"})],
        "partition_scoring": [StrOptions({"f1", "roc_auc"})],
        "partition_class_weight": [StrOptions({"balanced"}), None],
        "partition_cv": [Interval(numbers.Integral, 2, None, closed="left")],
        "random_state": ["random_state", np.random.Generator],
    }

    def __init__(
        self,
        *,
        mode: Literal["default", "paper"] = "default",
        epsilon: float = 1.0,
        n_partitions: int | None = None,
        n_subsets: int | None = None,
        subset_size: int | None = None,
        subsets: Sequence[Sequence[int]] | None = None,
        n_bins: int | Literal["auto"] = "auto",
        features: Sequence[FeatureSpec] | None = None,
        median_fraction: float = 0.15,
        median_steps: int = 3,
        median_confidence: float = 0.5,
        consistency: str | None = "norm_sub",
        smoothing: float = 1.0,
        combine: Literal["linear", "logit"] = "linear",
        partition_classifier: Literal["tree", "logistic"] = "tree",
        partition_scoring: Literal["f1", "roc_auc"] = "f1",
        partition_class_weight: Literal["balanced"] | None = "balanced",
        partition_cv: int = 3,
        random_state: int | np.random.Generator | None = None,
    ) -> None:
        self.mode = mode
        self.epsilon = epsilon
        self.n_partitions = n_partitions
        self.n_subsets = n_subsets
        self.subset_size = subset_size
        self.subsets = subsets
        self.n_bins = n_bins
        self.features = features
        self.median_fraction = median_fraction
        self.median_steps = median_steps
        self.median_confidence = median_confidence
        self.consistency = consistency
        self.smoothing = smoothing
        self.combine = combine
        self.partition_classifier = partition_classifier
        self.partition_scoring = partition_scoring
        self.partition_class_weight = partition_class_weight
        self.partition_cv = partition_cv
        self.random_state = random_state

    def __sklearn_tags__(self):  # noqa: D105 - scikit-learn protocol
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        tags.non_deterministic = self.random_state is None
        return tags

    # ------------------------------------------------------------------ fitting

    def fit(self, X: Any, y: Any) -> AnonMLClassifier:
        """Simulate the AnonML protocol with one peer per row and train the ensemble.

        Parameters
        ----------
        X : array-like of shape (n_peers, n_features)
            Raw feature vectors (categorical columns hold category indices).
        y : array-like of shape (n_peers,)
            Exactly two classes; ``classes_[1]`` is the reported label bit 1.

        Returns
        -------
        self
        """
        self._validate_params()
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        classes, y01 = np.unique(y, return_inverse=True)
        if classes.size != 2:
            raise ValueError(
                f"Only binary classification is supported: AnonMLClassifier needs exactly 2 "
                f"classes (one label bit per report), got {classes.size} "
                f"class{'es' if classes.size != 1 else ''}: {classes[:5]}"
            )
        features = self._feature_specs(X)
        rng = generator_from(self.random_state)
        config = self._config(X.shape[1])
        result = simulate_training(X, y01.astype(np.int64), features, config, rng)
        if self.mode == "paper":
            ensemble = paper_ensemble(
                result.histograms,
                result.sizes,
                classifier=self.partition_classifier,
                scoring=self.partition_scoring,
                class_weight=self.partition_class_weight,
                cv=self.partition_cv,
                rng=rng,
            )
        else:
            ensemble = default_ensemble(result.histograms, smoothing=self.smoothing, combine=self.combine)
        self.classes_ = classes
        self.n_partitions_ = config.n_partitions
        self.n_subsets_ = config.n_subsets
        self.subset_size_ = config.subset_size
        self.n_bins_ = result.n_bins
        self.binning_ = result.binning
        self.ensemble_ = ensemble
        self.privacy_ = result.accounting
        return self

    def _config(self, n_features: int) -> SimulationConfig:
        kp, kh, ks = _MODE_PLANS[self.mode]
        ks = self.subset_size if self.subset_size is not None else min(ks, n_features)
        kh = self.n_subsets if self.n_subsets is not None else max(1, min(kh, n_features // ks))
        if self.n_partitions is not None:
            kp = self.n_partitions
        elif kp is None:
            kp = max(1, n_features // (kh * ks))
        subsets = None if self.subsets is None else tuple(tuple(int(f) for f in s) for s in self.subsets)
        return SimulationConfig(
            epsilon=float(self.epsilon),
            n_partitions=int(kp),
            n_subsets=int(kh),
            subset_size=int(ks),
            subsets=subsets,
            n_bins=self.n_bins,
            median_fraction=float(self.median_fraction),
            median_steps=int(self.median_steps),
            median_confidence=float(self.median_confidence),
            consistency=self.consistency,
        )

    def _feature_specs(self, X: np.ndarray) -> tuple[FeatureSpec, ...]:
        if self.features is not None:
            specs = tuple(self.features)
            if len(specs) != X.shape[1]:
                raise ValueError(f"features lists {len(specs)} specs for {X.shape[1]} columns of X")
            for spec in specs:
                if not isinstance(spec, FeatureSpec):
                    raise TypeError(f"features must hold FeatureSpec objects, got {type(spec).__name__}")
            return specs
        low, high = X.min(axis=0), X.max(axis=0)
        return tuple(
            FeatureSpec(
                name=f"x{j}",
                kind=FeatureKind.NUMERIC,
                low=float(low[j]) if high[j] > low[j] else float(low[j]) - 0.5,
                high=float(high[j]) if high[j] > low[j] else float(high[j]) + 0.5,
            )
            for j in range(X.shape[1])
        )

    @classmethod
    def from_ensemble(
        cls,
        binning: Binning,
        ensemble: Ensemble,
        *,
        classes: Sequence[Any] = (0, 1),
        privacy: PrivacyAccounting | None = None,
        **params: Any,
    ) -> AnonMLClassifier:
        """A fitted model from bins and an ensemble built elsewhere (e.g. the aggregator)."""
        model = cls(**params)
        model.classes_ = np.asarray(classes)
        if model.classes_.shape != (2,):
            raise ValueError(f"classes must be two labels, got {classes!r}")
        model.n_features_in_ = binning.n_features
        model.binning_ = binning
        model.ensemble_ = ensemble
        model.privacy_ = privacy
        return model

    # --------------------------------------------------------------- prediction

    def _codes(self, X: Any) -> np.ndarray:
        check_is_fitted(self, ("binning_", "ensemble_"))
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return self.binning_.transform(X)

    def decision_function(self, X: Any) -> np.ndarray:
        """Ensemble score of each row; positive means ``classes_[1]``.

        Paper mode: ``Σ s_i h_i(x) / Σ s_i`` (eq. 6.2). Default mode: the log-odds.
        """
        codes = self._codes(X)
        return self.ensemble_.decision_function(codes)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Columns follow ``classes_``."""
        codes = self._codes(X)
        p1 = self.ensemble_.positive_proba(codes)
        return np.column_stack([1.0 - p1, p1])

    def predict(self, X: Any) -> np.ndarray:
        scores = self.decision_function(X)
        return self.classes_[(scores > 0).astype(np.int64)]

    # ------------------------------------------------------------ serialisation

    def to_json(self) -> str:
        """The versioned JSON document of the fitted model (byte-for-byte stable)."""
        check_is_fitted(self, ("binning_", "ensemble_"))
        doc = {
            "format": MODEL_FORMAT,
            "version": MODEL_VERSION,
            "params": self._json_params(),
            "classes": encode_classes(self.classes_),
            "n_features_in": int(self.n_features_in_),
            "binning": self.binning_.to_dict(),
            "ensemble": self.ensemble_.to_dict(),
            "privacy": None if self.privacy_ is None else self.privacy_.to_dict(),
        }
        return canonical_json(doc)

    def _json_params(self) -> dict[str, Any]:
        params = self.get_params(deep=False)
        params["random_state"] = (
            int(self.random_state) if isinstance(self.random_state, numbers.Integral) else None
        )
        if self.features is not None:
            params["features"] = [f.model_dump(mode="json") for f in self.features]
        if self.subsets is not None:
            params["subsets"] = [[int(f) for f in s] for s in self.subsets]
        return params

    @classmethod
    def from_json(cls, text: str | bytes) -> AnonMLClassifier:
        """Rebuild a fitted model from :meth:`to_json` output (see :mod:`anonml.learn.document`).

        Raises
        ------
        ProtocolError
            When the document is not a valid AnonML model of a known version.
        """
        doc = parse_document(text)
        params = dict(doc.params)
        try:
            if params.get("features") is not None:
                params["features"] = [FeatureSpec.model_validate(f) for f in params["features"]]
            binning = Binning.from_dict(doc.binning)
            ensemble = Ensemble.from_dict(doc.ensemble)
            privacy = None if doc.privacy is None else PrivacyAccounting.from_dict(doc.privacy)
            model = cls.from_ensemble(
                binning, ensemble, classes=decode_classes(doc.classes), privacy=privacy, **params
            )
        except (KeyError, TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
            raise ProtocolError(f"model document has bad contents: {exc}") from None
        check_ensemble_fits_bins(binning, ensemble, doc.n_features_in)
        return model
