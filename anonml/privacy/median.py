"""Private medians and quantiles by noisy binary search (thesis algorithm 1).

The aggregator needs bin edges for each feature without seeing any value.
Each step of a binary search asks one *fresh* peer partition "is your value
greater than e?"; every peer answers by binary randomised response with
``epsilon`` (:class:`~anonml.privacy.binary.BinaryRandomizedResponse`), so a
peer spends ``epsilon`` once. If the debiased fraction of "greater" is clearly
above one half the median is above ``e``, clearly below and it is below; within
the margin of error the search stops at ``e``.

The search only needs a callable ``query(threshold, step) -> perturbed bits``,
so the same code drives a simulation (:func:`simulated_query`) and, later, the
network rounds.

Guarantee
---------
Peers are taken to be independent draws from the population, so every
randomised answer to threshold ``e`` is Bernoulli((1-p) + (2p-1) G(e)) with
``G(e) = P(X > e)``, and the debiased fraction estimates ``G(e)`` directly with
standard error at most ``1 / (2 (2p-1) sqrt(n_k))``. The margin at step ``k`` is
``z`` times that, with ``z`` the two-sided normal quantile at level
``alpha / K`` (Bonferroni over the ``K = n_steps`` steps, ``alpha = 1 -
confidence``). When every step's estimate is within its margin (probability at
least ``confidence``, up to the normal approximation):

* every move is in the right direction, so the returned ``[lower, upper]``
  contains the ``tau``-quantile of the population;
* if the search stopped at ``e``, ``|G(e) - (1 - tau)| <= 2 * margin``: ``e`` is a
  quantile of rank ``tau`` up to ``rank_error``.

Deviation from the thesis: its algorithm starts at ``(max - min) / 2``, which
is not even inside ``[min, max]`` unless ``min = 0``; we start at
``min + (max - min) / 2``. The margin is Bonferroni-corrected so the bound
holds for the whole search, not per step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from anonml.privacy.binary import BinaryRandomizedResponse
from anonml.randomness import resolve_rng

__all__ = [
    "IsGreaterQuery",
    "SearchStep",
    "QuantileEstimate",
    "BinEdges",
    "estimate_quantile",
    "estimate_median",
    "estimate_bin_edges",
    "simulated_query",
    "median_question_answers",
    "median_pool_size",
    "search_steps",
]

#: Noise sd of one question's debiased "greater" share the median pool is sized for
#: (:func:`median_pool_size`); ``None`` sizes the pool by its fraction alone. Chosen on the
#: tuning sets (``python -m benchmarks.adult --pools``, paired seeds): on Adult's 32,561 peers a
#: pool sized for sd 0.1 / 0.15 / 0.2 (below the 15 % cap) cost 0.001 / 0.003 / 0.008 AUC at ε_T 1
#: (30 trials), so the bins want 0.1 or better; at 0.05 the freed peers gained AUC on 200,000 peers
#: drawn from Adult (+0.0034 ± 0.0010 at ε_T 4) but the one numeric feature of
#: ``benchmarks.trivial_floors``' synthetic regression (21,000 peers) lost 0.034 ± 0.009 MAE at 4
#: (60 splits). At 0.03 the cap binds on every tuning and public set, and the 200,000 peers keep
#: the gain at ε_T 4 (+0.0030 ± 0.0008 AUC, Brier −0.0014 ± 0.0004; 10 trials).
MEDIAN_ANSWER_SD: float | None = 0.03

#: ``query(threshold, step)`` returns the randomised IsGreater(threshold)
#: answers of the peer partition assigned to ``step`` (one bool per peer).
IsGreaterQuery = Callable[[float, int], ArrayLike]


@dataclass(frozen=True)
class SearchStep:
    """One question of the search and what it decided."""

    step: int
    threshold: float
    n: int
    fraction: float  # debiased fraction of peers above ``threshold``
    margin: float
    decision: Literal["up", "down", "stop"]


@dataclass(frozen=True)
class QuantileEstimate:
    """Result of one private quantile search.

    Attributes
    ----------
    quantile : float
        The rank ``tau`` searched for (0.5 for the median).
    value : float
        The estimate: where the search stopped, else the midpoint of the last
        bracket.
    lower, upper : float
        Bracket containing the population ``tau``-quantile with probability at
        least ``confidence`` (module docstring). ``|value - quantile| <= upper - lower``.
    rank_error : float or None
        If the search stopped: bound on ``|P(X > value) - (1 - tau)|`` at the
        same confidence. ``None`` if it used all its steps.
    steps : tuple of SearchStep
        Every question asked, in order.
    epsilon, confidence : float
        Privacy loss of each answer and the confidence of the bounds.
    """

    quantile: float
    value: float
    lower: float
    upper: float
    rank_error: float | None
    steps: tuple[SearchStep, ...]
    epsilon: float
    confidence: float

    @property
    def stopped(self) -> bool:
        """True if a step's fraction fell within its margin and ended the search."""
        return self.rank_error is not None


