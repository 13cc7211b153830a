"""The simulated peer pipeline: private bins from a separate pool, unbiased reports, the ledger."""

from __future__ import annotations

import numpy as np
import pytest

from anonml.learn.binning import Binning
from anonml.learn.histograms import exact_histogram, pool_histograms
from anonml.learn.partition import make_plan
from anonml.learn.simulation import (
    SimulationConfig,
    private_binning,
    simulate_reports,
    simulate_training,
    simulated_peer_keys,
)
from anonml.model import FeatureKind, FeatureSpec

SPECS = (
    FeatureSpec(name="score", low=0.0, high=100.0),
    FeatureSpec(name="group", kind=FeatureKind.CATEGORICAL, categories=("a", "b", "c")),
)


def test_private_median_lands_within_the_search_resolution():
    rng = np.random.default_rng(0)
    pool = np.column_stack([rng.normal(40.0, 10.0, 5000), rng.integers(0, 3, 5000)])
    binning, answered, estimates = private_binning(pool, SPECS, 2, epsilon=2.0, n_steps=5, rng=rng)
    (t,) = binning.features[0].thresholds
    # Five halvings of [0, 100] leave a bracket of 100/32 ≈ 3.1; an early stop is within the
    # rank margin (~0.03 at 1000 answers per step, ≈ 0.8 in value at the median's density 0.04).
    assert abs(t - 40.0) <= 100 / 2**5 + 1.0
    steps = estimates[0].estimates[0].steps
    assert answered == sum(s.n for s in steps) <= 5000  # one answer per peer at most
    assert binning.n_bins == (2, 3)


def test_quantile_bins_split_the_pool_across_features_and_quantiles():
    rng = np.random.default_rng(1)
    specs = (SPECS[0], FeatureSpec(name="other", low=0.0, high=1.0))
    pool = np.column_stack([rng.uniform(0, 100, 6000), rng.uniform(0, 1, 6000)])
    binning, answered, _ = private_binning(pool, specs, 4, epsilon=4.0, n_steps=4, rng=rng)
    cuts = binning.features[0].thresholds
    # Quartiles of U(0, 100) are 25, 50, 75; four halvings of [0, 100] resolve 6.25.
    assert len(cuts) == 3 and np.allclose(cuts, [25, 50, 75], atol=6.25 + 1.0)
    assert answered <= 6000


def test_without_pool_peers_the_cuts_stay_at_the_starting_points():
    binning, answered, _ = private_binning(
        np.empty((0, 2)), SPECS, 3, epsilon=1.0, rng=np.random.default_rng(0)
    )
    assert binning.features[0].thresholds == pytest.approx((100 / 3, 200 / 3))
    assert answered == 0


def test_simulated_reports_estimate_the_true_histograms_without_bias():
    rng = np.random.default_rng(2)
    n = 12_000
    codes = np.column_stack([rng.integers(0, 2, n), rng.integers(0, 3, n)])
    y = (rng.random(n) < 0.4).astype(np.int64)
    plan = make_plan(rng.bytes(32), simulated_peer_keys(n), 2, n_partitions=4, subsets=[[0], [1]])
    hists, sizes, mechs = simulate_reports(codes, y, plan, (2, 3), epsilon=1.0, consistency=None, rng=rng)
    assert sizes == (3000,) * 4 and len(mechs) == 4
    for pooled in pool_histograms(hists):
        members = np.concatenate([plan.members(p) for p in range(4) if plan.subsets[p][0] == pooled.features])
        truth = exact_histogram(
            codes[members][:, list(pooled.features)], y[members], pooled.features, pooled.shape
        )
        # Raw estimates are unbiased; each cell within 4 predicted sd of the truth.
        assert np.all(np.abs(pooled.counts - truth.counts) <= 4 * np.sqrt(pooled.variance))


def test_training_run_spends_exactly_epsilon_per_peer():
    rng = np.random.default_rng(3)
    n = 4000
    X = np.column_stack([rng.normal(50, 15, n).clip(0, 100), rng.integers(0, 3, n)])
    y = (rng.random(n) < 0.3).astype(np.int64)
    cfg = SimulationConfig(epsilon=1.5, n_partitions=2, n_subsets=2, subset_size=1, median_fraction=0.1)
    result = simulate_training(X, y, SPECS, cfg, rng)
    assert result.accounting.epsilon_total == pytest.approx(1.5)
    assert result.accounting.report_epsilon == pytest.approx(0.75)
    assert result.plan.median_pool_size == 400 and result.accounting.report_peers == 3600
    assert len(result.histograms) == 4 and all(h.n == 1800 for h in result.histograms)
    # The same seed replays the same run (reports are drawn from the injected generator).
    again = simulate_training(X, y, SPECS, cfg, np.random.default_rng(3))
    first = simulate_training(X, y, SPECS, cfg, np.random.default_rng(3))
    assert all(
        np.array_equal(a.counts, b.counts) for a, b in zip(again.histograms, first.histograms, strict=True)
    )


