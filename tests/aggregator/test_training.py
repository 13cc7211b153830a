"""From stored reports to the model: grouping, debiasing, training (no server needed)."""

from __future__ import annotations

import dataclasses
import json
from typing import get_args

import numpy as np
import pytest

from aggregator.training import binning_of, group_reports, train_problem
from anonml.crypto import Identity
from anonml.errors import ProtocolError
from anonml.learn import estimate_histogram, make_plan, simulated_learner
from anonml.privacy import RandomizedResponse, estimate_counts
from anonml.protocol import Bins, Problem, ProblemDraft, Roster, pack_bits
from tests.aggregator.helpers import (
    bins_document,
    draft,
    roster_document,
    signed_problem,
    unsigned_roster_entries,
)


def _problem(kp: int, mode: str = "default") -> tuple[Problem, Roster, Bins]:
    aggregator = Identity.generate()
    seed = bytes(range(32))
    d = draft(n_numeric=2, kp=kp, kh=1, epsilon=2.0).model_copy(update={"mode": mode})
    problem = signed_problem(d, aggregator, pid="p-train", seed=seed)
    peers = [Identity.generate() for _ in range(kp * 2)]
    entries = unsigned_roster_entries(peers, 1)  # training reads no signature
    roster = roster_document("p-train", entries, seed=seed)
    bins = bins_document("p-train", ((5.0,), (5.0,), ()))
    return problem, roster, bins


def test_group_reports_sums_bits_per_partition_subset_and_mechanism():
    mech = RandomizedResponse.from_epsilon(2.0, 4).descriptor().model_dump_json()
    other = RandomizedResponse.from_epsilon(1.0, 4).descriptor().model_dump_json()
    rows = [
        (0, 0, mech, pack_bits(np.array([1, 0, 0, 1]))),
        (0, 0, mech, pack_bits(np.array([1, 1, 0, 0]))),
        (1, 0, mech, pack_bits(np.array([0, 0, 1, 0]))),
        (0, 0, other, pack_bits(np.array([0, 0, 0, 1]))),
    ]
    groups = group_reports(rows)
    assert sorted((g.partition, g.subset, g.n) for g in groups) == [(0, 0, 1), (0, 0, 2), (1, 0, 1)]
    first = next(g for g in groups if g.n == 2)
    assert first.bit_sums.tolist() == [2, 1, 0, 1]


def _signal_reports(
    kp: int, rng: np.random.Generator
) -> tuple[list[tuple[int, int, str, bytes]], dict[int, np.ndarray]]:
    """Every partition reports one feature with the label; feature value above the cut ⇔ label 1 w.p. 0.9.

    Returns the ``(partition, subset, mechanism JSON, packed bits)`` rows and each partition's true counts.
    """
    mech = RandomizedResponse.from_epsilon(2.0, 4)
    rows, truth = [], {}
    for p in range(kp):
        n = 3000
        high = rng.random(n) < 0.5
        label = np.where(rng.random(n) < 0.9, high, ~high).astype(int)
        values = high.astype(int) * 2 + label  # C order: (bin, label)
        truth[p] = np.bincount(values, minlength=4)
        for b in mech.perturb(values, rng):
            rows.append((p, 0, mech.descriptor().model_dump_json(), pack_bits(b)))
    return rows, truth


def test_trained_model_follows_the_reported_signal_and_uses_the_published_bins():
    problem, roster, bins = _problem(kp=3)
    plan = make_plan(bytes(roster.seed), [bytes(e.identity) for e in roster.entries], 3, n_partitions=3)
    rng = np.random.default_rng(0)
    rows, truth = _signal_reports(3, rng)
    groups = group_reports(rows)
    for g in groups:
        est = estimate_counts(g.bit_sums, g.mechanism, g.n)
        # Unbiased estimate: within 4 predicted standard deviations of the true counts.
        assert np.all(np.abs(est.raw - truth[g.partition]) <= 4 * np.sqrt(est.variance) + 1)
    model, metrics = train_problem(problem, roster, bins, plan, rows, median_answered=0, rng=rng)
    assert metrics["reports"] == 9000 and metrics["histograms"] == 3
    assert model.binning_.to_dict() == binning_of(problem, bins).to_dict()
    X = np.array([[9.0, 9.0, 1.0], [1.0, 1.0, 0.0]])
    p_high, p_low = model.predict_proba(X)[:, 1]
    assert p_high > 0.7 > 0.3 > p_low