@dataclass(frozen=True)
class BinEdges:
    """Edges of ``b`` equal-mass bins: ``edges[0] = low``, ``edges[-1] = high``."""

    edges: np.ndarray
    estimates: tuple[QuantileEstimate, ...]


def _answers(query: IsGreaterQuery, threshold: float, step: int) -> np.ndarray:
    bits = np.asarray(query(threshold, step))
    if bits.ndim != 1 or bits.size == 0:
        raise ValueError(
            f"query for step {step} returned shape {bits.shape}; expected a non-empty 1-D "
            "array of the partition's randomised answers"
        )
    if bits.dtype != bool and not np.isin(bits, (0, 1)).all():
        raise ValueError(f"query for step {step} returned values other than 0/1")
    return bits.astype(bool, copy=False)


def _step_z(confidence: float, n_steps: int) -> float:
    """The margin's normal quantile: each step's two-sided interval at level ``(1 − confidence)/n_steps``
    (Bonferroni over the search's steps)."""
    from scipy.special import ndtri  # scipy.special costs 0.3 s at import: only when used

    return float(ndtri(1.0 - (1.0 - confidence) / (2.0 * n_steps)))


def _check_search(low: float, high: float, n_steps: int, confidence: float) -> None:
    if not (np.isfinite(low) and np.isfinite(high) and low < high):
        raise ValueError(f"need finite low < high, got low={low}, high={high}")
    if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 1:
        raise ValueError(f"n_steps must be an integer >= 1, got {n_steps!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")


def estimate_quantile(
    query: IsGreaterQuery,
    low: float,
    high: float,
    quantile: float,
    *,
    epsilon: float,
    n_steps: int,
    confidence: float = 0.95,
    first_step: int = 0,
) -> QuantileEstimate:
    """Search privately for the ``quantile``-quantile of values known to lie in ``[low, high]``.

    Parameters
    ----------
    query : callable ``(threshold, step) -> array of bool``
        Randomised IsGreater(threshold) answers of a fresh partition per step.
    low, high : float
        Declared range of the feature.
    quantile : float
        Rank in (0, 1); 0.5 is the median.
    epsilon : float
        Privacy loss of each answer (binary randomised response).
    n_steps : int
        Number of partitions available, i.e. the most questions asked.
    confidence : float, default=0.95
        Confidence of the returned bounds over the whole search.
    first_step : int, default=0
        Step number passed to ``query`` for the first question (later ones follow).

    Returns
    -------
    QuantileEstimate
    """
    _check_search(low, high, n_steps, confidence)
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile must lie in (0, 1), got {quantile}")
    rr = BinaryRandomizedResponse(epsilon)
    target = 1.0 - quantile  # fraction above the quantile
    z = _step_z(confidence, n_steps)
    lo, hi = float(low), float(high)
    value = lo + (hi - lo) / 2.0
    steps: list[SearchStep] = []
    rank_error: float | None = None
    for k in range(n_steps):
        bits = _answers(query, value, first_step + k)
        est = rr.estimate(int(bits.sum()), bits.size)
        margin = z * rr.max_standard_error(bits.size)
        if est.fraction > target + margin:
            decision: Literal["up", "down", "stop"] = "up"
        elif est.fraction < target - margin:
            decision = "down"
        else:
            decision = "stop"
        steps.append(SearchStep(first_step + k, value, bits.size, est.fraction, margin, decision))
        if decision == "stop":
            rank_error = 2.0 * margin
            break
        if decision == "up":
            lo = value
        else:
            hi = value
        value = lo + (hi - lo) / 2.0
    return QuantileEstimate(
        quantile=quantile,
        value=value,
        lower=lo,
        upper=hi,
        rank_error=rank_error,
        steps=tuple(steps),
        epsilon=rr.epsilon,
        confidence=confidence,
    )


