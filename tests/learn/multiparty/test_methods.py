"""Pathak, Hamm and Xie: noise calibration, sensitivity bounds, guarantees reported."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.base import clone

from anonml.learn.multiparty.common import MultipartyError, PrivacyUnit
from anonml.learn.multiparty.hamm import (
    HammMajorityVote,
    HammSoftLabel,
    collect_votes,
    train_local_classifiers,
)
from anonml.learn.multiparty.pathak import ParameterAveraging
from anonml.learn.multiparty.xie import AverageMethod, FeatureMethod
from tests.learn.multiparty.helpers import labelled_ball


def _data(seed: int, n: int = 120, d: int = 4) -> tuple[np.ndarray, np.ndarray]:
    X, positive = labelled_ball(seed, n, d, shrink=1.2)
    return X, positive.astype(int)


def test_pathak_noise_is_calibrated_to_the_smallest_party() -> None:
    # β = K·n_min·λε/2 ⇒ E‖η‖ = d/β, sd √d/β; mean over 120 fits within 4 SE.
    X, y = _data(1)
    parties = np.repeat([0, 1, 2], [10, 50, 60])
    fits = [ParameterAveraging(epsilon=1.0, lam=0.1, random_state=s).fit(X, y, parties) for s in range(120)]
    beta = 3 * 10 * 0.1 * 1.0 / 2
    d = X.shape[1]
    norms = np.array([f.noise_norm_ for f in fits])
    assert fits[0].smallest_party_ == 10
    assert abs(norms.mean() - d / beta) < 4 * math.sqrt(d) / beta / math.sqrt(120)
    # the release is the average of the local models plus exactly that noise
    f = fits[0]
    assert np.linalg.norm(f.coef_[0] - f.local_coefs_.mean(axis=0)) == pytest.approx(f.noise_norm_)
    assert f.privacy_.unit is PrivacyUnit.RECORD and (f.privacy_.epsilon, f.privacy_.delta) == (1.0, 0.0)


def test_pathak_local_sensitivity_bound_holds_for_a_changed_record() -> None:
    # Changing one record of party j moves the average by at most 2/(K n_j λ).
    X, y = _data(2)
    parties = np.repeat([0, 1], 60)
    lam = 0.05
    base = ParameterAveraging(epsilon=1.0, lam=lam, random_state=0).fit(X, y, parties)
    X2, y2 = X.copy(), y.copy()
    X2[0] = X2[1]  # a different record in party 0, with the opposite label
    y2[0] = 1 - y2[1]
    other = ParameterAveraging(epsilon=1.0, lam=lam, random_state=0).fit(X2, y2, parties)
    moved = np.linalg.norm(base.local_coefs_.mean(axis=0) - other.local_coefs_.mean(axis=0))
    assert 0 < moved <= 2 / (2 * 60 * lam)


def _votes(seed: int, m: int = 9, classes: int = 2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X_aux = rng.normal(size=(80, 3))
    X_aux /= 1.1 * np.linalg.norm(X_aux, axis=1, keepdims=True)
    labels = rng.integers(0, classes, size=(m, 80))
    votes = np.stack([(labels == c).sum(axis=0) for c in range(classes)], axis=1)
    return X_aux, votes


@pytest.mark.parametrize(
    ("cls", "classes", "expected"),
    [
        (HammMajorityVote, 2, lambda m, lam: 2 / lam),
        (HammSoftLabel, 2, lambda m, lam: 2 / (m * lam)),
        (HammMajorityVote, 3, lambda m, lam: math.sqrt(2) / lam),
        (HammSoftLabel, 3, lambda m, lam: math.sqrt(2) / (m * lam)),
    ],
)
def test_hamm_sensitivity_and_noise_law(cls: type, classes: int, expected) -> None:  # noqa: ANN001
    # Noise ∝ exp(-ε‖η‖/S) ⇒ ‖η‖ ~ Gamma(C·d or d, S/ε): mean over 120 fits within 4 SE.
    m, lam, eps = 9, 0.5, 2.0
    X_aux, votes = _votes(3, m, classes)
    fits = [cls(epsilon=eps, lam=lam, random_state=s).fit(X_aux, votes) for s in range(120)]
    sens = expected(m, lam)
    assert fits[0].sensitivity_ == pytest.approx(sens)
    assert fits[0].n_parties_ == m
    dim = fits[0].coef_.size
    norms = np.array([np.linalg.norm(f.coef_ - f.nonprivate_coef_) for f in fits])
    assert abs(norms.mean() - dim * sens / eps) < 4 * math.sqrt(dim) * sens / eps / math.sqrt(120)
    assert fits[0].privacy_.unit is PrivacyUnit.PARTY
    assert (fits[0].privacy_.epsilon, fits[0].privacy_.delta) == (eps, 0.0)


@pytest.mark.parametrize("classes", [2, 3])
def test_hamm_soft_label_minimiser_moves_at_most_the_sensitivity_when_one_party_changes(classes: int) -> None:
    # Replace one party's votes by the most different ones possible: every point's vote moves.
    m, lam = 7, 0.05
    rng = np.random.default_rng(4)
    X_aux = rng.normal(size=(60, 3))
    X_aux /= np.linalg.norm(X_aux, axis=1, keepdims=True)
    labels = rng.integers(0, classes, size=(m, 60))
    changed = labels.copy()
    changed[0] = (labels[0] + 1) % classes

    def counts(lab: np.ndarray) -> np.ndarray:
        return np.stack([(lab == c).sum(axis=0) for c in range(classes)], axis=1)

    a = HammSoftLabel(epsilon=1.0, lam=lam, random_state=0).fit(X_aux, counts(labels))
    b = HammSoftLabel(epsilon=1.0, lam=lam, random_state=0).fit(X_aux, counts(changed))
    moved = np.linalg.norm(a.nonprivate_coef_ - b.nonprivate_coef_)
    assert 0 < moved <= a.sensitivity_


def test_collect_votes_counts_each_party_once_per_point() -> None:
    X, y = _data(5)
    parties = np.arange(X.shape[0]) % 6
    y[parties == 5] = 1  # one party sees a single class and votes it everywhere
    models = train_local_classifiers(X, y, parties)
    votes = collect_votes(models, X[:30], np.array([0, 1]))
    assert votes.shape == (30, 2) and np.all(votes.sum(axis=1) == 6)
    assert np.all(votes[:, 1] >= 1)


def test_hamm_rejects_inconsistent_votes() -> None:
    X_aux, votes = _votes(6)
    bad = votes.copy()
    bad[0, 0] += 1
    with pytest.raises(MultipartyError, match="labelled once by each of the M parties"):
        HammSoftLabel().fit(X_aux, bad)


def test_xie_feature_and_average_methods_report_record_unit() -> None:
    X, y = _data(7, n=200)
    parties = np.arange(200) % 4
    X_pub, y_pub = _data(8, n=40)
    feature = FeatureMethod(epsilon=1.0, lam=0.05, random_state=0).fit(X, y, parties, X_pub, y_pub)
    assert feature.local_coefs_.shape == (4, X.shape[1])
    # the final score is v·(M_f x) + b
    z = X_pub @ feature.local_coefs_.T
    np.testing.assert_allclose(feature.decision_function(X_pub), feature.combiner_.decision_function(z))
    average = AverageMethod(epsilon=1.0, lam=0.05, random_state=0).fit(X, y, parties)
    np.testing.assert_allclose(average.coef_[0], average.local_coefs_.mean(axis=0))
    for model in (feature, average):
        assert model.privacy_.unit is PrivacyUnit.RECORD
        assert (model.privacy_.epsilon, model.privacy_.delta) == (1.0, 0.0)
    with pytest.raises(MultipartyError, match="public labelled data"):
        FeatureMethod().fit(X, y, parties)


def test_xie_huber_loss_local_models() -> None:
    X, y = _data(9, n=200)
    model = AverageMethod(epsilon=5.0, lam=0.05, loss="huber", random_state=0).fit(X, y, np.arange(200) % 2)
    assert "huber" in model.privacy_.mechanism
    assert model.score(X, y) > 0.7


def test_estimators_are_clonable_and_validate_parameters() -> None:
    model = ParameterAveraging(epsilon=0.3, lam=0.2, random_state=1)
    assert clone(model).get_params() == model.get_params()
    with pytest.raises(ValueError, match="epsilon"):
        ParameterAveraging(epsilon=-1.0).fit(*_data(10), parties=np.zeros(120))
