"""Ensembles: paper mode is eq. 6.2; default mode recovers a known Bayes-optimal answer."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logit
from sklearn.metrics import roc_auc_score

from anonml.learn import ensemble
from anonml.learn.histograms import SubsetHistogram, exact_histogram

# A naive-Bayes world: y ~ Bernoulli(0.3); x0 ∈ {0,1,2} and x1 ∈ {0,1} independent given y.
PRIOR = 0.3
P_X0 = {0: np.array([0.6, 0.3, 0.1]), 1: np.array([0.2, 0.35, 0.45])}
P_X1 = {0: np.array([0.7, 0.3]), 1: np.array([0.4, 0.6])}


def _sample(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    y = (rng.random(n) < PRIOR).astype(np.int64)
    x0 = np.where(y == 1, rng.choice(3, n, p=P_X0[1]), rng.choice(3, n, p=P_X0[0]))
    x1 = np.where(y == 1, rng.choice(2, n, p=P_X1[1]), rng.choice(2, n, p=P_X1[0]))
    return np.column_stack([x0, x1]), y


def _bayes_log_odds(codes: np.ndarray) -> np.ndarray:
    return (
        logit(PRIOR)
        + np.log(P_X0[1][codes[:, 0]] / P_X0[0][codes[:, 0]])
        + np.log(P_X1[1][codes[:, 1]] / P_X1[0][codes[:, 1]])
    )


def test_eq_6_2_on_a_hand_built_ensemble():
    # Three classifiers over features 0 (3 bins), 1 (2 bins) and (0, 1); hand-set votes and scores.
    votes = [np.array([1, -1, 1]), np.array([-1, 1]), np.array([1, 1, -1, -1, 1, -1])]
    scores = [0.5, 0.2, 0.3]
    ens = ensemble.vote_ensemble([(0,), (1,), (0, 1)], [(3,), (2,), (3, 2)], votes, scores)
    codes = np.array([[0, 0], [1, 1], [2, 1], [2, 0]])
    expected = []
    for a, b in codes:
        h = [votes[0][a], votes[1][b], votes[2][a * 2 + b]]
        expected.append(sum(s * v for s, v in zip(scores, h, strict=True)) / sum(scores))
    assert np.allclose(ens.decision_function(codes), expected)
    # f = 0.5*1 + 0.2*(-1) + 0.3*1 = 0.6 for the first row, by hand:
    assert ens.decision_function(codes)[0] == pytest.approx(0.6)
    assert np.allclose(ens.positive_proba(codes), (1 + np.asarray(expected)) / 2)


def test_vote_ensemble_refuses_bad_votes_and_scores():
    with pytest.raises(ValueError, match="must be ±1"):
        ensemble.vote_ensemble([(0,)], [(2,)], [np.array([1, 0])], [1.0])
    with pytest.raises(ValueError, match="non-negative"):
        ensemble.vote_ensemble([(0,)], [(2,)], [np.array([1, -1])], [-0.1])
    with pytest.raises(ValueError, match="every classifier scored 0"):
        ensemble.vote_ensemble([(0,)], [(2,)], [np.array([1, -1])], [0.0])


def test_default_mode_recovers_the_bayes_posterior_from_exact_counts():
    rng = np.random.default_rng(1)
    codes, y = _sample(200_000, rng)
    hists = [exact_histogram(codes[:, [j]], y, [j], [b]) for j, b in ((0, 3), (1, 2))]
    ens = ensemble.default_ensemble(hists, combine="logit")
    grid = np.array([[a, b] for a in range(3) for b in range(2)])
    got = ens.decision_function(grid)
    want = _bayes_log_odds(grid)
    # Sampling error of each estimated log ratio: SE ≈ sqrt(1/c1 + 1/c0) per table cell, plus the
    # prior's sqrt(1/N1 + 1/N0) (pseudo-count 0.5 is negligible at these counts). Allow 4 SE.
    counts = [h.flat_counts() for h in hists]
    n1, n0 = y.sum(), (1 - y).sum()
    se = (
        np.sqrt(1 / counts[0][grid[:, 0], 1] + 1 / counts[0][grid[:, 0], 0])
        + np.sqrt(1 / counts[1][grid[:, 1], 1] + 1 / counts[1][grid[:, 1], 0])
        + 3 * np.sqrt(1 / n1 + 1 / n0)
    )
    assert np.all(np.abs(got - want) <= 4 * se)
    assert ens.kind == "logit" and ens.intercept == pytest.approx(logit(y.mean()))


def test_linear_combination_is_the_tangent_of_naive_bayes():
    rng = np.random.default_rng(2)
    codes, y = _sample(20_000, rng)
    h = exact_histogram(codes[:, [0]], y, [0], [3])
    ens = ensemble.default_ensemble([h], combine="linear", smoothing=0.0)
    pi = y.mean()
    post = ensemble.cell_posteriors(h, pi, 0.0)
    assert np.allclose(ens.components[0].table, (post - pi) / (pi * (1 - pi)))
    # Pseudo-count floor 0.5: P̂ = (c1 + 0.5π)/(c0 + c1 + 0.5).
    c = h.flat_counts()
    assert np.allclose(post, (c[:, 1] + 0.5 * pi) / (c.sum(axis=1) + 0.5))


def test_smoothing_pulls_noisy_cells_towards_the_prior():
    counts = np.array([[10.0, 0.0], [100.0, 100.0]])
    h = SubsetHistogram((0,), (2,), counts, np.full((2, 2), 400.0), 210)  # sd 20 per count
    pi = 0.5
    loose, tight = ensemble.cell_posteriors(h, pi, 0.0), ensemble.cell_posteriors(h, pi, 2.0)
    assert abs(tight[0] - pi) < abs(loose[0] - pi)  # the small cell moves most
    assert tight[0] == pytest.approx((0 + 40 * 0.5) / (10 + 40))


def test_features_in_several_subsets_share_their_weight():
    rng = np.random.default_rng(3)
    codes, y = _sample(5000, rng)
    hists = [
        exact_histogram(codes[:, [0, 1]], y, [0, 1], [3, 2]),
        exact_histogram(codes[:, [0]], y, [0], [3]),
    ]
    ens = ensemble.default_ensemble(hists)
    # Feature 0 is in both subsets (coverage 2), feature 1 in one: weights mean(1/2, 1) and 1/2.
    assert [c.weight for c in ens.components] == [pytest.approx(0.75), pytest.approx(0.5)]


def test_default_mode_is_near_bayes_optimal_auc():
    rng = np.random.default_rng(4)
    train, y = _sample(50_000, rng)
    test, y_test = _sample(20_000, rng)
    hists = [exact_histogram(train[:, [j]], y, [j], [b]) for j, b in ((0, 3), (1, 2))]
    bayes = roc_auc_score(y_test, _bayes_log_odds(test))
    for combine in ("logit", "linear"):
        auc = roc_auc_score(y_test, ensemble.default_ensemble(hists, combine=combine).decision_function(test))
        # Same ranking of the 6 cells as the Bayes rule gives the same AUC; the tolerance only
        # covers ties/near-ties of adjacent cells (AUC SE on 20,000 rows is ~0.004).
        assert auc >= bayes - 0.005


def test_paper_mode_votes_with_the_balanced_majority_and_weights_by_score():
    rng = np.random.default_rng(6)
    codes, y = _sample(30_000, rng)
    hists = [exact_histogram(codes[:, [j]], y, [j], [b]) for j, b in ((0, 3), (1, 2))]
    ens = ensemble.paper_ensemble(hists, [15_000, 15_000], rng=np.random.default_rng(0))
    assert ens.kind == "vote"
    # A balanced-class-weight tree on one feature votes 1 where P(x|y=1) > P(x|y=0).
    assert ens.components[0].table.tolist() == [-1.0, 1.0, 1.0]
    assert ens.components[1].table.tolist() == [-1.0, 1.0]
    weights = [c.weight for c in ens.components]
    assert sum(weights) == pytest.approx(1.0) and all(0 < w < 1 for w in weights)


def test_ensemble_dict_round_trip():
    comp = ensemble.Component((0, 2), (2, 3), np.arange(6, dtype=float) / 7, 0.25)
    ens = ensemble.Ensemble("logit", -1.25, (comp,))
    again = ensemble.Ensemble.from_dict(ens.to_dict())
    assert again.to_dict() == ens.to_dict()
    codes = np.array([[1, 0, 2], [0, 5, 1]])
    assert np.array_equal(again.decision_function(codes), ens.decision_function(codes))


def test_paper_mode_with_logistic_partitions_and_auc_scores():
    rng = np.random.default_rng(7)
    codes, y = _sample(20_000, rng)
    hists = [exact_histogram(codes, y, [0, 1], [3, 2])]
    ens = ensemble.paper_ensemble(
        hists,
        [20_000],
        classifier="logistic",
        scoring="roc_auc",
        class_weight=None,
        rng=np.random.default_rng(1),
    )
    # One classifier: eq. 6.2 reduces to its own vote, weight 1.
    assert len(ens.components) == 1 and ens.components[0].weight == pytest.approx(1.0)
    # Without class weights a logistic model votes 1 only where P(y=1|x) > 1/2, i.e. where
    # the Bayes log-odds are positive; cell (1, 1) sits at log-odds 0.000 (a tie) and is skipped.
    grid = np.array([[a, b] for a in range(3) for b in range(2)])
    clear = np.abs(_bayes_log_odds(grid)) > 0.05
    assert np.array_equal((ens.components[0].table > 0)[clear], (_bayes_log_odds(grid) > 0)[clear])
    with pytest.raises(ValueError, match="unknown partition classifier"):
        ensemble.paper_ensemble(hists, [100], classifier="svm")  # type: ignore[arg-type]


def _population_lda_weight(p_x: dict[int, np.ndarray]) -> float:
    """Fisher's diagonal-LDA coefficient of the log-likelihood-ratio term of one feature, exactly."""
    t = np.log(p_x[1] / p_x[0])
    mean = [p_x[y] @ t for y in (0, 1)]
    var = [p_x[y] @ t**2 - mean[y] ** 2 for y in (0, 1)]
    return (mean[1] - mean[0]) / (PRIOR * var[1] + (1 - PRIOR) * var[0])