def estimate_median(
    query: IsGreaterQuery,
    low: float,
    high: float,
    *,
    epsilon: float,
    n_steps: int,
    confidence: float = 0.95,
    first_step: int = 0,
) -> QuantileEstimate:
    """Private median by thesis algorithm 1 (see :func:`estimate_quantile`).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(7)
    >>> parts = [rng.normal(40.0, 10.0, 2000) for _ in range(12)]
    >>> est = estimate_median(simulated_query(parts, 2.0, rng), 0.0, 100.0,
    ...                       epsilon=2.0, n_steps=12)
    >>> est.lower <= 40.0 <= est.upper
    True
    """
    return estimate_quantile(
        query,
        low,
        high,
        0.5,
        epsilon=epsilon,
        n_steps=n_steps,
        confidence=confidence,
        first_step=first_step,
    )


def estimate_bin_edges(
    query: IsGreaterQuery,
    low: float,
    high: float,
    n_bins: int,
    *,
    epsilon: float,
    n_steps: int,
    confidence: float = 0.95,
) -> BinEdges:
    """Edges of ``n_bins`` equal-mass bins by one quantile search per inner edge.

    The search for quantile ``j / n_bins`` (``j = 1 .. n_bins-1``) uses steps
    ``(j-1) n_steps .. j n_steps - 1``, so each question goes to a fresh
    partition. The inner edges are sorted (monotone rearrangement, which never
    increases the distance to the true increasing quantiles). ``n_bins = 2`` is
    the median split.
    """
    if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 2:
        raise ValueError(f"n_bins must be an integer >= 2, got {n_bins!r}")
    _check_search(low, high, n_steps, confidence)
    estimates = tuple(
        estimate_quantile(
            query,
            low,
            high,
            j / n_bins,
            epsilon=epsilon,
            n_steps=n_steps,
            confidence=confidence,
            first_step=(j - 1) * n_steps,
        )
        for j in range(1, n_bins)
    )
    inner = np.sort([e.value for e in estimates])
    edges = np.concatenate(([float(low)], inner, [float(high)]))
    edges.setflags(write=False)
    return BinEdges(edges=edges, estimates=estimates)


def simulated_query(
    partitions: Sequence[ArrayLike],
    epsilon: float,
    rng: np.random.Generator | None = None,
) -> IsGreaterQuery:
    """An IsGreater query answered by simulated peers: step ``k`` asks ``partitions[k]``.

    Each peer answers ``value > threshold`` through binary randomised response
    with ``epsilon``. Asking a step twice, or a step with no partition, is an
    error: a partition answers once.
    """
    rr = BinaryRandomizedResponse(epsilon)
    gen = resolve_rng(rng)
    parts = [np.asarray(part, dtype=float) for part in partitions]
    asked: set[int] = set()

    def query(threshold: float, step: int) -> np.ndarray:
        if not 0 <= step < len(parts):
            raise ValueError(f"step {step} has no partition (there are {len(parts)})")
        if step in asked:
            raise ValueError(f"partition {step} was already asked; each answers once")
        asked.add(step)
        return rr.perturb(parts[step] > threshold, gen)

    return query


