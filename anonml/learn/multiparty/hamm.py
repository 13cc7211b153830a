"""Ensemble-labelled auxiliary data (Hamm, Cao & Belkin 2016).

M parties each train a classifier of any type on their own data and use it to
label the aggregator's N auxiliary *unlabeled* points; the local models are
never released, only their votes (collected by a trusted curator or a secure
sum, as in the paper). The aggregator trains a λ-regularised linear classifier
on the labelled auxiliary data and releases it with output perturbation. The
privacy unit is **one party**: neighbouring inputs differ in one party's
entire local data set, hence possibly in all its N votes.

* Majority vote (paper sec. 3.1): labels v(x) = the most voted class. One party
  can flip every tied label, so the ERM minimiser moves by at most 2/λ
  (|l'| ≤ 1, ‖x‖ ≤ 1; paper Theorem 2); released with p(η) ∝ exp(-λε‖η‖/2).
* Soft labels (sec. 3.2, eq. 7): α(x) = fraction of positive votes and the
  loss α l(wᵀx) + (1-α) l(-wᵀx). One party moves each α by at most 1/M, so the
  minimiser moves by at most 2/(Mλ) (Theorem 4); p(η) ∝ exp(-Mλε‖η‖/2).
* Multiclass (sec. 3.4): softmax ERM on one-hot (vote) or vote-fraction (soft)
  targets a. The gradient of a point's loss is (softmax(Wx) - a)xᵀ; one party
  moving its vote from class c to c' changes a by e_c' - e_c (vote, if the
  winner flips) or by (e_c' - e_c)/M (soft), i.e. the gradient by a matrix of
  Frobenius norm at most √2 resp. √2/M. The sensitivities are therefore √2/λ
  and √2/(Mλ), and the noise (a C×d matrix) has density ∝ exp(-λε‖η‖_F/√2)
  resp. exp(-Mλε‖η‖_F/√2).

For two classes we keep the paper's general bound 2/λ (any 1-Lipschitz loss)
although the logistic loss admits 1/λ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from sklearn.base import ClassifierMixin, clone
from sklearn.linear_model import LogisticRegression
from sklearn.utils.validation import check_array

from anonml.learn.multiparty.base import PRIVATE_ERM_CONSTRAINTS, LinearMultipartyClassifier
from anonml.learn.multiparty.common import (
    MultipartyError,
    PrivacyGuarantee,
    PrivacyUnit,
    check_parties,
    check_unit_ball,
    sample_norm_noise,
)
from anonml.learn.multiparty.erm import fit_linear_erm, fit_soft_label_erm, fit_softmax_erm
from anonml.learn.params import checked_fit, store_params
from anonml.randomness import generator_from

__all__ = [
    "ConstantClassifier",
    "train_local_classifiers",
    "collect_votes",
    "HammMajorityVote",
    "HammSoftLabel",
]


class ConstantClassifier:
    """A party whose data hold a single class votes that class everywhere."""

    def __init__(self, label: object) -> None:
        self.label = label

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.full(X.shape[0], self.label)


def train_local_classifiers(
    X: np.ndarray,
    y: np.ndarray,
    parties: np.ndarray,
    estimator: ClassifierMixin | None = None,
) -> list[object]:
    """Fit one classifier per party on its own rows (any scikit-learn classifier).

    Parameters
    ----------
    X, y : ndarrays
    parties : ndarray of shape (n,)
        Party id of each row.
    estimator : classifier, optional
        Unfitted scikit-learn classifier, cloned for each party; default
        ``LogisticRegression()``. A party whose
        rows hold one class gets a :class:`ConstantClassifier`.

    Returns
    -------
    list, one fitted model per party in sorted party-id order.
    """
    parties, ids = check_parties(parties, X.shape[0])
    prototype = LogisticRegression() if estimator is None else estimator
    # Group rows by party once (a mask per party would cost O(n) each, O(nM) in all).
    order = np.argsort(parties, kind="stable")
    bounds = np.searchsorted(parties[order], ids, side="left").tolist() + [order.size]
    models: list[object] = []
    for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
        rows = order[start:stop]
        labels = np.unique(y[rows])
        if labels.size == 1:
            models.append(ConstantClassifier(labels[0]))
            continue
        models.append(clone(prototype).fit(X[rows], y[rows]))
    return models


def collect_votes(models: Sequence[object], X_aux: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Vote counts: entry (i, c) = number of parties labelling auxiliary point i as classes[c].

    Each party labels every point once, so every row sums to M = len(models).
    """
    X_aux = check_array(X_aux, dtype=np.float64)
    classes = np.asarray(classes)
    counts = np.zeros((X_aux.shape[0], classes.size), dtype=np.int64)
    rows = np.arange(X_aux.shape[0])
    for model in models:
        predicted = np.asarray(model.predict(X_aux))  # type: ignore[attr-defined]
        index = np.searchsorted(classes, predicted)
        if np.any(index >= classes.size) or np.any(classes[np.minimum(index, classes.size - 1)] != predicted):
            raise MultipartyError("a local classifier predicted a label outside classes")
        np.add.at(counts, (rows, index), 1)
    return counts


