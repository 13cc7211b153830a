"""The exact fast samplers: every path gives i.i.d. bits / uniform subsets."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import chisquare

from anonml.privacy import _sampling
from anonml.privacy._sampling import bernoulli_bits, uniform_subsets
from anonml.randomness import resolve_rng
from tests.privacy.exact import subsets_onehot

# Probabilities exercising each plan (asserted below): sparse layer alone,
# sliced layer alone (0.25, 0.75: exactly representable), sliced plus sparse
# remainder (0.2689 and 100.9/512: the remainder adds ~0.01, some forty
# standard errors at n = 4e6, so dropping it fails), and complements.
PATHS = [0.003, 0.0379, 0.25, 0.75, 0.2689, 100.9 / 512, 0.4999, 0.99]


def test_paths_cover_every_plan():
    plans = {p: _sampling._plan(p) for p in PATHS}
    kinds = {(c, t > 0, r > 0) for c, t, _, r in plans.values()}
    assert (False, False, True) in kinds  # sparse only
    assert (False, True, False) in kinds  # sliced only
    assert (False, True, True) in kinds  # sliced + sparse remainder
    assert any(c for c, *_ in plans.values())  # complement


@pytest.mark.parametrize("prob", PATHS)
def test_bits_have_the_right_mean_and_no_structure(prob):
    rng = np.random.default_rng(int(prob * 1e6))
    n = 4_000_000
    bits = bernoulli_bits(rng, prob, n)
    assert bits.shape == (n,) and bits.dtype == bool
    sd = math.sqrt(prob * (1 - prob) / n)
    assert abs(bits.mean() - prob) < 4.5 * sd  # 4.5 sd of a binomial mean
    # Bits are generated 64 (and 8) at a time: every position within a word
    # must have the same rate (chi-square over the 64 lanes).
    lanes = bits.reshape(-1, 64).sum(axis=0)
    expected = np.full(64, n / 64 * prob)
    assert chisquare(lanes, expected * lanes.sum() / expected.sum()).pvalue > 1e-4
    # Neighbours independent: P(b_i = b_{i+1} = 1) = prob^2 within 4.5 sd.
    both = np.mean(bits[:-1] & bits[1:])
    assert abs(both - prob**2) < 4.5 * math.sqrt(prob**2 * (1 - prob**2) / n)


def test_small_and_degenerate_sizes():
    rng = np.random.default_rng(0)
    assert bernoulli_bits(rng, 0.3, 0).shape == (0,)
    assert not bernoulli_bits(rng, 0.0, 10_000).any()
    assert bernoulli_bits(rng, 1.0, 10_000).all()
    assert bernoulli_bits(rng, 0.3, 100).shape == (100,)
    with pytest.raises(ValueError):
        bernoulli_bits(rng, 1.5, 10)
    with pytest.raises(ValueError):
        bernoulli_bits(rng, 0.5, -1)


def test_sparse_layer_is_a_bernoulli_set_despite_repeated_hits():
    # Poisson hits at uniform positions: the union must cover each position
    # with probability r (4.5 sd), and repeats must occur (else it would not
    # be testing the with-replacement draw).
    size, prob = 2_000_000, 0.05
    hits = _sampling._sparse_hits(np.random.default_rng(4), prob, size)
    assert hits.min() >= 0 and hits.max() < size
    covered = np.unique(hits).size
    assert covered < hits.size
    assert abs(covered - size * prob) < 4.5 * math.sqrt(size * prob * (1 - prob))


@pytest.mark.parametrize("bound", [1, 3, 7, 15, 200, 256, 1000, 1820, 70_000])
def test_uniform_below_is_uniform(bound):
    rng = np.random.default_rng(bound)
    n = max(200_000, 20 * bound)
    draws = _sampling.uniform_below(rng, bound, n)
    assert draws.min() >= 0 and draws.max() < bound
    counts = np.bincount(draws.astype(np.intp), minlength=bound)
    if bound > 1:
        assert chisquare(counts).pvalue > 1e-4


def _subset_counts(onehot: np.ndarray, table: np.ndarray) -> np.ndarray:
    m = onehot.shape[1]
    codes = onehot.astype(np.int64) @ (1 << np.arange(m))
    table_codes = table.astype(np.int64) @ (1 << np.arange(m))
    return np.array([(codes == c).sum() for c in table_codes])


@pytest.mark.parametrize(("m", "k"), [(5, 2), (6, 3), (7, 1)])
def test_floyd_subsets_are_uniform(m, k):
    n = 60_000
    onehot, members = uniform_subsets(np.random.default_rng(m * 10 + k), n, m, k)
    assert onehot.shape == (n, m) and members.shape == (n, k)
    assert (onehot.sum(axis=1) == k).all()
    # members lists exactly the marked positions
    listed = np.zeros_like(onehot)
    np.put_along_axis(listed, members.astype(np.intp), True, axis=1)
    assert np.array_equal(listed, onehot)
    counts = _subset_counts(onehot, subsets_onehot(m, k))
    assert counts.sum() == n
    assert chisquare(counts).pvalue > 1e-4
    # A uniformly chosen member (how subset selection swaps) is uniform over
    # the domain: each value with probability 1/m.
    picked = members[np.arange(n), np.random.default_rng(1).integers(0, k, n)]
    assert chisquare(np.bincount(picked, minlength=m)).pvalue > 1e-4


@pytest.mark.parametrize(("m", "k"), [(5, 2), (6, 3), (7, 1), (16, 4), (16, 7)])
@pytest.mark.parametrize("one_draw", [True, False])
def test_subsets_by_membership_hold_the_value_iff_asked_and_are_uniform(m, k, one_draw, monkeypatch):
    if not one_draw:  # force the two-draw lookup
        monkeypatch.setattr(_sampling, "_JOINT_MAX", 0)
    rng = np.random.default_rng(m + k)
    n = 80_000 if m < 16 else 200_000
    values = rng.integers(0, m, n).astype(np.uint8)
    include = rng.random(n) < 0.6
    assert _sampling.has_membership_table(m, k)
    onehot = _sampling.subsets_by_membership(rng, values, m, k, include)
    assert onehot.shape == (n, m) and (onehot.sum(axis=1) == k).all()
    assert np.array_equal(onehot[np.arange(n), values], include)
    if m > 7:
        return  # membership checked; uniformity on the small domains
    table = subsets_onehot(m, k)
    for v in (0, m - 1):
        for holds in (True, False):
            rows = (values == v) & (include == holds)
            allowed = table[:, v] == holds
            counts = _subset_counts(onehot[rows], table[allowed])
            assert counts.sum() == rows.sum()
            if counts.size > 1:
                assert chisquare(counts).pvalue > 1e-4


def test_resolve_rng():
    gen = np.random.default_rng(1)
    assert resolve_rng(gen) is gen
    a, b = resolve_rng(None), resolve_rng(None)
    assert isinstance(a, np.random.Generator)
    assert a.integers(0, 2**62) != b.integers(0, 2**62)  # 2^-62 chance of a false failure
    with pytest.raises(TypeError):
        resolve_rng(42)  # type: ignore[arg-type]