def test_discriminant_weights_follow_the_formula_on_a_hand_built_histogram():
    # Cells (v, y): counts ĉ_v0, ĉ_v1; a negative (noisy) count is clipped to 0 first.
    counts = np.array([[50.0, 10.0], [30.0, 30.0], [20.0, -5.0]])
    h = SubsetHistogram((0,), (3,), counts, np.zeros((3, 2)), 135)
    flat = SubsetHistogram((1,), (2,), np.array([[40.0, 20.0], [60.0, 30.0]]), np.zeros((2, 2)), 150)
    table = np.array([-1.0, 0.5, 2.0])
    pi = 0.25
    got = ensemble.discriminant_weights([h, flat], [table, np.array([0.3, 0.3])], pi)
    # By hand: P(v|0) = (.5, .3, .2), P(v|1) = (.25, .75, 0); μ0 = -.5+.15+.4 = .05, μ1 = -.25+.375 = .125;
    # E0[t²] = .5+.075+.8 = 1.375, E1[t²] = .25+.1875 = .4375; σ0² = 1.3725, σ1² = .421875.
    w = (0.125 - 0.05) / (0.25 * 0.421875 + 0.75 * 1.3725)
    # The flat table has no within-class variance: weight 0; the rest rescaled to mean 1.
    assert got == pytest.approx([w / (w / 2), 0.0])
    assert got == pytest.approx([2.0, 0.0])
    # A term that ranks the classes the wrong way gets 0 too; all zero falls back to equal weights.
    assert ensemble.discriminant_weights([h], [-table], pi) == pytest.approx([1.0])
    with pytest.raises(ValueError, match="binary histogram and one value per cell"):
        ensemble.discriminant_weights([h], [np.zeros(2)], pi)


