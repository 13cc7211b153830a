"""Private median / quantile search (thesis algorithm 1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from anonml.privacy import (
    BinaryRandomizedResponse,
    estimate_bin_edges,
    estimate_median,
    estimate_quantile,
    simulated_query,
)
from anonml.privacy.median import search_steps

# (name, frozen distribution, declared range); the range holds all but
# ~1e-9 of the mass (values outside are clipped, as a featurizer would) and
# its midpoint is off the median, so the search has to move.
DISTRIBUTIONS = [
    ("normal", stats.norm(40.0, 10.0), (-10.0, 130.0)),
    ("exponential", stats.expon(scale=10.0), (0.0, 250.0)),
    ("uniform", stats.uniform(100.0, 100.0), (100.0, 230.0)),
    ("lognormal", stats.lognorm(1.0, scale=5.0), (0.0, 2000.0)),
]


def _partitions(dist, bounds, count, size, rng):
    low, high = bounds
    return [np.clip(dist.rvs(size=size, random_state=rng), low, high) for _ in range(count)]


def _within_bound(est, dist, quantile) -> bool:
    """The predicted error bound: the bracket holds the true quantile, and a
    stopped search's point has rank within rank_error of the target."""
    truth = dist.ppf(quantile)
    if not est.lower <= truth <= est.upper:
        return False
    if est.rank_error is not None:
        above = dist.sf(est.value)  # P(X > value)
        return abs(above - (1 - quantile)) <= est.rank_error
    return True


@pytest.mark.parametrize(("name", "dist", "bounds"), DISTRIBUTIONS, ids=[d[0] for d in DISTRIBUTIONS])
def test_median_lands_within_its_predicted_bound_in_95_percent_of_runs(name, dist, bounds):
    runs, steps, size, epsilon = 150, 10, 1500, 1.0
    hits = moved = 0
    widths = []
    for seed in range(runs):
        rng = np.random.default_rng(1000 + seed)
        query = simulated_query(_partitions(dist, bounds, steps, size, rng), epsilon, rng)
        est = estimate_median(query, *bounds, epsilon=epsilon, n_steps=steps)
        assert est.lower <= est.value <= est.upper
        hits += _within_bound(est, dist, 0.5)
        widths.append(abs(est.value - dist.median()))
        moved += len(est.steps) > 1
    assert hits >= 0.95 * runs, f"{name}: {hits}/{runs}"
    # Not vacuous: searches do move, and land far closer than the range.
    assert moved >= 0.9 * runs
    assert np.median(widths) < (bounds[1] - bounds[0]) / 40


def test_search_starts_at_min_plus_half_the_range_and_halves_the_bracket():
    asked: list[float] = []
    rr_p = BinaryRandomizedResponse(2.0).p
    n = 10_000

    def everyone_above(threshold: float, step: int) -> np.ndarray:
        asked.append(threshold)
        # Exactly the expected share of randomised "yes" when all are above.
        return np.arange(n) < round(rr_p * n)

    est = estimate_median(everyone_above, 100.0, 200.0, epsilon=2.0, n_steps=4)
    assert asked == [150.0, 175.0, 187.5, 193.75]  # the thesis' (max-min)/2 would ask 50
    assert (est.lower, est.upper, est.value) == (193.75, 200.0, 196.875)
    assert not est.stopped and [s.decision for s in est.steps] == ["up"] * 4


def test_search_moves_down_and_stops_within_the_margin():
    rr = BinaryRandomizedResponse(1.0)
    n = 4000

    def answers(threshold: float, step: int) -> np.ndarray:
        # Below 30 the true fraction above is 0.8; above 30 it is 0.2; at 25 exactly 0.5.
        true = 0.5 if threshold == 25.0 else (0.8 if threshold < 30 else 0.2)
        return np.arange(n) < round(((1 - rr.p) + (2 * rr.p - 1) * true) * n)

    est = estimate_median(answers, 0.0, 100.0, epsilon=1.0, n_steps=8)
    assert [s.threshold for s in est.steps] == [50.0, 25.0]
    assert [s.decision for s in est.steps] == ["down", "stop"]
    assert est.value == 25.0 and est.stopped
    # margin = z_{1 - 0.05/16} / (2 (2p - 1) sqrt(n)); rank error twice that.
    z = stats.norm.ppf(1 - 0.05 / 16)
    assert est.rank_error == pytest.approx(2 * z / (2 * (2 * rr.p - 1) * math.sqrt(n)))


@pytest.mark.parametrize("quantile", [0.1, 0.25, 0.75, 0.9])
def test_quantile_search_covers_the_true_quantile(quantile):
    dist, bounds = stats.norm(0.0, 1.0), (-8.0, 8.0)
    runs, steps = 100, 9
    hits = 0
    for seed in range(runs):
        rng = np.random.default_rng(seed)
        query = simulated_query(_partitions(dist, bounds, steps, 2000, rng), 2.0, rng)
        est = estimate_quantile(query, *bounds, quantile, epsilon=2.0, n_steps=steps)
        hits += _within_bound(est, dist, quantile)
    assert hits >= 0.95 * runs


