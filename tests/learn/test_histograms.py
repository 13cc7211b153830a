"""Subset histograms: report encoding, exact counts, unbiased private estimates, pooling."""

from __future__ import annotations

import numpy as np
import pytest

from anonml.learn.histograms import (
    SubsetHistogram,
    domain_size,
    estimate_histogram,
    exact_histogram,
    label_fraction,
    pool_histograms,
    report_values,
)
from anonml.privacy import best_mechanism


def test_report_values_ravel_features_then_label():
    codes = np.array([[0, 0], [1, 2], [1, 0]])
    y = np.array([1, 0, 1])
    # shape (2, 3, 2): value = (a*3 + b)*2 + y
    assert report_values(codes, y, (2, 3)).tolist() == [1, 10, 7]
    assert domain_size((2, 3)) == 12
    with pytest.raises(ValueError, match="do not fit"):
        report_values(codes, y, (2,))


def test_exact_histogram_counts_cells():
    codes = np.array([[0], [1], [1], [1]])
    y = np.array([0, 1, 1, 0])
    h = exact_histogram(codes, y, [3], [2])
    assert h.counts.tolist() == [[1.0, 0.0], [1.0, 2.0]]
    assert h.n == 4 and h.features == (3,)
    assert h.cells.tolist() == [[0], [1]]


def test_private_estimate_is_unbiased_within_its_predicted_variance():
    # R repeats of n reports; the mean estimate of each cell must be within 4 sd/sqrt(R)
    # of the truth, sd from the estimator's own predicted variance (raw counts, no consistency).
    rng = np.random.default_rng(5)
    n, R = 3000, 60
    codes = rng.integers(0, 3, size=(n, 1))
    y = (rng.random(n) < 0.3).astype(int)
    truth = exact_histogram(codes, y, [0], [3]).counts
    values = report_values(codes, y, (3,))
    mech = best_mechanism(1.0, 6, n)
    runs = []
    for _ in range(R):
        bits = mech.perturb(values, rng)
        runs.append(estimate_histogram(bits.sum(axis=0), mech, n, [0], [3], consistency=None))
    mean = np.mean([h.counts for h in runs], axis=0)
    sd = np.sqrt(runs[0].variance)
    assert np.all(np.abs(mean - truth) <= 4 * sd / np.sqrt(R))
    # Consistent estimates are non-negative and sum to n.
    h = estimate_histogram(mech.perturb(values, rng).sum(axis=0), mech, n, [0], [3])
    assert h.counts.min() >= 0 and h.counts.sum() == pytest.approx(n)


def test_pooling_adds_same_subsets_and_label_fraction_pools_all():
    a = SubsetHistogram((0,), (2,), np.array([[3.0, 1.0], [2.0, 4.0]]), np.ones((2, 2)), 10)
    b = SubsetHistogram((0,), (2,), np.array([[1.0, 1.0], [1.0, 1.0]]), np.ones((2, 2)), 4)
    c = SubsetHistogram((1,), (2,), np.array([[5.0, 0.0], [5.0, 0.0]]), np.zeros((2, 2)), 10)
    pooled = pool_histograms([a, c, b])
    assert [h.features for h in pooled] == [(0,), (1,)]
    assert pooled[0].counts.tolist() == [[4.0, 2.0], [3.0, 5.0]]
    assert pooled[0].variance.tolist() == [[2.0, 2.0], [2.0, 2.0]]
    assert pooled[0].n == 14
    # positives: 1+4 + 1+1 + 0 = 7 of 24
    assert label_fraction([a, b, c]) == pytest.approx(7 / 24)


def test_shape_mismatch_is_refused():
    with pytest.raises(ValueError, match="must both have shape"):
        SubsetHistogram((0,), (3,), np.zeros((2, 2)), np.zeros((2, 2)), 1)
