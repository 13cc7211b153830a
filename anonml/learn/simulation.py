"""The peer-side AnonML pipeline, simulated in one process (one row of X = one peer).

What every simulated peer does is what a real peer does, minus the network:

1. **Plan.** A fresh 32-byte seed and the roster of simulated peer keys fix the
   partition plan (:func:`~anonml.learn.partition.make_plan`): a median pool
   (what its questions need, at most ``median_fraction`` of the peers:
   :func:`~anonml.privacy.median.median_pool_size`) and k_p report partitions.
2. **Private bins.** For each numeric feature the median pool's share answers
   IsGreater questions of the private quantile search (thesis algorithm 1,
   :func:`anonml.privacy.estimate_bin_edges`), one question per peer, each by
   binary randomised response with the full ε_T; a fresh partition per step.
3. **Reports.** Each report peer bins its row with the published bins and
   sends one report per assigned subset (k_s features + label), each with
   ε_T/k_h, through the mechanism of least expected error for that report's
   domain (:func:`anonml.privacy.best_mechanism`).
4. **Estimation.** The aggregator sums each partition's reports per subset and
   debiases them with the same mechanism, then applies the consistency step
   (:func:`anonml.privacy.estimate_counts`).

Privacy accounting (sound, DESIGN §5): a report peer releases k_h reports of
ε_T/k_h each, total ε_T by sequential composition; a median-pool peer answers
one question with ε_T. The pools are disjoint, so they compose in parallel and
no peer exceeds ε_T; :mod:`anonml.learn.accounting` records the releases in a
capped ledger and reads back the headline (:class:`PrivacyAccounting`). The run's
settings are a :class:`SimulationConfig` (:mod:`anonml.learn.simulation_config`).

Defaults (median pool at most 15 %, 3 questions per quantile search, stopping margin at
confidence 0.5) were chosen on the Adult benchmark: fewer, better-populated
search steps beat finer searches at every ε_T in {0.5, 1, 2, 4}, and a pool of
12-20 % was best at low ε_T (bins matter more than the reports the pool costs).
The pool is smaller than its cap only when the cap would give every question more
answers than a noise sd of :data:`~anonml.privacy.median.MEDIAN_ANSWER_SD` needs, i.e. on
large rosters: there the extra answers barely move the bins, and the peers they would
take report features instead.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from anonml.learn.accounting import PrivacyAccounting, account_releases, unlinkable_pools
from anonml.learn.binning import Binning, auto_n_bins, relative_cell_error
from anonml.learn.calibration import CALIBRATION_BINS
from anonml.learn.histograms import (
    SubsetHistogram,
    dependence_and_noise,
    dependence_statistic,
    domain_size,
    estimate_histogram,
    label_distribution,
    report_values,
)
from anonml.learn.notices import SmallGroupWarning
from anonml.learn.partition import SEED_BYTES, PartitionPlan, make_plan
from anonml.learn.simulation_config import SimulationConfig
from anonml.model import FeatureKind, FeatureSpec
from anonml.privacy import Mechanism, best_mechanism, estimate_bin_edges, simulated_query
from anonml.privacy.median import MEDIAN_ANSWER_SD, median_pool_size, search_steps

# SimulationConfig and PrivacyAccounting have their own modules; callers import them from here too.
__all__ = [
    "SimulationConfig",
    "PrivacyAccounting",
    "SimulationResult",
    "simulated_peer_keys",
    "private_binning",
    "simulate_reports",
    "simulate_training",
    "planned_pools",
]


@dataclass(frozen=True, eq=False)
class SimulationResult:
    """Output of :func:`simulate_training`: what the aggregator ends up holding."""

    plan: PartitionPlan
    binning: Binning
    histograms: tuple[SubsetHistogram, ...]
    sizes: tuple[int, ...]
    accounting: PrivacyAccounting
    n_bins: int
    mechanisms: tuple[str, ...] = ()
    median_estimates: dict[int, Any] = field(default_factory=dict)
    calibration_rows: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    selected_features: tuple[int, ...] | None = None


@lru_cache(maxsize=4)
def _keys(n: int) -> tuple[bytes, ...]:
    return tuple(hashlib.sha256(b"anonml/simulated-peer/" + i.to_bytes(8, "big")).digest() for i in range(n))


def simulated_peer_keys(n: int) -> list[bytes]:
    """Stand-in public keys of ``n`` simulated peers (32 bytes each, distinct)."""
    return list(_keys(int(n)))


def private_binning(
    X_pool: np.ndarray,
    features: Sequence[FeatureSpec],
    n_bins: int,
    *,
    epsilon: float,
    n_steps: int = 3,
    confidence: float = 0.5,
    rng: np.random.Generator,
) -> tuple[Binning, int, dict[int, Any]]:
    """Bins from the median pool's private answers (thesis algorithm 1, quantile search).

    The pool's rows are split evenly over the numeric features; each feature's
    share is split into ``(n_bins − 1)·n_steps`` partitions, one per question,
    so every pool peer answers at most one question with ``epsilon``.

    Returns
    -------
    binning : Binning
    answered : int
        How many pool peers answered a question.
    estimates : dict
        Feature index → :class:`anonml.privacy.median.BinEdges` (with every
        search step), for inspection.

    Notes
    -----
    A feature's searches take at most ``n_steps`` steps, fewer where its share's groups would be too
    small for a step to move the search (:func:`~anonml.privacy.median.search_steps`, the split the
    aggregator makes too); where not even one step could, no question is asked and the cuts stay at
    the searches' starting points (equal-width cuts of the declared range), which uses no data.
    """
    numeric = [j for j, f in enumerate(features) if f.kind is FeatureKind.NUMERIC]
    thresholds: dict[int, tuple[float, ...]] = {}
    estimates: dict[int, Any] = {}
    answered = 0
    if n_bins < 2 or not numeric:
        return Binning.from_thresholds(features, {}), 0, {}
    shares = np.array_split(np.arange(X_pool.shape[0]), len(numeric))
    searches = n_bins - 1
    for j, share in zip(numeric, shares, strict=True):
        spec = features[j]
        low, high = float(spec.low), float(spec.high)
        steps = search_steps(share.size, searches, n_steps, confidence)
        if steps < 1:
            thresholds[j] = tuple(low + (high - low) * k / n_bins for k in range(1, n_bins))
            continue
        parts = np.array_split(X_pool[share, j], steps * searches)
        query = simulated_query(parts, epsilon, rng)
        edges = estimate_bin_edges(
            query, low, high, n_bins, epsilon=epsilon, n_steps=steps, confidence=confidence
        )
        asked = {s.step for e in edges.estimates for s in e.steps}
        answered += sum(parts[s].size for s in asked)
        thresholds[j] = tuple(float(t) for t in edges.edges[1:-1])
        estimates[j] = edges
    return Binning.from_thresholds(features, thresholds), answered, estimates


def simulate_reports(
    codes: np.ndarray,
    y: np.ndarray,
    plan: PartitionPlan,
    n_bins: Sequence[int],
    *,
    epsilon: float,
    consistency: str | None,
    rng: np.random.Generator,
    n_classes: int = 2,
) -> tuple[tuple[SubsetHistogram, ...], tuple[int, ...], tuple[Mechanism, ...]]:
    """Every report peer's reports, perturbed and then estimated per (partition, subset).

    Parameters
    ----------
    codes : ndarray of shape (n_peers, n_features), int
        Binned rows (roster order).
    y : ndarray of shape (n_peers,), int in {0, …, K−1}
    plan : PartitionPlan
    n_bins : sequence of int
        Bins of each feature.
    epsilon : float
        ε of one report (ε_T / k_h).
    consistency : str or None
    rng : numpy.random.Generator
    n_classes : int, default=2
        K, the label domain.

    Returns
    -------
    histograms : tuple of SubsetHistogram, one per (partition, subset)
    sizes : tuple of int, the partition size behind each histogram
    mechanisms : tuple of Mechanism, the mechanism each histogram's reports used
    """
    histograms: list[SubsetHistogram] = []
    sizes: list[int] = []
    mechanisms: list[Mechanism] = []
    for p in range(plan.n_partitions):
        members = plan.members(p)
        rows, labels = codes[members], y[members]
        for subset in plan.subsets[p]:
            shape = tuple(int(n_bins[f]) for f in subset)
            values = report_values(rows[:, list(subset)], labels, shape, n_classes)
            mechanism = best_mechanism(epsilon, domain_size(shape, n_classes), members.size)
            bits = mechanism.perturb(values, rng)
            histograms.append(
                estimate_histogram(
                    bits.sum(axis=0),
                    mechanism,
                    members.size,
                    subset,
                    shape,
                    consistency=consistency,
                    n_classes=n_classes,
                )
            )
            sizes.append(int(members.size))
            mechanisms.append(mechanism)
    return tuple(histograms), tuple(sizes), tuple(mechanisms)


def _set_aside_calibration(
    X: np.ndarray, y: np.ndarray, config: SimulationConfig, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows left for medians and reports, and the calibration pool's rows (indices into X)."""
    calibration_rows = _calibration_rows(config, X.shape[0], rng)
    if calibration_rows.size:
        rest = np.setdiff1d(np.arange(X.shape[0]), calibration_rows)
        X, y = X[rest], y[rest]
    return X, y, calibration_rows


