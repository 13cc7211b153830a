"""The plain LDP naive-Bayes baseline every AnonML mode must beat.

What a practitioner would build without AnonML's machinery: the peers are
split at random into one group per feature; every peer of group ``j`` sends
one report of (bin of feature ``j``, label) at the full ε through k-ary
randomised response or optimised unary encoding, whichever has the smaller
variance for that domain (``k-RR`` iff ``m < 3e^ε + 2``, Wang et al. 2017);
the aggregator debiases the counts, clips them at 0, adds one to every cell
(Laplace smoothing) and scores a row by naive Bayes,

    log P(y=1|x)/P(y=0|x) = log π̂₁/π̂₀ + Σ_j log P̂(x_j | y=1)/P̂(x_j | y=0),

with ``π̂`` the pooled label shares. Numeric features are cut into
equal-width bins over their public range (no private quantiles: nothing is
spent on bins), as many as :func:`~anonml.learn.binning.auto_n_bins` allows for
the group size. Each peer releases one ε-LDP report: ε per peer in total.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from anonml.learn.binning import Binning, auto_n_bins
from anonml.learn.histograms import domain_size, report_values
from anonml.model import FeatureKind, FeatureSpec
from anonml.privacy import OUE, Mechanism, RandomizedResponse, estimate_counts

__all__ = ["LdpNaiveBayes", "fit_ldp_naive_bayes"]


class LdpNaiveBayes:
    """A fitted LDP naive-Bayes baseline: bins, per-feature log-likelihood ratios, prior."""

    def __init__(self, binning: Binning, tables: list[np.ndarray], log_prior_ratio: float) -> None:
        self.binning = binning
        self.tables = tables
        self.log_prior_ratio = log_prior_ratio

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """Log-odds of class 1 for raw rows (binned with the baseline's bins)."""
        codes = self.binning.transform(X)
        out = np.full(codes.shape[0], self.log_prior_ratio)
        for j, table in enumerate(self.tables):
            out += table[codes[:, j]]
        return out

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        p1 = 1.0 / (1.0 + np.exp(-self.decision_function(X)))
        return np.column_stack([1.0 - p1, p1])


def _mechanism(epsilon: float, m: int) -> Mechanism:
    return RandomizedResponse(epsilon, m) if m < 3.0 * math.exp(epsilon) + 2.0 else OUE(epsilon, m)


def fit_ldp_naive_bayes(
    X: np.ndarray, y: np.ndarray, features: Sequence[FeatureSpec], *, epsilon: float, rng: np.random.Generator
) -> LdpNaiveBayes:
    """Simulate the baseline on ``(X, y)``, one peer per row (module docstring).

    Parameters
    ----------
    X : ndarray of shape (n, F)
        Encoded rows (category indices, 0/1, numbers).
    y : ndarray of shape (n,), int in {0, 1}
    features : sequence of FeatureSpec
        Kinds and public ranges.
    epsilon : float
        Each peer's one report.
    rng : numpy.random.Generator
    """
    n, n_features = X.shape
    if len(features) != n_features:
        raise ValueError(f"{len(features)} feature specs for {n_features} columns")
    groups = np.array_split(rng.permutation(n), n_features)
    b = auto_n_bins(epsilon, max(1, min(g.size for g in groups)))
    thresholds = {
        j: tuple(float(f.low) + (float(f.high) - float(f.low)) * k / b for k in range(1, b))
        for j, f in enumerate(features)
        if f.kind is FeatureKind.NUMERIC
    }
    binning = Binning.from_thresholds(features, thresholds)
    codes = binning.transform(X)
    tables: list[np.ndarray] = []
    class_counts = np.zeros(2)
    for j, rows in enumerate(groups):
        shape = (binning.n_bins[j],)
        m = domain_size(shape)
        values = report_values(codes[rows][:, [j]], y[rows], shape)
        mechanism = _mechanism(epsilon, m)
        bits = mechanism.perturb(values, rng)
        raw = np.asarray(estimate_counts(bits.sum(axis=0), mechanism, rows.size, consistency=None).raw)
        counts = np.clip(raw.reshape(shape[0], 2), 0.0, None) + 1.0
        class_counts += counts.sum(axis=0)
        likelihood = counts / counts.sum(axis=0, keepdims=True)
        tables.append(np.log(likelihood[:, 1]) - np.log(likelihood[:, 0]))
    return LdpNaiveBayes(binning, tables, float(np.log(class_counts[1] / class_counts[0])))
