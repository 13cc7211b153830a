"""The K ≥ 3 calibration step's library pieces the protocol shares with the simulation: the halves the
plan fixes, the class map from debiased counts, the choice split into the peer's perturbing and the
aggregator's choosing, and the support of a choice report — all seed-identical to the simulation of
before the split (expectations computed on 6af5d75, before it)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from anonml.learn.baselines import duchi_bound, hybrid_alpha, piecewise_bound, sampled_dimensions
from anonml.learn.calibration import (
    CLASS_MAP_WEIGHTS,
    LOSS_CLIP,
    check_choice_report,
    choose_from_reports,
    class_map,
    class_map_groups,
    loss_steps,
    map_weight,
    measured_choice,
    mixed_proba,
    perturb_steps,
)
from anonml.learn.model import AnonMLClassifier
from anonml.learn.partition import make_plan
from anonml.model import FeatureSpec

SEED = bytes(range(32))
KEYS = [hashlib.sha256(b"peer-%d" % i).digest() for i in range(60)]

#: SHA-256 of ``class_map``'s bytes on the draw of :func:`_confusion`, computed on 6af5d75.
CLASS_MAP_BEFORE = "ea4fe2f55e84344f39a1eb239cdc0a490e777f9992fbf72e0098e8bbedea5944"
#: ``measured_choice`` of :func:`_steps` at ε = 0.5, 1, 2, 4, 6 (seed 5), computed on 6af5d75.
CHOICES_BEFORE = [-1, -1, -1, 1, 1]
#: SHA-256 of the JSON of :func:`_correlated_fit` (its class map kept, weight 1), computed on 6af5d75.
FIT_BEFORE = "9972d4f0e3c2b69c03cc06788e13a0ff3948a5686fce4deb379e0c93474e93d4"


def _confusion() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    predicted = rng.choice(3, size=3000)
    return predicted, np.where(rng.random(3000) < 0.6, predicted, rng.choice(3, size=3000))


def _steps() -> np.ndarray:
    return np.random.default_rng(3).normal(-0.1, 0.5, size=(500, 2))


def _correlated_fit() -> AnonMLClassifier:
    """Six near-copies of one feature: the default mode double-counts them, so the model is
    overconfident and the class map is kept."""
    rng = np.random.default_rng(1)
    n = 20_000
    y = rng.choice(3, size=n, p=[0.5, 0.3, 0.2])
    base = rng.normal(size=n) + 0.8 * y
    X = np.clip(base[:, None] + 0.05 * rng.normal(size=(n, 6)), -4, 6)
    specs = [FeatureSpec(name=f"x{j}", low=-4.0, high=6.0) for j in range(6)]
    return AnonMLClassifier(epsilon=2.0, features=specs, random_state=1, calibration_fraction=0.2).fit(X, y)


def test_the_halves_are_the_plans_pool_split_in_plan_order():
    plan = make_plan(SEED, KEYS, 4, n_partitions=3, median_pool_size=7, calibration_pool_size=11)
    pool = plan.calibration_pool().tolist()
    assert class_map_groups(11) == (6, 5)
    assert plan.class_map_half().tolist() == pool[:6] and plan.choice_half().tolist() == pool[6:]
    assert all(plan.assignment(int(i)).index < 6 for i in plan.class_map_half())
    assert all(plan.assignment(int(i)).index >= 6 for i in plan.choice_half())
    empty = make_plan(SEED, KEYS, 4, n_partitions=3, median_pool_size=7)
    assert empty.class_map_half().size == 0 and empty.choice_half().size == 0


def test_the_class_map_is_the_one_of_before_the_split():
    predicted, y = _confusion()
    q = class_map(predicted, y, 3, np.full(3, 1 / 3), 2.0, np.random.default_rng(11))
    assert hashlib.sha256(np.asarray(q).tobytes()).hexdigest() == CLASS_MAP_BEFORE


def test_the_measured_choice_is_the_one_of_before_the_split_and_is_perturb_then_choose():
    steps = _steps()
    assert [measured_choice(steps, 1.0, e, np.random.default_rng(5)) for e in (0.5, 1.0, 2.0, 4.0, 6.0)] == (
        CHOICES_BEFORE
    )
    for epsilon in (1.0, 4.0):
        reports = perturb_steps(steps, LOSS_CLIP, epsilon, np.random.default_rng(5))
        assert choose_from_reports(reports, LOSS_CLIP) == measured_choice(
            steps, LOSS_CLIP, epsilon, np.random.default_rng(5)
        )


def test_a_seeded_multiclass_fit_is_the_one_of_before_the_split():
    model = _correlated_fit()
    assert model.ensemble_.class_map is not None and model.ensemble_.map_weight == 1.0
    assert hashlib.sha256(model.to_json().encode()).hexdigest() == FIT_BEFORE


def test_loss_steps_are_the_differences_of_the_mixtures_log_losses():
    rng = np.random.default_rng(2)
    proba = rng.dirichlet(np.ones(3), size=40)
    mapped = rng.dirichlet(np.ones(3), size=40)
    y = rng.integers(0, 3, size=40)
    steps = loss_steps(proba, mapped, y)
    rows = np.arange(40)
    losses = [-np.log(proba[rows, y])]
    losses += [-np.log(mixed_proba(proba, mapped, t)[rows, y]) for t in CLASS_MAP_WEIGHTS]
    np.testing.assert_allclose(steps, np.column_stack([losses[1] - losses[0], losses[2] - losses[1]]))
    # One peer's row alone is its row of the whole: what the peer computes is what the simulation does.
    np.testing.assert_allclose(loss_steps(proba[5:6], mapped[5:6], y[5:6])[0], steps[5])
    assert map_weight(proba, mapped, y, 2.0, np.random.default_rng(0)) in (0.0, *CLASS_MAP_WEIGHTS)


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 2.0, 4.0, 5.0, 8.0])
def test_every_honest_choice_report_is_in_the_support(epsilon):
    steps = np.random.default_rng(4).uniform(-2, 2, size=(400, len(CLASS_MAP_WEIGHTS)))
    reports = perturb_steps(steps, LOSS_CLIP, epsilon, np.random.default_rng(6))
    for report in reports:
        check_choice_report(report, epsilon)


@pytest.mark.parametrize("epsilon", [0.3, 2.0, 8.0])
def test_a_choice_report_outside_the_support_is_refused(epsilon):
    d = len(CLASS_MAP_WEIGHTS)
    k = sampled_dimensions(d, epsilon)
    scale = d / k
    hybrid = hybrid_alpha(epsilon / k) > 0
    top = scale * (piecewise_bound(epsilon / k) if hybrid else duchi_bound(epsilon / k))
    with pytest.raises(ValueError, match="values, got shape"):
        check_choice_report(np.zeros(d + 1), epsilon)
    with pytest.raises(ValueError, match="finite"):
        check_choice_report(np.array([np.nan] + [0.0] * (d - 1)), epsilon)
    with pytest.raises(ValueError, match="beyond the mechanism's bound|other than"):
        check_choice_report(np.array([top * 1.01] + [0.0] * (d - 1)), epsilon)
    if k < d:  # only k coordinates are reported: another non-zero one is no mechanism's output
        with pytest.raises(ValueError, match="non-zero values"):
            check_choice_report(np.full(d, top / 2), epsilon)
    if hybrid_alpha(epsilon / k) == 0:  # Duchi et al. alone: exactly ±(d/k)·B, nothing in between
        with pytest.raises(ValueError, match="other than"):
            check_choice_report(np.array([top / 2] + [0.0] * (d - 1)), epsilon)
