"""Partition plans: reproducible from public data, checkable by every peer, stable across versions."""

from __future__ import annotations

import hashlib
from collections import Counter

import numpy as np
import pytest

from anonml.errors import ProtocolError
from anonml.learn.partition import (
    PeerAssignment,
    commit_seed,
    make_plan,
    membership_order,
    random_subsets,
    roster_digest,
    verify_assignment,
)

SEED = bytes(range(32))
KEYS = [hashlib.sha256(b"peer-%d" % i).digest() for i in range(50)]


def _plan(seed=SEED, keys=KEYS, **overrides):
    kwargs = dict(n_partitions=4, n_subsets=2, subset_size=3, median_pool_size=6)
    kwargs.update(overrides)
    return make_plan(seed, keys, 11, **kwargs)


def test_order_is_sha256_of_seed_roster_and_key():
    # Independent recomputation of DESIGN §6's rule: sort by H(seed ‖ roster digest ‖ key).
    digest = hashlib.sha256(
        b"anonml/partition/v1/roster" + b"".join(len(k).to_bytes(4, "big") + k for k in sorted(KEYS))
    ).digest()
    expected = sorted(range(len(KEYS)), key=lambda i: hashlib.sha256(SEED + digest + KEYS[i]).digest())
    assert roster_digest(KEYS) == digest
    assert membership_order(SEED, KEYS).tolist() == expected


def test_keys_of_any_length_and_a_large_roster_follow_the_same_rule():
    # The digest's length prefixes matter only when keys differ in length; the ranks' sort must
    # match Python's bytes order on thousands of keys (ranks sharing leading bytes included).
    mixed = [b"a", b"bb", b"\x00", b"ccc" * 10, bytes(32), b"\x00" * 40]
    encoded = b"".join(len(k).to_bytes(4, "big") + k for k in sorted(mixed))
    assert roster_digest(mixed) == hashlib.sha256(b"anonml/partition/v1/roster" + encoded).digest()
    many = [hashlib.sha256(b"member-%d" % i).digest()[: 16 + i % 17] for i in range(5_000)]
    digest = roster_digest(many)
    rank = {i: hashlib.sha256(SEED + digest + many[i]).digest() for i in range(len(many))}
    assert membership_order(SEED, many).tolist() == sorted(range(len(many)), key=rank.__getitem__)


def test_a_roster_checked_before_does_not_vouch_for_another():
    # verify_assignment remembers a roster's digest for the next identity of the same process; a
    # different roster passed later is hashed again, not matched against the one remembered.
    plan = _plan()
    i = int(plan.order[20])
    assert _check(plan.assignment(i), i) == plan.assignment(i)
    swapped = [*KEYS[:-1], hashlib.sha256(b"newcomer").digest()]
    with pytest.raises(ProtocolError, match="another roster"):
        _check(plan.assignment(i), i, keys=swapped)


def test_known_answer_vector_pins_the_plan_across_versions():
    # Golden values: any change to the hashing or the dealing of subsets changes them.
    plan = _plan()
    assert commit_seed(SEED) == hashlib.sha256(b"anonml/partition/v1/commit" + SEED).digest()
    assert commit_seed(SEED).hex() == "46b5f4ea2eeb7abeb4e163b9cb887c8bb0c0277800d3d4e8ad8080a324c621a7"
    assert plan.order[:8].tolist() == [26, 31, 38, 42, 18, 2, 43, 1]
    assert plan.subsets[0] == ((1, 6, 7), (2, 8, 10))


def test_plan_is_reproducible_and_depends_on_the_seed():
    a, b = _plan(), _plan()
    assert a.order.tolist() == b.order.tolist() and a.subsets == b.subsets
    other = _plan(seed=bytes(32))
    assert other.order.tolist() != a.order.tolist()


def test_roster_digest_ignores_registration_order_and_rejects_duplicates():
    assert roster_digest(KEYS) == roster_digest(list(reversed(KEYS)))
    with pytest.raises(ProtocolError, match="more than once"):
        roster_digest([KEYS[0], KEYS[1], KEYS[0]])
    with pytest.raises(ProtocolError, match="empty peer key"):
        roster_digest([KEYS[0], b"", KEYS[1]])


def test_pools_are_disjoint_balanced_and_cover_every_peer():
    plan = _plan()
    median = plan.median_pool().tolist()
    parts = [plan.members(p).tolist() for p in range(plan.n_partitions)]
    everyone = median + [i for part in parts for i in part]
    assert sorted(everyone) == list(range(len(KEYS)))  # each peer exactly once
    assert median == plan.order[:6].tolist()
    assert sorted(len(p) for p in parts) == [11, 11, 11, 11]  # 44 report peers over 4
    assert all(plan.assignment(i).role == "median" for i in median)
    assert plan.assignment(parts[2][0]) == PeerAssignment("report", 2, plan.subsets[2])


def test_the_smallest_partition_is_the_fewest_report_peers_of_a_partition():
    assert _plan().smallest_partition() == 11  # 44 report peers over 4
    uneven = _plan(keys=KEYS[:47], median_pool_size=5)  # 42 over 4: 11, 11, 10, 10
    assert sorted(uneven.partition_sizes()) == [10, 10, 11, 11] and uneven.smallest_partition() == 10


def test_random_subsets_never_overlap_within_a_partition_and_are_balanced():
    subsets = random_subsets(SEED, 11, n_partitions=20, n_subsets=2, subset_size=1)
    for partition in subsets:
        flat = [f for s in partition for f in s]
        assert len(flat) == len(set(flat))
    counts = Counter(f for partition in subsets for s in partition for f in s)
    assert set(counts) == set(range(11))  # no feature left out by chance
    assert max(counts.values()) - min(counts.values()) <= 1  # 40 slots over 11 features
    with pytest.raises(ValueError, match="could not be disjoint"):
        random_subsets(SEED, 5, n_partitions=2, n_subsets=2, subset_size=3)