def _pooled(
    stages: Sequence[tuple[PartitionPlan, Sequence[SubsetHistogram], Sequence[int], Sequence[Mechanism]]],
) -> tuple[tuple[SubsetHistogram, ...], tuple[int, ...], tuple[Mechanism, ...]]:
    """Every stage's histograms, partition sizes and mechanisms, in stage order."""
    histograms = tuple(h for _, hs, _, _ in stages for h in hs)
    sizes = tuple(n for _, _, ns, _ in stages for n in ns)
    mechanisms = tuple(m for _, _, _, ms in stages for m in ms)
    return histograms, sizes, mechanisms


def _simulated_plan(
    n: int, n_features: int, pool: int, config: SimulationConfig, rng: np.random.Generator
) -> PartitionPlan:
    """The partition plan of ``n`` simulated peers (a median pool of ``pool``), seeded from ``rng``."""
    return make_plan(
        rng.bytes(SEED_BYTES),
        simulated_peer_keys(n),
        n_features,
        n_partitions=config.n_partitions,
        n_subsets=config.n_subsets,
        subset_size=config.subset_size,
        subsets=config.subsets,
        median_pool_size=pool,
    )


def _check_given_plan(plan: PartitionPlan, n_all: int, n_calibration: int) -> None:
    """A given plan (a real roster's) must cover every row, and then there is no calibration pool."""
    if plan.order.size != n_all or n_calibration:
        raise ValueError(
            f"a given plan must cover every one of the {n_all} rows with no calibration pool, "
            f"it covers {plan.order.size} (calibration pool {n_calibration})"
        )


