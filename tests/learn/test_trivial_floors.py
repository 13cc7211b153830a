"""Never worse than the trivial predictor: the prior (multiclass), the median (regression).

The floors are checked as the benchmark checks them (benchmarks/trivial_floors.py): seeded
70/30 splits, the paired difference model − trivial, mean within a few standard errors of
≤ 0. The unit tests pin the shrinkage formulas that give the floors.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from anonml.learn.ensemble import MIN_SHRINKAGE, shrinkage_factor
from anonml.learn.histograms import (
    CONSISTENT_PRIOR_NOISE_MARGIN,
    MIN_PRIOR_SHARE,
    SubsetHistogram,
    estimate_histogram,
    exact_histogram,
    noise_margin,
    pooled_label_shares,
    report_values,
    shrunk_label_distribution,
)
from anonml.learn.notices import SmallGroupWarning
from anonml.learn.regression import AnonMLRegressor, predictive_median
from anonml.model import FeatureSpec
from anonml.privacy import best_mechanism
from benchmarks.trivial_floors import evaluate_split, load_sets, synthetic_regression

SPLITS = 10


def _paired(data, epsilon: float, metrics: list[tuple[str, str]]) -> list[tuple[float, float]]:
    """Per (metric, trivial) pair, mean and standard error over seeded splits of ``metric − trivial``."""
    runs = [evaluate_split(data, epsilon, seed) for seed in range(SPLITS)]
    out = []
    for metric, trivial in metrics:
        arr = np.asarray([r[metric] - r[trivial] for r in runs])
        out.append((float(arr.mean()), float(arr.std(ddof=1) / np.sqrt(arr.size))))
    return out


def test_digits_log_loss_and_accuracy_never_fall_below_the_prior():
    # Before the shrinkage the default scored 10.1 nats here against the prior's 2.30.
    digits = load_sets(["digits"])[0]
    (loss, loss_se), (acc, acc_se) = _paired(
        digits, 1.0, [("log_loss", "log_loss_trivial"), ("accuracy", "accuracy_trivial")]
    )
    assert loss <= 3 * loss_se + 1e-3, (loss, loss_se)
    assert acc >= -(3 * acc_se + 1e-3), (acc, acc_se)


def test_iris_log_loss_at_low_epsilon_stays_at_the_prior():
    iris = load_sets(["iris"])[0]
    for epsilon in (0.5, 1.0):  # before: +0.12 and +0.06 nats over the prior
        ((mean, se),) = _paired(iris, epsilon, [("log_loss", "log_loss_trivial")])
        assert mean <= 3 * se + 1e-3, (epsilon, mean, se)


def test_regression_mae_beats_the_training_median():
    data = synthetic_regression(n=10_000, seed=3)
    ((mean, se),) = _paired(data, 0.5, [("mae", "mae_trivial")])
    assert mean + 3 * se < 0, (mean, se)


@pytest.mark.parametrize("epsilon", [2.0, 4.0])
def test_diabetes_mae_is_no_worse_than_the_median(epsilon):
    # Before: +6.8 ± 3.4 at ε = 2 (equal-width target bins, predictive mean).
    diabetes = load_sets(["diabetes"])[0]
    ((mean, se),) = _paired(diabetes, epsilon, [("mae", "mae_trivial")])
    assert mean <= 3 * se, (mean, se)


def _noisy_histogram(rng, n: int, epsilon: float, y_share: float, dependence: float) -> SubsetHistogram:
    """One binary feature and a binary label, reported through the least-error mechanism."""
    y = (rng.random(n) < y_share).astype(np.int64)
    x = np.where(rng.random(n) < 0.5 + dependence * (y - 0.5), 1, 0)[:, None]
    values = report_values(x, y, (2,))
    mechanism = best_mechanism(epsilon, 4, n)
    bits = mechanism.perturb(values, rng)
    return estimate_histogram(bits.sum(axis=0), mechanism, n, (0,), (2,))


def test_label_distribution_shrinks_to_uniform_under_noise_and_not_without_it():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 2, size=(20_000, 1))
    y = (rng.random(20_000) < 0.2).astype(np.int64)
    exact = exact_histogram(codes, y, (0,), (2,))
    assert shrunk_label_distribution([exact])[1] == pytest.approx(np.mean(y))
    # 40 reports at ε = 0.5: the share's noise sd is ~0.5. Two classes take the Wiener factor, which
    # minimises the squared error (the Brier excess): mostly uniform, never much worse than uniform,
    # far better than the raw estimate.
    tiny = [_noisy_histogram(np.random.default_rng(s), 40, 0.5, 0.2, 0.0) for s in range(200)]
    shares = np.array([shrunk_label_distribution([h])[1] for h in tiny])
    raw = np.array([h.unbiased_counts().sum(axis=0)[1] / h.n for h in tiny])
    assert np.mean(np.isclose(shares, 0.5)) >= 0.5
    assert np.mean((shares - 0.2) ** 2) <= 1.1 * (0.5 - 0.2) ** 2
    assert np.mean((shares - 0.2) ** 2) < np.mean((raw - 0.2) ** 2) / 3
    # 50,000 reports at ε = 2: the noise is small, the estimate stays near 0.2
    big = _noisy_histogram(np.random.default_rng(1), 50_000, 2.0, 0.2, 0.0)
    assert shrunk_label_distribution([big])[1] == pytest.approx(0.2, abs=0.02)


def test_binary_prior_is_a_probability_even_when_the_noisy_share_is_not():
    # 40 reports at ε = 0.5, base rate 0.2: the raw share's noise sd is ~0.5, so it often lands
    # outside [0, 1], where the untruncated Wiener estimate put a class at 0 (then clipped to ~1e-4:
    # 9 nats per member of that class). The posterior mean on [0, 1] keeps it a probability and
    # changes nothing where the estimate is well inside.
    tiny = [_noisy_histogram(np.random.default_rng(100 + s), 40, 0.5, 0.2, 0.0) for s in range(300)]
    u = np.full(2, 0.5)
    new, old, inside = [], [], 0
    for h in tiny:
        p, v = pooled_label_shares([h])
        deviation = float(np.sum((p - u) ** 2))
        s = max(0.0, 1.0 - v / deviation) if deviation > 0 else 0.0
        untruncated = u + s * (p - u)
        clipped = np.clip(untruncated, 0.0, None)
        old.append((clipped / clipped.sum())[1])
        new.append(shrunk_label_distribution([h])[1])
        if min(untruncated[1], 1 - untruncated[1]) > 3 * np.sqrt(s * v / 2):  # far inside: unchanged
            inside += 1
            assert new[-1] == pytest.approx(untruncated[1], abs=0.01)
    new, old = np.array(new), np.array(old)
    assert inside >= 20
    assert np.sum((old <= 1e-9) | (old >= 1 - 1e-9)) >= 5  # the failure this guards against occurs here
    assert new.min() > 0.01 and new.max() < 0.99
    assert np.mean((new - 0.2) ** 2) < np.mean((old - 0.2) ** 2)


def test_shrinkage_factor_is_one_on_exact_counts_and_floored_on_pure_noise():
    rng = np.random.default_rng(2)
    codes = rng.integers(0, 2, size=(5000, 1))
    y = (codes[:, 0] ^ (rng.random(5000) < 0.2)).astype(np.int64)
    assert shrinkage_factor([exact_histogram(codes, y, (0,), (2,))]) == 1.0
    noise = [_noisy_histogram(np.random.default_rng(10 + s), 60, 0.5, 0.5, 0.0) for s in range(10)]
    factors = [shrinkage_factor([h]) for h in noise]
    assert np.median(factors) < 0.2  # mostly the floor: no signal to trust
    assert min(factors) == MIN_SHRINKAGE
    strong = _noisy_histogram(np.random.default_rng(3), 20_000, 2.0, 0.5, 0.8)
    assert shrinkage_factor([strong]) > 0.9


def test_predictive_median_interpolates_inside_the_bin():
    edges = np.array([0.0, 10.0, 20.0, 40.0])
    proba = np.array([[0.2, 0.6, 0.2], [0.5, 0.0, 0.5], [0.0, 0.25, 0.75]])
    # row 0: F(10) = 0.2, half needs 0.3 of bin 1's 0.6 → 10 + 0.5·10; row 1: exactly at 10;
    # row 2: F(20) = 0.25, needs 0.25 of bin 2's 0.75 → 20 + (1/3)·20
    assert predictive_median(proba, edges) == pytest.approx([15.0, 10.0, 20.0 + 20.0 / 3])


def test_quantile_target_bins_hold_equal_shares_and_are_accounted():
    rng = np.random.default_rng(4)
    n = 20_000
    x = rng.uniform(0, 10, n)
    y = rng.exponential(scale=2.0 + x)  # skewed: equal-width bins over [0, 60] would be mostly empty
    specs = [FeatureSpec(name="x", low=0.0, high=10.0)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SmallGroupWarning)
        model = AnonMLRegressor(
            target_range=(0.0, 60.0),
            n_target_bins=4,
            classifier_params={"epsilon": 2.0, "features": specs, "random_state": 0},
        ).fit(x[:, None], y)
    shares = np.diff(np.searchsorted(np.sort(y), model.edges_)) / n
    assert model.edges_[0] == 0.0 and model.edges_[-1] == 60.0 and model.edges_.size == 5
    assert np.all(np.abs(shares - 0.25) < 0.1), shares  # equal-width bins: 0.93, 0.06, 0.01, 0.00
    # the target pool (10 % of the peers) answered with ε_T and is counted with the median pool
    clf = model.classifier_.privacy_
    assert model.privacy_.median_peers > clf.median_peers - 1
    assert model.privacy_.median_peers - clf.median_peers > 0.5 * 0.1 * n
    assert model.privacy_.shuffle.peers_outside == model.privacy_.median_peers
    assert model.privacy_.epsilon_total == pytest.approx(2.0)
    uniform = AnonMLRegressor(
        target_range=(0.0, 60.0),
        n_target_bins=4,
        target_bins="uniform",
        classifier_params={"epsilon": 2.0, "features": specs, "random_state": 0},
    ).fit(x[:, None], y)
    assert np.allclose(uniform.edges_, [0.0, 15.0, 30.0, 45.0, 60.0])


#: Four skewed classes (the tuning set skewed4's shares): the prior's log loss 1.21 nats, uniform's 1.39.
_SKEWED = np.array([0.45, 0.3, 0.15, 0.1])


def _skewed_histograms(rng, n: int, epsilon: float, partitions: int = 3) -> list[SubsetHistogram]:
    """``partitions`` disjoint groups of ``n`` reports: a 3-bin feature of pure noise and a skewed label."""
    out = []
    for j in range(partitions):
        y = rng.choice(_SKEWED.size, size=n, p=_SKEWED)
        codes = rng.integers(0, 3, size=(n, 1))
        mechanism = best_mechanism(epsilon, 3 * _SKEWED.size, n)
        bits = mechanism.perturb(report_values(codes, y, (3,), _SKEWED.size), rng)
        out.append(estimate_histogram(bits.sum(axis=0), mechanism, n, (j,), (3,), n_classes=_SKEWED.size))
    return out


def _chi2_rule(histograms: list[SubsetHistogram]) -> np.ndarray:
    """The rule before consistent shares: the unbiased shares kept by the χ²-margin factor."""
    p, noise = pooled_label_shares(histograms)
    u = np.full(p.size, 1.0 / p.size)
    deviation = float(np.sum((p - u) ** 2))
    share = max(MIN_PRIOR_SHARE, 1.0 - noise_margin(p.size) * noise / deviation)
    q = np.clip(u + share * (p - u), 0.0, None)
    return q / q.sum()


def _histogram(counts: np.ndarray, raw: np.ndarray, variance: float) -> SubsetHistogram:
    """One feature of ``counts.shape[0]`` bins, given consistent and raw counts, independent cells."""
    n = int(round(float(raw.sum())))
    return SubsetHistogram((0,), (counts.shape[0],), counts, np.full(counts.shape, variance), n, raw)


def test_a_detected_prior_takes_the_consistent_shares_with_the_wiener_factor():
    raw = np.array([[300.0, 150.0, 60.0], [310.0, 170.0, 10.0]])  # unbiased: shares 0.61, 0.32, 0.07
    consistent = np.array([[290.0, 140.0, 50.0], [300.0, 160.0, 60.0]])  # shares 0.59, 0.30, 0.11
    variance = 400.0  # independent cells: each class total's variance is 2·400
    h = _histogram(consistent, raw, variance)
    u = np.full(3, 1 / 3)
    p, noise = pooled_label_shares([h])
    assert noise == pytest.approx(3 * 2 * variance / 1000.0**2)
    assert 1.0 - noise_margin(3) * noise / np.sum((p - u) ** 2) > 0  # the χ² test finds the skew
    shares = consistent.sum(axis=0) / consistent.sum()
    s = 1.0 - CONSISTENT_PRIOR_NOISE_MARGIN * noise / np.sum((shares - u) ** 2)
    np.testing.assert_allclose(shrunk_label_distribution([h]), u + s * (shares - u), rtol=1e-12)


def test_an_undetected_prior_and_raw_counts_keep_the_chi2_rule():
    u = np.full(3, 1 / 3)
    # the same skew under noise the χ² margin can explain: uniform plus the least share
    raw = np.array([[300.0, 150.0, 60.0], [310.0, 170.0, 10.0]])
    loud = _histogram(raw * 0.9 + 10.0, raw, 40_000.0)
    p, noise = pooled_label_shares([loud])
    assert 1.0 - noise_margin(3) * noise / np.sum((p - u) ** 2) <= 0
    np.testing.assert_allclose(shrunk_label_distribution([loud]), u + MIN_PRIOR_SHARE * (p - u), rtol=1e-9)
    # counts with a negative cell were not made consistent (consistency=None): the unbiased rule
    negative = np.array([[300.0, 150.0, -20.0], [310.0, 170.0, 90.0]])
    h = _histogram(negative, negative, 400.0)
    np.testing.assert_allclose(shrunk_label_distribution([h]), _chi2_rule([h]), rtol=1e-12)


def test_a_skewed_prior_under_noise_is_closer_to_the_truth_than_the_chi2_rule():
    # 3 × 600 reports at ε = 1: the χ² rule pulled the skew most of the way to uniform, the consistent
    # shares keep more of it. KL from the true shares, 40 seeds: 0.061 nats against the χ² rule's
    # 0.093 (s.e. of the paired difference 0.005); uniform costs 0.176.
    def kl(q: np.ndarray) -> float:
        return float(np.sum(_SKEWED * np.log(_SKEWED / q)))

    new, old = [], []
    for seed in range(40):
        hs = _skewed_histograms(np.random.default_rng(seed), 600, 1.0)
        new.append(kl(shrunk_label_distribution(hs)))
        old.append(kl(_chi2_rule(hs)))
    new_mean, old_mean = float(np.mean(new)), float(np.mean(old))
    diff = np.asarray(new) - np.asarray(old)
    se = float(diff.std(ddof=1) / np.sqrt(diff.size))
    assert new_mean < old_mean - 3 * se, (new_mean, old_mean, se)
    assert new_mean < kl(np.full(4, 0.25)) / 2  # and far from the uniform fallback's cost


def test_the_correlated_tuning_set_repeats_one_latent_score_six_times():
    (data,) = load_sets(["correlated5"])
    assert data.task == "multiclass" and data.X.shape == (30_000, 8)
    shares = np.bincount(data.y) / data.y.size
    np.testing.assert_allclose(shares, [0.35, 0.25, 0.20, 0.12, 0.08], atol=0.01)
    corr = np.corrcoef(data.X.T)
    copies = corr[:6, :6][~np.eye(6, dtype=bool)]
    assert copies.min() > 0.7  # the same evidence six times: what summed terms double count
    assert np.abs(corr[6:, :6]).max() < 0.05  # the two noise features carry none


def test_the_independent_tuning_set_has_features_independent_given_the_class():
    (data, large) = load_sets(["independent5", "correlated5_large"])
    assert data.task == "multiclass" and data.X.shape == (53_940, 8)
    np.testing.assert_allclose(np.bincount(data.y) / data.y.size, [0.30, 0.25, 0.20, 0.15, 0.10], atol=0.01)
    for c in range(5):  # within a class the features share nothing: summed per-feature terms are right
        corr = np.corrcoef(data.X[data.y == c].T)
        assert np.abs(corr[~np.eye(8, dtype=bool)]).max() < 0.06
    means = [data.X[data.y == c].mean() for c in range(5)]
    np.testing.assert_allclose(np.diff(means), 0.25, atol=0.03)  # each feature's weak shift per class
    # correlated5's generator at the same size, so the two sets' K >= 3 pools are the same
    assert large.name == "correlated5_large" and large.X.shape == (53_940, 8)