class _HammBase(LinearMultipartyClassifier):
    param_checks: dict = {
        **PRIVATE_ERM_CONSTRAINTS,
    }
    _multiclass = True

    def __init__(
        self,
        epsilon: float = 1.0,
        lam: float = 1e-4,
        random_state: int | np.random.Generator | None = None,
    ) -> None:
        store_params(self, locals())

    def _check_votes(
        self, X_aux: np.ndarray, votes: np.ndarray, classes: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        X_aux = check_unit_ball(X_aux, "X_aux")
        self.n_features_in_ = X_aux.shape[1]
        votes = check_array(votes, dtype=np.float64)
        if votes.shape[0] != X_aux.shape[0] or votes.shape[1] < 2:
            raise MultipartyError(
                f"votes must have shape (n_aux, n_classes>=2) = ({X_aux.shape[0]}, C), got {votes.shape}"
            )
        if np.any(votes < 0) or not np.allclose(votes, np.round(votes)):
            raise MultipartyError("votes must be non-negative integer counts")
        totals = votes.sum(axis=1)
        if totals[0] < 1 or not np.all(totals == totals[0]):
            raise MultipartyError("every auxiliary point must be labelled once by each of the M parties")
        classes = np.arange(votes.shape[1]) if classes is None else np.asarray(classes)
        if classes.shape != (votes.shape[1],):
            raise MultipartyError("classes must name one class per column of votes")
        return X_aux, votes, classes, int(totals[0])

    def _release(self, coef: np.ndarray, sensitivity: float, classes: np.ndarray, mechanism: str) -> None:
        rng = generator_from(self.random_state)
        eta = sample_norm_noise(coef.size, self.epsilon / sensitivity, rng=rng).reshape(coef.shape)
        self.nonprivate_coef_ = coef
        self.sensitivity_ = sensitivity
        self.coef_ = coef + eta
        self.classes_ = classes
        self.privacy_ = PrivacyGuarantee(PrivacyUnit.PARTY, float(self.epsilon), 0.0, mechanism)


class HammMajorityVote(_HammBase):
    """Majority-vote labels on auxiliary data, regularised ERM, output perturbation.

    Parameters
    ----------
    epsilon : float, default=1.0
        ε per party.
    lam : float, default=1e-4
        λ of the ERM on auxiliary data.
    random_state : int, Generator or None, default=None

    Attributes
    ----------
    coef_ : ndarray of shape (1, d) (two classes) or (C, d)
    nonprivate_coef_ : ndarray
        The ERM minimiser before noise.
    sensitivity_ : float
        2/λ (two classes) or √2/λ.
    classes_, privacy_, n_parties_

    References
    ----------
    Hamm, Cao & Belkin, "Learning privately from multiparty data", ICML 2016,
    sec. 3.1 and 3.4.
    """

    @checked_fit
    def fit(
        self, X_aux: np.ndarray, votes: np.ndarray, classes: np.ndarray | None = None
    ) -> HammMajorityVote:
        """Train on the auxiliary points labelled by majority vote.

        Parameters
        ----------
        X_aux : ndarray of shape (N, d), rows with ‖x‖ ≤ 1
        votes : ndarray of shape (N, C)
            Vote counts from :func:`collect_votes`; rows sum to M.
        classes : ndarray of shape (C,), optional
            Class label of each column (default 0..C-1).
        """
        X_aux, votes, classes, m = self._check_votes(X_aux, votes, classes)
        self.n_parties_ = m
        winner = np.argmax(votes, axis=1)  # ties go to the lowest column: any rule is covered
        if votes.shape[1] == 2:
            y = np.where(winner == 1, 1.0, -1.0)
            coef = fit_linear_erm(X_aux, y, self.lam).reshape(1, -1)
            sensitivity = 2.0 / self.lam
        else:
            coef = fit_softmax_erm(X_aux, np.eye(votes.shape[1])[winner], self.lam)
            sensitivity = math.sqrt(2.0) / self.lam
        self._release(
            coef,
            sensitivity,
            classes,
            f"majority-vote ERM + output perturbation, sensitivity {sensitivity:.3g} (Hamm et al. 2016)",
        )
        return self


class HammSoftLabel(_HammBase):
    """Soft-label (vote-fraction) weighted ERM on auxiliary data, output perturbation.

    Parameters
    ----------
    epsilon, lam, random_state
        As for :class:`HammMajorityVote` (the same hyperparameters, defaults and meaning).

    Attributes
    ----------
    coef_ : ndarray of shape (1, d) (two classes) or (C, d)
    nonprivate_coef_ : ndarray
    sensitivity_ : float
        2/(Mλ) (two classes) or √2/(Mλ).
    classes_, privacy_, n_parties_

    References
    ----------
    Hamm, Cao & Belkin, ICML 2016, sec. 3.2 (eq. 7) and 3.4.
    """

    @checked_fit
    def fit(self, X_aux: np.ndarray, votes: np.ndarray, classes: np.ndarray | None = None) -> HammSoftLabel:
        """Train on the auxiliary points weighted by the fraction of votes per class."""
        X_aux, votes, classes, m = self._check_votes(X_aux, votes, classes)
        self.n_parties_ = m
        fractions = votes / m
        if votes.shape[1] == 2:
            coef = fit_soft_label_erm(X_aux, fractions[:, 1], self.lam).reshape(1, -1)
            sensitivity = 2.0 / (m * self.lam)
        else:
            coef = fit_softmax_erm(X_aux, fractions, self.lam)
            sensitivity = math.sqrt(2.0) / (m * self.lam)
        self._release(
            coef,
            sensitivity,
            classes,
            f"soft-label ERM + output perturbation, sensitivity {sensitivity:.3g} (Hamm et al. 2016)",
        )
        return self
