"""Empirical privacy audit: sampled reports never show more than epsilon.

For neighbouring inputs 0 and 1 we draw 10^6 reports each and count events
E = (bit 0, bit 1, number of other set bits capped at 3). For every event the
Clopper-Pearson interval of P(E | 0) and P(E | 1) gives a lower confidence
bound on the privacy loss ln(P(E|0) / P(E|1)) (lower end over upper end), and
an upper one. The lower bound must never exceed epsilon (no leak), and the
upper bound must reach epsilon on some event (the loss is attained, so the
mechanism is not quietly noisier than it claims). Intervals are at family-wise
level 1e-3 (Bonferroni over events, directions and ends).
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
from scipy.stats import beta

from anonml.privacy import OUE, RAPPOR, PQPerturbation, RandomizedResponse, SubsetSelection

KINDS = [PQPerturbation, RAPPOR, OUE, RandomizedResponse, SubsetSelection]
DRAWS = 1_000_000
CHUNK = 250_000
OTHERS_CAP = 3
FAMILY_ALPHA = 1e-3


def _event_counts(mech, value: int, rng: np.random.Generator) -> np.ndarray:
    cells = 4 * (OTHERS_CAP + 1)
    counts = np.zeros(cells, dtype=np.int64)
    for start in range(0, DRAWS, CHUNK):
        reports = mech.perturb(np.full(min(CHUNK, DRAWS - start), value), rng=rng)
        others = np.minimum(reports[:, 2:].sum(axis=1), OTHERS_CAP)
        code = (reports[:, 0] * 2 + reports[:, 1]) * (OTHERS_CAP + 1) + others
        counts += np.bincount(code, minlength=cells)
    return counts


def _clopper_pearson(k: np.ndarray, n: int, a: float) -> tuple[np.ndarray, np.ndarray]:
    lower = np.where(k > 0, beta.ppf(a, k, n - k + 1), 0.0)
    upper = np.where(k < n, beta.ppf(1 - a, k + 1, n - k), 1.0)
    return lower, upper


def audit(mech, seed: int) -> tuple[float, float]:
    """(lower, upper) confidence bounds on the largest observed privacy loss."""
    rng = np.random.default_rng(seed)
    k0, k1 = _event_counts(mech, 0, rng), _event_counts(mech, 1, rng)
    a = FAMILY_ALPHA / (4 * k0.size)  # events x 2 directions x 2 ends
    lo0, hi0 = _clopper_pearson(k0, DRAWS, a)
    lo1, hi1 = _clopper_pearson(k1, DRAWS, a)
    seen = (k0 > 0) | (k1 > 0)
    with np.errstate(divide="ignore"):
        loss_low = np.maximum(np.log(lo0 / hi1), np.log(lo1 / hi0))[seen]
        loss_high = np.maximum(np.log(hi0 / lo1), np.log(hi1 / lo0))[seen]
    return float(loss_low.max()), float(loss_high.max())


def _check(kind, m, epsilon):
    mech = kind.from_epsilon(epsilon, m)
    low, high = audit(mech, seed=zlib.crc32(f"{kind.__name__}-{m}-{epsilon}".encode()))
    assert low <= epsilon, f"audit shows a loss of at least {low:.4f} > epsilon={epsilon}"
    assert high >= epsilon, f"loss {epsilon} never attained (upper bound {high:.4f})"


# A representative subset: every mechanism, each domain size and each epsilon
# at least once, in ~5 s; the full 80-point grid runs under -m slow.
REPRESENTATIVE = [
    (PQPerturbation, 4, 0.5),
    (PQPerturbation, 64, 4.0),
    (RAPPOR, 2, 1.0),
    (RAPPOR, 16, 2.0),
    (OUE, 16, 4.0),
    (OUE, 4, 1.0),
    (RandomizedResponse, 4, 2.0),
    (RandomizedResponse, 64, 0.5),
    (SubsetSelection, 16, 1.0),
    (SubsetSelection, 64, 2.0),
]


@pytest.mark.parametrize(
    ("kind", "m", "epsilon"), REPRESENTATIVE, ids=lambda x: getattr(x, "__name__", str(x))
)
def test_audit_representative(kind, m, epsilon):
    _check(kind, m, epsilon)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
@pytest.mark.parametrize("m", [2, 4, 16, 64])
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 4.0])
def test_audit_full_grid(kind, m, epsilon):
    _check(kind, m, epsilon)


def test_audit_catches_a_mechanism_that_leaks_more_than_it_claims():
    # A (p, q) pair whose true loss is 1.5 labelled with a smaller claim: the
    # audit's lower bound must exceed the claim (the check above would fail).
    leaky = PQPerturbation(p=0.7, q=0.3, m=4)  # true loss 2 ln(7/3) = 1.69
    low, _ = audit(leaky, seed=1)
    assert low > 1.5
    assert math.isclose(leaky.epsilon, 2 * math.log(7 / 3))
