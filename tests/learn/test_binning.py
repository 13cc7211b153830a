"""Bins: the x > t convention of the median search, categorical checks, JSON form, the auto rule."""

from __future__ import annotations

import numpy as np
import pytest

from anonml.learn.binning import Binning, FeatureBins, auto_n_bins, quantile_thresholds
from anonml.model import FeatureKind, FeatureSpec
from anonml.privacy import best_mechanism

SPECS = (
    FeatureSpec(name="age", low=0, high=100),
    FeatureSpec(name="colour", kind=FeatureKind.CATEGORICAL, categories=("red", "green", "blue")),
    FeatureSpec(name="flag", kind=FeatureKind.BOOL),
)


def test_numeric_bin_counts_thresholds_strictly_below():
    bins = FeatureBins("age", "numeric", (30.0, 50.0))
    # x == t stays below t: IsGreater(t) answered "no".
    assert bins.transform(np.array([10, 30, 30.5, 50, 51, 1e9])).tolist() == [0, 0, 1, 1, 2, 2]
    assert bins.n_bins == 3


def test_from_thresholds_merges_duplicates_and_keeps_categoricals():
    binning = Binning.from_thresholds(SPECS, {0: [40.0, 40.0, 20.0]})
    assert binning.features[0].thresholds == (20.0, 40.0)
    assert binning.n_bins == (3, 3, 2)
    X = np.array([[45.0, 2.0, 1.0], [20.0, 0.0, 0.0]])
    assert binning.transform(X).tolist() == [[2, 2, 1], [0, 0, 0]]


def test_published_edges_are_the_cut_points_of_each_feature_in_order():
    binning = Binning.from_published(SPECS, ((40.0, 20.0), (), ()))
    assert binning.features[0].thresholds == (20.0, 40.0) and binning.n_bins == (3, 3, 2)
    assert binning.to_dict() == Binning.from_thresholds(SPECS, {0: [20.0, 40.0]}).to_dict()


def test_categorical_value_outside_categories_is_named():
    binning = Binning.from_thresholds(SPECS, {0: [40.0]})
    with pytest.raises(ValueError, match=r"feature 'colour' .* row 1 holds 3.0"):
        binning.transform(np.array([[1.0, 0.0, 0.0], [1.0, 3.0, 0.0]]))
    with pytest.raises(ValueError, match=r"row 0 holds 0.5"):
        binning.transform(np.array([[1.0, 0.5, 0.0]]))
    with pytest.raises(ValueError, match="width 3"):
        binning.transform(np.zeros((2, 4)))


def test_thresholds_must_increase():
    with pytest.raises(ValueError, match="strictly increasing"):
        FeatureBins("age", "numeric", (3.0, 3.0))


def test_dict_round_trip_is_exact():
    binning = Binning.from_thresholds(SPECS, {0: [0.1 + 0.2, 1 / 3]})
    again = Binning.from_dict(binning.to_dict())
    assert again == binning


def test_quantile_thresholds_split_mass_evenly():
    rng = np.random.default_rng(0)
    x = rng.normal(size=10_000)
    cuts = quantile_thresholds(x, 4)
    shares = np.bincount(np.searchsorted(cuts, x, side="left"), minlength=4) / x.size
    # Exact quantiles of the sample: each bin holds 1/4 of the points up to ties (none here).
    assert np.allclose(shares, 0.25, atol=1e-3)
    assert quantile_thresholds(np.zeros(100), 3) == (0.0,)


def test_auto_n_bins_follows_its_rule_and_grows_with_epsilon():
    n = 2800
    chosen = {eps: auto_n_bins(eps, n) for eps in (0.5, 1.0, 2.0, 4.0)}
    assert chosen[0.5] <= chosen[1.0] <= chosen[2.0] <= chosen[4.0]
    assert chosen[0.5] == 2 and chosen[4.0] == 5
    for eps, b in chosen.items():
        # The rule: largest b whose relative per-cell error E(2b)·sqrt(2b) <= 0.25.
        err = best_mechanism(eps, 2 * b, n).expected_l2_error(n) * np.sqrt(2 * b)
        assert b == 2 or err <= 0.25
        if b < 5:
            nxt = best_mechanism(eps, 2 * (b + 1), n).expected_l2_error(n) * np.sqrt(2 * (b + 1))
            assert nxt > 0.25
