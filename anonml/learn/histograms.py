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
    "pooled_label_shares",
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
    cov_offset : float
    cov_cell : ndarray of shape (*shape, K) or None
        The noise covariance of two different cells' raw estimates is
        ``cov_offset + cov_cell[i] + cov_cell[j]``
        (:meth:`~anonml.privacy.Mechanism.count_covariance`): zero for unary
        encodings, negative for k-RR and subset selection, whose bits of one
        report are dependent. Sums and contrasts of cells (class totals, a
        cell's label shares) need it; None means zero.
    """

    features: tuple[int, ...]
    shape: tuple[int, ...]
    counts: np.ndarray
    variance: np.ndarray
    n: int
    raw: np.ndarray | None = None
    cov_offset: float = 0.0
    cov_cell: np.ndarray | None = None

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
        if self.cov_cell is not None and self.cov_cell.shape != want:
            raise ValueError(
                f"histogram of features {self.features}: cov_cell {self.cov_cell.shape} is not {want}"
            )

    def flat_cov_cell(self) -> np.ndarray:
        """``cov_cell`` as (cells, K), zeros when None."""
        if self.cov_cell is None:
            return np.zeros((int(np.prod(self.shape, dtype=np.int64)), self.n_classes))
        return self.cov_cell.reshape(-1, self.n_classes)

    def class_total_variance(self) -> np.ndarray:
        """Noise variance of each class's raw total ``Σ_v r_vc``, shape (K,).

        Over the V cells of a class, ``Σ_v σ²_vc + Σ_{v≠v'} Cov = Σ_v σ²_vc +
        o·V(V−1) + 2(V−1)·Σ_v g_vc`` (``o``, ``g`` the covariance terms).
        """
        var, g = self.flat_variance(), self.flat_cov_cell()
        cells = var.shape[0]
        total = var.sum(axis=0) + self.cov_offset * cells * (cells - 1) + 2.0 * (cells - 1) * g.sum(axis=0)
        return np.clip(total, 0.0, None)

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
    # the covariance at the same plug-in counts as the variance (estimate_counts)
    offset, cell = result.mechanism.count_covariance(int(n), np.clip(result.counts, 0.0, n))
    return SubsetHistogram(
        tuple(int(f) for f in features),
        tuple(int(s) for s in shape),
        np.asarray(result.counts, dtype=float).reshape(full),
        np.asarray(result.variance, dtype=float).reshape(full),
        int(n),
        np.asarray(result.raw, dtype=float).reshape(full),
        float(offset),
        np.asarray(cell, dtype=float).reshape(full),
    )


def pool_histograms(histograms: Sequence[SubsetHistogram]) -> list[SubsetHistogram]:
    """Merge histograms of the same feature subset (from different partitions).

    Disjoint partitions give independent estimates of one subset, so their
    counts, variances, covariance terms and report numbers add; one pooled histogram per distinct
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
        both = seen.cov_cell is None and h.cov_cell is None
        cell = None if both else seen.flat_cov_cell() + h.flat_cov_cell()
        pooled[h.features] = SubsetHistogram(
            h.features,
            h.shape,
            seen.counts + h.counts,
            seen.variance + h.variance,
            seen.n + h.n,
            raw,
            seen.cov_offset + h.cov_offset,
            None if cell is None else cell.reshape(h.counts.shape),
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


#: K ≥ 3 classes: the label distribution moves off uniform only by the share of its deviation beyond
#: ``c_K`` times its noise, ``c_K`` the 1 − PRIOR_FALSE_ALARM quantile of χ²_{K−1}/(K−1) — what
#: ``‖p̂ − u‖²/v`` is under a uniform truth — since a prior pushed off by noise (to 0 for a class, at
#: worst) costs more log loss than it can win. (c = 3, a 5 % false alarm at K = 3, let iris at ε_T = 0.5
#: reach 1.47 nats against the prior's 1.10 once the class totals' noise was no longer overstated.)
PRIOR_FALSE_ALARM = 1e-2
#: Two classes: the Wiener factor itself (margin 1), which minimises the expected squared error of the
#: prior and so its Brier excess ``(π̂ − π)²``; a margin of 3 there pulled a noisy but informative base
#: rate (breast cancer at ε_T = 1: 0.63 ± 0.09) to 1/2, worse than its noise (+0.016 Brier vs ≈ +0.007).
BINARY_PRIOR_NOISE_MARGIN = 1.0
#: K ≥ 3, once the χ² test above finds a deviation and the counts are consistent (non-negative): the
#: prior is the consistent counts' label shares ``p̃`` (:func:`label_distribution`) shrunk toward
#: uniform by ``max(0, 1 − c·v/‖p̃ − u‖²)`` with this ``c`` and ``v`` the *unbiased* shares' noise
#: (:func:`pooled_label_shares`). The consistency step (Norm-Sub: negative cells cut to 0, the rest
#: lowered to sum to n) leaves shares with less noise than the unbiased ones (benchmarks/trivial_floors.py
#: tuning sets, 10 splits: squared error 0.024 against 0.030 on skewed4 at ε_T = 1, 0.028 against 0.36
#: on wine at 0.5), so ``v`` overstates theirs and the plain Wiener factor (c = 1) is already
#: conservative; the χ² margin on top had pulled a detected skew most of the way back to uniform.
#: Detection stays the χ² test's: used for detection too, the consistent shares moved near-uniform
#: priors off uniform enough to outweigh weak terms' argmax (digits at ε_T = 4: accuracy 0.37 → 0.32).
#: Against the test labels' distribution (KL, 10 splits) skewed4's prior went from 0.118 to 0.100 nats
#: at ε_T = 1 and from 0.027 to 0.016 at 2; wine's at ε_T = 2 from 0.012 to 0.019.
CONSISTENT_PRIOR_NOISE_MARGIN = 1.0
#: K ≥ 3: the least share of the deviation kept, so a prior the noise pulled to uniform still ranks the
#: classes as the private totals do (an exact tie made every fallback prediction class 0, whatever the
#: majority: wine at ε_T ≤ 1 scored 0.33 against the majority's 0.39); it moves no probability by more
#: than 1e-3 of the deviation.
MIN_PRIOR_SHARE = 1e-3


def pooled_label_shares(histograms: Sequence[SubsetHistogram]) -> tuple[np.ndarray, float]:
    """The pooled unbiased label shares ``p̂`` and their noise ``v = Σ_c Var(p̂_c)``, unshrunk.

    ``p̂_c`` is class c's raw total over every report divided by the number of
    reports (unbiased, possibly negative); ``v`` sums each class total's noise
    variance (:meth:`SubsetHistogram.class_total_variance`) over ``n²``.
    """
    label_distribution(histograms)  # the same checks: classes agree, counts exist
    per_class = sum(h.unbiased_counts().sum(axis=0) for h in histograms)
    total = float(sum(h.n for h in histograms))
    noise = float(sum(np.sum(h.class_total_variance()) for h in histograms)) / total**2
    return np.asarray(per_class, dtype=float) / total, noise


def shrunk_label_distribution(histograms: Sequence[SubsetHistogram]) -> np.ndarray:
    """The pooled label distribution shrunk toward uniform as far as its noise says.

    With ``p̂`` the pooled unbiased estimate (raw counts where known, each
    class's total over all reports divided by their number), ``u = 1/K`` and
    ``v = Σ_c Var(p̂_c)`` from each class total's noise variance
    (:meth:`SubsetHistogram.class_total_variance`: the cells' variances *and*
    covariances — a k-RR class total is far less noisy than the sum of its
    cells' variances, which overstated it and pushed the prior to uniform),
    ``E‖p̂ − u‖² = ‖π − u‖² + v``, so the share of the observed deviation that
    is signal is estimated by ``s = max(0, 1 − c·v/‖p̂ − u‖²)`` (the plug-in
    Wiener / positive-part James–Stein factor; ``c = 1`` for two classes, where
    it minimises the prior's Brier excess, else a χ² margin against noise,
    :data:`PRIOR_FALSE_ALARM`) and the estimate is
    ``u + s·(p̂ − u)``; for K ≥ 3 with consistent counts, once ``s > 0``, the kept deviation is
    instead that of the consistent counts' shares with margin :data:`CONSISTENT_PRIOR_NOISE_MARGIN`.
    When the privacy noise swamps the label counts the
    prior falls back to uniform instead of putting a class at ~0 (whose
    members would then cost ``−log 0`` in log loss); for two classes the
    estimate is the posterior mean on [0, 1] (:func:`_truncated_posterior_mean`),
    so a share the noise pushed outside the interval stays a probability; for K ≥ 3 it keeps at
    least :data:`MIN_PRIOR_SHARE` of the deviation, so its argmax is still the
    privately estimated majority class.
    """
    p, noise = pooled_label_shares(histograms)
    k = p.size
    uniform = np.full(k, 1.0 / k)
    margin = BINARY_PRIOR_NOISE_MARGIN if k == 2 else noise_margin(k)
    share = _kept_share(p, uniform, noise, margin)
    if k > 2 and share > 0 and all(np.all(h.counts >= 0) for h in histograms):
        # A deviation stands beyond the χ² margin: its size is read off the consistent counts
        # (CONSISTENT_PRIOR_NOISE_MARGIN).
        p = label_distribution(histograms)
        share = _kept_share(p, uniform, noise, CONSISTENT_PRIOR_NOISE_MARGIN)
    if k == 2:
        positive = _truncated_posterior_mean(0.5 + share * (float(p[1]) - 0.5), share * noise / 2)
        return np.array([1.0 - positive, positive])
    share = max(share, MIN_PRIOR_SHARE)
    shrunk = np.clip(uniform + share * (p - uniform), 0.0, None)
    return shrunk / shrunk.sum()


def _truncated_posterior_mean(mean: float, variance: float) -> float:
    """Mean of ``N(mean, variance)`` restricted to [0, 1]: the binary prior's posterior mean.

    The Wiener estimate ``u + s·(p̂ − u)`` is the mean of the normal posterior of ``π`` under a normal
    prior at ``u`` (empirical Bayes, variance ``s·σ²`` with ``σ² = v/2`` the share's noise); ``π`` is
    a probability, so the posterior lives on [0, 1]. Where the raw share is far outside it (Adult,
    560 reports at ε_T = 0.5: ``p̂₁ = −0.09 ± 0.16``) the untruncated mean fell below 0 and the prior
    was clipped to ~0, a class then costing 9 nats per member; truncated it is 0.11. Inside the
    interval, a few standard deviations from its ends, nothing changes.
    """
    if variance <= 0:
        return float(np.clip(mean, 0.0, 1.0))
    from scipy.stats import truncnorm  # scipy.stats costs a second at import: only when fitting

    sd = float(np.sqrt(variance))
    return float(truncnorm.mean((0.0 - mean) / sd, (1.0 - mean) / sd, loc=mean, scale=sd))


def _kept_share(shares: np.ndarray, uniform: np.ndarray, noise: float, margin: float) -> float:
    """``max(0, 1 − margin·noise/‖shares − uniform‖²)``; 0 for no deviation."""
    deviation = float(np.sum((shares - uniform) ** 2))
    return 0.0 if deviation <= 0 else max(0.0, 1.0 - margin * noise / deviation)


def noise_margin(k: int) -> float:
    """The χ² margin ``c`` of a K-class shrinkage: ``χ²_{K−1}(1 − PRIOR_FALSE_ALARM) / (K − 1)``,
    so noise alone leaves a deviation with probability :data:`PRIOR_FALSE_ALARM`."""
    from scipy.stats import chi2  # scipy.stats costs a second at import: only when a margin is needed

    return float(chi2.ppf(1 - PRIOR_FALSE_ALARM, k - 1)) / (k - 1)


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


def dependence_and_noise(
    h: SubsetHistogram, prior: np.ndarray | None = None
) -> tuple[float, float, float]:
    """A histogram's label dependence ``D`` and its expectation ``E₀[D]`` under independence.

    On the unbiased counts ``r_vc`` (raw, before consistency; the consistent
    ones stand in when raw are unknown) with cell totals ``s_v`` and class
    shares ``π_c``, ``D = Σ_vc (r_vc − s_v·π_c)²``, and ``D − E₀[D]`` estimates
    the signal energy (:func:`~anonml.learn.ensemble.shrinkage_factor`).

    *π given* (``prior``: the label distribution pooled over many histograms,
    whose own noise is negligible here): each cell's residual ``a_c·r_v`` with
    ``a_c = e_c − π_c·1`` is linear in its K counts, so exactly

        E₀[D] = Σ_vc [Σa²σ² + o·((Σa)² − Σa²) + 2(Σa·g)(Σa) − 2Σa²g] + Σ_vc s_v·π_c(1 − π_c),

    the privacy noise's variances ``σ²`` and covariances ``o + g_i + g_j``
    (:attr:`SubsetHistogram.cov_offset`; zero for independent bits, where the
    bracket is ``σ²_vc(1 − π_c)² + π_c²·Σ_{c'≠c} σ²_vc'``, negative for k-RR and
    subset selection) plus the sampling noise of the true counts.

    *π from the histogram itself* (``prior`` None): the shares absorb part of
    the noise, so to first order the residual is the double-centred noise
    ``(A ⊗ B)·η`` (``A = I − w·1ᵀ`` over cells with ``w_v = s_v/N``,
    ``B = I − π·1ᵀ``): ``E₀[D] = Σ_vc (σ²_vc − o − 2g_vc)·α_v·β_c + o·‖A1‖²‖B1‖²
    + 2·(AᵀA1)ᵀG(BᵀB1) + Σ_vc s_v·π_c(1 − π_c)(1 − w_v)`` with
    ``α_v = 1 − 2w_v + ‖w‖²``, ``β_c = 1 − 2π_c + ‖π‖²``.

    Taking the histogram's own π as if known, and its cells' noise as
    independent, overstated ``E₀[D]`` by up to ``1/α`` — twice for two bins —
    so the temperature saw no signal in small groups and fell to its floor.

    Returns
    -------
    (D, E₀[D], sd₀[D])
        ``sd₀[D] = √(2·Σ_vc e_vc²)`` with ``e_vc`` the cells' shares of ``E₀[D]``:
        the standard deviation of ``D`` under independence (Gaussian cells).
    """
    r = h.unbiased_counts()
    k = h.n_classes
    var, g, o = h.flat_variance(), h.flat_cov_cell(), float(h.cov_offset)
    s = np.clip(r.sum(axis=1), 0.0, None)
    if prior is not None:
        pi = np.clip(np.asarray(prior, dtype=float), 1e-6, None)
        pi = pi / pi.sum()
    else:
        pi = np.clip(r.sum(axis=0), 1e-6, None)
        pi = pi / pi.sum()
    deviation = float(np.sum((r - r.sum(axis=1, keepdims=True) * pi[None, :]) ** 2))
    if prior is not None:
        p = pi[None, :]
        squares = (1 - p) ** 2 + (k - 1) * p**2  # Σ a²
        total = 1 - k * p  # Σ a
        a2_var = var * (1 - p) ** 2 + p**2 * (var.sum(axis=1, keepdims=True) - var)
        a_g = g - p * g.sum(axis=1, keepdims=True)
        a2_g = g * (1 - p) ** 2 + p**2 * (g.sum(axis=1, keepdims=True) - g)
        cell = np.clip(a2_var + o * (total**2 - squares) + 2 * a_g * total - 2 * a2_g, 0.0, None)
        cell = cell + s[:, None] * (pi * (1 - pi))[None, :]
        null = float(np.sum(cell))
        return deviation, null, float(np.sqrt(2.0 * np.sum(cell**2)))
    w = s / max(float(np.sum(s)), 1e-9)
    n_cells = var.shape[0]
    alpha = 1.0 - 2.0 * w + float(np.sum(w**2))
    beta = 1.0 - 2.0 * pi + float(np.sum(pi**2))
    cell = np.clip((var - o - 2.0 * g) * alpha[:, None] * beta[None, :], 0.0, None)
    a1 = 1.0 - n_cells * w  # A·1
    b1 = 1.0 - k * pi  # B·1
    u = a1 - w * float(np.sum(a1))  # AᵀA·1
    z = b1 - pi * float(np.sum(b1))  # BᵀB·1
    extra = o * float(np.sum(a1**2)) * float(np.sum(b1**2)) + 2.0 * float(u @ g @ z)
    cell = cell + s[:, None] * (pi * (1 - pi))[None, :] * (1 - w)[:, None]
    null = max(float(np.sum(cell)) + extra, 0.0)
    shares = cell * (null / max(float(np.sum(cell)), 1e-12))
    return deviation, null, float(np.sqrt(2.0 * np.sum(shares**2)))
