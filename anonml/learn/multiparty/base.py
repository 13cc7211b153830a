"""The estimator shape every multiparty method shares.

A method's ``fit`` sets ``coef_`` (one weight row per class score, the intercept
inside, as the features were scaled by :class:`NormBallScaler`), ``classes_``
and ``privacy_`` (a :class:`PrivacyGuarantee`); prediction is linear:
``decision_function(X) = X coef_ᵀ + intercept_`` (``intercept_`` is zero except
for Xie et al.'s feature method, whose second stage has its own) and the predicted class is its sign
(binary) or arg-max (multiclass), as in scikit-learn's linear models.
"""

from __future__ import annotations

from numbers import Real

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from anonml.learn.multiparty.common import PrivacyGuarantee, check_unit_ball, to_pm1
from anonml.learn.params import RANDOM_STATE, Interval, Options, store_params

__all__ = [
    "LinearMultipartyClassifier",
    "MarginLossClassifier",
    "PRIVATE_ERM_CONSTRAINTS",
    "LOSS_CONSTRAINTS",
]


#: Hyperparameter constraints (scikit-learn's ``param_checks``) that
#: every multiparty estimator shares: ε > 0, the regulariser λ > 0, the random state.
PRIVATE_ERM_CONSTRAINTS: dict = {
    "epsilon": [Interval(Real, 0, None, closed="neither")],
    "lam": [Interval(Real, 0, None, closed="neither")],
    "random_state": RANDOM_STATE,
}
#: Those of estimators trained with a margin loss (logistic or Huber).
LOSS_CONSTRAINTS: dict = {
    "loss": [Options(frozenset({"logistic", "huber"}))],
    "huber_h": [Interval(Real, 0, 1, closed="right")],
}


class LinearMultipartyClassifier(ClassifierMixin, BaseEstimator):
    """Base class: linear prediction from ``coef_`` and the guarantee in ``privacy_``.

    Attributes (set by subclasses' ``fit``)
    ---------------------------------------
    coef_ : ndarray of shape (1, d) for two classes, (C, d) otherwise
    intercept_ : ndarray of shape (1,) or (C,)
        Zero unless the method adds a public-data stage (feature method).
    classes_ : ndarray of shape (C,)
    privacy_ : PrivacyGuarantee
    n_features_in_ : int
    """

    coef_: np.ndarray
    classes_: np.ndarray
    privacy_: PrivacyGuarantee

    #: Whether the method learns more than two classes natively (Hamm et al.'s softmax ERM does).
    _multiclass: bool = False

    def __sklearn_tags__(self):  # noqa: D105 - scikit-learn protocol
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = self._multiclass
        tags.non_deterministic = getattr(self, "random_state", None) is None
        return tags

    def _binary_training_data(self, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
        """``(X, y_pm, classes)`` of a binary method's ``fit``: validated (``n_features_in_`` set),
        rows in the unit ball (the sensitivity bounds assume ‖x‖ ≤ 1), labels as ±1 with the
        two classes sorted (:func:`~anonml.learn.multiparty.common.to_pm1`)."""
        X, y = validate_data(self, X, y, dtype=np.float64)
        X = check_unit_ball(X)
        y_pm, classes = to_pm1(y)
        return X, y_pm, classes

    def _set_binary(self, w: np.ndarray, classes: np.ndarray, privacy: PrivacyGuarantee) -> None:
        self.coef_ = np.asarray(w, dtype=np.float64).reshape(1, -1)
        self.intercept_ = np.zeros(1)
        self.classes_ = np.asarray(classes)
        self.privacy_ = privacy

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """Scores X coef_ᵀ + intercept_: shape (n,) for two classes (positive favours ``classes_[1]``)."""
        check_is_fitted(self, "coef_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        scores = X @ self.coef_.T + getattr(self, "intercept_", 0.0)
        return scores[:, 0] if self.coef_.shape[0] == 1 else scores

    def predict(self, X: np.ndarray) -> np.ndarray:
        scores = self.decision_function(X)
        if scores.ndim == 1:
            return self.classes_[(scores > 0).astype(int)]
        return self.classes_[np.argmax(scores, axis=1)]


class MarginLossClassifier(LinearMultipartyClassifier):
    """Base class of the ε-DP estimators trained with a margin loss (objective perturbation).

    Holds their shared hyperparameters, stored as given: ``epsilon``, the regulariser
    ``lam`` (λ of (λ/2)‖w‖²), ``loss`` ("logistic" or "huber"), ``huber_h`` and
    ``random_state``; each subclass documents them with its method.
    """

    param_checks: dict = {
        **PRIVATE_ERM_CONSTRAINTS,
        **LOSS_CONSTRAINTS,
    }

    def __init__(
        self,
        epsilon: float = 1.0,
        lam: float = 1e-3,
        loss: str = "logistic",
        huber_h: float = 0.5,
        random_state: int | np.random.Generator | None = None,
    ) -> None:
        store_params(self, locals())
