"""Histograms over (binned feature subset × label): the aggregator's view of one partition.

A report of subset ``S = (f_1, …, f_s)`` is one value of the domain
``bins(f_1) × … × bins(f_s) × {0, …, K−1}`` of size ``m = K·Π b_i`` (K label
classes, 2 for a binary problem), encoded in C order with the label last
(:func:`report_values`). The aggregator sums the
reported bit vectors of a partition and debiases them with the mechanism that
produced them (thesis eq. 7.1, :func:`anonml.privacy.estimate_counts`); the
consistent counts and their predicted variances are held in a
:class:`SubsetHistogram`, shaped ``(*bins, K)``.
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
    "label_distribution",
    "shrunk_label_distribution",
    "dependence_statistic",
    "dependence_and_noise",
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
    counts : ndarray of shape (*shape, K)
        Consistent (non-negative) count estimates; ``counts[..., c]`` are the
        reports of label class ``c`` (``counts[..., 1]`` the positives of a
        binary problem). Sums to ``n`` for a norm-preserving consistency step.
    variance : ndarray of shape (*shape, K)
        Predicted variance of each raw (unbiased) count estimate; zeros for
        exact counts.
    n : int
        Number of reports behind the histogram.
    raw : ndarray of shape (*shape, K) or None
        The unbiased count estimates before the consistency step (may be
        negative), when known: their noise is exactly ``variance``, which is
        what the noise-aware shrinkage (:func:`dependence_and_noise`,
        :func:`shrunk_label_distribution`) needs.
    """

    features: tuple[int, ...]
    shape: tuple[int, ...]
    counts: np.ndarray
    variance: np.ndarray
    n: int
    raw: np.ndarray | None = None

    def __post_init__(self) -> None:
        k = self.counts.shape[-1] if self.counts.ndim else 0
        want = (*self.shape, k)
        if k < 2 or self.counts.shape != want or self.variance.shape != want:
            raise ValueError(
                f"histogram of features {self.features}: counts {self.counts.shape} and "
                f"variance {self.variance.shape} must both have shape (*{self.shape}, K) with K >= 2"
            )
        if len(self.features) != len(self.shape):
            raise ValueError(f"features {self.features} and shape {self.shape} differ in length")
        if self.raw is not None and self.raw.shape != want:
            raise ValueError(f"histogram of features {self.features}: raw {self.raw.shape} is not {want}")

    def unbiased_counts(self) -> np.ndarray:
        """The raw (unbiased) estimates when known, else the consistent counts, shape (cells, K)."""
        return (self.counts if self.raw is None else self.raw).reshape(-1, self.n_classes)

    @property
    def n_classes(self) -> int:
        """K, the size of the label domain."""
        return int(self.counts.shape[-1])

    @property
    def cells(self) -> np.ndarray:
        """Every cell's feature codes, shape (Π shape, k), in C order."""
        grids = np.indices(self.shape).reshape(len(self.shape), -1)
        return grids.T.astype(np.int64)

    def flat_counts(self) -> np.ndarray:
        """Counts as (Π shape, K): one row per cell, one column per label class."""
        return self.counts.reshape(-1, self.n_classes)

    def flat_variance(self) -> np.ndarray:
        return self.variance.reshape(-1, self.n_classes)


def domain_size(shape: Sequence[int], n_classes: int = 2) -> int:
    """Report domain size ``m = K·Π shape``."""
    return int(n_classes) * int(np.prod(shape, dtype=np.int64))


def report_values(codes: np.ndarray, y: np.ndarray, shape: Sequence[int], n_classes: int = 2) -> np.ndarray:
    """Value indices of reports: the subset's codes and the label, raveled in C order.

    Parameters
    ----------
    codes : ndarray of shape (n, k), int
        Binned values of the subset's k features.
    y : ndarray of shape (n,), int in {0, …, K−1}
    shape : sequence of int
        Bins of each of the k features.
    n_classes : int, default=2
        K, the size of the label domain.
    """
    codes = np.asarray(codes, dtype=np.int64)
    y = np.asarray(y, dtype=np.int64)
    if codes.ndim != 2 or codes.shape[1] != len(shape) or codes.shape[0] != y.shape[0]:
        raise ValueError(f"codes {codes.shape} and labels {y.shape} do not fit a subset of shape {shape}")
    if y.size and (y.min() < 0 or y.max() >= n_classes):
        raise ValueError(
            f"labels must be class indices 0..{n_classes - 1}, got values in [{y.min()}, {y.max()}]"
        )
    return np.ravel_multi_index((*codes.T, y), (*shape, int(n_classes)))


