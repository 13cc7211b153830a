"""privacy_.shuffle: the clone bound over the unlinkable pools only (DESIGN §11), as the protocol has it."""

from __future__ import annotations

import numpy as np
import pytest

from anonml.learn.model import AnonMLClassifier
from anonml.learn.simulation import SimulationConfig, simulate_training
from anonml.model import FeatureKind, FeatureSpec
from anonml.privacy.amplification import ShuffleBound, shuffle_epsilon, unlinkable_pools_bound

SPECS = [
    FeatureSpec(name="a", kind=FeatureKind.CATEGORICAL, categories=("x", "y", "z")),
    FeatureSpec(name="c", low=-4.0, high=4.0),
]


def _world(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.4).astype(np.int64)
    a = np.where(y == 1, rng.choice(3, n, p=[0.2, 0.3, 0.5]), rng.choice(3, n, p=[0.6, 0.3, 0.1]))
    c = np.clip(rng.normal(np.where(y == 1, 1.0, -0.5), 1.0), -4, 4)
    return np.column_stack([a, c]).astype(float), y


def test_the_bound_is_the_report_pools_alone_and_names_the_median_peers_outside():
    X, y = _world(4000, 0)
    config = SimulationConfig(epsilon=1.0, n_partitions=2, n_subsets=2, median_fraction=0.15)
    result = simulate_training(X, y, SPECS, config, np.random.default_rng(1))
    acct = result.accounting
    smallest = min(result.plan.partition_sizes())
    assert acct.median_peers > 0 and acct.shuffle is not None
    # Exactly the report pool's groups: k_h = 2 reports of ε/2, each among the smallest partition.
    report_only = ShuffleBound.of_groups([(0.5, 2, smallest)])
    assert (acct.shuffle.epsilon, acct.shuffle.delta) == (report_only.epsilon, report_only.delta)
    assert acct.shuffle == unlinkable_pools_bound(
        {"report": (0.5, 2, smallest)}, peers_outside=acct.median_peers
    )
    assert acct.shuffle.pools == ("report",) and acct.shuffle.peers_outside == acct.median_peers
    # The median steps (each answered once at ε_T by a few hundred peers) are not in it: had they
    # been counted as shuffled groups, the weakest of them would have decided a larger ε.
    steps = [
        s.n for edges in result.median_estimates.values() for e in edges.estimates for s in e.steps if s.n
    ]
    assert steps and min(steps) < smallest
    assert shuffle_epsilon(1.0, min(steps), acct.shuffle.delta) > acct.shuffle.epsilon


def test_a_median_steps_size_does_not_move_the_bound():
    X, y = _world(4000, 2)
    config = SimulationConfig(epsilon=2.0, n_partitions=2, median_fraction=0.15)
    searched = simulate_training(X, y, SPECS, config, np.random.default_rng(3))
    # The same plan and reports with the bins given: no median answer at all, same bound.
    given = simulate_training(
        X, y, SPECS, config, np.random.default_rng(3), plan=searched.plan, binning=searched.binning
    )
    assert searched.accounting.median_peers > 0 and given.accounting.median_peers == 0
    a, b = searched.accounting.shuffle, given.accounting.shuffle
    assert a is not None and b is not None
    assert (a.epsilon, a.delta, a.smallest_group) == (b.epsilon, b.delta, b.smallest_group)
    assert (a.peers_outside, b.peers_outside) == (searched.accounting.median_peers, 0)


def test_the_calibration_pool_is_a_pool_of_unlinkable_reports_and_survives_json():
    X, y = _world(30_000, 4)
    config = SimulationConfig(epsilon=2.0, n_partitions=2, calibration_fraction=0.1)
    result = simulate_training(X, y, SPECS, config, np.random.default_rng(0))
    acct = result.accounting
    assert acct.calibration_peers == result.calibration_rows.size > 0 and acct.shuffle is not None
    assert acct.shuffle.pools == ("report", "calibration")
    assert acct.shuffle.peers_outside == acct.median_peers > 0
    # One (score bin, label) report of ε_T per calibration peer, shuffled among the pool.
    smallest = min(result.plan.partition_sizes())
    expected = ShuffleBound.of_groups([(2.0, 1, smallest), (2.0, 1, acct.calibration_peers)])
    assert (acct.shuffle.epsilon, acct.shuffle.delta) == (expected.epsilon, expected.delta)
    assert acct.shuffle.smallest_group == min(smallest, acct.calibration_peers)
    clf = AnonMLClassifier(epsilon=2.0, features=SPECS, calibration_fraction=0.1, random_state=0).fit(X, y)
    assert clf.privacy_.shuffle is not None and clf.privacy_.shuffle.pools == ("report", "calibration")
    assert AnonMLClassifier.from_json(clf.to_json()).privacy_.shuffle == clf.privacy_.shuffle


def test_too_small_a_partition_has_no_bound():
    X, y = _world(60, 5)
    with pytest.warns(Warning):
        clf = AnonMLClassifier(
            epsilon=1.0, features=SPECS, n_partitions=40, calibration_fraction=0.0, random_state=0
        ).fit(X, y)
    assert clf.privacy_.shuffle is None  # a partition of one peer hides its report among nobody
