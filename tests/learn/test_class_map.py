"""K ≥ 3 calibration: the class map of (predicted class, label) reports and the privately measured choice."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.stats import chi2
from sklearn.metrics import log_loss

from anonml.learn.calibration import (
    CLASS_MAP_FLOOR,
    calibrate_classes,
    class_map,
    mixed_proba,
    shrink_shares,
)
from anonml.learn.ensemble import Component, Ensemble
from anonml.learn.histograms import PRIOR_FALSE_ALARM
from anonml.learn.model import AnonMLClassifier
from anonml.learn.notices import SmallGroupWarning
from anonml.model import FeatureSpec

PRIOR = np.array([0.55, 0.25, 0.15, 0.05])


def test_shrink_shares_follows_its_formula():
    shares, target = np.array([0.5, 0.3, 0.2]), np.array([1 / 3, 1 / 3, 1 / 3])
    deviation = float(np.sum((shares - target) ** 2))
    margin = chi2.ppf(1 - PRIOR_FALSE_ALARM, 2) / 2
    variance = 0.2 * deviation / margin  # keeps 80 % of the deviation
    np.testing.assert_allclose(shrink_shares(shares, target, variance), target + 0.8 * (shares - target))
    np.testing.assert_allclose(shrink_shares(shares, target, 10.0), target)  # noise dominates
    floored = shrink_shares(np.array([1.0, 0.0, 0.0]), target, 0.0)
    assert floored.min() == pytest.approx(CLASS_MAP_FLOOR / (1 + 2 * CLASS_MAP_FLOOR))
    assert floored.sum() == pytest.approx(1.0)


def test_shrink_shares_returns_the_target_for_pure_noise_about_99_percent_of_the_time():
    # Noise of total variance v on the simplex: ‖δ‖²/v ~ χ²_{K−1}/(K−1), so it passes the margin 1 % of the
    # time. A factor without the margin (c = 1) would keep some deviation in about half of the draws.
    rng = np.random.default_rng(0)
    k, v, draws = 4, 1e-3, 3000
    target = np.full(k, 1 / k)
    centring = np.eye(k) - 1 / k
    kept = 0
    for _ in range(draws):
        delta = centring @ rng.normal(scale=np.sqrt(v / (k - 1)), size=k)
        kept += not np.allclose(shrink_shares(target + delta, target, v), target)
    assert kept / draws < PRIOR_FALSE_ALARM + 4 * np.sqrt(PRIOR_FALSE_ALARM / draws)


def _confusion_draw(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Predicted classes and labels from a known confusion: P(y | ĉ) = 0.6 on the diagonal, the rest even."""
    k = PRIOR.size
    truth = np.full((k, k), 0.4 / (k - 1))
    np.fill_diagonal(truth, 0.6)
    predicted = rng.choice(k, size=n, p=PRIOR)
    return predicted, _draw_rows(truth[predicted], rng), truth


