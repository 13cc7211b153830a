"""The aggregator's Platt map from real (signed, stored) calibration answers is the library's map
from the same reports, and too few answers leave the model as trained."""

from __future__ import annotations

import numpy as np
import pytest

from aggregator.calibration import answer_counts, calibrate_model, enough_answers, score_cuts
from anonml.learn import AnonMLClassifier
from anonml.learn.calibration import CALIBRATION_BINS, calibrate_ensemble, score_bins
from anonml.model import FeatureSpec
from anonml.privacy import best_mechanism
from anonml.protocol import pack_bits

EPSILON = 4.0


def _data(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    x = rng.uniform(0, 10, size=(n, 3))
    logits = 0.9 * (x[:, 0] - 5) + 0.5 * (x[:, 1] - 5)
    return x, (rng.random(n) < 1 / (1 + np.exp(-logits))).astype(np.int64)


@pytest.fixture(scope="module")
def model() -> AnonMLClassifier:
    x, y = _data(6000, np.random.default_rng(1))
    features = [FeatureSpec(name=f"f{i}", low=0.0, high=10.0) for i in range(3)]
    learner = AnonMLClassifier(features=features, epsilon=EPSILON, calibration_fraction=0.0, random_state=2)
    return learner.fit(x, y)


def _pool(model: AnonMLClassifier, n: int, seed: int):
    """A pool's binned rows and labels, and its answers made as calibrate_ensemble makes them."""
    x, y = _data(n, np.random.default_rng(seed))
    codes = model.binning_.transform(x)
    cuts, centres = score_bins(model.ensemble_, CALIBRATION_BINS)
    values = np.searchsorted(cuts, model.ensemble_.decision_function(codes), side="left") * 2 + y
    mechanism = best_mechanism(EPSILON, 2 * centres.size, n)
    bits = mechanism.perturb(values, np.random.default_rng(seed + 100))
    descriptor = mechanism.descriptor().model_dump_json()
    return codes, y, [(descriptor, pack_bits(row)) for row in bits]


def test_the_map_of_stored_answers_is_the_librarys_map_of_the_same_reports(model):
    assert model.ensemble_.calibration is None
    codes, y, answers = _pool(model, 2000, 7)
    ensemble, n = calibrate_model(model, answers, EPSILON)
    assert n == 2000 and ensemble is not None
    # calibrate_ensemble draws the same reports from the same generator.
    library = calibrate_ensemble(model.ensemble_, codes, y, epsilon=EPSILON, rng=np.random.default_rng(107))
    assert ensemble.calibration == pytest.approx(library.calibration, rel=1e-9, abs=1e-12)
    a, b = ensemble.calibration
    assert abs(a - 1.0) > 1e-3 or abs(b) > 1e-3  # a map, not the identity
    assert ensemble.components == model.ensemble_.components  # the tables are the model's


def test_too_few_answers_leave_the_model_as_trained(model):
    _, _, answers = _pool(model, 100, 9)  # 100 answers' 20 cells err by 0.6 at ε = 4 (> 0.5)
    assert not enough_answers(100, EPSILON) and enough_answers(200, EPSILON)
    ensemble, n = calibrate_model(model, answers, EPSILON)
    assert ensemble is None and n == 100
    assert calibrate_model(model, [], EPSILON) == (None, 0)


def test_cut_points_are_the_models_and_answers_of_another_domain_are_refused(model):
    cuts, _ = score_bins(model.ensemble_, CALIBRATION_BINS)
    assert score_cuts(model) == tuple(cuts) and len(cuts) == CALIBRATION_BINS - 1
    wrong = best_mechanism(EPSILON, 8, 10)
    with pytest.raises(ValueError, match="answer over 8 values"):
        answer_counts([(wrong.descriptor().model_dump_json(), pack_bits(np.zeros(8)))], CALIBRATION_BINS)
