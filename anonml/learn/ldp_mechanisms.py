"""One-dimensional LDP mechanisms for a value in [−1, 1], and their k-of-d vector form.

Wang, Xiao, Yang, Zhao, Hu, Lin, Li & Yu, *Collecting and Analyzing Multidimensional Data with Local
Differential Privacy*, ICDE 2019: the Piecewise Mechanism (Algorithm 2), the Hybrid Mechanism
(Algorithm 3, mixing in Duchi, Jordan & Wainwright's ±B mechanism, JASA 2018) and the k-of-d
sampling of Algorithm 4 (:func:`perturb_vector`), each with its variance formula. The LDP baselines
(:mod:`anonml.learn.baselines`) and the class map's K ≥ 3 answers (:mod:`anonml.learn.calibration`)
report through them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from anonml.privacy._checks import check_epsilon

__all__ = [
    "piecewise_perturb",
    "piecewise_variance",
    "piecewise_bound",
    "duchi_perturb",
    "duchi_variance",
    "duchi_bound",
    "hybrid_perturb",
    "hybrid_variance",
    "hybrid_worst_variance",
    "hybrid_alpha",
    "EPSILON_STAR",
    "ScalarMechanism",
    "sampled_dimensions",
    "perturb_vector",
    "vector_variance",
    "unit_values",
    "SCALAR_MECHANISMS",
]


def unit_values(t: ArrayLike, where: str = "t") -> np.ndarray:
    """``t`` as a float array after checking every value is finite and in [-1, 1]."""
    arr = np.asarray(t, dtype=float)
    bad = ~np.isfinite(arr) | (np.abs(arr) > 1.0)
    if bad.any():
        first = np.flatnonzero(bad.reshape(-1))[0]
        raise ValueError(
            f"{where} must lie in [-1, 1]; value {arr.reshape(-1)[first]!r} at flat index {first}"
        )
    return arr


def piecewise_bound(epsilon: float) -> float:
    """The Piecewise Mechanism's output bound ``C = (e^{ε/2} + 1)/(e^{ε/2} − 1)``: outputs lie in [−C, C]."""
    half = math.exp(check_epsilon(epsilon) / 2.0)
    return (half + 1.0) / (half - 1.0)


