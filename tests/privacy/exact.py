"""Test-side exact laws of the mechanisms, derived from their definitions.

Written independently of ``anonml.privacy`` (which only states p, q, epsilon),
so tests can compare the library's formulas and samples against them.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from anonml.privacy import Mechanism


def all_outputs(m: int) -> np.ndarray:
    """Every m-bit vector, row r holding the bits of r (bit j = (r >> j) & 1)."""
    codes = np.arange(2**m)
    return ((codes[:, None] >> np.arange(m)) & 1).astype(bool)


def encode(reports: np.ndarray) -> np.ndarray:
    """Integer code of each report row, consistent with :func:`all_outputs`."""
    return reports.astype(np.int64) @ (1 << np.arange(reports.shape[1], dtype=np.int64))


def pmf(mech: Mechanism, outputs: np.ndarray, value: int) -> np.ndarray:
    """P(report = outputs[r] | true value) from the mechanism's definition."""
    m = mech.m
    ones = outputs.sum(axis=1)
    if mech.kind in ("pq", "rappor", "oue"):
        p, q = mech.p, mech.q
        own = outputs[:, value]
        others_on = ones - own  # independent Bernoulli(q) bits elsewhere
        return (q**others_on * (1 - q) ** (m - 1 - others_on)) * np.where(own, p, 1 - p)
    if mech.kind == "krr":
        lam = math.exp(mech.epsilon)
        own = lam / (lam + m - 1)
        other = 1 / (lam + m - 1)
        return np.where(ones == 1, np.where(outputs[:, value], own, other), 0.0)
    if mech.kind == "subset":
        lam, w = math.exp(mech.epsilon), mech.omega
        z = math.comb(m - 1, w - 1) * lam + math.comb(m - 1, w)
        return np.where(ones == w, np.where(outputs[:, value], lam, 1.0) / z, 0.0)
    raise AssertionError(mech.kind)


def report_covariance(mech: Mechanism, value: int) -> np.ndarray:
    """Cov(B) of one report of ``value`` (m x m), from the definition."""
    m, p, q = mech.m, mech.p, mech.q
    marg = np.full(m, q)
    marg[value] = p
    if mech.kind in ("pq", "rappor", "oue"):
        both = np.outer(marg, marg)  # independent bits
    elif mech.kind == "krr":
        both = np.zeros((m, m))  # one-hot: never two ones
    elif mech.kind == "subset":
        w = mech.omega
        both = np.zeros((m, m))
        if m > 2:
            pair = (p * (w - 1) * (w - 2) + (1 - p) * w * (w - 1)) / ((m - 1) * (m - 2))
            both[:] = pair
        with_own = p * (w - 1) / (m - 1)
        both[value, :] = with_own
        both[:, value] = with_own
    else:
        raise AssertionError(mech.kind)
    cov = both - np.outer(marg, marg)
    cov[np.diag_indices(m)] = marg * (1 - marg)
    return cov


def subsets_onehot(m: int, k: int) -> np.ndarray:
    rows = np.zeros((math.comb(m, k), m), dtype=bool)
    for i, members in enumerate(itertools.combinations(range(m), k)):
        rows[i, list(members)] = True
    return rows
