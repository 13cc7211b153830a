"""Histograms over (binned feature subset × label): the aggregator's view of one partition.

A report of subset ``S = (f_1, …, f_k)`` is one value of the domain
``bins(f_1) × … × bins(f_k) × {0, 1}`` of size ``m = 2·Π b_i``, encoded in C
order with the label last (:func:`report_values`). The aggregator sums the
reported bit vectors of a partition and debiases them with the mechanism that
produced them (thesis eq. 7.1, :func:`anonml.privacy.estimate_counts`); the
consistent counts and their predicted variances are held in a
:class:`SubsetHistogram`, shaped ``(*bins, 2)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from anonml.privacy import Mechanism, MechanismDescriptor, estimate_counts

__all__ = [
    "SubsetHistogram",
    "report_values",
    "domain_size",
    "exact_histogram",
    "estimate_histogram",
    "pool_histograms",
    "label_fraction",
]


@dataclass(frozen=True, eq=False)
class SubsetHistogram:
    """Estimated counts of one feature subset jointly with the label.

    Attributes
    ----------
    features : tuple of int
        Column indices of the subset's features.
    shape : tuple of int
        Bins of each feature.
    counts : ndarray of shape (*shape, 2)
        Consistent (non-negative) count estimates; ``counts[..., 1]`` are the
        positives. Sums to ``n`` for a norm-preserving consistency step.
    variance : ndarray of shape (*shape, 2)
        Predicted variance of each raw (unbiased) count estimate; zeros for
        exact counts.
    n : int
        Number of reports behind the histogram.
    """

    features: tuple[int, ...]
    shape: tuple[int, ...]
    counts: np.ndarray
    variance: np.ndarray
    n: int

    def __post_init__(self) -> None:
        want = (*self.shape, 2)
        if self.counts.shape != want or self.variance.shape != want:
            raise ValueError(
                f"histogram of features {self.features}: counts {self.counts.shape} and "
                f"variance {self.variance.shape} must both have shape {want}"
            )
        if len(self.features) != len(self.shape):
            raise ValueError(f"features {self.features} and shape {self.shape} differ in length")

    @property
    def cells(self) -> np.ndarray:
        """Every cell's feature codes, shape (Π shape, k), in C order."""
        grids = np.indices(self.shape).reshape(len(self.shape), -1)
        return grids.T.astype(np.int64)

    def flat_counts(self) -> np.ndarray:
        """Counts as (Π shape, 2): one row per cell, columns label 0 and 1."""
        return self.counts.reshape(-1, 2)

    def flat_variance(self) -> np.ndarray:
        return self.variance.reshape(-1, 2)


def domain_size(shape: Sequence[int]) -> int:
    """Report domain size ``m = 2·Π shape``."""
    return 2 * int(np.prod(shape, dtype=np.int64))


def report_values(codes: np.ndarray, y: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """Value indices of reports: the subset's codes and the label, raveled in C order.

    Parameters
    ----------
    codes : ndarray of shape (n, k), int
        Binned values of the subset's k features.
    y : ndarray of shape (n,), int in {0, 1}
    shape : sequence of int
        Bins of each of the k features.
    """
    codes = np.asarray(codes, dtype=np.int64)
    y = np.asarray(y, dtype=np.int64)
    if codes.ndim != 2 or codes.shape[1] != len(shape) or codes.shape[0] != y.shape[0]:
        raise ValueError(f"codes {codes.shape} and labels {y.shape} do not fit a subset of shape {shape}")
    return np.ravel_multi_index((*codes.T, y), (*shape, 2))


def exact_histogram(
    codes: np.ndarray, y: np.ndarray, features: Sequence[int], shape: Sequence[int]
) -> SubsetHistogram:
    """The true (non-private) histogram of a subset: the zero-noise reference."""
    values = report_values(codes, y, shape)
    counts = np.bincount(values, minlength=domain_size(shape)).astype(float)
    full = (*shape, 2)
    return SubsetHistogram(
        tuple(int(f) for f in features),
        tuple(int(s) for s in shape),
        counts.reshape(full),
        np.zeros(full),
        int(values.size),
    )


def estimate_histogram(
    bit_sums: np.ndarray,
    mechanism: Mechanism | MechanismDescriptor,
    n: int,
    features: Sequence[int],
    shape: Sequence[int],
    *,
    consistency: str | None = "norm_sub",
) -> SubsetHistogram:
    """Debias the summed bit vectors of ``n`` reports into a :class:`SubsetHistogram`.

    Uses :func:`anonml.privacy.estimate_counts`: ``n̂_i = (ñ_i − q·n)/(p − q)``
    (thesis eq. 7.1) followed by the selected consistency step.
    """
    full = (*shape, 2)
    result = estimate_counts(np.asarray(bit_sums), mechanism, int(n), consistency=consistency)
    return SubsetHistogram(
        tuple(int(f) for f in features),
        tuple(int(s) for s in shape),
        np.asarray(result.counts, dtype=float).reshape(full),
        np.asarray(result.variance, dtype=float).reshape(full),
        int(n),
    )


def pool_histograms(histograms: Sequence[SubsetHistogram]) -> list[SubsetHistogram]:
    """Merge histograms of the same feature subset (from different partitions).

    Disjoint partitions give independent estimates of one subset, so their
    counts, variances and report numbers add; one pooled histogram per distinct
    subset is returned in order of first appearance.
    """
    pooled: dict[tuple[int, ...], SubsetHistogram] = {}
    for h in histograms:
        seen = pooled.get(h.features)
        if seen is None:
            pooled[h.features] = h
            continue
        if seen.shape != h.shape:
            raise ValueError(f"subset {h.features} appears with shapes {seen.shape} and {h.shape}")
        pooled[h.features] = SubsetHistogram(
            h.features, h.shape, seen.counts + h.counts, seen.variance + h.variance, seen.n + h.n
        )
    return list(pooled.values())


def label_fraction(histograms: Sequence[SubsetHistogram]) -> float:
    """Pooled estimate of P(y = 1) over every report of every histogram.

    Every report carries the label, so all partitions estimate the same
    fraction; pooling their counts averages out their noise.
    """
    positives = sum(float(h.counts[..., 1].sum()) for h in histograms)
    total = sum(float(h.counts.sum()) for h in histograms)
    if total <= 0:
        raise ValueError("histograms hold no counts")
    return positives / total