def test_discriminant_weights_estimate_the_population_coefficients():
    # Exact histograms of n rows from the naive-Bayes world, logit terms: the ratio of the two
    # features' weights estimates the ratio of their population LDA coefficients.
    want = _population_lda_weight(P_X0) / _population_lda_weight(P_X1)
    ratios = []
    for seed in range(20):
        codes, y = _sample(20_000, np.random.default_rng(100 + seed))
        hists = [exact_histogram(codes[:, [j]], y, [j], [b]) for j, b in ((0, 3), (1, 2))]
        ens = ensemble.default_ensemble(hists, combine="logit", smoothing=0.0, weighting="lda")
        equal = ensemble.default_ensemble(hists, combine="logit", smoothing=0.0)
        pairs = list(zip(ens.components, equal.components, strict=True))
        factors = [a.weight / b.weight for a, b in pairs]
        assert np.mean(factors) == pytest.approx(1.0)  # rescaled to mean 1
        assert all(np.allclose(a.table, b.table) for a, b in pairs)  # only the weights change
        ratios.append(factors[0] / factors[1])
    se = np.std(ratios, ddof=1) / np.sqrt(len(ratios))
    assert abs(np.mean(ratios) - want) <= 4 * se + 0.005 * want  # 0.5 %: clipping and sampling bias
    assert want != pytest.approx(1.0, abs=0.05)  # the weights are not the equal ones in this world


def test_discriminant_weighting_is_binary_only_and_named():
    rng = np.random.default_rng(5)
    codes, y = _sample(2000, rng)
    y3 = np.where(rng.random(y.size) < 0.3, 2, y)
    hists = [exact_histogram(codes[:, [0]], y3, [0], [3], n_classes=3)]
    with pytest.raises(ValueError, match="defined for two classes"):
        ensemble.default_ensemble(hists, weighting="lda")
    with pytest.raises(ValueError, match="unknown weighting"):
        ensemble.default_ensemble(hists, weighting="inverse")  # type: ignore[arg-type]


def test_noisy_discriminant_weights_are_pulled_toward_equal_by_the_shrinkage_factor():
    rng = np.random.default_rng(7)
    codes, y = _sample(3000, rng)
    hists = []
    for j, b in ((0, 3), (1, 2)):
        exact = exact_histogram(codes[:, [j]], y, [j], [b])
        # Gaussian count noise of sd 30 per cell, stated in the variance: λ < 1.
        noisy = exact.counts + rng.normal(0.0, 30.0, exact.counts.shape)
        hists.append(SubsetHistogram((j,), (b,), noisy, np.full(exact.counts.shape, 900.0), exact.n, noisy))
    trust = ensemble.shrinkage_factor(hists)
    assert 0.0 < trust < 1.0
    lda = ensemble.default_ensemble(hists, weighting="lda")
    equal = ensemble.default_ensemble(hists)
    prior = 1.0 / (1.0 + np.exp(-equal.intercept))
    raw = ensemble.discriminant_weights(hists, [c.table for c in equal.components], prior)
    got = [a.weight / b.weight for a, b in zip(lda.components, equal.components, strict=True)]
    assert got == pytest.approx(1.0 + trust * (raw - 1.0))
