"""The calibration pool in the partition plan: disjoint from the median pool and the report
partitions, checked by the peer like every role, and absent (plans unchanged) when its size is 0."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from anonml.errors import ProtocolError
from anonml.learn import PeerAssignment
from anonml.learn.partition import commit_seed, make_plan, verify_assignment

SEED = bytes(range(32))
BEACON = hashlib.sha256(b"beacon").digest()
KEYS = [hashlib.sha256(b"peer-%d" % i).digest() for i in range(60)]


def test_without_a_calibration_pool_the_plan_is_the_one_it_was():
    before = make_plan(SEED, KEYS, 4, n_partitions=3, median_pool_size=7, beacon=BEACON)
    zero = make_plan(
        SEED, KEYS, 4, n_partitions=3, median_pool_size=7, beacon=BEACON, calibration_pool_size=0
    )
    assert np.array_equal(before.order, zero.order)
    assert before.bounds == zero.bounds == (7, 25, 43, 60)
    assert before.subsets == zero.subsets
    assert [before.assignment(i) for i in range(60)] == [zero.assignment(i) for i in range(60)]
    assert zero.calibration_pool().size == 0


def test_the_three_pools_are_disjoint_and_cover_the_roster_in_membership_order():
    plan = make_plan(
        SEED, KEYS, 4, n_partitions=3, median_pool_size=7, beacon=BEACON, calibration_pool_size=11
    )
    plain = make_plan(SEED, KEYS, 4, n_partitions=3, median_pool_size=7, beacon=BEACON)
    assert np.array_equal(plan.order, plain.order)  # the pool changes no peer's rank
    median = set(plan.median_pool().tolist())
    calibration = set(plan.calibration_pool().tolist())
    reports = [set(plan.members(p).tolist()) for p in range(plan.n_partitions)]
    assert len(median) == 7 and len(calibration) == 11 and sum(map(len, reports)) == 60 - 18
    assert not median & calibration and not any((median | calibration) & r for r in reports)
    assert median | calibration | set().union(*reports) == set(range(60))
    assert plan.calibration_pool().tolist() == plan.order[7:18].tolist()
    roles = [plan.assignment(i).role for i in range(60)]
    assert roles.count("median") == 7 and roles.count("calibration") == 11 and roles.count("report") == 42
    for rank, index in enumerate(plan.calibration_pool()):
        assert plan.assignment(int(index)) == PeerAssignment("calibration", rank)


def test_a_peer_refuses_a_role_other_than_the_plans():
    plan = make_plan(SEED, KEYS, 4, n_partitions=3, median_pool_size=7, calibration_pool_size=11)
    mine = int(plan.calibration_pool()[0])
    checks = {"commitment": commit_seed(SEED), "peer_keys": KEYS, "my_key": KEYS[mine]}
    assert verify_assignment(PeerAssignment("calibration", 0), plan, **checks).role == "calibration"
    # Told to report features instead (an aggregator moving a pool member into a partition): refused.
    with pytest.raises(ProtocolError, match="differs from the one the seed gives"):
        verify_assignment(PeerAssignment("report", 0, plan.subsets[0]), plan, **checks)
    reporter = int(plan.members(0)[0])
    with pytest.raises(ProtocolError, match="differs from the one the seed gives"):
        verify_assignment(
            PeerAssignment("calibration", 0), plan, **{**checks, "my_key": KEYS[reporter]}
        )


def test_too_few_peers_for_the_pools_and_the_partitions_is_refused():
    with pytest.raises(ValueError, match="minus a median pool of 7 and a calibration pool of 51"):
        make_plan(SEED, KEYS, 4, n_partitions=3, median_pool_size=7, calibration_pool_size=51)
    with pytest.raises(ValueError, match="pool sizes must be >= 0"):
        make_plan(SEED, KEYS, 4, n_partitions=3, calibration_pool_size=-1)
