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

The cut points must be public before the pool reports: equal-width bins over
the range of scores the published model can give, a function of the model
alone. The debiased counts are used raw (unbiased, possibly negative): the
Platt score equations are linear in the counts, so their noise averages out
instead of being clipped into a bias.
Each pool peer spends ε_T once; the pools are disjoint, so no peer exceeds ε_T.
"""

from __future__ import annotations

import numpy as np

from anonml.learn.ensemble import Ensemble, platt_from_histogram
from anonml.privacy import best_mechanism, estimate_counts

__all__ = ["CALIBRATION_BINS", "score_range", "score_bins", "calibrate_ensemble"]

#: Score bins of a calibration report (domain 2·bins with the label).
CALIBRATION_BINS = 10


def score_range(ensemble: Ensemble) -> tuple[float, float]:
    """The smallest and largest score the ensemble can give: ``b + Σ w·min table``, ``b + Σ w·max table``."""
    low = float(ensemble.intercept) + sum(c.weight * float(np.min(c.table)) for c in ensemble.components)
    high = float(ensemble.intercept) + sum(c.weight * float(np.max(c.table)) for c in ensemble.components)
    return (low, high) if high > low else (low - 0.5, high + 0.5)


def score_bins(ensemble: Ensemble, n_bins: int = CALIBRATION_BINS) -> tuple[np.ndarray, np.ndarray]:
    """Public cut points of the score and the midpoint of every bin.

    ``n_bins`` equal-width bins span the ensemble's whole score range
    (:func:`score_range`), so they depend on the published model alone and a
    bin's midpoint is within half a bin of any score in it.

    Returns
    -------
    cuts : ndarray of shape (B − 1,)
        A score ``f`` falls in bin ``#{k : f > cuts[k]}``.
    centres : ndarray of shape (B,)
    """
    low, high = score_range(ensemble)
    edges = np.linspace(low, high, n_bins + 1)
    return edges[1:-1], 0.5 * (edges[:-1] + edges[1:])


def calibrate_ensemble(
    ensemble: Ensemble, codes: np.ndarray, y: np.ndarray, *, epsilon: float, rng: np.random.Generator
) -> Ensemble:
    """Simulate the calibration pool and return the ensemble with its Platt map.

    Parameters
    ----------
    ensemble : Ensemble
        A binary ensemble (``vote`` or ``logit``).
    codes : ndarray of shape (n_pool, n_features), int
        The calibration pool's binned rows.
    y : ndarray of shape (n_pool,), int in {0, 1}
    epsilon : float
        ε_T: each pool peer's one report.
    rng : numpy.random.Generator

    Returns
    -------
    Ensemble
        The same tables with ``calibration = (a, b)``; unchanged when the pool is empty.
    """
    if ensemble.kind == "softmax":
        raise ValueError("calibration maps binary ensembles only")
    if codes.shape[0] == 0:
        return ensemble
    cuts, centres = score_bins(ensemble, CALIBRATION_BINS)
    b = centres.size
    bins = np.searchsorted(cuts, ensemble.decision_function(codes), side="left")
    values = bins * 2 + np.asarray(y, dtype=np.int64)
    mechanism = best_mechanism(epsilon, 2 * b, int(values.size))
    bits = mechanism.perturb(values, rng)
    estimate = estimate_counts(bits.sum(axis=0), mechanism, int(values.size), consistency=None)
    counts = np.asarray(estimate.raw, dtype=float).reshape(b, 2)
    variance = np.asarray(estimate.variance, dtype=float).reshape(b, 2)
    return ensemble.with_calibration(platt_from_histogram(centres, counts, variance))