def test_bin_edges_for_b_bins():
    rng = np.random.default_rng(5)
    dist, bounds, bins, steps = stats.uniform(0, 100), (0.0, 100.0), 4, 10
    parts = _partitions(dist, bounds, (bins - 1) * steps, 3000, rng)
    result = estimate_bin_edges(simulated_query(parts, 2.0, rng), *bounds, bins, epsilon=2.0, n_steps=steps)
    assert result.edges[0] == 0.0 and result.edges[-1] == 100.0
    assert np.all(np.diff(result.edges) >= 0) and len(result.edges) == bins + 1
    # Each inner edge within its search's bound of the true quantile 25/50/75.
    for j, est in enumerate(result.estimates, start=1):
        assert est.quantile == pytest.approx(j / bins)
        assert _within_bound(est, dist, j / bins)
    steps_used = [s.step for est in result.estimates for s in est.steps]
    assert len(steps_used) == len(set(steps_used))  # a fresh partition per question


def test_bad_queries_and_arguments_are_refused():
    def bad_shape(threshold, step):
        return np.ones((2, 2), dtype=bool)

    with pytest.raises(ValueError, match="step 0"):
        estimate_median(bad_shape, 0.0, 1.0, epsilon=1.0, n_steps=3)
    with pytest.raises(ValueError, match="0/1"):
        estimate_median(lambda t, s: np.array([0, 3]), 0.0, 1.0, epsilon=1.0, n_steps=3)
    with pytest.raises(ValueError, match="low < high"):
        estimate_median(bad_shape, 1.0, 1.0, epsilon=1.0, n_steps=3)
    with pytest.raises(ValueError, match="n_steps"):
        estimate_median(bad_shape, 0.0, 1.0, epsilon=1.0, n_steps=0)
    with pytest.raises(ValueError, match="quantile"):
        estimate_quantile(bad_shape, 0.0, 1.0, 1.0, epsilon=1.0, n_steps=2)
    with pytest.raises(ValueError, match="n_bins"):
        estimate_bin_edges(bad_shape, 0.0, 1.0, 1, epsilon=1.0, n_steps=2)
    query = simulated_query([np.arange(10.0)], 1.0, np.random.default_rng(0))
    query(5.0, 0)
    with pytest.raises(ValueError, match="already asked"):
        query(5.0, 0)
    with pytest.raises(ValueError, match="no partition"):
        query(5.0, 1)


def _moves_both_ways(group: int, steps: int, confidence: float, epsilon: float) -> bool:
    """Whether a first step of ``group`` answers can send a ``steps``-step median search up and down."""
    decisions = set()
    for answer in (True, False):
        est = estimate_median(
            lambda t, s, a=answer: np.full(group, a),
            0.0,
            1.0,
            epsilon=epsilon,
            n_steps=steps,
            confidence=confidence,
        )
        decisions.add(est.steps[0].decision)
    return decisions == {"up", "down"}


@pytest.mark.parametrize("confidence", [0.5, 0.8, 0.95])
@pytest.mark.parametrize("epsilon", [0.5, 3.0])
def test_search_steps_asks_only_steps_whose_groups_can_move_the_search(confidence, epsilon):
    for share in range(0, 40):
        for searches in (1, 2, 4):
            steps = search_steps(share, searches, 4, confidence)
            if steps:
                # every question of the plan can move its search both ways ...
                assert _moves_both_ways(share // (searches * steps), steps, confidence, epsilon)
            more = range(steps + 1, min(4, share // searches) + 1)
            # ... and no plan with more steps (smaller groups) could
            assert not any(_moves_both_ways(share // (searches * s), s, confidence, epsilon) for s in more)


def test_single_answer_groups_never_leave_the_midpoint_and_fewer_steps_do():
    # 2 pool peers for a feature (breast cancer's 30 features at 15 %): two steps of one answer each
    # stop at the range's midpoint whatever the answers; one step asked of both can move.
    for answers in ([True], [False]):
        stuck = estimate_median(
            lambda t, s, a=answers: np.array(a), 0.0, 8.0, epsilon=2.0, n_steps=2, confidence=0.5
        )
        assert stuck.value == 4.0 and stuck.steps[0].decision == "stop"
    assert search_steps(2, 1, 3, 0.5) == 1
    moved = estimate_median(
        lambda t, s: np.array([True, True]), 0.0, 8.0, epsilon=2.0, n_steps=1, confidence=0.5
    )
    assert moved.value == 6.0


def test_search_steps_refuses_bad_arguments():
    for bad in ((-1, 1, 3, 0.5), (4, 0, 3, 0.5), (4, 1, 0, 0.5), (4, 1, 3, 1.0), (4, 1, 3, 0.0)):
        with pytest.raises(ValueError, match="need share"):
            search_steps(*bad)
    assert search_steps(0, 1, 3, 0.5) == 0  # no peer: no question
    assert search_steps(3, 1, 3, 0.95) == 0  # one step of 3 answers cannot leave a 95 % margin
