"""A numeric target learned as ordered bins: a fare, a duration, a grade.

Every AnonML report carries the label, so a numeric target is cut into K
ordered bins over a *public* range ``[low, high]`` (fixed before any data is
seen, like a feature's range) and each peer reports its bin index as a K-class
label (:class:`~anonml.learn.model.AnonMLClassifier` in default mode, label
domain K in every histogram). The prediction is the expected bin centre under
the model's class probabilities,

    ŷ(x) = Σ_k P̂(bin k | x) · c_k,   c_k the midpoint of bin k,

so the estimate moves smoothly between bins and never leaves ``[low, high]``.
Values outside the range are clipped into the end bins (one row at a time, no
privacy cost). The privacy accounting is the classifier's: each peer still
releases one report per assigned subset.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, column_or_1d

from anonml.learn.model import AnonMLClassifier
from anonml.learn.params import Interval, check_params
from anonml.learn.selection import SelectionAware

__all__ = ["AnonMLRegressor", "target_edges", "target_bins"]


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
        K, equal-width bins over ``target_range``.
    classifier_params : dict, optional
        Parameters of the underlying :class:`AnonMLClassifier` (``epsilon``,
        ``features``, ``ranges``, ``random_state`` …; its mode is "default").

    Attributes
    ----------
    classifier_ : AnonMLClassifier
        Fitted on the bin indices.
    centres_ : ndarray of shape (K,)
        Midpoint of each target bin.
    privacy_ : PrivacyAccounting
        The classifier's.
    """

    param_checks: dict[str, tuple[Any, ...]] = {
        "target_range": (tuple, list),
        "n_target_bins": (Interval(numbers.Integral, 2, None, closed="left"),),
        "classifier_params": (dict, None),
    }

    def __init__(
        self,
        target_range: tuple[float, float] = (0.0, 1.0),
        n_target_bins: int = 5,
        classifier_params: dict[str, Any] | None = None,
    ) -> None:
        self.target_range = target_range
        self.n_target_bins = n_target_bins
        self.classifier_params = classifier_params

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
        model = cls(target_range=tuple(target_range), n_target_bins=int(n_target_bins))
        edges = model._edges()
        model.classifier_ = classifier
        model.centres_ = 0.5 * (edges[:-1] + edges[1:])
        model.n_features_in_ = classifier.n_features_in_
        model.privacy_ = classifier.privacy_
        return model

    def fit(self, X: Any, y: Any) -> AnonMLRegressor:
        """Bin ``y`` over the public range and fit the K-class classifier on the bin indices."""
        check_params(self)
        edges = self._edges()
        if y is None:
            raise ValueError("AnonMLRegressor requires y to be passed, but the target y is None")
        target = column_or_1d(np.asarray(y, dtype=np.float64), warn=True)
        if not np.all(np.isfinite(target)):
            raise ValueError("y must be a 1-D array of finite numbers")
        bins = target_bins(target, edges)
        params = dict(self.classifier_params or {})
        if params.get("mode", "default") != "default":
            raise ValueError("a binned target needs the default mode (K classes); paper mode is binary")
        classifier = AnonMLClassifier(**params)
        context = getattr(self, "_anonml_selection", None)
        if context is not None:  # this regressor is a model-selection clone: so is its classifier
            classifier._anonml_selection = context
        self.classifier_ = classifier.fit(X, bins)
        self.centres_ = 0.5 * (edges[:-1] + edges[1:])
        self.n_features_in_ = self.classifier_.n_features_in_
        self.privacy_ = self.classifier_.privacy_
        return self

    def predict(self, X: Any) -> np.ndarray:
        """``Σ_k P̂(bin k | x)·c_k`` (bins never seen in training have probability 0)."""
        check_is_fitted(self, "classifier_")
        proba = self.classifier_.predict_proba(X)
        centres = self.centres_[np.asarray(self.classifier_.classes_, dtype=np.int64)]
        return proba @ centres
