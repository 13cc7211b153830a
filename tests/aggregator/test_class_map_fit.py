"""The aggregator's K ≥ 3 calibration is the library's: the map half's stored answers give the class
map the simulation builds from the same draws, the choice half's the weight it chooses."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from aggregator.calibration import chosen_map_weight, class_map_of
from anonml.learn.calibration import (
    CLASS_MAP_WEIGHTS,
    LOSS_CLIP,
    chosen_weight,
    class_map,
    measured_choice,
    perturb_steps,
)
from anonml.privacy import best_mechanism
from anonml.protocol import pack_bits

K = 3


def _model(prior: np.ndarray) -> SimpleNamespace:
    """What :func:`class_map_of` reads of a model: a softmax ensemble's K and intercepts."""
    return SimpleNamespace(ensemble_=SimpleNamespace(n_classes=K, intercept=np.log(prior)))


def test_the_map_from_stored_answers_is_the_simulations_from_the_same_draws():
    rng = np.random.default_rng(7)
    n = 2000
    predicted = rng.choice(K, size=n)
    y = np.where(rng.random(n) < 0.7, (predicted + 1) % K, rng.choice(K, size=n))
    prior = np.array([0.5, 0.3, 0.2])
    simulated = class_map(predicted, y, K, prior, 2.0, np.random.default_rng(11))
    # The same draws, one signed answer per member: the bits of the simulation's one perturb call.
    mechanism = best_mechanism(2.0, K * K, n)
    bits = mechanism.perturb(predicted * K + y, np.random.default_rng(11))
    answers = [(mechanism.descriptor().model_dump_json(), pack_bits(b)) for b in bits]
    q, counted = class_map_of(_model(prior), answers, n, 2.0)  # type: ignore[arg-type]
    assert counted == n and q is not None
    np.testing.assert_array_equal(q, simulated)
    assert np.argmax(q, axis=1).tolist() == [1, 2, 0]  # the signal: the class after the predicted one


def test_too_few_answers_in_either_half_give_no_map_and_no_weight():
    prior = np.full(K, 1 / K)
    mechanism = best_mechanism(2.0, K * K, 10)
    answers = [(mechanism.descriptor().model_dump_json(), pack_bits(b)) for b in mechanism.perturb(
        np.zeros(300, dtype=int), np.random.default_rng(0))]
    # 300 + 300 at ε = 2 carry 600·0.58 ≈ 349 < 500 binary-equivalents: the library forms no pool.
    assert class_map_of(_model(prior), answers, 300, 2.0)[0] is None  # type: ignore[arg-type]
    assert class_map_of(_model(prior), answers, 700, 2.0)[0] is not None  # type: ignore[arg-type]
    assert class_map_of(_model(prior), answers, 1, 2.0)[0] is None  # type: ignore[arg-type]
    reports = np.zeros((300, len(CLASS_MAP_WEIGHTS)))
    assert chosen_map_weight(reports.tolist(), 300, 2.0, K) is None
    assert chosen_map_weight(reports.tolist(), 700, 2.0, K) == 0.0  # all zero: no mixture measured to help
    assert chosen_map_weight(reports[:1].tolist(), 5000, 2.0, K) is None


def test_the_weight_from_stored_reports_is_the_simulations_from_the_same_draws():
    steps = np.random.default_rng(3).normal(-0.3, 0.5, size=(800, len(CLASS_MAP_WEIGHTS)))
    reports = perturb_steps(steps, LOSS_CLIP, 4.0, np.random.default_rng(5))
    expected = chosen_weight(measured_choice(steps, LOSS_CLIP, 4.0, np.random.default_rng(5)))
    assert chosen_map_weight(reports.tolist(), 800, 4.0, K) == expected > 0