@pytest.mark.parametrize("mode", get_args(ProblemDraft.model_fields["mode"].annotation))
def test_the_demos_simulation_is_the_aggregators_computation(mode):
    # The demo and the protocol benchmark simulate a draft with simulated_learner; the aggregator
    # trains it from reports. Same draft ⇒ same learner settings, same consistency step and the same
    # ensemble from the same histograms (paper mode: the same sampling and folds for the same rng).
    problem, roster, bins = _problem(kp=3, mode=mode)
    plan = make_plan(bytes(roster.seed), [bytes(e.identity) for e in roster.entries], 3, n_partitions=3)
    rows, _ = _signal_reports(3, np.random.default_rng(4))
    rng = np.random.default_rng(9)
    model, _ = train_problem(problem, roster, bins, plan, rows, median_answered=0, rng=rng)

    simulated = simulated_learner(problem.draft, random_state=0)
    published = {k: v for k, v in model.get_params().items() if k != "random_state"}
    assert published == {k: v for k, v in simulated.get_params().items() if k != "random_state"}
    assert published["mode"] == mode and published["n_bins"] == problem.draft.bins
    assert published["n_partitions"] == problem.draft.kp and published["consistency"] == "norm_sub"

    binning = binning_of(problem, bins)
    groups = group_reports(rows)
    histograms = [
        estimate_histogram(
            g.bit_sums,
            g.mechanism,
            g.n,
            plan.subsets[g.partition][g.subset],
            tuple(binning.n_bins[f] for f in plan.subsets[g.partition][g.subset]),
            consistency=simulated.consistency,
        )
        for g in groups
    ]
    expected = simulated.ensemble_from(histograms, [g.n for g in groups], np.random.default_rng(9))
    assert model.ensemble_.to_dict() == expected.to_dict()

    # The simulation fitted on one row per peer follows the draft's plan, as the protocol does.
    rng = np.random.default_rng(2)
    X = np.column_stack([rng.uniform(0, 10, 600), rng.uniform(0, 10, 600), rng.integers(0, 2, 600)])
    y = (X[:, 0] > 5).astype(int)
    fitted = simulated_learner(problem.draft, random_state=0).fit(X, y)
    assert (fitted.n_partitions_, fitted.n_subsets_, fitted.subset_size_) == (3, 1, 1)
    assert fitted.privacy_.calibration_peers == 0  # the protocol has no calibration pool


def test_no_reports_is_a_clear_error():
    problem, roster, bins = _problem(kp=1)
    plan = make_plan(bytes(roster.seed), [bytes(e.identity) for e in roster.entries], 3, n_partitions=1)
    with pytest.raises(ProtocolError, match="no report arrived"):
        train_problem(problem, roster, bins, plan, [], median_answered=0)


def test_a_three_class_label_trains_three_classes_with_the_spec_names_and_the_shuffle_bound():
    from dataclasses import replace

    from anonml.privacy.amplification import report_pool_bound
    from anonml.protocol import LabelSpec

    names = ("low", "mid", "high")
    problem, roster, bins = _problem(kp=2)
    d = problem.draft.model_copy(update={"label": LabelSpec(kind="classes", classes=names)})
    problem = problem.model_copy(update={"draft": d})
    plan = make_plan(bytes(roster.seed), [bytes(e.identity) for e in roster.entries], 3, n_partitions=2)
    # Feature 0 of partition 0 and feature 1 of partition 1, each (2 bins) × 3 classes: the class
    # follows the bin (low bin → "low", high bin → "high") w.p. 0.8, else "mid".
    rng = np.random.default_rng(3)
    mech = RandomizedResponse.from_epsilon(2.0, 6)
    rows, sizes = [], {0: 2500, 1: 1800}
    for p in (0, 1):
        high = rng.random(sizes[p]) < 0.5
        label = np.where(rng.random(sizes[p]) < 0.8, np.where(high, 2, 0), 1)
        for b in mech.perturb(high.astype(int) * 3 + label, rng):
            rows.append((p, 0, mech.descriptor().model_dump_json(), pack_bits(b)))
    model, metrics = train_problem(problem, roster, bins, plan, rows, median_answered=5, rng=rng)
    assert list(model.classes_) == list(names) and metrics["label_classes"] == 3
    x_high, x_low = np.array([[9.0, 9.0, 1.0]]), np.array([[1.0, 1.0, 0.0]])  # high / low bin of each
    assert model.predict(x_high)[0] == "high" and model.predict(x_low)[0] == "low"
    # The bound rests on the fewest reports of a slot: 1,800 reports of ε = 2 (k_h = 1).
    shuffle = model.privacy_.shuffle
    # The five median peers who answered are outside it: signed answers keep their local ε.
    assert shuffle.smallest_group == 1800 and shuffle.peers_outside == 5
    assert shuffle == replace(report_pool_bound(2.0, 1, 1800), peers_outside=5)
    assert 0 < shuffle.epsilon < 0.5 and "median answers are signed" in shuffle.assumptions


