"""Exact, vectorised samplers behind the mechanisms' ``perturb``.

Perturbing a report is mostly drawing many independent Bernoulli bits. Drawing a
float per bit (``rng.random(size) < q``) costs 64 random bits and a comparison per
output bit; the samplers here spend a few random bits per output bit while
keeping the distribution exact (to the double precision in which the
probability itself is given):

* **Sparse layer** (rate ``r``): give every position an independent
  Poisson(lam) number of hits with ``lam = -ln(1 - r)``, so it is hit at least
  once with probability exactly ``r``. By Poisson splitting this is the same as
  drawing ``K ~ Poisson(size * lam)`` hits at uniform positions *with*
  replacement; repeated positions need no special care (a bit set twice is
  set). Cost ~ ``size * r`` integers and writes.
* **Sliced layer**: for ``T < 2**k``, a uniform k-bit integer ``U`` is below ``T``
  with probability exactly ``T / 2**k``. The comparison runs 64 bits at a time
  on random ``uint64`` words ("bit-slicing": word j holds bit j of 64
  independent ``U``) and stops at the last 1-bit of ``T``, so its cost is that
  many words per 64 output bits.
* Bernoulli(q) is a sliced layer ``T / 2**k <= q`` OR-ed with a sparse layer
  ``r = (q - T/2**k) / (1 - T/2**k)``, since ``1 - (1 - T/2**k)(1 - r) = q``; or
  the complement of that for ``1 - q``; or a sparse layer alone. A small cost
  model picks the cheapest plan; every plan is exact, so the choice only
  affects speed.
* **Uniform integers** below a small bound: random bytes (or 16-bit words)
  reduced modulo the bound through a lookup table, after rejecting the top
  ``2**w mod bound`` values (rejected draws are redrawn), so exactly uniform.
* **Uniform subsets** of size k of ``range(m)``, one per row: with or without a
  given value, by a uniform index into the table of all k-subsets ordered by
  membership when that table is small; else Floyd's algorithm run on all rows
  at once (each step draws one integer per row).

All functions take a ready :class:`numpy.random.Generator`;
:func:`anonml.randomness.resolve_rng` turns the public ``rng=None`` convention
into an OS-CSPRNG-seeded generator.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import numpy as np

__all__ = [
    "bernoulli_bits",
    "uniform_below",
    "uniform_subsets",
    "subsets_by_membership",
    "has_membership_table",
    "one_hot_table",
]

#: Cost of one sparse hit relative to one sliced step per output bit (a hit
#: is an integer draw and a scattered write, ~3.5 ns; a step is one random
#: word and three bitwise operations per 64 bits, ~0.035 ns per bit).
_HIT_COST = 100.0
#: Longest bit expansion of q considered for the sliced layer.
_MAX_SLICE_BITS = 12
#: Below this many bits, one float per bit is simplest and fast enough.
_SMALL = 4096
#: Largest table of all k-subsets (entries x m bytes) worth caching.
_TABLE_BYTES = 1 << 20
#: Largest shared bound lcm(C_in, C_out) for the one-draw subset lookup.
_JOINT_MAX = 1 << 16
_U64_MAX = np.iinfo(np.uint64).max


def _random_words(rng: np.random.Generator, count: int) -> np.ndarray:
    # Full-range integers: 64 uniform bits per word for every bit generator
    # (random_raw would give only 32 on MT19937).
    return rng.integers(0, _U64_MAX, size=count, dtype=np.uint64, endpoint=True)


def _sparse_hits(rng: np.random.Generator, prob: float, size: int) -> np.ndarray:
    """Positions (unsorted, possibly repeated) whose union is a Bernoulli(prob) set."""
    if prob <= 0.0 or size == 0:
        return np.empty(0, dtype=np.uint32)
    lam = -math.log1p(-prob)
    hits = int(rng.poisson(lam * size))
    # 32-bit positions halve the memory traffic whenever they fit.
    dtype = np.uint32 if size <= 1 << 32 else np.intp
    return rng.integers(0, size, size=hits, dtype=dtype)


def _sliced_below(rng: np.random.Generator, threshold: int, k: int, words: int) -> np.ndarray:
    """``words`` uint64 words whose bits are i.i.d. Bernoulli(threshold / 2**k)."""
    bits = [(threshold >> (k - 1 - j)) & 1 for j in range(k)]
    last_one = max(j for j in range(k) if bits[j])
    below = np.zeros(words, dtype=np.uint64)
    equal: np.ndarray | None = None  # None stands for all-ones (empty prefix)
    for j in range(last_one + 1):
        r = _random_words(rng, words)  # bit j of every U, MSB first
        if bits[j]:
            # U < T decided here where the prefix matched and U's bit is 0.
            if equal is None:
                np.invert(r, out=below)
                equal = r
            else:
                np.bitwise_and(equal, r, out=r)  # r := prefix still equal
                np.bitwise_xor(equal, r, out=equal)  # equal := decided "below" here
                np.bitwise_or(below, equal, out=below)
                equal = r
        else:
            np.invert(r, out=r)
            if equal is None:
                equal = r
            else:
                np.bitwise_and(equal, r, out=equal)
    return below


@lru_cache(maxsize=256)
def _plan(prob: float) -> tuple[bool, int, int, float]:
    """Cheapest exact plan for Bernoulli(prob): (complement, threshold, k, sparse rate).

    ``threshold = 0`` means no sliced layer. Cost (in sliced steps per output
    bit) is the number of steps plus ``_HIT_COST`` times the sparse hit rate.
    """
    best = (math.inf, (False, 0, 0, prob))
    for complement, target in ((False, prob), (True, 1.0 - prob)):
        best = min(best, (_HIT_COST * -math.log1p(-target), (complement, 0, 0, target)))
        for k in range(1, _MAX_SLICE_BITS + 1):
            threshold = math.floor(target * (1 << k))
            if threshold == 0 or (threshold & 1) == 0:
                continue  # even thresholds are the same plan at a smaller k
            base = threshold / (1 << k)
            rest = max((target - base) / (1.0 - base), 0.0)
            cost = k + 1 + _HIT_COST * -math.log1p(-rest)  # k steps plus the unpacking
            best = min(best, (cost, (complement, threshold, k, rest)))
    return best[1]


def bernoulli_bits(rng: np.random.Generator, prob: float, size: int) -> np.ndarray:
    """Return ``size`` i.i.d. Bernoulli(``prob``) bits as a 1-D boolean array.

    Exact in distribution: every bit is 1 with probability ``prob`` (as a double)
    independently of all others, whichever internal plan is taken (see the
    module docstring).
    """
    if size < 0:
        raise ValueError(f"size must be non-negative, got {size}")
    if not 0.0 <= prob <= 1.0:
        raise ValueError(f"prob must lie in [0, 1], got {prob}")
    if prob == 0.0 or prob == 1.0:
        return np.full(size, prob == 1.0, dtype=bool)
    if size < _SMALL:
        return rng.random(size) < prob
    complement, threshold, k, rest = _plan(prob)
    if threshold:
        below = _sliced_below(rng, threshold, k, -(-size // 64))
        # Bit order inside the words is irrelevant: all bits are i.i.d.
        out = np.unpackbits(below.view(np.uint8), count=size).view(bool)
    else:
        out = np.zeros(size, dtype=bool)
    out[_sparse_hits(rng, rest, size)] = True
    if complement:
        np.invert(out, out=out)
    return out


@lru_cache(maxsize=64)
def _modulo_table(bound: int, width: int) -> np.ndarray:
    table = (np.arange(1 << width) % bound).astype(np.uint8 if bound <= 256 else np.uint16)
    table.setflags(write=False)
    return table


def uniform_below(rng: np.random.Generator, bound: int, size: int) -> np.ndarray:
    """``size`` independent uniform integers in ``[0, bound)``.

    Uses one random byte per draw for ``bound <= 256`` (two for ``<= 65536``):
    values at or above ``2**w - 2**w % bound`` are rejected and redrawn, the rest
    reduced modulo ``bound``. Returns ``uint8``/``uint16``/``intp`` by bound.
    """
    if bound < 1:
        raise ValueError(f"bound must be >= 1, got {bound}")
    if bound > 1 << 16 or size < _SMALL:
        dtype = np.uint8 if bound <= 256 else np.uint16 if bound <= 1 << 16 else np.intp
        return rng.integers(0, bound, size=size, dtype=dtype)
    width = 8 if bound <= 256 else 16
    raw = _random_words(rng, -(-size * width // 64)).view(np.uint8 if width == 8 else np.uint16)[:size]
    out = np.take(_modulo_table(bound, width), raw)
    limit = (1 << width) - (1 << width) % bound
    if limit < 1 << width:
        redo = np.flatnonzero(raw >= limit)
        if redo.size:
            out[redo] = uniform_below(rng, bound, redo.size)
    return out


@lru_cache(maxsize=64)
def one_hot_table(m: int, repeats: int = 1) -> np.ndarray:
    """Rows ``r`` = one-hot of ``r % m`` for ``r < repeats * m`` (read-only, cached).

    ``np.take(table, codes, axis=0)`` turns value codes into one-hot rows far
    faster than scattering into a zeroed array.
    """
    table = np.tile(np.eye(m, dtype=bool), (repeats, 1))
    table.setflags(write=False)
    return table


def _member_dtype(m: int) -> type[np.integer]:
    return np.uint8 if m <= 256 else np.intp


def has_membership_table(m: int, k: int) -> bool:
    """Whether :func:`subsets_by_membership` can serve (m, k): the table is small."""
    count = math.comb(m, k)
    return count * m <= _TABLE_BYTES and count <= 1 << 16


@lru_cache(maxsize=16)
def _membership_table(m: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """All k-subsets as one-hot rows, and per value v their indices, those holding v first."""
    members = np.array(list(itertools.combinations(range(m), k)), dtype=np.intp)
    onehot = np.zeros((members.shape[0], m), dtype=bool)
    np.put_along_axis(onehot, members, True, axis=1)
    order = np.concatenate(
        [np.concatenate((np.flatnonzero(onehot[:, v]), np.flatnonzero(~onehot[:, v]))) for v in range(m)]
    ).astype(np.uint16)
    onehot.setflags(write=False)
    order.setflags(write=False)
    return onehot, order


@lru_cache(maxsize=16)
def _joint_table(m: int, k: int, bound: int) -> np.ndarray:
    """Entry ``(v, holds, u)``: subset ``u mod C_in`` holding v, or ``u mod C_out`` not."""
    _, order = _membership_table(m, k)
    count, holding = math.comb(m, k), math.comb(m - 1, k - 1)
    by_value = order.reshape(m, count)
    u = np.arange(bound)
    joint = np.stack([by_value[:, holding + u % (count - holding)], by_value[:, u % holding]], axis=1)
    joint = np.ascontiguousarray(joint).reshape(-1)
    joint.setflags(write=False)
    return joint


def subsets_by_membership(
    rng: np.random.Generator, values: np.ndarray, m: int, k: int, include: np.ndarray
) -> np.ndarray:
    """Row i: a uniform k-subset of ``range(m)`` holding ``values[i]`` iff ``include[i]``.

    Draws a uniform index among the ``C_in = C(m-1, k-1)`` subsets that hold the
    value or among the ``C_out = C(m-1, k)`` that do not, and looks it up in the
    cached table (:func:`has_membership_table` must hold). When
    ``B = lcm(C_in, C_out)`` is small, one draw ``u`` uniform in ``[0, B)`` serves
    both cases (``u mod C_in`` and ``u mod C_out`` are each uniform, and a row
    uses only one). Returns one-hot rows, shape (n, m).
    """
    onehot, order = _membership_table(m, k)
    count = onehot.shape[0]
    holding = math.comb(m - 1, k - 1)
    other = count - holding
    n = values.size
    shared = math.lcm(holding, other)
    index = values.astype(np.int32)
    if shared <= _JOINT_MAX and m * 2 * shared <= _TABLE_BYTES:
        index *= 2
        index += include
        index *= shared
        index += uniform_below(rng, shared, n)
        return np.take(onehot, np.take(_joint_table(m, k, shared), index), axis=0)
    # Position within the value's ordering (holding subsets first), then its start.
    position = uniform_below(rng, other, n).astype(np.int32)
    position += holding
    held = uniform_below(rng, holding, n).astype(np.int32)
    position += include * (held - position)
    index *= count
    index += position
    return np.take(onehot, np.take(order, index), axis=0)


def uniform_subsets(rng: np.random.Generator, n: int, m: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``n`` independent uniform k-subsets of ``range(m)`` (Floyd's algorithm).

    For j = m-k .. m-1, every row draws t uniform in [0, j] and takes t, or j if
    t is already taken; each step is one vectorised draw over all rows.

    Returns
    -------
    onehot : ndarray of bool, shape (n, m)
        Row i marks the members of subset i.
    members : ndarray of int, shape (n, k)
        The members of each subset, each row a permutation of its subset
        (``uint8`` when ``m <= 256``).
    """
    if not 1 <= k <= m:
        raise ValueError(f"subset size k must lie in [1, m={m}], got {k}")
    onehot = np.zeros((n, m), dtype=bool)
    flat = onehot.reshape(-1)
    members = np.empty((k, n), dtype=_member_dtype(m))  # one row per step
    base = np.arange(n, dtype=np.intp) * m
    for s, j in enumerate(range(m - k, m)):
        t = uniform_below(rng, j + 1, n)
        t = np.where(np.take(flat, base + t), j, t).astype(members.dtype, copy=False)
        flat[base + t] = True
        members[s] = t
    return onehot, members.T