def simulate_training(
    X: np.ndarray,
    y: np.ndarray,
    features: Sequence[FeatureSpec],
    config: SimulationConfig,
    rng: np.random.Generator,
    *,
    plan: PartitionPlan | None = None,
    binning: Binning | None = None,
) -> SimulationResult:
    """Run the whole peer-side pipeline on ``(X, y)``, one peer per row.

    Parameters
    ----------
    X : ndarray of shape (n_peers, n_features)
        Raw feature vectors.
    y : ndarray of shape (n_peers,), int in {0, …, K−1}
    features : sequence of FeatureSpec
        Kinds and public ranges (numeric ranges bound the median search).
    config : SimulationConfig
    rng : numpy.random.Generator
    plan : PartitionPlan, optional
        The plan of a real roster (row ``i`` of ``X`` is roster member ``i``)
        instead of one drawn from ``rng``; needs no calibration pool.
    binning : Binning, optional
        Bins fixed elsewhere (e.g. those a protocol run published) instead of
        the median pool's simulated search. The median pool is still drawn and
        still sends no report, so the reports are what they would have been
        with those bins; the pool answers nothing, and the accounting counts
        no median answers.

    Returns
    -------
    SimulationResult
        ``calibration_rows`` holds the rows (indices into X) of the
        calibration pool, drawn at random before the plan and kept out of it;
        they report nothing here (they report once the model exists).

    Warns
    -----
    SmallGroupWarning
        When a report partition is so small that the noise per histogram cell
        exceeds the average cell frequency (see :func:`warn_small_groups`).
    """
    n_all, n_features = X.shape
    if len(features) != n_features:
        raise ValueError(f"{len(features)} feature specs for {n_features} columns")
    X, y, calibration_rows = _set_aside_calibration(X, y, config, rng)
    n = X.shape[0]
    n_bins, pool = _bins_and_pool(features, config, n, n_all)
    if plan is None:
        plan = _simulated_plan(n, n_features, pool, config, rng)
    else:
        _check_given_plan(plan, n_all, calibration_rows.size)
    binning, answered, estimates = _median_pool_bins(X, plan, features, n_bins, config, rng, binning)
    stages, selected = _report_stages(binning.transform(X), y, plan, binning, config, rng)
    histograms, sizes, mechanisms = _pooled(stages)
    warn_small_groups(histograms, mechanisms, config.epsilon)
    accounting = account_releases(
        [(p, ms) for p, _, _, ms in stages],
        plan,
        features,
        config,
        answered,
        estimates,
        calibration_rows.size,
    )
    return SimulationResult(
        plan,
        binning,
        histograms,
        sizes,
        accounting,
        n_bins,
        tuple(m.kind for m in mechanisms),
        estimates,
        calibration_rows,
        selected,
    )


