"""The temperature of a model's summed terms, measured by the peers it predicts for.

A default-mode model adds one term per feature subset (:mod:`anonml.learn.ensemble`). Features that
carry the same evidence (a computer's price seen through its memory, disk and speed) add it once
per feature, so the predictive distribution of a binned numeric target is too sharp and its median
too extreme: on a tuning set of eight features sharing one latent factor the default regressor erred
more than the training median at every ε_T, even at ε_T = 25. No report shows the features'
correlation (each peer reports one subset), so a disjoint *temper pool* of peers measures it
against their own targets, one private bit each.

*Halving search* (the shape of thesis algorithm 1, :mod:`anonml.privacy.median`): the terms are
scaled by a temperature ``T``, starting at 1. The pool is split into ``s`` groups; at step ``j``
each peer of group ``j`` computes its two predictions ``ŷ_T(x)`` and ``ŷ_{T/2}(x)`` from the
published model and answers one bit, "is ``|y − ŷ_{T/2}| < |y − ŷ_T|``?" (a tie: a fair coin, which
carries nothing), by binary randomised response at ε_T. With ``ŝ`` the debiased share of "yes" and
``σ = 1/(2c√m)`` its largest standard error (``c = 2p − 1``, ``m`` the group's size), the search
halves ``T`` when ``ŝ > 1/2 + z·σ`` (``z`` = :data:`TEMPER_SDS`) and otherwise stops. A sign test:
``T/2`` is taken only when more than half the group predicts better with it by more than the
noise explains. Each pool peer answers at most one question at ε_T.

*Steps that can move* (:func:`temperature_steps`): a group's threshold must be clear of the noise
for a three-in-four majority, ``m > (2z/c)²``; the steps are the most (at most :func:`temper_step_cap`,
which ``n`` terms bound at ``⌊log₂ n⌋``) whose groups pass, and 0 (no pool) when not even one can.
Its size is at most what a step needs to tell a 60 % majority from the noise per step
(:func:`temper_group_size`), so a large roster gives the model its other peers. Public quantities
only (pool size, ε_T, the number of features), fixed before any answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from anonml.privacy.binary import BinaryRandomizedResponse

__all__ = [
    "TEMPER_STEPS",
    "TEMPER_SDS",
    "TEMPER_MAJORITY",
    "temper_step_cap",
    "temper_group_size",
    "temperature_steps",
    "halving_temperature",
]

#: Halvings of the temperature at most, down to 1/8: eight features sharing one latent factor (the
#: tuning set of docs/model-quality.md) were best served by 1/8 at every ε_T in hindsight.
TEMPER_STEPS = 3
#: Standard errors by which a step's debiased "better at T/2" share must exceed one half.
TEMPER_SDS = 2.0
#: The majority a step's group is sized to tell from the noise (:func:`temper_group_size`): a pool
#: larger than that only takes reports from the model (the calibration pool is capped the same way).
TEMPER_MAJORITY = 0.6


def temper_step_cap(n_terms: int) -> int:
    """``min(TEMPER_STEPS, ⌊log₂ n_terms⌋)``: ``n_terms`` terms can count one piece of evidence at
    most ``n_terms`` times, so a temperature below ``1/n_terms`` is never asked about (one term: no
    search)."""
    if n_terms < 1:
        raise ValueError(f"n_terms must be >= 1, got {n_terms}")
    return min(TEMPER_STEPS, int(math.floor(math.log2(n_terms))))


def temper_group_size(epsilon: float) -> int:
    """Peers per step that tell a :data:`TEMPER_MAJORITY` share from one half: the least ``m`` with
    ``z/(2c√m) ≤ TEMPER_MAJORITY − 1/2``, i.e. ``⌈(z/(2c·(TEMPER_MAJORITY − 1/2)))²⌉`` (100/c² peers
    at the defaults: 108 at ε_T = 4, 469 at ε_T = 1)."""
    c = _signal(epsilon)
    return int(math.ceil((TEMPER_SDS / (2.0 * c * (TEMPER_MAJORITY - 0.5))) ** 2 - 1e-9))


def temperature_steps(n_pool: int, epsilon: float, max_steps: int = TEMPER_STEPS) -> int:
    """The most steps ``s ≤ max_steps`` whose groups of ``⌊n_pool/s⌋`` peers can move the search.

    A step moves only if its debiased share clears ``1/2 + z/(2c√m)`` (``z`` = :data:`TEMPER_SDS`,
    ``c = 2p − 1`` of binary randomised response at ``epsilon``). A group is formed only if it can
    tell three in four of its peers being better off at ``T/2`` from the noise, ``1/4 > z/(2c√m)``,
    so ``m > (2z/c)²``: a smaller pool would cost its peers' reports for a search that moves only on
    a near-unanimous answer (on the 442-row diabetes tuning set, pools of ~30 peers never moved and
    cost 0.7–2.9 MAE). 0 when not even one step can.
    """
    if n_pool < 0 or max_steps < 0:
        raise ValueError(f"need n_pool >= 0 and max_steps >= 0, got {n_pool}, {max_steps}")
    c = _signal(epsilon)
    need = (2.0 * TEMPER_SDS / c) ** 2
    for steps in range(int(max_steps), 0, -1):
        if n_pool // steps > need:
            return steps
    return 0


def halving_temperature(
    errors: Callable[[np.ndarray, float], np.ndarray],
    n_pool: int,
    epsilon: float,
    rng: np.random.Generator,
    steps: int,
) -> tuple[float, int]:
    """Run the halving search (module docstring) over a pool of ``n_pool`` peers.

    Parameters
    ----------
    errors : callable ``(rows, T) -> ndarray``
        The absolute errors of the pool's ``rows`` (indices into the pool) under temperature ``T``:
        what each peer computes for itself from the published model.
    n_pool : int
        Peers of the temper pool.
    epsilon : float
        ε_T of each peer's one answer.
    rng : numpy.random.Generator
        The groups' draw, the ties' coins and the randomised response.
    steps : int
        Groups of the pool (:func:`temperature_steps`); 0 asks nothing.

    Returns
    -------
    temperature : float
        ``2^(−j)`` after ``j`` halvings.
    answered : int
        Peers that answered a question (the groups of the steps taken, and the one that stopped it).
    """
    if steps < 0 or n_pool < 0:
        raise ValueError(f"need steps >= 0 and n_pool >= 0, got {steps}, {n_pool}")
    if steps and n_pool // steps < 1:
        raise ValueError(f"{n_pool} peers cannot form {steps} groups")
    rr = BinaryRandomizedResponse(float(epsilon))
    temperature, answered = 1.0, 0
    for group in np.array_split(rng.permutation(n_pool), steps) if steps else []:
        now, halved = errors(group, temperature), errors(group, temperature / 2.0)
        coins = rng.integers(0, 2, group.size).astype(bool)
        better = np.where(halved == now, coins, halved < now)
        estimate = rr.estimate(int(rr.perturb(better, rng).sum()), int(group.size))
        answered += int(group.size)
        if estimate.fraction <= 0.5 + TEMPER_SDS * rr.max_standard_error(int(group.size)):
            break
        temperature /= 2.0
    return temperature, answered


def _signal(epsilon: float) -> float:
    """``c = 2p − 1`` of binary randomised response at ``epsilon``: a debiased share's noise scales by 1/c."""
    return 2.0 * BinaryRandomizedResponse(float(epsilon)).p - 1.0