def test_given_subsets_are_dealt_in_order_and_checked():
    plan = make_plan(SEED, KEYS, 4, n_partitions=3, subsets=[[2], [0], [3]])
    assert plan.subsets == (((2,),), ((0,),), ((3,),))
    with pytest.raises(ValueError, match=r"subsets\[1\] repeats a feature"):
        make_plan(SEED, KEYS, 4, n_partitions=2, subset_size=2, subsets=[[0, 1], [2, 2]])
    with pytest.raises(ValueError, match="outside 0..3"):
        make_plan(SEED, KEYS, 4, n_partitions=2, subsets=[[7]])


def _check(claimed, i, plan=None, *, key=None, commitment=None, keys=KEYS):
    """Peer ``i``'s check of ``claimed`` against the plan it computed (default :func:`_plan`)."""
    return verify_assignment(
        claimed,
        _plan() if plan is None else plan,
        commitment=commit_seed(SEED) if commitment is None else commitment,
        peer_keys=keys,
        my_key=KEYS[i] if key is None else key,
    )


def test_peer_accepts_the_true_assignment():
    plan = _plan()
    for i in (int(plan.order[0]), int(plan.order[20]), int(plan.order[-1])):
        claimed = plan.assignment(i)
        assert _check(claimed, i) == claimed


def test_peer_rejects_a_wrong_partition():
    plan = _plan()
    i = int(plan.order[20])
    true = plan.assignment(i)
    forged = PeerAssignment("report", (true.index + 1) % 4, plan.subsets[(true.index + 1) % 4])
    with pytest.raises(ProtocolError, match="differs from the one the seed gives"):
        _check(forged, i)


def test_peer_rejects_a_seed_that_breaks_the_commitment_or_an_unknown_key():
    plan = _plan()
    i = int(plan.order[20])
    other_seed = _plan(seed=bytes(32))
    with pytest.raises(ProtocolError, match="does not match the commitment"):
        _check(plan.assignment(i), i, other_seed)
    with pytest.raises(ProtocolError, match="not on the closed roster"):
        _check(plan.assignment(i), i, key=b"stranger")


def test_peer_rejects_a_plan_of_another_roster():
    """A plan computed without one member cannot vouch for an assignment on the full roster."""
    plan = _plan()
    i = int(plan.order[20])
    short = _plan(keys=KEYS[:-1])
    with pytest.raises(ProtocolError, match="another roster"):
        _check(plan.assignment(i), i, short)
    assert _check(short.assignment(i), i, short, keys=KEYS[:-1]) == short.assignment(i)


def test_bad_seed_and_too_few_peers_are_refused():
    with pytest.raises(ProtocolError, match="32 bytes"):
        make_plan(b"short", KEYS, 11, n_partitions=2)
    with pytest.raises(ValueError, match="cannot fill"):
        make_plan(SEED, KEYS[:5], 11, n_partitions=4, median_pool_size=3)


def test_membership_is_close_to_uniform_over_seeds():
    # Each peer lands in partition 0 of 5 with probability 1/5; over 400 seeds the count for
    # peer 0 is Binomial(400, 0.2): mean 80, sd 8. Allow 4 sd.
    hits = 0
    for s in range(400):
        seed = hashlib.sha256(b"seed-%d" % s).digest()
        plan = make_plan(seed, KEYS, 11, n_partitions=5)
        hits += int(plan.assignment(0).index == 0)
    assert abs(hits - 80) <= 32
    assert np.isfinite(hits)


BEACON = hashlib.blake2b(b"witness signatures", digest_size=32).digest()


def test_order_with_a_beacon_is_sha256_of_seed_beacon_roster_and_key():
    digest = roster_digest(KEYS)
    expected = sorted(
        range(len(KEYS)), key=lambda i: hashlib.sha256(SEED + BEACON + digest + KEYS[i]).digest()
    )
    assert membership_order(SEED, KEYS, BEACON).tolist() == expected
    assert membership_order(SEED, KEYS, BEACON).tolist() != membership_order(SEED, KEYS).tolist()
    plan = _plan(beacon=BEACON)
    assert plan.beacon == BEACON and plan.order.tolist() == expected


def test_the_beacon_must_be_empty_or_32_bytes():
    for bad in (b"x", bytes(31), bytes(33), "not bytes"):
        with pytest.raises(ProtocolError, match="beacon must be empty or 32 bytes"):
            make_plan(SEED, KEYS, 11, n_partitions=2, beacon=bad)


def test_verification_uses_the_peers_own_beacon():
    plan = _plan(beacon=BEACON)
    moved = [i for i in range(len(KEYS)) if plan.assignment(i) != _plan().assignment(i)]
    assert moved  # the beacon changes where peers land
    i = moved[0]
    claimed = plan.assignment(i)
    assert _check(claimed, i, plan) == claimed
    # The aggregator announcing the seed-only plan is caught by a peer that holds the beacon.
    with pytest.raises(ProtocolError, match="differs from the one the seed gives"):
        _check(_plan().assignment(i), i, plan)


def test_membership_is_close_to_uniform_over_beacons():
    # With the seed fixed, the beacon alone moves a peer: Binomial(400, 0.2) for partition 0.
    hits = sum(
        int(make_plan(SEED, KEYS, 11, n_partitions=5, beacon=hashlib.sha256(b"b-%d" % s).digest())
            .assignment(0).index == 0)
        for s in range(400)
    )
    assert abs(hits - 80) <= 32
