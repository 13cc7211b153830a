"""The feature method and the average method (Xie, Plis & Sarwate 2017).

Each of K parties releases an ε-DP linear classifier w_k trained on its own
records by objective perturbation (Chaudhuri et al. 2011, Algorithm 2, with the
ε' ≤ 0 slack case; logistic or Huberised-hinge loss). The parties' data are
disjoint, so the set {w_k} is ε-DP per record (parallel composition).

* Feature method: the aggregator holds a small *public labelled* set. It maps
  each public x to z = M_f x = (w_1ᵀx, …, w_Kᵀx) and fits a (non-private)
  logistic regression v, b on the (z, y) pairs; the final score is
  vᵀ M_f x + b. The public data cost no privacy.
* Average method: w̄ = (1/K) Σ_k w_k.

Post-processing of DP outputs with public data keeps the guarantee, so both
methods are ε-DP per record with δ = 0.
"""

from __future__ import annotations

from numbers import Real

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.utils.validation import check_array

from anonml.learn.multiparty.base import MarginLossClassifier
from anonml.learn.multiparty.common import (
    MultipartyError,
    PrivacyGuarantee,
    PrivacyUnit,
    check_parties,
)
from anonml.learn.multiparty.erm import margin_loss
from anonml.learn.multiparty.objective import objective_perturbation
from anonml.learn.params import Interval, checked_fit, store_params
from anonml.randomness import generator_from

__all__ = ["FeatureMethod", "AverageMethod"]


class _LocalObjectivePerturbation(MarginLossClassifier):
    def _fit_local(self, X: np.ndarray, y: np.ndarray, parties: np.ndarray | None) -> np.ndarray:
        X, y_pm, classes = self._binary_training_data(X, y)
        parties, ids = check_parties(parties, X.shape[0])
        rng = generator_from(self.random_state)
        loss = margin_loss(self.loss, self.huber_h)
        self.local_coefs_ = np.vstack(
            [
                objective_perturbation(X[parties == k], y_pm[parties == k], self.epsilon, self.lam, loss, rng)
                for k in ids
            ]
        )
        self.classes_ = classes
        self.privacy_ = PrivacyGuarantee(
            PrivacyUnit.RECORD,
            float(self.epsilon),
            0.0,
            f"per-party objective perturbation ({self.loss} loss, Chaudhuri et al. 2011), "
            "disjoint parties compose in parallel",
        )
        return self.local_coefs_


class AverageMethod(_LocalObjectivePerturbation):
    """Average of the parties' objective-perturbed classifiers.

    Parameters
    ----------
    epsilon : float, default=1.0
        ε of each party's release (ε-DP per record overall).
    lam : float, default=1e-3
    loss : {"logistic", "huber"}, default="logistic"
    huber_h : float, default=0.5
    random_state : int, Generator or None, default=None

    Attributes
    ----------
    coef_ : ndarray of shape (1, d)
    local_coefs_ : ndarray of shape (K, d)
        The released w_k.
    classes_, privacy_

    References
    ----------
    Xie, Plis & Sarwate, 2017 (average method, the baseline of the feature method).
    """

    @checked_fit
    def fit(self, X: np.ndarray, y: np.ndarray, parties: np.ndarray | None = None) -> AverageMethod:
        """Each party perturbs its own objective; the aggregator averages the w_k."""
        local = self._fit_local(X, y, parties)
        self._set_binary(local.mean(axis=0), self.classes_, self.privacy_)
        return self


class FeatureMethod(_LocalObjectivePerturbation):
    """Logistic regression on the projections M_f x of public labelled data.

    Parameters
    ----------
    epsilon, lam, loss, huber_h, random_state
        As for :class:`AverageMethod` (the same hyperparameters, defaults and meaning).
    public_C : float, default=1.0
        Inverse regularisation of the (non-private) second-stage logistic
        regression on public data (scikit-learn's ``C``).

    Attributes
    ----------
    coef_ : ndarray of shape (1, d)
        M_fᵀ v, so that decision_function(x) = vᵀ M_f x + b.
    intercept_ : ndarray of shape (1,)
        b.
    local_coefs_ : ndarray of shape (K, d)
        M_f, the released w_k.
    combiner_ : LogisticRegression
        The second stage fitted on (M_f x, y) of the public data.
    classes_, privacy_

    References
    ----------
    Xie, Plis & Sarwate, 2017 (feature method).
    """

    param_checks: dict = {
        **_LocalObjectivePerturbation.param_checks,
        "public_C": [Interval(Real, 0, None, closed="neither")],
    }

    def __init__(
        self,
        epsilon: float = 1.0,
        lam: float = 1e-3,
        loss: str = "logistic",
        huber_h: float = 0.5,
        public_C: float = 1.0,
        random_state: int | np.random.Generator | None = None,
    ) -> None:
        store_params(self, locals())

    @checked_fit
    def fit(
        self,
        X: np.ndarray,
        y: np.ndarray,
        parties: np.ndarray | None = None,
        X_public: np.ndarray | None = None,
        y_public: np.ndarray | None = None,
    ) -> FeatureMethod:
        """Parties release w_k; the aggregator fits on (M_f x, y) of its public data.

        Parameters
        ----------
        X, y, parties : the parties' private rows, labels and party ids
        X_public, y_public : the aggregator's public labelled rows
        """
        local = self._fit_local(X, y, parties)
        if X_public is None or y_public is None:
            raise MultipartyError("the feature method needs public labelled data: X_public and y_public")
        X_public = check_array(X_public, dtype=np.float64)
        if X_public.shape[1] != local.shape[1]:
            raise MultipartyError(
                f"X_public has {X_public.shape[1]} columns, the parties' data {local.shape[1]}"
            )
        y_public = np.asarray(y_public)
        if not set(np.unique(y_public)) <= set(self.classes_.tolist()):
            raise MultipartyError("y_public holds a class the parties' data do not")
        if np.unique(y_public).size < 2:
            raise MultipartyError("y_public must hold both classes to fit the second stage")
        combiner = LogisticRegression(C=self.public_C, max_iter=1000).fit(X_public @ local.T, y_public)
        sign = 1.0 if combiner.classes_[1] == self.classes_[1] else -1.0
        self.combiner_ = combiner
        self._set_binary(sign * combiner.coef_[0] @ local, self.classes_, self.privacy_)
        self.intercept_ = sign * combiner.intercept_
        return self
