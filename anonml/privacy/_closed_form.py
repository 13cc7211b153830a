"""The closed-form ``p``, ``q`` and ``epsilon`` of each mechanism kind, with the math module alone.

Each mechanism of :mod:`anonml.privacy.mechanisms` takes its numbers from here, and a
:class:`~anonml.privacy.descriptor.MechanismDescriptor` checks the numbers it carries against the
same functions (:func:`implied_parameters`). So the descriptor never needs the mechanism classes:
a service that only parses wire messages validates every descriptor without loading NumPy or the
mechanisms (issue 31), and the mechanisms import the descriptor, never the other way round.

Per kind, with ``lam = e**epsilon`` (the formulas each mechanism's docstring derives)::

    pq      epsilon = ln(p (1-q) / ((1-p) q))                          (thesis eq. 7.1)
    rappor  p = 1 / (1 + e**(-epsilon/2)),  q = 1 / (1 + e**(epsilon/2))
    oue     p = 1/2,                         q = 1 / (lam + 1)
    krr     p = lam / (lam + m - 1),         q = 1 / (lam + m - 1)
    subset  p = w lam / (w lam + m - w),
            q = (w (w-1) lam + (m - w) w) / ((m-1) (w lam + m - w))    (w = omega)

References
----------
Cyphers, *A System for Privacy-Preserving Machine Learning on Personal Data*, MIT 2017,
sec. 7.1. Erlingsson, Pihur & Korolova, RAPPOR, CCS 2014. Wang, Blocki, Li & Jha, USENIX
Security 2017 (OUE, k-RR). Wang et al. 2016; Ye & Barg, IEEE T-IT 2018 (subset selection).
"""

from __future__ import annotations

import math

__all__ = [
    "MIN_EPSILON",
    "MAX_EPSILON",
    "check_epsilon",
    "check_pq",
    "check_subset_size",
    "pq_epsilon",
    "rappor_pq",
    "oue_pq",
    "krr_pq",
    "subset_pq",
    "implied_parameters",
]


#: Smallest ε a mechanism accepts. The closed forms divide by ``e^ε − 1``, which rounds to 0 near
#: 1e-16 (a ZeroDivisionError at ε = 1e-20); long before that a report carries nothing usable: its
#: debiasing multiplies the noise by about ``1/ε``.
MIN_EPSILON = 1e-6

#: Largest ε a mechanism accepts. Past it p rounds to 1 in double precision
#: (and e^ε soon overflows): the report would simply be the raw value.
MAX_EPSILON = 30.0


def check_epsilon(epsilon: float, where: str = "epsilon") -> float:
    """Return ``epsilon`` as a float after checking it is finite and in [MIN_EPSILON, MAX_EPSILON]."""
    try:
        value = float(epsilon)
    except (TypeError, ValueError):
        raise TypeError(f"{where} must be a number, got {epsilon!r}") from None
    if not (math.isfinite(value) and value > 0.0):
        raise ValueError(f"{where} must be finite and > 0, got {epsilon!r}")
    if value < MIN_EPSILON:
        raise ValueError(
            f"{where} must be at least {MIN_EPSILON:g} (p and q would be indistinguishable), got {epsilon!r}"
        )
    if value > MAX_EPSILON:
        raise ValueError(f"{where} must be at most {MAX_EPSILON:g} (p would round to 1), got {epsilon!r}")
    return value


def check_pq(p: float, q: float) -> None:
    """Raise ValueError unless ``0 < q < p < 1`` (a (p,q)-perturbation that favours the true bit)."""
    if not (0.0 < q < p < 1.0):
        raise ValueError(f"need 0 < q < p < 1, got p={p!r}, q={q!r}")


def check_subset_size(omega: int, m: int) -> None:
    """Raise ValueError unless ``1 <= omega <= m - 1`` (a proper, non-empty subset of the domain)."""
    if not 1 <= omega <= m - 1:
        raise ValueError(f"omega must lie in [1, m-1={m - 1}], got {omega}")


def pq_epsilon(p: float, q: float) -> float:
    """Privacy loss of a (p,q)-perturbation: ``ln(p (1-q) / ((1-p) q))`` (thesis eq. 7.1).

    The worst output has a 1 at the first input's bit and a 0 at the second's.
    """
    return math.log(p * (1 - q) / ((1 - p) * q))


def rappor_pq(epsilon: float) -> tuple[float, float]:
    """RAPPOR's ``(p, q)``: ``p = 1 / (1 + e^(-epsilon/2))``, ``q = 1 - p = 1 / (1 + e^(epsilon/2))``."""
    return 1.0 / (1.0 + math.exp(-epsilon / 2)), 1.0 / (1.0 + math.exp(epsilon / 2))


def oue_pq(epsilon: float) -> tuple[float, float]:
    """Optimised unary encoding's ``(p, q) = (1/2, 1 / (e^epsilon + 1))``."""
    return 0.5, 1.0 / (math.exp(epsilon) + 1.0)


def krr_pq(epsilon: float, m: int) -> tuple[float, float]:
    """k-ary randomised response's ``(p, q) = (lam, 1) / (lam + m - 1)`` with ``lam = e^epsilon``."""
    lam = math.exp(epsilon)
    return lam / (lam + m - 1), 1.0 / (lam + m - 1)


def subset_pq(epsilon: float, m: int, omega: int) -> tuple[float, float]:
    """Subset selection's ``(p, q)`` for subsets of size ``w = omega``, ``lam = e^epsilon``.

    ``p = w lam / (w lam + m - w)`` and ``q = (w (w-1) lam + (m - w) w) / ((m-1) (w lam + m - w))``.
    """
    lam, w = math.exp(epsilon), omega
    return w * lam / (w * lam + m - w), (w * (w - 1) * lam + (m - w) * w) / ((m - 1) * (w * lam + m - w))


def implied_parameters(
    kind: str, m: int, p: float, q: float, epsilon: float, omega: int | None
) -> tuple[float, float, float]:
    """``(p, q, epsilon)`` as the defining parameters of ``kind`` imply them.

    A ``"pq"`` mechanism is defined by ``(p, q)``, so its ``epsilon`` is derived (eq. 7.1);
    every other kind is defined by ``(epsilon, m)`` (and ``omega`` for ``"subset"``), so its
    ``p`` and ``q`` are. The defining parameters are checked as the mechanism's constructor
    checks them, with the same messages (ValueError).
    """
    if kind == "pq":
        check_pq(p, q)
        return p, q, pq_epsilon(p, q)
    check_epsilon(epsilon)
    if kind == "rappor":
        return (*rappor_pq(epsilon), epsilon)
    if kind == "oue":
        return (*oue_pq(epsilon), epsilon)
    if kind == "krr":
        return (*krr_pq(epsilon, m), epsilon)
    if kind == "subset":
        if omega is None:
            raise ValueError("omega is required for kind 'subset'")
        check_subset_size(omega, m)
        return (*subset_pq(epsilon, m, omega), epsilon)
    raise ValueError(f"unknown mechanism kind {kind!r}")