def exact_histogram(
    codes: np.ndarray,
    y: np.ndarray,
    features: Sequence[int],
    shape: Sequence[int],
    n_classes: int = 2,
) -> SubsetHistogram:
    """The true (non-private) histogram of a subset: the zero-noise reference."""
    values = report_values(codes, y, shape, n_classes)
    counts = np.bincount(values, minlength=domain_size(shape, n_classes)).astype(float)
    full = (*shape, int(n_classes))
    return SubsetHistogram(
        tuple(int(f) for f in features),
        tuple(int(s) for s in shape),
        counts.reshape(full),
        np.zeros(full),
        int(values.size),
        counts.reshape(full),
    )


def estimate_histogram(
    bit_sums: np.ndarray,
    mechanism: Mechanism | MechanismDescriptor,
    n: int,
    features: Sequence[int],
    shape: Sequence[int],
    *,
    consistency: str | None = "norm_sub",
    n_classes: int = 2,
) -> SubsetHistogram:
    """Debias the summed bit vectors of ``n`` reports into a :class:`SubsetHistogram`.

    Uses :func:`anonml.privacy.estimate_counts`: ``n̂_i = (ñ_i − q·n)/(p − q)``
    (thesis eq. 7.1) followed by the selected consistency step. ``n_classes``
    is K, the label domain of the reports.
    """
    full = (*shape, int(n_classes))
    result = estimate_counts(np.asarray(bit_sums), mechanism, int(n), consistency=consistency)
    return SubsetHistogram(
        tuple(int(f) for f in features),
        tuple(int(s) for s in shape),
        np.asarray(result.counts, dtype=float).reshape(full),
        np.asarray(result.variance, dtype=float).reshape(full),
        int(n),
        np.asarray(result.raw, dtype=float).reshape(full),
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
        raw = None if seen.raw is None or h.raw is None else seen.raw + h.raw
        pooled[h.features] = SubsetHistogram(
            h.features, h.shape, seen.counts + h.counts, seen.variance + h.variance, seen.n + h.n, raw
        )
    return list(pooled.values())


def label_distribution(histograms: Sequence[SubsetHistogram]) -> np.ndarray:
    """Pooled estimate of ``P(y = c)`` for every class ``c``, over every report of every histogram.

    Every report carries the label, so all partitions estimate the same
    distribution; pooling their counts averages out their noise.
    """
    if not histograms:
        raise ValueError("no histograms")
    k = histograms[0].n_classes
    if any(h.n_classes != k for h in histograms):
        raise ValueError("histograms disagree on the number of label classes")
    per_class = sum(h.counts.reshape(-1, k).sum(axis=0) for h in histograms)
    total = float(np.sum(per_class))
    if total <= 0:
        raise ValueError("histograms hold no counts")
    return np.asarray(per_class, dtype=float) / total


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


#: The label distribution moves off uniform only by the share of its deviation beyond this many times
#: its noise: under a uniform truth ``‖p̂ − u‖²/v`` is about χ²_{K−1}/(K−1), which passes 3 with
#: probability ≤ 0.05 for K ≥ 3, and a prior pushed off by noise costs more log loss than it can win.
PRIOR_NOISE_MARGIN = 3.0


def shrunk_label_distribution(histograms: Sequence[SubsetHistogram]) -> np.ndarray:
    """The pooled label distribution shrunk toward uniform as far as its noise says.

    With ``p̂`` the pooled unbiased estimate (raw counts where known, each
    class's total over all reports divided by their number), ``u = 1/K`` and
    ``v = Σ_c Var(p̂_c)`` from the predicted count variances,
    ``E‖p̂ − u‖² = ‖π − u‖² + v``, so the share of the observed deviation that
    is signal is estimated by ``s = max(0, 1 − c·v/‖p̂ − u‖²)`` (the plug-in
    Wiener / positive-part James–Stein factor, ``c`` = :data:`PRIOR_NOISE_MARGIN`
    for a margin against noise) and the estimate is
    ``u + s·(p̂ − u)``. When the privacy noise swamps the label counts the
    prior falls back to uniform instead of putting a class at ~0 (whose
    members would then cost ``−log 0`` in log loss).
    """
    label_distribution(histograms)  # the same checks: classes agree, counts exist
    k = histograms[0].n_classes
    per_class = sum(h.unbiased_counts().sum(axis=0) for h in histograms)
    total = float(sum(h.n for h in histograms))
    p = np.asarray(per_class, dtype=float) / total
    noise = float(sum(np.sum(h.variance) for h in histograms)) / total**2
    uniform = np.full(k, 1.0 / k)
    deviation = float(np.sum((p - uniform) ** 2))
    share = 0.0 if deviation <= 0 else max(0.0, 1.0 - PRIOR_NOISE_MARGIN * noise / deviation)
    shrunk = np.clip(uniform + share * (p - uniform), 0.0, None)
    return shrunk / shrunk.sum()


def dependence_statistic(h: SubsetHistogram, prior: np.ndarray) -> tuple[float, int]:
    """How far a histogram's cells are from label independence, in units of their noise.

    For cells ``v`` and classes ``c`` with estimated counts ``ĉ_vc``, predicted
    noise variances ``σ²_vc``, cell totals ``ĉ_v`` and class shares ``π̂_c``,

        T = Σ_vc (ĉ_vc − ĉ_v·π̂_c)² / (σ²_vc + ĉ_v·π̂_c(1 − π̂_c)),

    a chi-square-like statistic with at most ``df = cells·K`` degrees of
    freedom when the subset is independent of the label (each cell carries its
    own privacy noise; sampling noise alone would give ``(cells − 1)(K − 1)``).

    Returns
    -------
    (T, df)
    """
    prior = np.clip(np.asarray(prior, dtype=float), 1e-6, 1.0)
    counts = np.clip(h.flat_counts(), 0.0, None)
    totals = counts.sum(axis=1, keepdims=True)
    expected = totals * prior[None, :]
    spread = h.flat_variance() + expected * (1 - prior[None, :])
    stat = float(np.sum((counts - expected) ** 2 / np.maximum(spread, 1e-9)))
    return stat, int(counts.size)


def dependence_and_noise(h: SubsetHistogram) -> tuple[float, float, float]:
    """A histogram's label dependence ``D`` and its expectation ``E₀[D]`` under privacy noise alone.

    On the unbiased counts ``r_vc`` (raw, before consistency; the consistent
    ones stand in when raw are unknown) with noise variances ``σ²_vc`` and the
    histogram's own class shares ``π_c``, ``D = Σ_vc (r_vc − r_v·π_c)²``; if
    the subset were independent of the label, ``D`` would hold noise only, of
    mean ``E₀[D] = Σ_vc [σ²_vc(1 − π_c)² + π_c²·Σ_{c'≠c} σ²_vc']`` (cells'
    noise taken as independent; sampling noise, of the order of the counts
    rather than of the privacy noise, left out). ``D − E₀[D]`` estimates the
    signal energy (:func:`~anonml.learn.ensemble.shrinkage_factor`).

    Returns
    -------
    (D, E₀[D], sd₀[D])
        ``sd₀[D] = √(2·Σ_vc v_vc²)`` with ``v_vc`` each term's noise variance above:
        the standard deviation of ``D`` under noise alone (Gaussian cells).
    """
    r = h.unbiased_counts()
    pi = np.clip(r.sum(axis=0), 1e-6, None)
    pi = pi / pi.sum()
    var = h.flat_variance()
    deviation = float(np.sum((r - r.sum(axis=1, keepdims=True) * pi[None, :]) ** 2))
    others = var.sum(axis=1, keepdims=True) - var
    cell = var * (1 - pi[None, :]) ** 2 + pi[None, :] ** 2 * others
    return deviation, float(np.sum(cell)), float(np.sqrt(2.0 * np.sum(cell**2)))
