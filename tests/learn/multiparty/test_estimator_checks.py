"""scikit-learn's estimator checks over every multiparty estimator and NormBallScaler.

The checks call ``fit(X, y)`` on generic data. Two preconditions of the multiparty
methods are not in that data, so each estimator is checked through a thin subclass
that supplies them and nothing else:

* rows in the unit ball (the privacy calibration assumes ‖x‖ ≤ 1 and the estimators
  refuse other rows): rows above norm 1 are shrunk radially, one row at a time, as
  :class:`NormBallScaler` does; input that is not a finite 2-D real array passes
  through untouched, so the estimator's own validation meets it;
* who holds what: rows alternate between two parties; the feature method's public
  labelled set is the rows themselves; Hamm et al.'s votes are one party's one-hot
  labels of the rows.

Prediction is the estimators' own: a positive per-row scale never changes the sign of
a linear score, so predictions on the unshrunk rows are those of the shrunk ones.
High ε and small λ keep the accuracy checks about the estimator, not the noise.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import sparse
from sklearn.utils.estimator_checks import parametrize_with_checks
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import column_or_1d

from anonml.learn.multiparty import (
    AverageMethod,
    FeatureMethod,
    GaussianObjectivePerturbation,
    HammMajorityVote,
    HammSoftLabel,
    NormBallScaler,
    ObjectivePerturbationLR,
    ParameterAveraging,
    PrivateSGD,
)


def _in_unit_ball(X: Any) -> Any:
    """Rows of a finite real 2-D array shrunk to norm ≤ 1 (a DataFrame stays one); anything else as given."""
    if sparse.issparse(X):
        return X
    try:
        values = np.asarray(X)
    except (TypeError, ValueError):
        return X
    if values.dtype.kind not in "biufO" or values.ndim != 2 or values.size == 0:
        return X
    try:
        values = values.astype(np.float64)
    except (TypeError, ValueError):
        return X
    if not np.all(np.isfinite(values)):
        return X
    shrink = np.maximum(1.0, np.linalg.norm(values, axis=1))
    if hasattr(X, "div"):  # a DataFrame keeps its column names
        return X.div(shrink, axis=0)
    return values / shrink[:, None]


def _two_parties(X: Any, y: Any) -> np.ndarray:
    """Rows alternate between parties 0 and 1 (``y`` may be None: the estimator then refuses it)."""
    return np.arange(np.asarray(y if y is not None else X).shape[0]) % 2


class CheckedParameterAveraging(ParameterAveraging):
    def fit(self, X: Any, y: Any) -> CheckedParameterAveraging:
        return super().fit(_in_unit_ball(X), y, parties=_two_parties(X, y))


class CheckedAverageMethod(AverageMethod):
    def fit(self, X: Any, y: Any) -> CheckedAverageMethod:
        return super().fit(_in_unit_ball(X), y, parties=_two_parties(X, y))


class CheckedFeatureMethod(FeatureMethod):
    def fit(self, X: Any, y: Any) -> CheckedFeatureMethod:
        X = _in_unit_ball(X)
        return super().fit(X, y, parties=_two_parties(X, y), X_public=X, y_public=y)


class CheckedPrivateSGD(PrivateSGD):
    def fit(self, X: Any, y: Any) -> CheckedPrivateSGD:
        return super().fit(_in_unit_ball(X), y, parties=_two_parties(X, y))


class CheckedGaussianObjectivePerturbation(GaussianObjectivePerturbation):
    def fit(self, X: Any, y: Any) -> CheckedGaussianObjectivePerturbation:
        return super().fit(_in_unit_ball(X), y, parties=_two_parties(X, y))


class CheckedObjectivePerturbationLR(ObjectivePerturbationLR):
    def fit(self, X: Any, y: Any) -> CheckedObjectivePerturbationLR:
        return super().fit(_in_unit_ball(X), y)


def _one_party_votes(y: Any) -> tuple[np.ndarray, np.ndarray]:
    """One party labels every row with its own label: one-hot vote counts and the classes."""
    if y is None:
        raise ValueError("requires y to be passed, but the target y is None")
    y = column_or_1d(y, warn=True)
    check_classification_targets(y)
    classes, index = np.unique(y, return_inverse=True)
    return np.eye(max(classes.size, 2))[index.ravel()], classes


class CheckedHammMajorityVote(HammMajorityVote):
    def fit(self, X: Any, y: Any) -> CheckedHammMajorityVote:
        votes, classes = _one_party_votes(y)
        return super().fit(_in_unit_ball(X), votes, classes)


class CheckedHammSoftLabel(HammSoftLabel):
    def fit(self, X: Any, y: Any) -> CheckedHammSoftLabel:
        votes, classes = _one_party_votes(y)
        return super().fit(_in_unit_ball(X), votes, classes)


ESTIMATORS = [
    CheckedParameterAveraging(epsilon=1e4, lam=1e-3, random_state=0),
    CheckedAverageMethod(epsilon=1e4, lam=1e-3, random_state=0),
    CheckedFeatureMethod(epsilon=1e4, lam=1e-3, random_state=0),
    CheckedPrivateSGD(epsilon=1e4, lam=1e-3, n_iter=300, random_state=0),
    CheckedGaussianObjectivePerturbation(epsilon=1e4, lam=1e-3, random_state=0),
    CheckedObjectivePerturbationLR(epsilon=1e4, lam=1e-3, random_state=0),
    CheckedHammMajorityVote(epsilon=1e4, lam=1e-3, random_state=0),
    CheckedHammSoftLabel(epsilon=1e4, lam=1e-3, random_state=0),
    NormBallScaler(bound=3.0),
]


@parametrize_with_checks(ESTIMATORS)
def test_sklearn_contract(estimator, check):
    check(estimator)
