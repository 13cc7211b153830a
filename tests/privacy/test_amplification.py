"""Shuffle amplification (Feldman, McMillan & Talwar 2021): properties any correct bound has."""

from __future__ import annotations

import math

import numpy as np
import pytest

from anonml.privacy.amplification import (
    MEDIAN_NOT_SHUFFLED,
    ShuffleBound,
    _pair,
    closed_form_epsilon,
    default_delta,
    local_epsilon_for,
    report_pool_bound,
    shuffle_delta,
    shuffle_epsilon,
    unlinkable_pools_bound,
)


@pytest.mark.parametrize(("epsilon0", "n"), [(0.5, 50), (1.0, 400), (3.0, 2000)])
def test_the_clone_pair_is_two_probability_distributions_with_ratio_at_most_e_eps0(epsilon0, n):
    p, q = _pair(epsilon0, n)
    assert p.sum() == pytest.approx(1.0, abs=1e-9) and q.sum() == pytest.approx(1.0, abs=1e-9)
    positive = q > 1e-300
    assert np.all(p[positive] / q[positive] <= math.exp(epsilon0) * (1 + 1e-9))


def test_delta_falls_with_epsilon_and_vanishes_at_epsilon0():
    deltas = [shuffle_delta(e, 1.0, 500) for e in (0.0, 0.1, 0.2, 0.4, 0.8, 1.0)]
    assert all(a >= b for a, b in zip(deltas, deltas[1:], strict=False))
    assert deltas[-1] == 0.0 and deltas[0] > 0.0


def test_central_epsilon_shrinks_with_n_and_never_exceeds_epsilon0():
    for epsilon0 in (0.5, 1.0, 2.0, 4.0):
        values = [shuffle_epsilon(epsilon0, n, 1e-6) for n in (1, 10, 100, 1000, 10_000)]
        assert values[0] == epsilon0  # one report: nothing to hide among
        assert all(v <= epsilon0 for v in values)
        assert all(a >= b for a, b in zip(values, values[1:], strict=False))
    assert shuffle_epsilon(1.0, 10_000, 1e-6) < 0.1  # ~1/√n amplification


def test_central_epsilon_grows_with_epsilon0():
    values = [shuffle_epsilon(e, 2000, 1e-6) for e in (0.25, 0.5, 1.0, 2.0, 4.0)]
    assert all(a < b for a, b in zip(values, values[1:], strict=False))


@pytest.mark.parametrize(
    ("epsilon0", "n", "delta"), [(0.5, 1000, 1e-6), (1.0, 2500, 1e-6), (2.0, 10_000, 1e-8)]
)
def test_the_numerical_bound_is_never_above_the_papers_closed_form(epsilon0, n, delta):
    closed = closed_form_epsilon(epsilon0, n, delta)
    assert closed is not None
    assert shuffle_epsilon(epsilon0, n, delta) <= closed


def test_the_closed_form_is_refused_outside_its_range():
    assert closed_form_epsilon(4.0, 1000, 1e-6) is None  # ε0 > log(n / (16 log(2/δ)))
    with pytest.raises(ValueError, match="delta"):
        closed_form_epsilon(1.0, 1000, 0.0)


def test_the_returned_epsilon_satisfies_the_bound():
    eps = shuffle_epsilon(1.0, 800, 1e-6)
    assert shuffle_delta(eps, 1.0, 800) <= 1e-6 < shuffle_delta(eps - 1e-3, 1.0, 800)


def test_a_central_target_gives_the_largest_local_epsilon_that_meets_it():
    eps0 = local_epsilon_for(0.5, 2500, 1e-6)
    assert eps0 > 0.5  # amplification buys local budget
    assert shuffle_epsilon(eps0, 2500, 1e-6) <= 0.5 < shuffle_epsilon(eps0 + 0.01, 2500, 1e-6)
    assert local_epsilon_for(0.5, 1, 1e-6) == pytest.approx(0.5, abs=1e-3)  # no crowd, no amplification


def test_pools_compose_sequentially_within_and_in_parallel_across():
    delta = 1e-6
    bound = ShuffleBound.of_groups([(0.5, 2, 3000), (1.0, 1, 800)], delta)
    assert bound.epsilon == pytest.approx(
        max(2 * shuffle_epsilon(0.5, 3000, delta / 2), shuffle_epsilon(1.0, 800, delta))
    )
    assert bound.smallest_group == 800 and "unlinkable" in bound.assumptions
    assert ShuffleBound.from_dict(bound.to_dict()) == bound
    assert default_delta(10) == pytest.approx(1e-6) and default_delta(10**7) == pytest.approx(1e-8)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="local epsilon"):
        shuffle_epsilon(0.0, 10)
    with pytest.raises(ValueError, match="group size"):
        shuffle_epsilon(1.0, 0)
    with pytest.raises(ValueError, match="delta"):
        shuffle_epsilon(1.0, 10, 1.5)


def test_a_problems_bound_covers_only_its_unlinkable_pools():
    pools = {"report": (0.25, 4, 3000), "calibration": (1.0, 1, 900)}
    bound = unlinkable_pools_bound(pools, peers_outside=1200)
    assert bound is not None
    reference = ShuffleBound.of_groups([(0.25, 4, 3000), (1.0, 1, 900)])
    assert (bound.epsilon, bound.delta, bound.smallest_group) == (
        reference.epsilon,
        reference.delta,
        reference.smallest_group,
    )
    assert bound.pools == ("report", "calibration") and bound.peers_outside == 1200
    assert bound.assumptions.endswith(MEDIAN_NOT_SHUFFLED) and "median" in bound.assumptions
    assert ShuffleBound.from_dict(bound.to_dict()) == bound
    # A bound on bare groups names no pool and no outside count, and documents without them load.
    legacy = {k: v for k, v in bound.to_dict().items() if k not in ("pools", "peers_outside")}
    assert ShuffleBound.from_dict(legacy).pools == () and ShuffleBound.from_dict(legacy).peers_outside is None


def test_the_protocols_report_pool_bound_is_the_shared_computation():
    bound = report_pool_bound(0.5, 2, 700)
    shared = unlinkable_pools_bound({"report": (0.5, 2, 700)})
    assert bound == shared and bound is not None and bound.pools == ("report",)
    assert bound.epsilon == ShuffleBound.of_groups([(0.5, 2, 700)]).epsilon
    # One report alone hides among nobody: no bound, in either entry point.
    assert report_pool_bound(0.5, 2, 1) is None
    assert unlinkable_pools_bound({"report": (0.5, 2, 700), "calibration": (1.0, 1, 1)}) is None
    with pytest.raises(ValueError, match="no unlinkable pool"):
        unlinkable_pools_bound({})


def test_a_bound_is_validated_on_construction_and_on_loading():
    """numpy scalars become plain numbers (the document is JSON); a bad field is named, not guessed."""
    bound = ShuffleBound(np.float64(0.7), 1e-6, np.int64(12), pools=["report"])
    assert type(bound.epsilon) is float and type(bound.smallest_group) is int and bound.pools == ("report",)
    assert bound.to_dict() == {
        "epsilon": 0.7,
        "delta": 1e-6,
        "smallest_group": 12,
        "assumptions": bound.assumptions,
        "pools": ["report"],
    }
    with pytest.raises(ValueError, match="smallest_group"):
        ShuffleBound.from_dict({"epsilon": 0.7, "delta": 1e-6, "assumptions": "x"})
    with pytest.raises(ValueError, match="smallest_group"):
        ShuffleBound(0.7, 1e-6, smallest_group=12.5)