def test_the_status_shows_the_planned_bound_then_the_published_models():
    from aggregator.routes.problems import problem_shuffle
    from aggregator.state import ProblemContext
    from anonml.crypto import TokenKey
    from anonml.privacy.amplification import ShuffleBound, report_pool_bound

    problem, roster, _ = _problem(kp=2)
    ctx = ProblemContext(problem, TokenKey.generate())
    assert problem_shuffle(ctx, None) is None  # no roster, no partitions yet
    before = ctx
    ctx = ctx.with_roster(roster, b"")
    assert before.roster is None and before.plan is None  # a context never changes under its reader
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.roster = None  # type: ignore[misc]
    planned = problem_shuffle(ctx, None)
    smallest = min(ctx.plan.partition_sizes())
    assert planned.planned and planned.smallest_group == smallest == 2
    assert planned.epsilon == report_pool_bound(2.0, 1, 2).epsilon < planned.local_epsilon == 2.0
    # Before the median round nobody is known to stand outside the report pool's bound.
    assert planned.pools == ("report",) and planned.peers_outside is None
    published = ShuffleBound(0.25, 1e-7, 400, "as published", pools=("report",), peers_outside=7)
    document = json.dumps({"model": {"privacy": {"shuffle": published.to_dict()}}})
    shown = problem_shuffle(ctx, document)
    assert not shown.planned and (shown.epsilon, shown.smallest_group, shown.assumptions) == (
        0.25, 400, "as published"
    )
    assert shown.pools == ("report",) and shown.peers_outside == 7


def test_a_drafts_central_target_is_stated_in_the_published_model_and_absent_from_the_wire_when_unset():
    from anonml.privacy.amplification import shuffle_epsilon
    from anonml.protocol import CentralTargetSpec, signing_bytes

    problem, roster, bins = _problem(kp=3)
    assert "central_target" not in problem.draft.model_dump_json()  # signatures of old drafts unchanged
    assert b"central_target" not in signing_bytes(problem)
    d = problem.draft.model_copy(update={"central_target": CentralTargetSpec(epsilon=0.5, delta=1e-7)})
    problem = problem.model_copy(update={"draft": d})
    assert ProblemDraft.model_validate_json(d.model_dump_json()) == d
    plan = make_plan(bytes(roster.seed), [bytes(e.identity) for e in roster.entries], 3, n_partitions=3)
    rows, _ = _signal_reports(3, np.random.default_rng(0))
    rng = np.random.default_rng(1)
    model, _ = train_problem(problem, roster, bins, plan, rows, median_answered=0, rng=rng)
    target = model.privacy_.central_target
    # 3,000 reports of local ε = 2 per slot, bounded at the target's δ.
    assert target.local_epsilon == 2.0 and target.smallest_group == 3000 and target.delta == 1e-7
    assert target.central_epsilon == pytest.approx(shuffle_epsilon(2.0, 3000, 1e-7), abs=1e-5)
    assert target.met and target.central_epsilon < 0.5
    stated = json.loads(model.to_json())["privacy"]["central_target"]
    assert stated["epsilon"] == 0.5 and stated["local_epsilon"] == 2.0
