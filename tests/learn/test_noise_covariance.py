"""The noise of sums and contrasts of cells: each mechanism's cell covariances, and D's null expectation."""

from __future__ import annotations

import numpy as np
import pytest

from anonml.learn.histograms import dependence_and_noise, estimate_histogram, report_values
from anonml.privacy import OUE, RandomizedResponse, SubsetSelection


@pytest.mark.parametrize(
    "mechanism",
    [
        RandomizedResponse.from_epsilon(1.0, 4),
        SubsetSelection(epsilon=0.5, m=12, omega=4),
        OUE.from_epsilon(1.0, 6),
    ],
    ids=["krr", "subset", "oue"],
)
def test_the_predicted_covariance_of_two_cells_matches_the_mechanism(mechanism):
    rng = np.random.default_rng(0)
    n, trials, m = 150, 6000, mechanism.m
    values = rng.integers(0, m, size=n)
    true = np.bincount(values, minlength=m)
    sums = np.stack([mechanism.perturb(values, rng).sum(axis=0) for _ in range(trials)])
    estimates = (sums - mechanism.q * n) / (mechanism.p - mechanism.q)
    empirical = np.cov(estimates.T)
    offset, cell = mechanism.count_covariance(n, true)
    predicted = offset + cell[:, None] + cell[None, :]
    off = ~np.eye(m, dtype=bool)
    # The mean off-diagonal covariance, within 4 standard errors (each ≈ √(σ²_i σ²_j / trials)).
    se = np.sqrt(np.mean(np.diag(empirical)) ** 2 / trials / off.sum() * m)
    assert abs(np.mean(empirical[off]) - np.mean(predicted[off])) < 4 * se + 1e-9
    # The total of every cell: exactly n for k-RR and subset selection (one report, fixed bit count).
    total = np.asarray(mechanism.count_variance(n, true)).sum() + predicted[off].sum()
    assert total == pytest.approx(np.var(estimates.sum(axis=1), ddof=1), rel=0.1, abs=1e-6)
    if mechanism.kind != "oue":
        assert total == pytest.approx(0.0, abs=1e-6) and np.mean(predicted[off]) < 0


@pytest.mark.parametrize(
    ("epsilon", "bins", "k", "n"), [(1.0, 2, 2, 12), (1.0, 2, 2, 200), (1.0, 3, 3, 40), (4.0, 2, 10, 17)]
)
def test_the_null_expectation_of_d_is_what_independent_data_give(epsilon, bins, k, n):
    """Feature independent of the label: mean D within 6 % of E₀[D] (it was ~2× for 2 bins)."""
    from anonml.privacy import best_mechanism

    rng = np.random.default_rng(1)
    prior = np.full(k, 1.0 / k) if k > 2 else np.array([0.37, 0.63])
    mechanism = best_mechanism(epsilon, bins * k, n)
    ds, nulls = [], []
    for _ in range(2500):
        x = rng.integers(0, bins, n)
        y = rng.choice(k, size=n, p=prior)
        values = report_values(x[:, None], y, (bins,), k)
        bits = mechanism.perturb(values, rng).sum(axis=0)
        h = estimate_histogram(bits, mechanism, n, (0,), (bins,), n_classes=k)
        d, null, _ = dependence_and_noise(h, prior)
        ds.append(d)
        nulls.append(null)
    assert np.mean(ds) == pytest.approx(np.mean(nulls), rel=0.06)


def test_a_k_rr_class_total_is_far_less_noisy_than_the_sum_of_its_cells():
    mechanism = RandomizedResponse.from_epsilon(1.0, 4)
    rng = np.random.default_rng(2)
    n = 400
    values = report_values(rng.integers(0, 2, n)[:, None], (rng.random(n) < 0.6).astype(int), (2,), 2)
    totals = []
    for _ in range(3000):
        h = estimate_histogram(mechanism.perturb(values, rng).sum(axis=0), mechanism, n, (0,), (2,))
        totals.append(h.unbiased_counts().sum(axis=0)[1])
    predicted = h.class_total_variance()[1]
    assert predicted == pytest.approx(np.var(totals, ddof=1), rel=0.1)
    assert predicted < 0.7 * h.flat_variance()[:, 1].sum()