def _median_pool_bins(
    X: np.ndarray,
    plan: PartitionPlan,
    features: Sequence[FeatureSpec],
    n_bins: int,
    config: SimulationConfig,
    rng: np.random.Generator,
    binning: Binning | None,
) -> tuple[Binning, int, dict[int, Any]]:
    """The private bins of ``plan``'s median pool (:func:`private_binning`), or ``binning`` when given.

    Given bins must be for exactly ``features``; then the pool answers nothing
    (0 answers, no search estimates) and ``rng`` is not drawn from.
    """
    if binning is None:
        return private_binning(
            X[plan.median_pool()],
            features,
            n_bins,
            epsilon=config.epsilon,
            n_steps=config.median_steps,
            confidence=config.median_confidence,
            rng=rng,
        )
    if binning.names != [f.name for f in features]:
        raise ValueError(f"the given bins are for features {binning.names}, not {[f.name for f in features]}")
    return binning, 0, {}


_Stage = tuple[PartitionPlan, tuple[SubsetHistogram, ...], tuple[int, ...], tuple[Mechanism, ...]]


def _report_stages(
    codes: np.ndarray,
    y: np.ndarray,
    plan: PartitionPlan,
    binning: Binning,
    config: SimulationConfig,
    rng: np.random.Generator,
) -> tuple[list[_Stage], tuple[int, ...] | None]:
    """Every report stage (its plan, histograms, partition sizes and mechanisms), and the kept features.

    Without a pilot (:func:`_pilot_applies`) there is one stage, ``plan``
    itself, and no selection (None). With one, a pilot round over every
    feature comes first, :func:`select_features` keeps some — all of them
    unless :func:`selection_pays` — and the rest of the report peers report
    only on those (one group per kept feature).
    Each report carries ε_T/k_h (:func:`simulate_reports`).
    """

    def stage(rows: np.ndarray | slice, stage_plan: PartitionPlan) -> _Stage:
        return (
            stage_plan,
            *simulate_reports(
                codes[rows],
                y[rows],
                stage_plan,
                binning.n_bins,
                epsilon=config.epsilon / config.n_subsets,
                consistency=config.consistency,
                rng=rng,
                n_classes=config.n_classes,
            ),
        )

    n_features = codes.shape[1]
    if not _pilot_applies(config, n_features):
        return [stage(slice(None), plan)], None
    report_rows = plan.order[plan.median_pool_size :]
    n_pilot = max(n_features, int(round(config.pilot_fraction * report_rows.size)))
    pilot_rows, main_rows = report_rows[:n_pilot], report_rows[n_pilot:]
    stages = [stage(pilot_rows, _single_feature_plan(pilot_rows, range(n_features), n_features, rng))]
    selected = select_features(stages[0][1])
    if not selection_pays(stages[0][1], selected):
        selected = tuple(range(n_features))
    if main_rows.size >= len(selected):
        stages.append(stage(main_rows, _single_feature_plan(main_rows, selected, n_features, rng)))
    return stages, selected


def _pilot_applies(config: SimulationConfig, n_features: int) -> bool:
    return (
        config.pilot_fraction > 0
        and config.subset_size == 1
        and config.n_subsets == 1
        and config.subsets is None
        and n_features > 1
    )


def _single_feature_plan(
    rows: np.ndarray, features: Sequence[int], n_features: int, rng: np.random.Generator
) -> PartitionPlan:
    """One partition per listed feature over the peers ``rows`` (their simulated keys)."""
    keys = simulated_peer_keys(int(rows.max()) + 1 if rows.size else 0)
    return make_plan(
        rng.bytes(SEED_BYTES),
        [keys[i] for i in rows],
        n_features,
        n_partitions=len(features),
        subsets=[[int(f)] for f in features],
    )


