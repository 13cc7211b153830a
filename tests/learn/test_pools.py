"""The side pools' sizes: the median pool by what its questions need, capped by its fraction.

:func:`anonml.privacy.median.median_pool_size` is checked against its formula, the simulated
learner's pool (:func:`anonml.learn.simulation.planned_pools` and a fit) against it, and the
protocol's draft (:meth:`anonml.protocol.ProblemDraft.median_pool_size`) against the learner's.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from anonml.learn import simulation
from anonml.learn.model import AnonMLClassifier
from anonml.learn.settings import learner_settings
from anonml.learn.simulation import SimulationConfig, planned_pools, simulate_training
from anonml.model import FeatureKind, FeatureSpec
from anonml.plugins import PluginRef
from anonml.privacy import BinaryRandomizedResponse
from anonml.privacy.median import MEDIAN_ANSWER_SD, median_pool_size, median_question_answers
from anonml.protocol import MedianSettings, ProblemDraft, Schedule

NUMERIC = tuple(FeatureSpec(name=f"x{j}", low=0.0, high=100.0) for j in range(3))
SPECS = (*NUMERIC, FeatureSpec(name="c", kind=FeatureKind.CATEGORICAL, categories=("a", "b", "c")))


def _rr_factor(epsilon: float) -> float:
    """``(e^ε − 1)/(e^ε + 1)``, written out as the docstrings state it."""
    return (math.exp(epsilon) - 1.0) / (math.exp(epsilon) + 1.0)


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("answer_sd", [0.05, 0.1])
def test_a_question_gets_the_fewest_answers_whose_noise_is_within_the_target(epsilon, answer_sd):
    m = median_question_answers(epsilon, answer_sd)
    assert m == math.ceil(0.25 / (_rr_factor(epsilon) * answer_sd) ** 2)
    rr = BinaryRandomizedResponse(epsilon)
    # The debiased share of m answers is within the target, of m − 1 answers it is not.
    assert rr.max_standard_error(m) <= answer_sd + 1e-12
    assert rr.max_standard_error(m - 1) > answer_sd


def test_question_answers_at_stated_points():
    # ε = 1, sd 0.05: 0.25/(0.46212·0.05)² = 468.26 → 469; ε = 4: 0.25/(0.96403·0.05)² = 107.6 → 108.
    assert median_question_answers(1.0, 0.05) == 469
    assert median_question_answers(4.0, 0.05) == 108
    assert median_question_answers(40.0, 0.05) == 100  # c → 1: 0.25/0.05² exactly, no overflow
    with pytest.raises(ValueError, match="epsilon > 0 and answer_sd > 0"):
        median_question_answers(0.0, 0.05)
    with pytest.raises(ValueError, match="epsilon > 0 and answer_sd > 0"):
        median_question_answers(1.0, -0.1)


def test_median_pool_for_a_thousand_and_a_hundred_thousand_peers():
    questions = 3 * (3 - 1) * 3  # three numeric features, three bins, three steps per search
    need = questions * median_question_answers(1.0, 0.05)  # 18 · 469 = 8442
    assert need == 8442
    # 1,000 peers: the need is out of reach, the fraction caps the pool (150 of 1,000).
    assert median_pool_size(150, 1.0, questions, 0.05) == 150
    # 100,000 peers: the cap (15,000) is more than the questions need; the rest report.
    assert median_pool_size(15_000, 1.0, questions, 0.05) == need
    # No precision target: the cap alone (the old rule).
    assert median_pool_size(15_000, 1.0, questions, None) == 15_000
    assert median_pool_size(15_000, 1.0, 0, 0.05) == 0  # no question, no pool
    with pytest.raises(ValueError, match="cap >= 0"):
        median_pool_size(-1, 1.0, questions, 0.05)


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
def test_the_learners_median_pool_is_monotone_capped_and_enough_for_every_question(epsilon):
    config = SimulationConfig(epsilon=epsilon, n_partitions=4, n_bins=3, median_fraction=0.15)
    questions = len(NUMERIC) * (3 - 1) * config.median_steps
    per_question = median_question_answers(epsilon, MEDIAN_ANSWER_SD)
    previous = 0
    for n in [200, 1_000, 5_000, 20_000, 50_000, 100_000, 300_000, 1_000_000]:
        pool = planned_pools(config, n, SPECS)  # the sizes the fit will use
        _, size = simulation._bins_and_pool(SPECS, config, n, n)
        cap = round(0.15 * n)
        assert size <= cap
        assert size == min(cap, questions * per_question)
        # Below the cap, every question gets at least the answers it was sized for.
        assert size == cap or size // questions >= per_question
        assert size >= previous
        previous = size
        assert pool  # planned_pools reads the same sizes (it would fail on an impossible plan)
    # A large enough roster stops growing the pool: the rest goes to the reports.
    assert previous == questions * per_question < round(0.15 * 1_000_000)


def test_auto_bins_size_the_questions_by_the_most_bins_the_pool_allows():
    # With "auto" bins the questions are counted at the bins of a pool-less roster, an upper bound.
    config = SimulationConfig(epsilon=2.0, n_partitions=4, median_fraction=0.15)
    n = 400_000
    n_bins, size = simulation._bins_and_pool(SPECS, config, n, n)
    most = simulation.auto_n_bins(2.0, n // 4)
    assert n_bins <= most
    questions = len(NUMERIC) * (most - 1) * 3
    assert size == min(round(0.15 * n), questions * median_question_answers(2.0, MEDIAN_ANSWER_SD))
    assert size < round(0.15 * n)  # the need, not the cap: the case this test is about


def _draft(n_bins: int, epsilon: float) -> ProblemDraft:
    return ProblemDraft(
        title="pool sizes",
        instancer=PluginRef(name="user_window"),
        featurizer=PluginRef(name="mooc_engagement"),
        features=NUMERIC,
        epsilon=epsilon,
        kp=2,
        bins=n_bins,
        median=MedianSettings(pool_fraction=0.2, steps=4),
        schedule=Schedule(registration_deadline=datetime.now(UTC) + timedelta(seconds=60)),
    )


@pytest.mark.parametrize("n", [40, 1_000, 100_000, 1_000_000])
def test_the_protocols_median_pool_is_the_learners(n):
    # A roster of n peers: the draft's pool (what the aggregator publishes and peers check) is the
    # simulated learner's for the same settings (n a multiple of 5: floor and round of 0.2·n agree).
    draft = _draft(4, 1.0)
    settings = learner_settings(draft)
    config = SimulationConfig(
        epsilon=settings["epsilon"],
        n_partitions=settings["n_partitions"],
        n_bins=settings["n_bins"],
        median_fraction=settings["median_fraction"],
        median_steps=settings["median_steps"],
    )
    _, simulated = simulation._bins_and_pool(NUMERIC, config, n, n)
    assert draft.median_pool_size(n) == simulated
    need = 3 * 3 * 4 * median_question_answers(1.0, MEDIAN_ANSWER_SD)
    assert draft.median_pool_size(n) == min(n // 5, need)


def test_a_large_roster_gives_the_reports_what_the_median_questions_do_not_need(monkeypatch):
    rng = np.random.default_rng(11)
    n = 100_000
    X = np.column_stack([rng.normal(50, 15, (n, 3)).clip(0, 100), rng.integers(0, 3, n)])
    y = (X[:, 0] + rng.normal(0, 15, n) > 55).astype(np.int64)
    config = SimulationConfig(epsilon=4.0, n_partitions=4, n_bins=3, median_fraction=0.15)
    per_question = median_question_answers(4.0, MEDIAN_ANSWER_SD)
    need = 3 * 2 * 3 * per_question  # 18 · 299 = 5382 at sd 0.03, below the cap of 15,000
    assert need < 15_000
    sized = simulate_training(X, y, SPECS, config, np.random.default_rng(5))
    monkeypatch.setattr(simulation, "MEDIAN_ANSWER_SD", None)  # the fraction alone
    fixed = simulate_training(X, y, SPECS, config, np.random.default_rng(5))
    assert sized.plan.median_pool_size == need and fixed.plan.median_pool_size == 15_000
    assert sized.accounting.report_peers == n - need > fixed.accounting.report_peers == n - 15_000
    # Every question the sized pool's searches asked had at least the answers it was sized for.
    asked = [s.n for edges in sized.median_estimates.values() for e in edges.estimates for s in e.steps]
    assert asked and min(asked) >= per_question


def test_a_classifier_on_a_large_roster_reports_with_the_freed_peers():
    rng = np.random.default_rng(12)
    n = 60_000
    X = np.column_stack([rng.normal(50, 15, (n, 3)).clip(0, 100), rng.integers(0, 3, n)])
    y = (X[:, 0] + rng.normal(0, 15, n) > 55).astype(np.int64)
    model = AnonMLClassifier(
        epsilon=4.0, n_bins=3, features=list(SPECS), calibration_fraction=0.0, random_state=0
    ).fit(X, y)
    need = 3 * 2 * 3 * median_question_answers(4.0, MEDIAN_ANSWER_SD)  # 5382 of a 9,000 cap
    assert need < round(0.15 * n)
    assert model.privacy_.report_peers == n - need
    assert model.privacy_.median_peers <= need


def test_the_default_answer_sd_is_the_stated_one():
    # The docstrings (model, protocol draft, docs/protocol.md) state 0.03; ε = 4 needs 299 answers.
    assert MEDIAN_ANSWER_SD == 0.03
    assert median_question_answers(4.0, MEDIAN_ANSWER_SD) == 299


@pytest.mark.slow
def test_the_adult_pool_sweep_pairs_its_variants_and_sizes_their_pools(adult_dir):
    from anonml.datasets import adult
    from benchmarks.adult import pools

    data = adult.load(adult_dir)
    with pytest.raises(ValueError, match="unknown pool variants"):
        pools(data, [2.0], 2, 0, ["cal1500_median_fraction", "magic"])
    names = ["cal1500_median_fraction", "nocal_median_fraction", "cal1500_median_sd0.1"]
    rows = pools(data, [2.0], 2, 0, names)
    reference, no_calibration, sized = rows
    n = data.X_train.shape[0]
    # The reference is paired with itself; the pools are the rules' (ε 2: ⌈1500/tanh(1)²⌉ = 2,587
    # calibration peers, the median pool its 15 % cap; sd 0.1: 5 numeric × 4 edges × 3 steps × 44).
    assert reference["auc_diff"] == reference["brier_diff"] == 0.0
    assert reference["calibration_peers"] == simulation.calibration_pool_size(0.2, n, 2.0) > 0
    assert reference["median_pool"] == round(0.15 * n)
    assert no_calibration["calibration_peers"] == 0
    assert sized["median_pool"] == 5 * 4 * 3 * median_question_answers(2.0, 0.1) < reference["median_pool"]
    # The sweep restores the module's rules.
    assert simulation.MEDIAN_ANSWER_SD == MEDIAN_ANSWER_SD
