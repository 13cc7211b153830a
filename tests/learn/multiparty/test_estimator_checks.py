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

from collections.abc import Callable
from typing import Any

import numpy as np
from scipy import sparse
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
from tests.learn.helpers import sklearn_contract


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


def _two_party_fit(X: Any, y: Any) -> tuple[tuple, dict[str, Any]]:
    return (_in_unit_ball(X), y), {"parties": _two_parties(X, y)}


def _public_set_fit(X: Any, y: Any) -> tuple[tuple, dict[str, Any]]:
    """Two parties, and the rows themselves as the public labelled set."""
    X = _in_unit_ball(X)
    return (X, y), {"parties": _two_parties(X, y), "X_public": X, "y_public": y}


def _pooled_fit(X: Any, y: Any) -> tuple[tuple, dict[str, Any]]:
    return (_in_unit_ball(X), y), {}


def _one_party_votes(y: Any) -> tuple[np.ndarray, np.ndarray]:
    """One party labels every row with its own label: one-hot vote counts and the classes."""
    if y is None:
        raise ValueError("requires y to be passed, but the target y is None")
    y = column_or_1d(y, warn=True)
    check_classification_targets(y)
    classes, index = np.unique(y, return_inverse=True)
    return np.eye(max(classes.size, 2))[index.ravel()], classes


def _votes_fit(X: Any, y: Any) -> tuple[tuple, dict[str, Any]]:
    votes, classes = _one_party_votes(y)
    return (_in_unit_ball(X), votes, classes), {}


def _checked(estimator: type, supply: Callable[[Any, Any], tuple[tuple, dict[str, Any]]]) -> type:
    """The subclass ``Checked<estimator>`` whose ``fit(X, y)`` is the estimator's fit on ``supply(X, y)``.

    Bound at module level under its own name, so that the pickling checks find it.
    """

    def fit(self: Any, X: Any, y: Any) -> Any:
        args, kwargs = supply(X, y)
        return estimator.fit(self, *args, **kwargs)

    name = f"Checked{estimator.__name__}"
    return type(name, (estimator,), {"fit": fit, "__module__": __name__, "__qualname__": name})


CheckedParameterAveraging = _checked(ParameterAveraging, _two_party_fit)
CheckedAverageMethod = _checked(AverageMethod, _two_party_fit)
CheckedFeatureMethod = _checked(FeatureMethod, _public_set_fit)
CheckedPrivateSGD = _checked(PrivateSGD, _two_party_fit)
CheckedGaussianObjectivePerturbation = _checked(GaussianObjectivePerturbation, _two_party_fit)
CheckedObjectivePerturbationLR = _checked(ObjectivePerturbationLR, _pooled_fit)
CheckedHammMajorityVote = _checked(HammMajorityVote, _votes_fit)
CheckedHammSoftLabel = _checked(HammSoftLabel, _votes_fit)


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


test_sklearn_contract = sklearn_contract(ESTIMATORS)
