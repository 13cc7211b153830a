"""largest_local_epsilon: the local ε for a central target, by bisection over the shuffle bound."""

from __future__ import annotations

import pytest

from anonml.privacy.amplification import (
    MIN_LOCAL_EPSILON,
    CentralTarget,
    CentralTargetUnmet,
    largest_local_epsilon,
    local_epsilon_for,
    report_pool_bound,
    shuffle_epsilon,
)


@pytest.mark.parametrize(("target", "n", "delta"), [(1.0, 2000, 1e-6), (0.5, 10_000, 1e-8), (2.0, 300, 1e-6)])
def test_the_chosen_local_epsilon_meets_the_target_and_a_step_more_does_not(target, n, delta):
    tol = 1e-3
    local = largest_local_epsilon(lambda e: shuffle_epsilon(e, n, delta), target, tol=tol)
    assert shuffle_epsilon(local, n, delta) <= target < shuffle_epsilon(local + tol, n, delta)
    assert local >= target  # a central ε never exceeds the local one
    assert local == pytest.approx(local_epsilon_for(target, n, delta), abs=2 * tol)


def test_a_target_below_what_the_floor_gives_is_refused_naming_it():
    with pytest.raises(CentralTargetUnmet, match=r"ε=0\.005 cannot be met by n=10"):
        largest_local_epsilon(lambda e: shuffle_epsilon(e, 10, 1e-6), 0.005, what="n=10")
    with pytest.raises(CentralTargetUnmet, match="no shuffle bound"):
        largest_local_epsilon(lambda e: None, 1.0)
    assert shuffle_epsilon(MIN_LOCAL_EPSILON, 10, 1e-6) > 0.005


def test_the_cap_is_returned_when_it_meets_the_target():
    assert largest_local_epsilon(lambda e: 0.0, 1.0, max_epsilon0=7.0) == 7.0


def test_the_record_states_met_or_missed():
    bound = report_pool_bound(3.0, 1, 2000)
    met = CentralTarget.of(1.0, bound.delta, 3.0, bound)
    assert met.met and met.central_epsilon == bound.epsilon < 1.0 and met.smallest_group == 2000
    missed = CentralTarget.of(0.5, bound.delta, 3.0, bound)
    assert not missed.met
    alone = CentralTarget.of(1.0, 1e-6, 2.0, None, smallest_group=1)
    assert alone.central_epsilon == 2.0 and not alone.met
    assert CentralTarget.from_dict(met.to_dict()) == met