def _draw_rows(p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One class per row from its row of probabilities."""
    return (rng.random((p.shape[0], 1)) > np.cumsum(p, axis=1)).sum(axis=1)


def test_class_map_recovers_a_known_confusion_within_its_noise():
    rng = np.random.default_rng(1)
    predicted, y, truth = _confusion_draw(60_000, rng)
    q = class_map(predicted, y, PRIOR.size, np.full(PRIOR.size, 0.25), epsilon=2.0, rng=rng)
    np.testing.assert_allclose(q.sum(axis=1), 1.0)
    # Row ĉ holds ~60,000·π_ĉ reports (3,000 for the rarest); a cell's count sd is ~210 at ε = 2, so a
    # share's sd is ≤ 0.07 for the rarest row and ≤ 0.01 for the largest.
    np.testing.assert_allclose(q[:3], truth[:3], atol=0.06)
    assert np.argmax(q[3]) == 3


def _softmax_ensemble(tables: np.ndarray, prior: np.ndarray) -> Ensemble:
    """One component over one feature whose K codes score the classes by ``tables`` (shape (K, K))."""
    component = Component((0,), (tables.shape[0],), np.asarray(tables, dtype=float), 1.0)
    return Ensemble("softmax", np.log(prior), (component,))


def test_a_confidently_wrong_model_is_replaced_by_the_map():
    # The model puts 0.97 on the class of its code, which is drawn independently of the label: its log
    # loss is ~3.4 nats against the prior's 1.10. The pool must find that and fall back toward P(y).
    rng = np.random.default_rng(2)
    k = PRIOR.size
    tables = np.log(np.where(np.eye(k) > 0, 0.97, 0.01))
    ensemble = _softmax_ensemble(tables, np.full(k, 0.25))
    n = 8000
    codes = rng.integers(0, k, size=(n, 1))
    y = rng.choice(k, size=n, p=PRIOR)
    calibrated = calibrate_classes(ensemble, codes, y, epsilon=2.0, rng=rng)
    assert calibrated.class_map is not None and calibrated.map_weight == 1.0
    test_codes = rng.integers(0, k, size=(20_000, 1))
    test_y = rng.choice(k, size=20_000, p=PRIOR)
    prior_loss = log_loss(test_y, np.tile(PRIOR, (test_y.size, 1)), labels=range(k))
    assert log_loss(test_y, ensemble.proba(test_codes), labels=range(k)) > prior_loss + 2.0
    assert log_loss(test_y, calibrated.proba(test_codes), labels=range(k)) < prior_loss + 0.02
    # Predictions follow the map: the majority class wherever the map is the prior.
    assert np.mean(calibrated.proba(test_codes).argmax(axis=1) == 0) > 0.95


def test_a_calibrated_model_is_kept():
    # The model's probabilities are the true P(y | code): no mixture can lower its log loss, so the
    # choice half must keep it (a mixture passes −2 standard errors by noise ~2.3 % of the time).
    k = PRIOR.size
    truth = np.full((k, k), 0.3 / (k - 1))
    np.fill_diagonal(truth, 0.7)
    ensemble = _softmax_ensemble(np.log(truth), np.full(k, 0.25))
    kept = 0
    for seed in range(10):
        rng = np.random.default_rng(10 + seed)
        codes = rng.integers(0, k, size=(6000, 1))
        y = _draw_rows(truth[codes[:, 0]], rng)
        kept += calibrate_classes(ensemble, codes, y, epsilon=2.0, rng=rng).class_map is None
    assert kept >= 9


def test_mixed_proba_is_the_normalised_geometric_mixture_and_the_ensemble_applies_it():
    p = np.array([[0.7, 0.2, 0.1]])
    q = np.array([[0.2, 0.5, 0.3]])
    expected = np.sqrt(p * q) / np.sqrt(p * q).sum()
    np.testing.assert_allclose(mixed_proba(p, q, 0.5), expected)
    np.testing.assert_allclose(mixed_proba(p, q, 1.0), q)
    tables = np.log(np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]]))
    base = _softmax_ensemble(tables, np.full(3, 1 / 3))
    qmap = np.array([[0.2, 0.5, 0.3], [0.3, 0.4, 0.3], [0.1, 0.1, 0.8]])
    mapped = base.with_class_map(qmap, 0.5)
    codes = np.array([[0], [1], [2]])
    np.testing.assert_allclose(mapped.proba(codes), mixed_proba(base.proba(codes), qmap, 0.5))
    np.testing.assert_allclose(mapped.calibrated_decision(codes), np.log(mapped.proba(codes)))
    again = Ensemble.from_dict(mapped.to_dict())
    np.testing.assert_allclose(again.proba(codes), mapped.proba(codes))
    assert again.map_weight == 0.5


@pytest.mark.parametrize(
    ("class_map", "weight", "match"),
    [
        (np.full((3, 3), 0.5), 1.0, "rows summing to 1"),
        (np.full((2, 2), 0.5), 1.0, "3 x 3"),
        (np.full((3, 3), 1 / 3), 0.0, "map_weight"),
    ],
)
def test_a_bad_class_map_is_refused(class_map, weight, match):
    base = _softmax_ensemble(np.zeros((3, 3)), np.full(3, 1 / 3))
    with pytest.raises(ValueError, match=match):
        base.with_class_map(class_map, weight)


def test_a_binary_ensemble_takes_no_class_map():
    binary = Ensemble("logit", 0.0, (Component((0,), (2,), np.zeros(2), 1.0),))
    with pytest.raises(ValueError, match="softmax"):
        binary.with_class_map(np.full((2, 2), 0.5))


def test_a_prior_pulled_to_uniform_still_predicts_the_private_majority():
    # Pure-noise features and a small roster: the model falls back to its prior, which the noise pulls
    # to (almost) uniform. With an exact tie every prediction was class 0; the kept 1e-3 of the
    # deviation ranks the classes by the private totals, whose majority is class 1 (60 %).
    specs = [FeatureSpec(name=f"x{j}", low=-4.0, high=4.0) for j in range(3)]
    majority = 0
    for seed in range(8):
        rng = np.random.default_rng(seed)
        y = rng.choice(3, size=400, p=[0.2, 0.6, 0.2])
        X = np.clip(rng.normal(size=(400, 3)), -4, 4)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SmallGroupWarning)
            model = AnonMLClassifier(epsilon=1.0, features=specs, random_state=seed).fit(X, y)
        majority += np.mean(model.predict(X) == 1) > 0.5
    assert majority >= 6


def test_a_multiclass_fit_accounts_for_both_halves_of_its_calibration_pool():
    rng = np.random.default_rng(0)
    n = 30_000
    y = rng.choice(4, size=n, p=PRIOR)
    X = np.clip(rng.normal(size=(n, 4)) + 0.4 * y[:, None], -4, 6)
    specs = [FeatureSpec(name=f"x{j}", low=-4.0, high=6.0) for j in range(4)]
    model = AnonMLClassifier(epsilon=2.0, features=specs, random_state=0).fit(X, y)
    pool = model.privacy_.calibration_peers
    assert pool > 0 and model.privacy_.epsilon_total == pytest.approx(2.0)  # one report per pool peer
    # Each half asks its own question: a report hides only among its half.
    assert model.privacy_.shuffle.smallest_group <= pool // 2
    assert model.ensemble_.n_classes == 4
    # The published JSON carries the map and its weight: a clone predicts the same.
    q = np.full((4, 4), 0.1) + 0.6 * np.eye(4)
    model.ensemble_ = model.ensemble_.with_class_map(q, 0.5)
    clone = AnonMLClassifier.from_json(model.to_json())
    np.testing.assert_allclose(clone.predict_proba(X[:200]), model.predict_proba(X[:200]))
    assert clone.ensemble_.map_weight == 0.5
    np.testing.assert_array_equal(clone.predict(X[:200]), model.predict(X[:200]))