#: A feature is kept when its pilot dependence statistic exceeds df + this many sd of its null.
SELECTION_SDS = 3.0


def select_features(histograms: Sequence[SubsetHistogram]) -> tuple[int, ...]:
    """Features whose single-feature histogram shows label dependence beyond the LDP noise.

    With ``(T, df)`` each feature's :func:`~anonml.learn.histograms.dependence_statistic`
    against the pooled class shares, a feature is kept when
    ``T > df + SELECTION_SDS·√(2·df)``; the feature of largest ``T/df`` is
    always kept. Returns the kept features in increasing order.
    """
    if not histograms:
        raise ValueError("no pilot histograms")
    prior = label_distribution(histograms)
    scores: dict[int, float] = {}
    kept: list[int] = []
    for h in histograms:
        if len(h.features) != 1:
            raise ValueError(f"pilot histograms are single-feature, got features {h.features}")
        stat, df = dependence_statistic(h, prior)
        scores[h.features[0]] = stat / df
        if stat > df + SELECTION_SDS * np.sqrt(2.0 * df):
            kept.append(h.features[0])
    if not kept:
        kept.append(max(scores, key=scores.__getitem__))
    return tuple(sorted(kept))


#: The dropped features may carry at most this share of the pilot's estimated signal energy …
SELECTION_MAX_LOSS = 0.05
#: … with this many standard deviations of their estimate's noise added to what they carry.
SELECTION_SDS_LOSS = 2.0


def selection_pays(histograms: Sequence[SubsetHistogram], kept: Sequence[int]) -> bool:
    """Whether dropping the features :func:`select_features` did not keep loses (almost) nothing.

    The comparison is measured on the pilot's private histograms (post-processing,
    no budget): each feature's estimated signal energy is ``D − E₀[D]``
    (:func:`~anonml.learn.histograms.dependence_and_noise`, unbiased for the
    squared label dependence of its cells), and the selection is applied only
    when the dropped features' estimate plus :data:`SELECTION_SDS_LOSS` of its
    noise standard deviations is at most :data:`SELECTION_MAX_LOSS` of the total,
    which must itself be positive. Otherwise every feature is
    kept, i.e. no selection: a pilot that cannot tell signal from noise (a
    small pilot at low ε) never drops features that carry signal. On the issue's
    data a pilot of 20-40 % kept 1-1.2 features everywhere and cost AUC (0.662 → 0.551).
    """
    stats = {h.features[0]: dependence_and_noise(h) for h in histograms}
    total = sum(d - null for d, null, _ in stats.values())
    dropped = [stats[f] for f in stats if f not in set(kept)]
    loss = sum(d - null for d, null, _ in dropped)
    spread = float(np.sqrt(sum(sd**2 for _, _, sd in dropped)))
    return total > 0 and loss + SELECTION_SDS_LOSS * spread <= SELECTION_MAX_LOSS * total


#: The largest relative error of a calibration histogram's average cell at which the pool forms
#: (:func:`calibration_cell_error`, two classes); noisier, its peers report features instead. Measured on
#: Adult subsamples (tuning set; paired splits, mean ± s.e.): a pool whose cells err by 0.29 (3,000 rows,
#: ε_T = 4, 420 peers) took the Brier score from 0.169 to 0.125 (−0.044 ± 0.007, 10 splits) for 0.011 ±
#: 0.004 AUC; pools erring by 0.69 (20,000 rows, ε_T = 1) and 0.97 (10,000 rows, ε_T = 1) lost to no pool,
#: by 0.013 ± 0.010 AUC at an equal Brier score and by 0.025 ± 0.008 Brier (6 splits each); full Adult's
#: pools (0.44 / 0.32 / 0.15 at ε_T 1 / 2 / 4) stay. The rule it replaces, ``n·((e^ε − 1)/(e^ε + 1))²`` ≥
#: 500 binary randomised-response equivalents, overstates a 20-value report at ε_T = 1 8.5-fold relative to
#: one at ε_T = 4 (per peer, against the cells' true information): it refused the first of those pools and
#: formed the second.
MAX_CALIBRATION_CELL_ERROR = 0.5
#: The calibration pool is sized to carry this many binary-randomised-response-equivalent reports,
#: ``n·((e^ε − 1)/(e^ε + 1))²``, within its cap (tuned on Adult: docs/model-quality.md, "The side pools,
#: measured").
TARGET_CALIBRATION_INFORMATION = 1500.0
#: K ≥ 3 classes: fewest binary-randomised-response-equivalent reports for a class-map pool (on Adult at
#: ε = 0.5, ~390 of them had made a binary map's ECE worse than none; kept for K ≥ 3, not re-studied).
MIN_CLASS_MAP_INFORMATION = 500.0