def test_a_given_plan_and_bins_replace_the_drawn_ones():
    # What a protocol run's comparison needs: the roster's own plan and the published bins, with
    # only the reports' perturbation drawn.
    rng = np.random.default_rng(4)
    n = 2000
    X = np.column_stack([rng.normal(50, 15, n).clip(0, 100), rng.integers(0, 3, n)])
    y = (rng.random(n) < 0.3).astype(np.int64)
    cfg = SimulationConfig(epsilon=1.5, n_partitions=2, median_fraction=0.1)
    plan = make_plan(bytes(32), simulated_peer_keys(n), 2, n_partitions=2, median_pool_size=200)
    bins = Binning.from_thresholds(SPECS, {0: (12.5,)})
    result = simulate_training(X, y, SPECS, cfg, rng, plan=plan, binning=bins)
    assert result.plan is plan and result.binning is bins
    assert result.accounting.report_peers == 1800  # the given pool still sends no report
    assert [h.n for h in result.histograms] == plan.partition_sizes()
    # With the cut at 12.5, 99 % of N(50, 15) lies above it (a drawn median cut would split ~50/50);
    # the estimate's noise at ε = 1.5 over ~900 reports is a few percent of them.
    for h in result.histograms:
        if h.features == (0,):
            assert h.counts[1].sum() > 0.8 * h.n, h.counts
    with pytest.raises(ValueError, match="every one of the 1999 rows"):
        simulate_training(X[:-1], y[:-1], SPECS, cfg, rng, plan=plan)
    with pytest.raises(ValueError, match="given bins are for features"):
        simulate_training(X, y, SPECS, cfg, rng, binning=Binning.from_thresholds(SPECS[:1], {}))


def test_the_pilot_keeps_informative_features_and_drops_pure_noise():
    from anonml.learn.simulation import select_features

    rng = np.random.default_rng(11)
    n = 30_000
    y = (rng.random(n) < 0.4).astype(np.int64)
    signal = np.where(rng.random(n) < np.where(y == 1, 0.8, 0.3), 1, 0)
    noise = rng.integers(0, 2, size=(n, 3))
    X = np.column_stack([noise[:, 0], signal, noise[:, 1], noise[:, 2]]).astype(float)
    specs = [FeatureSpec(name=f"f{j}", kind=FeatureKind.CATEGORICAL, categories=("a", "b")) for j in range(4)]
    config = SimulationConfig(epsilon=2.0, n_partitions=4, pilot_fraction=0.3)
    result = simulate_training(X, y, specs, config, np.random.default_rng(0))
    assert result.selected_features == (1,)
    # Every report peer still reports once: the pilot and the main round cover the report pool.
    assert sum(result.sizes) == result.accounting.report_peers == n
    assert result.accounting.epsilon_total == pytest.approx(2.0)
    # Only the kept feature gets the second round: its reports outnumber any dropped one's.
    by_feature: dict[tuple[int, ...], int] = {}
    for h in result.histograms:
        by_feature[h.features] = by_feature.get(h.features, 0) + h.n
    assert by_feature[(1,)] > 3 * by_feature[(0,)]
    assert select_features(result.histograms[:4]) == (1,)


def _weak_features(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, list[FeatureSpec]]:
    """Eight binary features, each a little more often 1 for positives: signal spread thin."""
    y = (rng.random(n) < 0.5).astype(np.int64)
    X = (rng.random((n, 8)) < np.where(y[:, None] == 1, 0.58, 0.42)).astype(float)
    specs = [FeatureSpec(name=f"w{j}", kind=FeatureKind.CATEGORICAL, categories=("a", "b")) for j in range(8)]
    return X, y, specs


def test_the_pilot_keeps_every_feature_when_dropping_some_would_lose_signal():
    from anonml.learn.simulation import select_features, selection_pays

    X, y, specs = _weak_features(6000, np.random.default_rng(12))
    config = SimulationConfig(epsilon=1.0, n_partitions=8, pilot_fraction=0.3)
    result = simulate_training(X, y, specs, config, np.random.default_rng(1))
    pilot = result.histograms[:8]
    # The pilot's noise hides most of the weak features from select_features …
    chosen = select_features(pilot)
    assert len(chosen) < 8
    # … but their measured signal energy is too large a share to drop, so all are kept.
    assert not selection_pays(pilot, chosen)
    assert result.selected_features == tuple(range(8))
    assert sum(result.sizes) == result.accounting.report_peers


def test_the_guarded_pilot_does_not_cost_auc():
    from sklearn.metrics import roc_auc_score

    from anonml.learn.model import AnonMLClassifier

    gaps = []
    for seed in range(5):
        rng = np.random.default_rng(100 + seed)
        X, y, specs = _weak_features(8000, rng)
        X_test, y_test, _ = _weak_features(4000, rng)
        aucs = [
            roc_auc_score(
                y_test,
                AnonMLClassifier(epsilon=1.0, features=specs, pilot_fraction=pilot, random_state=seed)
                .fit(X, y)
                .predict_proba(X_test)[:, 1],
            )
            for pilot in (0.0, 0.4)
        ]
        gaps.append(aucs[1] - aucs[0])
    gaps_arr = np.asarray(gaps)
    se = gaps_arr.std(ddof=1) / np.sqrt(gaps_arr.size)
    assert gaps_arr.mean() > -(3 * se + 0.005), gaps


def test_selection_pays_needs_positive_signal_and_a_small_dropped_share():
    from anonml.learn.simulation import selection_pays

    rng = np.random.default_rng(13)
    n = 4000
    y = (rng.random(n) < 0.5).astype(np.int64)
    strong = np.where(rng.random(n) < np.where(y == 1, 0.9, 0.1), 1, 0)
    codes = np.column_stack([strong, rng.integers(0, 2, n)])
    hists = [exact_histogram(codes[:, [j]], y, (j,), (2,)) for j in range(2)]
    assert selection_pays(hists, [0])  # the dropped feature is noise: ~0 of the energy
    assert not selection_pays(hists, [1])  # dropping the strong one loses nearly all of it