def piecewise_perturb(t: ArrayLike, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """The Piecewise Mechanism (Wang et al. 2019, Algorithm 2): an unbiased ε-LDP report of ``t ∈ [−1, 1]``.

    With ``C = (e^{ε/2}+1)/(e^{ε/2}−1)``, ``l(t) = (C+1)/2·t − (C−1)/2`` and
    ``r(t) = l(t) + C − 1``, the report is uniform on ``[l(t), r(t)]`` with
    probability ``e^{ε/2}/(e^{ε/2}+1)``, else uniform on ``[−C, l(t)) ∪ (r(t), C]``.
    The density ratio between any two inputs is at most ``e^ε``; ``E[t*] = t``
    and ``Var[t*] = t²/(e^{ε/2}−1) + (e^{ε/2}+3)/(3(e^{ε/2}−1)²)`` (their Lemma 1).
    """
    values = unit_values(t)
    half = math.exp(check_epsilon(epsilon) / 2.0)
    c = (half + 1.0) / (half - 1.0)
    left = (c + 1.0) / 2.0 * values - (c - 1.0) / 2.0
    right = left + c - 1.0
    inside = rng.random(values.shape) < half / (half + 1.0)
    u = rng.random(values.shape)
    # The outside set has length (l + C) + (C − r) = C + 1; lay it out as one interval.
    v = u * (c + 1.0)
    outside = np.where(v < left + c, v - c, right + (v - (left + c)))
    return np.where(inside, left + u * (c - 1.0), outside)


def piecewise_variance(t: ArrayLike, epsilon: float) -> np.ndarray:
    """``Var[t*|t] = t²/(e^{ε/2}−1) + (e^{ε/2}+3)/(3(e^{ε/2}−1)²)`` (Wang et al. 2019, Lemma 1)."""
    values = unit_values(t)
    half = math.exp(check_epsilon(epsilon) / 2.0)
    return values**2 / (half - 1.0) + (half + 3.0) / (3.0 * (half - 1.0) ** 2)


def duchi_bound(epsilon: float) -> float:
    """Duchi et al.'s output magnitude ``B = (e^ε + 1)/(e^ε − 1)``: every report is ±B."""
    lam = math.exp(check_epsilon(epsilon))
    return (lam + 1.0) / (lam - 1.0)


def duchi_perturb(t: ArrayLike, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Duchi et al.'s one-dimensional mechanism: ``±B`` with ``P(+B) = 1/2 + t(e^ε−1)/(2(e^ε+1))``.

    ``B = (e^ε+1)/(e^ε−1)``; the two output probabilities differ across inputs
    by at most a factor ``e^ε``; ``E[t*] = t`` and ``Var[t*] = B² − t²``
    (Wang et al. 2019, sec. III-A, eq. 3).
    """
    values = unit_values(t)
    b = duchi_bound(epsilon)
    positive = rng.random(values.shape) < 0.5 + values / (2.0 * b)
    return np.where(positive, b, -b)


def duchi_variance(t: ArrayLike, epsilon: float) -> np.ndarray:
    """``Var[t*|t] = ((e^ε+1)/(e^ε−1))² − t²``."""
    values = unit_values(t)
    return duchi_bound(epsilon) ** 2 - values**2


#: ε* of Wang et al. 2019 (Lemma 4): below it the Hybrid Mechanism is Duchi et al.'s alone.
EPSILON_STAR: float = math.log(
    (
        -5.0
        + 2.0 * (6353.0 - 405.0 * math.sqrt(241.0)) ** (1 / 3)
        + 2.0 * (6353.0 + 405.0 * math.sqrt(241.0)) ** (1 / 3)
    )
    / 27.0
)


def hybrid_alpha(epsilon: float) -> float:
    """The Hybrid Mechanism's weight on the Piecewise Mechanism: ``1 − e^{−ε/2}`` if ``ε > ε*``, else 0."""
    epsilon = check_epsilon(epsilon)
    return 1.0 - math.exp(-epsilon / 2.0) if epsilon > EPSILON_STAR else 0.0


def hybrid_perturb(t: ArrayLike, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """The Hybrid Mechanism (Wang et al. 2019, sec. III-C): PM w.p. ``α``, else Duchi et al.'s, both at ε.

    ``α = hybrid_alpha(ε)``. Both parts are unbiased and ε-LDP, so the mixture is
    too, and ``Var = α·Var_PM + (1−α)·Var_Duchi`` (same mean). Its worst case
    over ``t`` is the paper's eq. 9 (:func:`hybrid_worst_variance`).
    """
    values = unit_values(t)
    use_pm = rng.random(values.shape) < hybrid_alpha(epsilon)
    return np.where(use_pm, piecewise_perturb(values, epsilon, rng), duchi_perturb(values, epsilon, rng))


def hybrid_variance(t: ArrayLike, epsilon: float) -> np.ndarray:
    """``α·Var_PM(t) + (1−α)·Var_Duchi(t)`` with ``α = hybrid_alpha(ε)``."""
    alpha = hybrid_alpha(epsilon)
    return alpha * piecewise_variance(t, epsilon) + (1.0 - alpha) * duchi_variance(t, epsilon)


def hybrid_worst_variance(epsilon: float) -> float:
    """The Hybrid Mechanism's largest variance over ``t`` (Wang et al. 2019, Lemma 4 / eq. 9).

    For ``ε > ε*``: ``(e^{ε/2}+3)/(3e^{ε/2}(e^{ε/2}−1)) + (e^ε+1)²/(e^{ε/2}(e^ε−1)²)``
    (reached at ``t = 0``); else Duchi et al.'s ``((e^ε+1)/(e^ε−1))²``.
    """
    epsilon = check_epsilon(epsilon)
    if epsilon <= EPSILON_STAR:
        return duchi_bound(epsilon) ** 2
    half, lam = math.exp(epsilon / 2.0), math.exp(epsilon)
    return (half + 3.0) / (3.0 * half * (half - 1.0)) + (lam + 1.0) ** 2 / (half * (lam - 1.0) ** 2)


ScalarMechanism = Literal["piecewise", "hybrid"]
SCALAR_MECHANISMS: dict[str, tuple[Callable[..., np.ndarray], Callable[..., np.ndarray]]] = {
    "piecewise": (piecewise_perturb, piecewise_variance),
    "hybrid": (hybrid_perturb, hybrid_variance),
    "duchi": (duchi_perturb, duchi_variance),
}


def sampled_dimensions(d: int, epsilon: float) -> int:
    """``k = max(1, min(d, ⌊ε/2.5⌋))`` coordinates a user reports (Wang et al. 2019, Algorithm 4)."""
    return max(1, min(int(d), math.floor(check_epsilon(epsilon) / 2.5)))


def perturb_vector(
    T: ArrayLike, epsilon: float, rng: np.random.Generator, mechanism: str = "hybrid"
) -> np.ndarray:
    """Algorithm 4 of Wang et al. 2019: one ε-LDP report of a tuple in ``[−1, 1]^d``.

    Each row samples ``k`` (:func:`sampled_dimensions`) of its ``d`` coordinates
    uniformly without replacement, reports each through ``mechanism`` at ``ε/k``
    scaled by ``d/k``, and sends 0 for the others. By composition the row's
    report is ε-LDP; each coordinate is unbiased with variance
    ``(d/k)(Var_M(t_j, ε/k) + t_j²) − t_j²`` (:func:`vector_variance`).
    """
    if mechanism not in SCALAR_MECHANISMS:
        raise ValueError(f"mechanism must be one of {sorted(SCALAR_MECHANISMS)}, got {mechanism!r}")
    values = unit_values(T, "T")
    if values.ndim != 2 or values.shape[1] < 1:
        raise ValueError(f"T must be a 2-D array of shape (n, d) with d >= 1, got shape {values.shape}")
    n, d = values.shape
    k = sampled_dimensions(d, epsilon)
    perturb = SCALAR_MECHANISMS[mechanism][0]
    chosen = np.argsort(rng.random((n, d)), axis=1)[:, :k]
    rows = np.repeat(np.arange(n), k)
    out = np.zeros((n, d))
    out[rows, chosen.reshape(-1)] = perturb(values[rows, chosen.reshape(-1)], epsilon / k, rng) * (d / k)
    return out


def vector_variance(T: ArrayLike, epsilon: float, mechanism: str = "hybrid") -> np.ndarray:
    """Per-coordinate variance of :func:`perturb_vector`: ``(d/k)(Var_M(t_j, ε/k) + t_j²) − t_j²``."""
    values = unit_values(T, "T")
    d = values.shape[-1]
    k = sampled_dimensions(d, epsilon)
    return (d / k) * (SCALAR_MECHANISMS[mechanism][1](values, epsilon / k) + values**2) - values**2