def median_question_answers(epsilon: float, answer_sd: float) -> int:
    """Answers one question needs for its debiased share to have noise sd at most ``answer_sd``.

    One answer is binary randomised response with ``p = e^ε/(e^ε + 1)``, so the debiased share of
    ``m`` answers has sd at most ``1/(2·c·√m)`` with ``c = 2p − 1 = (e^ε − 1)/(e^ε + 1)``
    (:meth:`~anonml.privacy.binary.BinaryRandomizedResponse.max_standard_error`, the worst case
    ``G(e) = 1/2``). Solving ``1/(2·c·√m) ≤ sd`` gives ``m = ⌈0.25/(c·sd)²⌉``.
    """
    if not epsilon > 0 or not answer_sd > 0:
        raise ValueError(f"need epsilon > 0 and answer_sd > 0, got epsilon={epsilon}, answer_sd={answer_sd}")
    c = math.tanh(epsilon / 2.0)  # (e^ε − 1)/(e^ε + 1), without overflow at large ε
    # The small slack keeps an exact integer solution (m = 100 at c·sd = 0.05) from rounding up.
    return max(1, math.ceil(0.25 / (c * answer_sd) ** 2 - 1e-9))


def search_steps(share: int, searches: int, max_steps: int, confidence: float) -> int:
    """Steps per quantile search when ``share`` peers of the median pool serve ``searches`` searches.

    With ``s`` steps each question goes to a fresh group of ``m = ⌊share/(searches·s)⌋`` peers. A
    step moves the search only if its debiased share leaves the margin ``z_s/(2c·√m)`` around the
    target (:func:`estimate_quantile`: ``z_s`` the two-sided normal quantile at level
    ``(1 − confidence)/s``, ``c = 2p − 1``), and the farthest a median's share can land from ½ —
    every answer alike — is ``1/(2c)``. So unless ``m > z_s²`` the step stops the search where it
    stands whatever the answers say, and its peers spend their ε for nothing. This returns the
    largest ``s ≤ max_steps`` whose groups pass ``m > z_s²`` (independent of ε: both sides scale by
    ``1/c``), or 0 when even one step cannot (no question: equal-width cuts of the declared range).
    At the default confidence 0.5 that is ``m ≥ 1`` for one step, ``m ≥ 2`` for two or three and
    ``m ≥ 3`` for four: a pool of 2 peers per feature (scikit-learn's breast cancer set, 30 features)
    asks one question of both instead of two questions of one, which could only stop at the range's
    midpoint (AUC +0.04 to +0.06 at ε_T 1–4 on its tuning splits, +0.014 to +0.048 on the held-out
    public-sets run; docs/model-quality.md).

    The aggregator's search (``aggregator.medians.median_groups``) and the simulation
    (:func:`anonml.learn.simulation.private_binning`) both split their pools by it, from public
    quantities only (pool size, bins, steps, confidence).
    """
    if share < 0 or searches < 1 or max_steps < 1 or not 0.0 < confidence < 1.0:
        raise ValueError(
            f"need share >= 0, searches >= 1, max_steps >= 1 and 0 < confidence < 1, got share={share}, "
            f"searches={searches}, max_steps={max_steps}, confidence={confidence}"
        )
    for steps in range(min(int(max_steps), int(share) // int(searches)), 0, -1):
        z = _step_z(confidence, steps)
        if share // (searches * steps) > z * z:
            return steps
    return 0


def median_pool_size(
    cap: int, epsilon: float, questions: int, answer_sd: float | None = MEDIAN_ANSWER_SD
) -> int:
    """Peers of the median pool: what ``questions`` questions need at ``answer_sd``, at most ``cap``.

    The pool is split into one group per question (``questions`` = numeric features × inner bin
    edges × steps per search), each group answering once with ε; a group of
    :func:`median_question_answers` peers decides its step with noise sd ``answer_sd``, so the pool
    needs ``questions · median_question_answers(ε, answer_sd)`` peers. More would only narrow a
    margin that is already small against the rank error the bins tolerate, and every peer beyond
    the need reports features instead (the model is noise-bound: more report peers is more AUC).
    ``cap`` (the pool fraction of the roster) bounds the pool on small rosters, where the need is
    out of reach and the fraction is what the benchmarks chose. ``answer_sd=None``: the cap alone.
    """
    if cap < 0 or questions < 0:
        raise ValueError(f"need cap >= 0 and questions >= 0, got cap={cap}, questions={questions}")
    if answer_sd is None:
        return int(cap)
    return min(int(cap), int(questions) * median_question_answers(epsilon, answer_sd))
