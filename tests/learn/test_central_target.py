"""Central-target mode: ``central_epsilon=(ε, δ)`` picks the largest local ε whose shuffle bound meets it."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from anonml.learn.model import CENTRAL_TOLERANCE, AnonMLClassifier
from anonml.learn.notices import DataWarning, NotPrivateWarning, SmallGroupWarning
from anonml.learn.regression import AnonMLRegressor
from anonml.learn.simulation import planned_pools
from anonml.model import FeatureSpec
from anonml.privacy.amplification import CentralTargetUnmet, unlinkable_pools_bound

RANGES = {f"x{j}": (-4.0, 4.0) for j in range(4)}
SPECS = [FeatureSpec(name=f"x{j}", low=-4.0, high=4.0) for j in range(4)]


def _data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.clip(rng.normal(size=(n, 4)), -4, 4)
    y = (X[:, 0] + X[:, 1] + rng.normal(size=n) > 0).astype(int)
    return X, y


@pytest.fixture(scope="module")
def fitted() -> AnonMLClassifier:
    X, y = _data(20_000)
    return AnonMLClassifier(central_epsilon=(1.0, 1e-6), ranges=RANGES, random_state=0).fit(X, y)


def _central(model: AnonMLClassifier, epsilon: float, n: int = 20_000) -> float:
    """The bound a fit of ``n`` rows at local ``epsilon`` would have, at the target's δ."""
    config = model._config(4, 2, epsilon)
    bound = unlinkable_pools_bound(planned_pools(config, n, SPECS), delta=1e-6)
    assert bound is not None
    return bound.epsilon


def test_the_chosen_local_epsilon_meets_the_target_and_one_step_more_does_not(fitted):
    target = fitted.privacy_.central_target
    local = fitted.epsilon_
    assert target is not None and target.met
    assert target.local_epsilon == local and target.epsilon == 1.0 and target.delta == 1e-6
    assert target.central_epsilon <= 1.0 and _central(fitted, local) <= 1.0
    assert _central(fitted, local + CENTRAL_TOLERANCE) > 1.0
    # 20,000 rows over 4 features hide each report among thousands: the local ε is well above the target.
    assert 2.0 < local < 6.0
    # The fit's own bound (its real groups, at the target's δ) is the one stated; the local ε the headline.
    assert fitted.privacy_.shuffle.delta == 1e-6
    assert target.central_epsilon == fitted.privacy_.shuffle.epsilon
    assert target.smallest_group == fitted.privacy_.shuffle.smallest_group
    assert fitted.privacy_.epsilon_total == pytest.approx(local)
    assert fitted.privacy_.report_epsilon == pytest.approx(local)
    assert "unlinkable" in target.assumptions and "honest peer" in target.assumptions
    assert "median answers are signed" in target.assumptions
    assert fitted.privacy_.private is True


def test_the_figures_round_trip_through_json(fitted):
    text = fitted.to_json()
    doc = json.loads(text)
    assert doc["params"]["central_epsilon"] == [1.0, 1e-6]
    stated = doc["privacy"]["central_target"]
    assert stated["local_epsilon"] == fitted.epsilon_ and stated["epsilon"] == 1.0 and stated["met"] is True
    clone = AnonMLClassifier.from_json(text)
    assert clone.privacy_.central_target == fitted.privacy_.central_target
    assert clone.central_epsilon == (1.0, 1e-6) and clone.epsilon_ == pytest.approx(fitted.epsilon_)
    assert clone.to_json() == text


def test_a_model_without_a_target_writes_no_target():
    X, y = _data(3000)
    doc = json.loads(AnonMLClassifier(epsilon=2.0, ranges=RANGES, random_state=0).fit(X, y).to_json())
    assert "central_epsilon" not in doc["params"] and "central_target" not in doc["privacy"]


def test_a_target_too_small_for_the_rows_is_refused_naming_n_and_the_target():
    X, y = _data(60)
    model = AnonMLClassifier(central_epsilon=(0.005, 1e-6), ranges=RANGES, random_state=0)
    with pytest.raises(CentralTargetUnmet, match=r"ε=0\.005.*n=60 rows") as info:
        model.fit(X, y)
    assert isinstance(info.value, ValueError)
    # The same target is met by enough rows.
    X, y = _data(20_000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SmallGroupWarning)
        big = AnonMLClassifier(central_epsilon=(0.005, 1e-6), ranges=RANGES, random_state=0).fit(X, y)
    assert big.privacy_.central_target.central_epsilon <= 0.005 < big.epsilon_


@pytest.mark.parametrize("bad", [(1.0,), (0.0, 1e-6), (1.0, 1.5), ("1", 1e-6), (float("inf"), 1e-6)])
def test_a_malformed_target_is_refused(bad):
    X, y = _data(500)
    with pytest.raises(ValueError, match="central_epsilon"):
        AnonMLClassifier(central_epsilon=bad, ranges=RANGES).fit(X, y)


def test_private_stays_false_for_ranges_read_from_the_rows():
    X, y = _data(5000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        with pytest.warns(NotPrivateWarning):
            model = AnonMLClassifier(central_epsilon=(1.0, 1e-6), ranges="from-data", random_state=0)
            model.fit(X, y)
    assert model.privacy_.private is False and model.privacy_.central_target.met
    assert AnonMLClassifier.from_json(model.to_json()).privacy_.private is False


def test_the_regressor_meets_the_target_and_its_target_pool_answers_with_the_same_local_epsilon():
    rng = np.random.default_rng(1)
    X = np.clip(rng.normal(size=(15_000, 4)), -4, 4)
    y = 2 * X[:, 0] + X[:, 1] + rng.normal(size=X.shape[0])
    model = AnonMLRegressor(
        target_range=(-10.0, 10.0),
        central_epsilon=(1.0, 1e-6),
        classifier_params={"ranges": RANGES, "random_state": 0},
    ).fit(X, y)
    target = model.privacy_.central_target
    assert target.met and target.central_epsilon <= 1.0
    assert model.classifier_.epsilon_ == pytest.approx(target.local_epsilon) and target.local_epsilon > 1.0
    assert model.privacy_.epsilon_total == pytest.approx(target.local_epsilon)
    # The target pool's 1,500 signed answers are outside the bound, beside the median pool's.
    assert model.privacy_.shuffle.peers_outside == model.privacy_.median_peers >= 1500
    with pytest.raises(ValueError, match="not both"):
        AnonMLRegressor(
            target_range=(-10.0, 10.0),
            central_epsilon=(1.0, 1e-6),
            classifier_params={"ranges": RANGES, "central_epsilon": (1.0, 1e-6)},
        ).fit(X, y)
