"""Calibrated probabilities from a private (score bin, label) histogram.

A default-mode score sums per-subset terms that double-count correlated
features, and a paper-mode score is a share of votes: both rank well and are
poor probabilities. Once the model exists, a third disjoint pool of peers
(the calibration pool, ``calibration_fraction`` of the roster) each computes
its own score ``f(x)``, bins it with public cut points and sends one report
of (score bin, label) at the full ε_T through the least-error mechanism. The
debiased histogram gives, per score bin, estimated counts of each label, and
Platt scaling ``P(y=1|x) = σ(a·f(x) + b)`` is fitted to it by maximum
a-posteriori (:func:`~anonml.learn.ensemble.platt_from_histogram`): two
parameters, so a few hundred noisy reports suffice.

The cut points must be public before the pool reports: they are quantiles of
the score under the model's own estimate of the feature distribution (each
feature's estimated marginal from the histograms, features drawn
independently) — post-processing of released data, no extra privacy cost.
Each pool peer spends ε_T once; the pools are disjoint, so no peer exceeds ε_T.
"""

from __future__ import annotations

import numpy as np

from anonml.learn.ensemble import Ensemble, platt_from_histogram
from anonml.learn.histograms import SubsetHistogram, pool_histograms
from anonml.privacy import best_mechanism, estimate_counts

__all__ = ["CALIBRATION_BINS", "feature_marginals", "score_bins", "calibrate_ensemble"]

#: Score bins of a calibration report (domain 2·bins with the label).
CALIBRATION_BINS = 10
_SYNTHETIC_ROWS = 20_000


def feature_marginals(
    histograms: list[SubsetHistogram] | tuple[SubsetHistogram, ...],
) -> dict[int, np.ndarray]:
    """Each feature's estimated distribution over its bins (first pooled histogram holding it).

    Negative estimates are clipped to 0; a feature whose estimates are all
    zero gets the uniform distribution.
    """
    out: dict[int, np.ndarray] = {}
    for h in pool_histograms(histograms):
        counts = np.clip(h.counts, 0.0, None)
        for axis, f in enumerate(h.features):
            if f in out:
                continue
            other = tuple(a for a in range(counts.ndim) if a != axis)
            m = counts.sum(axis=other)
            out[f] = m / m.sum() if m.sum() > 0 else np.full(m.size, 1.0 / m.size)
    return out


def score_bins(
    ensemble: Ensemble,
    histograms: list[SubsetHistogram] | tuple[SubsetHistogram, ...],
    n_features: int,
    rng: np.random.Generator,
    n_bins: int = CALIBRATION_BINS,
) -> tuple[np.ndarray, np.ndarray]:
    """Public cut points of the score and a representative score per bin.

    Scores of synthetic rows, each feature drawn independently from its
    estimated marginal, are cut at their ``k/n_bins`` quantiles (duplicates
    merged); a bin's representative is the median synthetic score in it.

    Returns
    -------
    cuts : ndarray of shape (B − 1,)
        A score ``f`` falls in bin ``#{k : f > cuts[k]}``.
    centres : ndarray of shape (B,)
    """
    marginals = feature_marginals(histograms)
    codes = np.zeros((_SYNTHETIC_ROWS, n_features), dtype=np.int64)
    for f, p in marginals.items():
        codes[:, f] = rng.choice(p.size, size=_SYNTHETIC_ROWS, p=p)
    scores = ensemble.decision_function(codes)
    cuts = np.unique(np.quantile(scores, np.arange(1, n_bins) / n_bins))
    which = np.searchsorted(cuts, scores, side="left")
    centres = np.empty(cuts.size + 1)
    for b in range(cuts.size + 1):
        inside = scores[which == b]
        if inside.size:
            centres[b] = np.median(inside)
        else:  # an empty bin (cannot happen for quantile cuts, kept for safety of the fit)
            lo = cuts[b - 1] if b > 0 else cuts[0]
            hi = cuts[b] if b < cuts.size else cuts[-1]
            centres[b] = 0.5 * (lo + hi)
    return cuts, centres


def calibrate_ensemble(
    ensemble: Ensemble,
    histograms: list[SubsetHistogram] | tuple[SubsetHistogram, ...],
    codes: np.ndarray,
    y: np.ndarray,
    *,
    epsilon: float,
    rng: np.random.Generator,
    consistency: str | None = "norm_sub",
) -> Ensemble:
    """Simulate the calibration pool and return the ensemble with its Platt map.

    Parameters
    ----------
    ensemble : Ensemble
        A binary ensemble (``vote`` or ``logit``).
    histograms : the training histograms (for the public score cut points).
    codes : ndarray of shape (n_pool, n_features), int
        The calibration pool's binned rows.
    y : ndarray of shape (n_pool,), int in {0, 1}
    epsilon : float
        ε_T: each pool peer's one report.
    rng : numpy.random.Generator
    consistency : str or None
        Consistency step of the (score bin, label) counts.

    Returns
    -------
    Ensemble
        The same tables with ``calibration = (a, b)``; unchanged when the pool is empty.
    """
    if ensemble.kind == "softmax":
        raise ValueError("calibration maps binary ensembles only")
    if codes.shape[0] == 0:
        return ensemble
    cuts, centres = score_bins(ensemble, histograms, codes.shape[1], rng)
    b = centres.size
    bins = np.searchsorted(cuts, ensemble.decision_function(codes), side="left")
    values = bins * 2 + np.asarray(y, dtype=np.int64)
    mechanism = best_mechanism(epsilon, 2 * b, int(values.size))
    bits = mechanism.perturb(values, rng)
    estimate = estimate_counts(bits.sum(axis=0), mechanism, int(values.size), consistency=consistency)
    counts = np.asarray(estimate.counts, dtype=float).reshape(b, 2)
    return ensemble.with_calibration(platt_from_histogram(centres, counts))
