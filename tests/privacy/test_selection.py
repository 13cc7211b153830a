"""The selector: least expected error, and the k-RR / OUE crossover."""

from __future__ import annotations

import math

import numpy as np
import pytest

from anonml.privacy import (
    CANDIDATES,
    OUE,
    RAPPOR,
    PQPerturbation,
    RandomizedResponse,
    SubsetSelection,
    best_mechanism,
)

GRID_M = [2, 3, 4, 5, 8, 16, 32, 64, 128, 256]
GRID_EPS = [0.1, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0]


@pytest.mark.parametrize("m", GRID_M)
@pytest.mark.parametrize("epsilon", GRID_EPS)
def test_choice_has_the_least_expected_error(m, epsilon):
    chosen = best_mechanism(epsilon, m, n=32_561)
    assert chosen.epsilon == pytest.approx(epsilon)
    errors = [kind.from_epsilon(epsilon, m).expected_l2_error(32_561) for kind in CANDIDATES]
    assert chosen.expected_l2_error(32_561) <= min(errors) * (1 + 1e-12)


@pytest.mark.parametrize("epsilon", GRID_EPS)
def test_pq_at_eq_7_3_is_never_worse_than_rappor_or_oue(epsilon):
    for m in GRID_M:
        pq = PQPerturbation.from_epsilon(epsilon, m).expected_l2_error(1)
        assert pq <= RAPPOR.from_epsilon(epsilon, m).expected_l2_error(1) * (1 + 1e-12)
        assert pq <= OUE.from_epsilon(epsilon, m).expected_l2_error(1) * (1 + 1e-12)


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 4.0])
def test_krr_beats_oue_per_value_exactly_when_m_below_3_lambda_plus_2(epsilon):
    # Wang et al. 2017: per-value variance at zero count, q(1-q)/(p-q)^2 * n.
    lam = math.exp(epsilon)
    for m in range(2, int(3 * lam + 2) + 40):
        krr = RandomizedResponse.from_epsilon(epsilon, m).count_variance(1000)
        oue = OUE.from_epsilon(epsilon, m).count_variance(1000)
        assert (krr < oue) == (m < 3 * lam + 2), m


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 4.0])
def test_krr_beats_oue_in_total_error_below_the_eq_7_2_crossover(epsilon):
    # Eq. 7.2 also counts the true values' own variance; solving
    # k^2 - (1 + 2 lam) k - (lam + 1)^2 = 0 for k = m - 1 gives the crossover.
    lam = math.exp(epsilon)
    k_star = ((1 + 2 * lam) + math.sqrt((1 + 2 * lam) ** 2 + 4 * (lam + 1) ** 2)) / 2
    for m in range(2, int(k_star) + 40):
        krr = RandomizedResponse.from_epsilon(epsilon, m).expected_l2_error(1000)
        oue = OUE.from_epsilon(epsilon, m).expected_l2_error(1000)
        assert (krr < oue) == (m - 1 < k_star), m


def test_small_domains_pick_krr_and_large_ones_subset_selection():
    assert isinstance(best_mechanism(1.0, 2, 100), RandomizedResponse)
    assert isinstance(best_mechanism(4.0, 16, 100), RandomizedResponse)
    assert isinstance(best_mechanism(1.0, 128, 100), SubsetSelection)


def test_candidates_and_arguments_are_checked():
    assert isinstance(best_mechanism(1.0, 64, 10, candidates=[OUE, RAPPOR]), OUE)
    with pytest.raises(ValueError):
        best_mechanism(1.0, 64, 0)
    with pytest.raises(ValueError):
        best_mechanism(-1.0, 64, 10)
    with pytest.raises(ValueError):
        best_mechanism(1.0, 1, 10)
    with pytest.raises(ValueError):
        best_mechanism(1.0, 8, 10, candidates=[])
    # n does not change the ranking.
    assert type(best_mechanism(1.0, 16, 10)) is type(best_mechanism(1.0, 16, 10**6))
    assert np.isfinite(best_mechanism(0.01, 1000, 5).expected_l2_error(5))
