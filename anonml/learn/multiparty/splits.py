"""Splitting a training set among parties: evenly, or by given fractions (skew).

Rajkumar & Agarwal (2012, fig. 2) compare K = 5, 10, 15 equal parties with a
skewed split of five parties holding [0.01, 0.29, 0.2, 0.25, 0.25] of the data;
Hamm et al. (2016) use M = 1,000 … 20,000 parties of a few records each. Both
are :func:`assign_parties` with or without fractions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from anonml.learn.multiparty.common import MultipartyError
from anonml.randomness import resolve_rng

__all__ = ["parse_skew", "assign_parties", "split_public"]


def parse_skew(text: str) -> tuple[float, ...] | None:
    """``"uniform"`` → ``None``; ``"0.01,0.29,0.2,0.25,0.25"`` → fractions (must sum to 1)."""
    text = text.strip()
    if text.lower() in ("", "uniform", "even", "none"):
        return None
    try:
        fractions = tuple(float(part) for part in text.replace(" ", "").strip("[]").split(","))
    except ValueError:
        raise MultipartyError(f"skew {text!r} is neither 'uniform' nor comma-separated fractions") from None
    if len(fractions) < 1 or any(not (f > 0) for f in fractions):
        raise MultipartyError(f"skew {text!r}: every fraction must be positive")
    if not math.isclose(sum(fractions), 1.0, abs_tol=1e-6):
        raise MultipartyError(f"skew {text!r}: fractions sum to {sum(fractions):g}, not 1")
    return fractions


def assign_parties(
    n: int,
    parties: int,
    skew: Sequence[float] | None = None,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Party id (0..K-1) of each of n rows, in random order.

    Parameters
    ----------
    n : int
        Number of rows to share out.
    parties : int
        K; with ``skew`` it must equal ``len(skew)``.
    skew : sequence of float, optional
        Fraction of rows of each party; ``None`` shares them evenly (sizes
        differ by at most one).
    rng : numpy.random.Generator, optional

    Returns
    -------
    ndarray of shape (n,), int
        Every party holds at least one row.
    """
    if parties < 1 or parties > n:
        raise MultipartyError(f"cannot share {n} rows among {parties} parties (each needs a row)")
    gen = resolve_rng(rng)
    if skew is None:
        sizes = np.full(parties, n // parties)
        sizes[: n % parties] += 1
    else:
        if len(skew) != parties:
            raise MultipartyError(f"skew has {len(skew)} fractions for {parties} parties")
        raw = np.asarray(skew, dtype=np.float64) * n
        sizes = np.maximum(np.floor(raw).astype(int), 1)
        # Hand the rows left by flooring to the largest remainders, take any excess
        # (from the at-least-one rule) from the largest parties.
        while sizes.sum() < n:
            sizes[int(np.argmax(raw - sizes))] += 1
        while sizes.sum() > n:
            sizes[int(np.argmax(sizes))] -= 1
    ids = np.repeat(np.arange(parties), sizes)
    return gen.permutation(ids)


def split_public(
    y: np.ndarray, fraction: float, rng: np.random.Generator | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Indices (public, private) with a stratified ``fraction`` of rows public.

    Every class present keeps at least one private row; the public share of
    each class is rounded, with at least one public row per class when
    ``fraction > 0``.
    """
    if not 0.0 <= fraction < 1.0:
        raise MultipartyError(f"public fraction must be in [0, 1), got {fraction}")
    gen = resolve_rng(rng)
    public: list[np.ndarray] = []
    private: list[np.ndarray] = []
    for label in np.unique(y):
        rows = gen.permutation(np.flatnonzero(y == label))
        take = 0 if fraction == 0 else min(max(1, round(fraction * rows.size)), rows.size - 1)
        public.append(rows[:take])
        private.append(rows[take:])
    return np.sort(np.concatenate(public)), np.sort(np.concatenate(private))