def randomized_response_equivalents(n_reports: int, epsilon: float) -> float:
    """``n·((e^ε − 1)/(e^ε + 1))²``: how many exact binary answers ``n`` answers by binary randomised
    response at ``ε`` are worth (the inverse of that mechanism's variance factor), the unit of
    :data:`TARGET_CALIBRATION_INFORMATION` and :data:`MIN_CLASS_MAP_INFORMATION`."""
    return n_reports * ((math.exp(epsilon) - 1.0) / (math.exp(epsilon) + 1.0)) ** 2


def calibration_pool_size(fraction: float, n_peers: int, epsilon: float, n_classes: int = 2) -> int:
    """Peers of the calibration pool: enough for the target information, at most ``fraction·n``.

    The pool takes as many peers as :data:`TARGET_CALIBRATION_INFORMATION` needs, capped at
    ``round(fraction·n)`` (so fewer at high ε, the cap at low ε). If the histogram its map is
    fitted to would still err by more than :data:`MAX_CALIBRATION_CELL_ERROR` of an average cell
    (:func:`calibration_cell_error`: privacy and sampling noise), the map would follow its noise,
    so there is no pool: the peers report features and the probabilities stay the model's own.
    That histogram is the pool's (score bin, label), 2 · CALIBRATION_BINS values. K ≥ 3 classes
    keep the earlier rule, ``n_c·((e^ε − 1)/(e^ε + 1))²`` ≥ :data:`MIN_CLASS_MAP_INFORMATION`: their
    pool is also the class map's guard against a confidently wrong model (its choice half), which
    the map half's cell error does not measure — read on the map half's K² cells, diamonds (K = 5,
    a held-out set) lost its pool at ε_T = 2 and its log loss went from 0.086 below the prior's to
    0.098 above.
    """
    per_peer = randomized_response_equivalents(1, epsilon)
    n_c = min(int(round(fraction * n_peers)), int(math.ceil(TARGET_CALIBRATION_INFORMATION / per_peer)))
    if n_c < 1:
        return 0
    if n_classes > 2:
        return n_c if randomized_response_equivalents(n_c, epsilon) >= MIN_CLASS_MAP_INFORMATION else 0
    error = calibration_cell_error(n_c, epsilon, 2 * CALIBRATION_BINS)
    return n_c if error <= MAX_CALIBRATION_CELL_ERROR else 0


def calibration_cell_error(n_reports: int, epsilon: float, domain: int) -> float:
    """Relative error of an average cell of a ``domain``-value histogram of ``n_reports`` at ``epsilon``.

    ``√(r² + (m − 1)/n)`` with ``m = domain``: ``r`` the privacy noise's
    (:func:`~anonml.learn.binning.relative_cell_error` of the least-error mechanism, thesis eq. 7.2)
    and ``(m − 1)/n`` the sampling noise's of a cell holding ``1/m`` of the reports (its share's
    variance ``(1/m)(1 − 1/m)/n`` over ``1/m²``). At high ε the privacy noise vanishes and a small
    pool's map still follows its sample: 80 peers' (score bin, label) at ε_T = 4 err by 0.46 and 0.49.
    """
    privacy = relative_cell_error(best_mechanism(epsilon, domain, n_reports), n_reports)
    return math.sqrt(privacy**2 + (domain - 1) / n_reports)


#: A report partition is "too small" when the noise sd of a histogram cell exceeds this
#: multiple of the average cell count (the relative error of :func:`auto_n_bins`).
SMALL_GROUP_ERROR = 1.0


