"""The temper pool: the halving search of the terms' temperature and the regressor that uses it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import mean_absolute_error

from anonml.learn import AnonMLClassifier, AnonMLRegressor
from anonml.learn.ensemble import Component, Ensemble
from anonml.learn.temperature import (
    TEMPER_MAJORITY,
    TEMPER_SDS,
    TEMPER_STEPS,
    halving_temperature,
    temper_group_size,
    temper_step_cap,
    temperature_steps,
)
from anonml.model import FeatureSpec
from anonml.privacy.binary import BinaryRandomizedResponse


def _needed_group(epsilon: float) -> float:
    """``(2z/c)²``, the group size a step must exceed (module docstring of anonml.learn.temperature)."""
    c = 2.0 * BinaryRandomizedResponse(epsilon).p - 1.0
    return (2.0 * TEMPER_SDS / c) ** 2


def test_step_cap_is_log2_of_the_terms_at_most_the_search_depth():
    assert [temper_step_cap(n) for n in (1, 2, 3, 4, 7, 8, 9, 100)] == [0, 1, 1, 2, 2, 3, 3, TEMPER_STEPS]
    with pytest.raises(ValueError, match="n_terms"):
        temper_step_cap(0)


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
def test_steps_are_the_most_whose_groups_clear_the_noise(epsilon):
    need = _needed_group(epsilon)
    smallest = math.floor(need) + 1  # the least group size m > need
    assert temperature_steps(3 * smallest, epsilon) == 3
    assert temperature_steps(3 * smallest - 3, epsilon) == 2  # groups of m − 1 for three steps
    assert temperature_steps(smallest, epsilon) == 1
    assert temperature_steps(smallest - 1, epsilon) == 0
    assert temperature_steps(10 * smallest, epsilon, max_steps=1) == 1
    assert temperature_steps(10 * smallest, epsilon, max_steps=0) == 0
    with pytest.raises(ValueError, match="n_pool"):
        temperature_steps(-1, epsilon)


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
def test_group_size_is_the_least_that_tells_the_majority_from_the_noise(epsilon):
    m = temper_group_size(epsilon)
    rr = BinaryRandomizedResponse(epsilon)
    assert TEMPER_SDS * rr.max_standard_error(m) <= TEMPER_MAJORITY - 0.5
    assert TEMPER_SDS * rr.max_standard_error(m - 1) > TEMPER_MAJORITY - 0.5
    assert m > _needed_group(epsilon)  # a group of this size can always move the search


def _recorder(best: np.ndarray):
    """Errors ``|T − best_i|`` per pool row, and the rows each call saw."""
    calls: list[np.ndarray] = []

    def errors(rows: np.ndarray, temperature: float) -> np.ndarray:
        calls.append(np.asarray(rows).copy())
        return np.abs(temperature - best[rows])

    return errors, calls


def test_search_halves_while_the_group_predicts_better_and_stops_at_the_best():
    rng = np.random.default_rng(0)
    best = np.clip(rng.normal(0.25, 0.05, 3_000), 0.01, 1.0)  # every row is best served by T ≈ 1/4
    errors, calls = _recorder(best)
    temperature, answered = halving_temperature(errors, best.size, 4.0, rng, 3)
    assert temperature == 0.25
    assert answered == best.size  # the third group answered "no" and stopped the search
    # every row answered once: two calls per group (T and T/2) over disjoint groups covering the pool
    groups = calls[::2]
    assert all(np.array_equal(a, b) for a, b in zip(calls[::2], calls[1::2], strict=True))
    assert np.array_equal(np.sort(np.concatenate(groups)), np.arange(best.size))


def test_search_stops_at_once_when_halving_hurts_and_counts_only_the_asked():
    rng = np.random.default_rng(1)
    best = np.ones(900)
    errors, calls = _recorder(best)
    temperature, answered = halving_temperature(errors, best.size, 2.0, rng, 3)
    assert temperature == 1.0
    assert answered == 300 and len(calls) == 2  # the first group of three asked, nobody else


def test_search_moves_on_noise_alone_rarely():
    """Ties everywhere (the model's terms are zero): the answers are coins, and a step's false move is
    one-sided beyond TEMPER_SDS maximal standard errors, ≤ 2.3 % of searches."""
    moved = 0
    for seed in range(400):
        rng = np.random.default_rng(seed)
        temperature, _ = halving_temperature(lambda rows, t: np.zeros(rows.size), 600, 1.0, rng, 3)
        moved += temperature < 1.0
    assert moved / 400 < 0.05


def test_search_asks_nothing_without_steps_and_refuses_bad_groups():
    rng = np.random.default_rng(2)
    errors, calls = _recorder(np.ones(10))
    assert halving_temperature(errors, 10, 1.0, rng, 0) == (1.0, 0)
    assert not calls
    with pytest.raises(ValueError, match="groups"):
        halving_temperature(errors, 2, 1.0, rng, 3)
    with pytest.raises(ValueError, match="steps"):
        halving_temperature(errors, 10, 1.0, rng, -1)


def _softmax_ensemble() -> Ensemble:
    table = np.array([[0.5, -0.2, 0.1], [-0.3, 0.4, 0.0]])
    return Ensemble("softmax", np.log([0.5, 0.3, 0.2]), (Component((0,), (2,), table, 0.8),))


def test_tempered_ensemble_scales_the_terms_and_keeps_the_prior():
    ensemble = _softmax_ensemble()
    codes = np.array([[0], [1]])
    tempered = ensemble.with_temperature(0.25)
    intercept = np.asarray(ensemble.intercept)
    assert np.allclose(
        tempered.decision_function(codes) - intercept, 0.25 * (ensemble.decision_function(codes) - intercept)
    )
    assert np.allclose(ensemble.with_temperature(1.0).proba(codes), ensemble.proba(codes))
    # tempering moves every row's probabilities toward the prior
    prior = np.exp(intercept) / np.exp(intercept).sum()
    assert np.all(
        np.abs(tempered.proba(codes) - prior).sum(axis=1) < np.abs(ensemble.proba(codes) - prior).sum(axis=1)
    )
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match="temperature"):
            ensemble.with_temperature(bad)


def _correlated_target(n: int, seed: int = 5) -> tuple[np.ndarray, np.ndarray, list[FeatureSpec]]:
    """Eight features sharing one latent factor and a linear target (benchmarks' correlated_reg)."""
    rng = np.random.default_rng(seed)
    latent = rng.normal(size=n)
    X = 0.8 * latent[:, None] + 0.6 * rng.normal(size=(n, 8))
    y = 10.0 + X @ rng.uniform(0.5, 1.5, 8) + rng.normal(scale=2.0, size=n)
    return np.clip(X, -4.0, 4.0), y, [FeatureSpec(name=f"x{j}", low=-4.0, high=4.0) for j in range(8)]


def _regressor(specs, fraction: float, epsilon: float = 2.0, **params) -> AnonMLRegressor:
    return AnonMLRegressor(
        target_range=(-20.0, 40.0),
        temper_fraction=fraction,
        classifier_params={"epsilon": epsilon, "features": specs, "random_state": 0},
        **params,
    )


def _classifier_rows(monkeypatch) -> list[np.ndarray]:
    """The rows every AnonMLClassifier fit of the test sees."""
    seen: list[np.ndarray] = []
    fit = AnonMLClassifier.fit

    def recording_fit(self, X_fit, y_fit, *args, **kwargs):
        seen.append(np.asarray(X_fit))
        return fit(self, X_fit, y_fit, *args, **kwargs)

    monkeypatch.setattr(AnonMLClassifier, "fit", recording_fit)
    return seen


def test_temper_pool_undoes_the_double_counting_of_correlated_features():
    """Untempered, eight copies of one signal push predictions to the range's ends: worse than the
    training median (tuning figures: 6.5 against 5.1 at ε_T 2 over 10 splits; tempered 3.2)."""
    X, y, specs = _correlated_target(6_000)
    train, test = slice(0, 4_200), slice(4_200, None)
    plain = _regressor(specs, 0.0).fit(X[train], y[train])
    tempered = _regressor(specs, 0.1).fit(X[train], y[train])
    median = mean_absolute_error(y[test], np.full(1_800, np.median(y[train])))
    plain_mae = mean_absolute_error(y[test], plain.predict(X[test]))
    tempered_mae = mean_absolute_error(y[test], tempered.predict(X[test]))
    assert plain.temperature_ == 1.0 and plain_mae > median
    assert tempered.temperature_ <= 0.5
    assert tempered_mae < 0.8 * median and tempered_mae < 0.7 * plain_mae
    # the fitted classifier carries the tempered terms: the published model predicts what the pool measured
    weights = [c.weight for c in tempered.classifier_.ensemble_.components]
    assert max(weights) > 0


def test_temper_pool_is_disjoint_counted_and_signed(monkeypatch):
    X, y, specs = _correlated_target(3_000)
    seen = _classifier_rows(monkeypatch)
    model = _regressor(specs, 0.1, target_bins="uniform").fit(X, y)
    n_pool = round(0.1 * 3_000)  # eight features: the full three steps' share
    assert 0 < model.temper_answers_ <= n_pool
    # the classifier saw every row but the pool's, each once
    (rows,) = seen
    assert rows.shape == (3_000 - n_pool, 8)
    assert np.unique(rows, axis=0).shape[0] == 3_000 - n_pool
    inner = model.classifier_.privacy_
    assert model.privacy_.median_peers == inner.median_peers + model.temper_answers_
    assert model.privacy_.shuffle.peers_outside == inner.shuffle.peers_outside + model.temper_answers_
    assert model.privacy_.epsilon_total == inner.epsilon_total == 2.0


def test_a_large_roster_gives_the_pool_only_what_its_steps_need(monkeypatch):
    X, y, specs = _correlated_target(12_000)
    seen = _classifier_rows(monkeypatch)
    model = _regressor(specs, 0.1, epsilon=4.0, target_bins="uniform").fit(X, y)
    (rows,) = seen
    assert rows.shape[0] == 12_000 - TEMPER_STEPS * temper_group_size(4.0)  # 324 peers, not 1,200
    assert 0 < model.temper_answers_ <= TEMPER_STEPS * temper_group_size(4.0)


def test_one_feature_forms_no_pool_and_fits_as_without_one():
    rng = np.random.default_rng(3)
    X = rng.uniform(0, 10, (2_000, 1))
    y = 2.0 * X[:, 0] + rng.normal(size=2_000)
    specs = [FeatureSpec(name="b", low=0.0, high=10.0)]
    with_pool = _regressor(specs, 0.1).fit(X, y)
    without = _regressor(specs, 0.0).fit(X, y)
    assert with_pool.temperature_ == 1.0 and with_pool.temper_answers_ == 0
    assert np.array_equal(with_pool.predict(X[:50]), without.predict(X[:50]))


def test_temper_fraction_is_checked():
    X, y, specs = _correlated_target(200)
    with pytest.raises(ValueError, match="temper_fraction"):
        _regressor(specs, 0.7).fit(X, y)


def test_a_frame_fits_and_predicts_through_the_temper_pool():
    pd = pytest.importorskip("pandas")
    X, y, specs = _correlated_target(3_000)
    frame = pd.DataFrame(X, columns=[spec.name for spec in specs])
    model = _regressor(specs, 0.1).fit(frame, y)
    from_array = _regressor(specs, 0.1).fit(X, y)
    assert model.temper_answers_ == from_array.temper_answers_ > 0
    assert model.temperature_ == from_array.temperature_
    assert np.array_equal(model.predict(frame.iloc[:100]), from_array.predict(X[:100]))