def warn_small_groups(
    histograms: Sequence[SubsetHistogram], mechanisms: Sequence[Mechanism], epsilon_total: float
) -> None:
    """Warn (:class:`SmallGroupWarning`) when the smallest report group cannot carry a signal.

    For each histogram of ``n`` reports over ``m`` cells, the relative per-cell
    error is ``E(m)·√m`` (thesis eq. 7.2 divided by the average cell frequency
    ``1/m``, as in :func:`~anonml.learn.binning.auto_n_bins`). Above
    :data:`SMALL_GROUP_ERROR` the estimated cells are mostly noise.
    """
    worst = None
    for h, mechanism in zip(histograms, mechanisms, strict=True):
        error = relative_cell_error(mechanism, h.n)
        if error > SMALL_GROUP_ERROR and (worst is None or error > worst[0]):
            worst = (error, h)
    if worst is not None:
        error, h = worst
        warnings.warn(
            f"report groups are too small to learn from: features {h.features} were reported by "
            f"{h.n} peers over {h.counts.size} cells at ε_T={epsilon_total:g}, so the noise of a "
            f"cell is {error:.1f}× its average count; use fewer partitions (k_p), fewer or coarser "
            f"features, a larger ε or more peers",
            SmallGroupWarning,
            stacklevel=4,
        )


def _bins_and_pool(
    features: Sequence[FeatureSpec], config: SimulationConfig, n: int, n_all: int
) -> tuple[int, int]:
    """Bins per numeric feature and the median pool's size, of ``n`` peers outside the calibration pool.

    The pool is what the median questions need (:func:`~anonml.privacy.median.median_pool_size` at
    :data:`MEDIAN_ANSWER_SD`), at most ``round(median_fraction · n_all)``. The questions are
    ``numeric features × (b − 1) × median_steps`` with ``b`` the bins of a pool-less roster — with
    ``"auto"`` bins an upper bound on the bins the pool's size then gives (:func:`auto_n_bins` grows
    with the partition), so every question gets at least the answers it was sized for.
    """
    numeric = sum(f.kind is FeatureKind.NUMERIC for f in features)

    def bins(pool: int) -> int:
        if config.n_bins != "auto":
            return int(config.n_bins)
        partition_size = max(1, (n - pool) // config.n_partitions)
        return auto_n_bins(config.epsilon / config.n_subsets, partition_size, subset_size=config.subset_size)

    cap = int(round(config.median_fraction * n_all)) if numeric else 0
    questions = numeric * (bins(0) - 1) * config.median_steps
    pool = median_pool_size(cap, config.epsilon, questions, MEDIAN_ANSWER_SD)
    n_bins = bins(pool)
    return n_bins, pool if n_bins >= 2 else 0


def planned_pools(
    config: SimulationConfig,
    n_all: int,
    features: Sequence[FeatureSpec],
    plan: PartitionPlan | None = None,
) -> dict[str, tuple[float, int, int]]:
    """The unlinkable pools :func:`simulate_training` will have on ``n_all`` rows, before any is drawn.

    The same sizes the fit computes: the calibration pool
    (:func:`calibration_pool_size`, which depends on ε), the median pool
    (:func:`_bins_and_pool`), and the smallest report partition — the given
    plan's, or ``⌊report peers / k_p⌋`` of a drawn one; with a pilot, the
    smaller of the pilot's groups and ``⌊main peers / F⌋``, a lower bound on
    the main stage's (it splits its peers over at most F kept features).
    A lower bound on a group only raises the bound's ε, so a target met here
    is met by the fit (:class:`~anonml.learn.model.AnonMLClassifier` checks it again).
    """
    n_features = len(features)
    n_calibration = calibration_pool_size(
        config.calibration_fraction, n_all, config.epsilon, config.n_classes
    )
    if plan is not None:
        smallest = plan.smallest_partition()
    else:
        n = n_all - n_calibration
        _, pool = _bins_and_pool(features, config, n, n_all)
        report = n - pool
        if _pilot_applies(config, n_features):
            n_pilot = max(n_features, int(round(config.pilot_fraction * report)))
            main = report - n_pilot
            smallest = n_pilot // n_features if main < 1 else min(n_pilot, main) // n_features
        else:
            smallest = report // config.n_partitions
    return unlinkable_pools(config, max(int(smallest), 0), n_calibration)


def _calibration_rows(config: SimulationConfig, n_all: int, rng: np.random.Generator) -> np.ndarray:
    """Rows of the calibration pool, drawn at random (empty when the pool would be too small)."""
    n_calibration = calibration_pool_size(
        config.calibration_fraction, n_all, config.epsilon, config.n_classes
    )
    if not n_calibration:
        return np.empty(0, dtype=np.int64)
    return np.sort(rng.permutation(n_all)[:n_calibration])
