"""Local-DP mechanisms for one categorical value, reported as a bit vector.

A peer holding value ``v`` in a domain of size ``m`` sends an ``m``-bit report
``B``. Every mechanism here has the same per-bit marginals: the true bit is 1
with probability ``p`` and every other bit with probability ``q < p``. That is
all the aggregator needs to debias (:mod:`anonml.privacy.estimation`), and it
fixes the expected error (Cyphers 2017, eq. 7.2)::

    E||f_hat - f||_2 = sqrt((m-1) q (1-q) + p (1-p)) / ((p - q) sqrt(n))

where ``f`` is the distribution of the ``n`` true values (the formula is the
root of the expected squared error; it holds whatever the correlation between
bits of one report, which only the privacy loss depends on). The privacy loss
``epsilon`` does depend on the joint law of the bits, so each mechanism states
its own, and the mechanism's *kind* travels with the report
(:class:`~anonml.privacy.descriptor.MechanismDescriptor`). Each mechanism's
``p``, ``q`` and ``epsilon`` come from :mod:`anonml.privacy._closed_form`, the
NumPy-free formulas a descriptor is checked against; every class registers
itself (:func:`~anonml.privacy.descriptor.register_mechanism`) so that
:meth:`~anonml.privacy.descriptor.MechanismDescriptor.to_mechanism` can build it.

References
----------
Cyphers, *A System for Privacy-Preserving Machine Learning on Personal Data*,
MIT 2017, sec. 7.1 (eqs. 7.1-7.3). Erlingsson, Pihur & Korolova, RAPPOR, CCS 2014.
Wang, Blocki, Li & Jha, *Locally Differentially Private Protocols for Frequency
Estimation*, USENIX Security 2017 (OUE, k-RR). Ye & Barg, *Optimal schemes for
discrete distribution estimation under LDP*, IEEE T-IT 2018, and Wang et al.
2016 (subset selection).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Self

import numpy as np
from numpy.typing import ArrayLike

from anonml.privacy._checks import check_domain, check_epsilon, check_values
from anonml.privacy._closed_form import (
    check_pq,
    check_subset_size,
    krr_pq,
    oue_pq,
    pq_epsilon,
    rappor_pq,
    subset_pq,
)
from anonml.privacy._sampling import (
    bernoulli_bits,
    has_membership_table,
    one_hot_table,
    subsets_by_membership,
    uniform_below,
    uniform_subsets,
)
from anonml.privacy.descriptor import MechanismDescriptor, register_mechanism
from anonml.randomness import resolve_rng

__all__ = [
    "Mechanism",
    "PQPerturbation",
    "RAPPOR",
    "OUE",
    "RandomizedResponse",
    "SubsetSelection",
    "optimal_pq_p",
]


def optimal_pq_p(epsilon: float, m: int) -> float:
    """The p minimising eq. 7.2 over (p,q)-perturbations with privacy ``epsilon`` (eq. 7.3).

    With ``lam = e**epsilon``::

        p = (lam**2 + m lam - lam - sqrt((m-1)(lam**3 + lam) + ((m-1)**2 + 1) lam**2))
            / (lam**2 - 1)

    and ``q = p / (p + lam (1 - p))``. At ``m = 2`` this is RAPPOR's
    ``sqrt(lam) / (1 + sqrt(lam))``; as ``m`` grows it tends to OUE's ``1/2``.
    """
    lam = math.exp(check_epsilon(epsilon))
    m = check_domain(m)
    root = math.sqrt((m - 1) * (lam**3 + lam) + ((m - 1) ** 2 + 1) * lam**2)
    return (lam**2 + m * lam - lam - root) / (lam**2 - 1.0)


class Mechanism(ABC):
    """A bit-vector LDP mechanism: true bit kept w.p. ``p``, other bits set w.p. ``q``.

    Subclasses are frozen dataclasses; ``kind`` names the mechanism on the wire.

    Attributes
    ----------
    m : int
        Domain size (number of bits per report).
    p : float
        Probability that the true value's bit is 1.
    q : float
        Probability that any other bit is 1.
    epsilon : float
        Worst-case log-likelihood ratio between two inputs' reports (the LDP budget).
    """

    kind: ClassVar[str]
    m: int
    p: float
    q: float
    epsilon: float

    @classmethod
    @abstractmethod
    def from_epsilon(cls, epsilon: float, m: int) -> Mechanism:
        """The mechanism of this kind with privacy loss ``epsilon`` on a domain of size ``m``."""

    @classmethod
    def from_descriptor(cls, descriptor: MechanismDescriptor) -> Mechanism:
        """The mechanism a (validated) descriptor of this kind names: by default its epsilon and m."""
        return cls.from_epsilon(descriptor.epsilon, descriptor.m)

    @abstractmethod
    def _perturb_indices(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Reports for validated value indices."""

    def perturb(self, values: ArrayLike, rng: np.random.Generator | None = None) -> np.ndarray:
        """Randomise many reports at once.

        Parameters
        ----------
        values : array-like of int, shape (n,), or of bool, shape (n, m)
            True value indices in ``[0, m)``, or their one-hot bit vectors.
        rng : numpy.random.Generator, optional
            Source of randomness; ``None`` seeds one from the OS CSPRNG.

        Returns
        -------
        ndarray of bool, shape (n, m)
            The reported bit vectors, one row per input value.
        """
        indices = check_values(values, self.m)
        return self._perturb_indices(indices, resolve_rng(rng))

    def count_variance(self, n: int, true_count: ArrayLike = 0.0) -> np.ndarray | float:
        """Variance of the debiased count of a value held by ``true_count`` of ``n`` peers.

        ``Var(n_hat_i) = (c p (1-p) + (n - c) q (1-q)) / (p - q)**2`` with
        ``c = true_count``: the reported bit sum is a sum of ``c`` Bernoulli(p)
        and ``n - c`` Bernoulli(q) independent bits (independent across peers).
        At ``c = 0`` this is the per-value variance of Wang et al. 2017.
        """
        c = np.asarray(true_count, dtype=float)
        p, q = self.p, self.q
        var = (c * p * (1 - p) + (n - c) * q * (1 - q)) / (p - q) ** 2
        return float(var) if var.ndim == 0 else var

    def pair_moments(self) -> tuple[float, float]:
        """``(r₀, r₁)``: the chance that two bits of one report are both 1, for a true value ``v``.

        ``r₀ = P(B_i = B_j = 1)`` for ``i ≠ j`` both ``≠ v``, ``r₁ = P(B_v = B_j = 1)``
        for ``j ≠ v``. Independent bits (unary encodings): ``(q², p·q)``. They fix
        the covariance of two cells' estimates (:meth:`count_covariance`), which
        eq. 7.2's sum of per-cell variances never needs but any sum of cells does.
        """
        return self.q**2, self.p * self.q

    def count_covariance(self, n: int, true_count: ArrayLike = 0.0) -> tuple[float, np.ndarray]:
        """Covariance of two different values' debiased counts: ``offset + g_i + g_j``.

        A peer holding ``v`` makes ``Cov(B_i, B_j)`` equal to ``r₀ − q²`` for
        ``i, j ≠ v`` and ``r₁ − p·q`` when one of them is ``v``
        (:meth:`pair_moments`); peers are independent, so over ``n`` peers of
        whom ``c_i`` hold ``i``,

            Cov(n̂_i, n̂_j) = [n·(r₀ − q²) + (c_i + c_j)·(r₁ − p·q − r₀ + q²)] / (p − q)²,

        returned as ``offset = n·(r₀ − q²)/(p − q)²`` and ``g = c·(r₁ − p·q − r₀ + q²)/(p − q)²``
        (shape of ``true_count``). Zero for independent bits; negative for k-RR
        (one bit per report), so a sum of k-RR cells is less noisy than the sum
        of their variances says — the sum of all m cells is exactly ``n``.
        """
        r0, r1 = self.pair_moments()
        p, q = self.p, self.q
        scale = (p - q) ** 2
        c = np.asarray(true_count, dtype=float)
        return float(n * (r0 - q * q) / scale), c * ((r1 - p * q) - (r0 - q * q)) / scale

    def expected_l2_error(self, n: int) -> float:
        """Root expected squared L2 error of the estimated distribution from ``n`` reports.

        Thesis eq. 7.2: ``sqrt((m-1) q (1-q) + p (1-p)) / ((p - q) sqrt(n))``.
        Multiply by ``n`` for the error of the counts.
        """
        if n < 1:
            raise ValueError(f"n (number of reports) must be >= 1, got {n}")
        p, q = self.p, self.q
        return math.sqrt((self.m - 1) * q * (1 - q) + p * (1 - p)) / ((p - q) * math.sqrt(n))

    def descriptor(self) -> MechanismDescriptor:
        """The serialisable description that travels with a report."""
        omega = getattr(self, "omega", None)
        return MechanismDescriptor(
            kind=self.kind, m=self.m, p=self.p, q=self.q, epsilon=self.epsilon, omega=omega
        )


class _UnaryEncoding(Mechanism):
    """Independent bits: (p,q)-perturbation and its special cases."""

    def _perturb_indices(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        n, m, p, q = values.size, self.m, self.p, self.q
        out = bernoulli_bits(rng, q, n * m)
        # The true bit must be Bernoulli(p); it already is Bernoulli(q), and
        # OR-ing an independent Bernoulli((p - q) / (1 - q)) gives exactly p.
        where = np.flatnonzero(bernoulli_bits(rng, (p - q) / (1 - q), n))
        chosen = np.take(values, where)  # (boolean-mask indexing is far slower)
        where *= m
        where += chosen
        out[where] = True
        return out.reshape(n, m)


@register_mechanism
@dataclass(frozen=True)
class PQPerturbation(_UnaryEncoding):
    """(p,q)-perturbation: 1-bits stay 1 w.p. ``p``, 0-bits become 1 w.p. ``q``.

    ``epsilon = ln(p (1-q) / ((1-p) q))`` (thesis eq. 7.1). :meth:`from_epsilon`
    uses the error-minimising ``p`` of eq. 7.3 (:func:`optimal_pq_p`).

    Examples
    --------
    >>> import numpy as np
    >>> mech = PQPerturbation.from_epsilon(1.0, 2)
    >>> bool(np.isclose(mech.p, RAPPOR.from_epsilon(1.0, 2).p))  # eq. 7.3 at m = 2
    True
    >>> mech.perturb(np.array([0, 1, 1]), rng=np.random.default_rng(0)).shape
    (3, 2)
    """

    kind: ClassVar[str] = "pq"
    p: float
    q: float
    m: int

    def __post_init__(self) -> None:
        check_pq(self.p, self.q)
        check_domain(self.m)

    @property
    def epsilon(self) -> float:
        return pq_epsilon(self.p, self.q)

    @classmethod
    def from_epsilon(cls, epsilon: float, m: int) -> PQPerturbation:
        p = optimal_pq_p(epsilon, m)
        lam = math.exp(epsilon)
        return cls(p=p, q=p / (p + lam * (1 - p)), m=m)

    @classmethod
    def from_descriptor(cls, descriptor: MechanismDescriptor) -> PQPerturbation:
        """Defined by its own ``p`` and ``q``, not by epsilon."""
        return cls(p=descriptor.p, q=descriptor.q, m=descriptor.m)


@dataclass(frozen=True)
class _DefinedByEpsilon:
    """Mechanisms whose fields are ``(epsilon, m)``: the fields, their checks, ``from_epsilon``,
    ``p`` and ``q``, once.

    Each kind gives only :meth:`_pq`, its closed form from :mod:`anonml.privacy._closed_form`.
    """

    epsilon: float
    m: int

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon)
        check_domain(self.m)

    @classmethod
    def from_epsilon(cls, epsilon: float, m: int) -> Self:
        return cls(epsilon=epsilon, m=m)  # type: ignore[call-arg]

    def _pq(self) -> tuple[float, float]:  # pragma: no cover - abstract
        """``(p, q)`` of this kind at its ``epsilon`` and ``m``."""
        raise NotImplementedError

    @property
    def p(self) -> float:
        return self._pq()[0]

    @property
    def q(self) -> float:
        return self._pq()[1]


@register_mechanism
@dataclass(frozen=True)
class RAPPOR(_DefinedByEpsilon, _UnaryEncoding):
    """One-time (basic) RAPPOR: ``q = 1 - p``, ``epsilon = 2 ln(p / (1-p))``.

    So ``p = e^(epsilon/2) / (1 + e^(epsilon/2))`` (Erlingsson et al. 2014).
    """

    kind: ClassVar[str] = "rappor"

    def _pq(self) -> tuple[float, float]:
        return rappor_pq(self.epsilon)


@register_mechanism
@dataclass(frozen=True)
class OUE(_DefinedByEpsilon, _UnaryEncoding):
    """Optimised unary encoding: ``p = 1/2``, ``q = 1 / (e^epsilon + 1)`` (Wang et al. 2017)."""

    kind: ClassVar[str] = "oue"

    def _pq(self) -> tuple[float, float]:
        return oue_pq(self.epsilon)


@register_mechanism
@dataclass(frozen=True)
class RandomizedResponse(_DefinedByEpsilon, Mechanism):
    """k-ary randomised response: the true value w.p. ``p``, else one of the other m-1.

    ``p = e^epsilon / (e^epsilon + m - 1)``, so ``epsilon = ln((m-1) p / (1-p))``;
    the report is the one-hot of the reported value, hence ``q = (1-p) / (m-1)``.
    The thesis writes ``m`` where the mechanism it describes gives ``m - 1``.
    """

    kind: ClassVar[str] = "krr"

    def _pq(self) -> tuple[float, float]:
        return krr_pq(self.epsilon, self.m)

    def pair_moments(self) -> tuple[float, float]:
        """One bit per report: no two bits are ever both 1."""
        return 0.0, 0.0

    def _perturb_indices(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        n, m = values.size, self.m
        # Keep the value (shift 0) w.p. p, else shift it by 1..m-1 modulo m:
        # uniform over the m-1 others. Row r of the table is the one-hot of r % m.
        small = np.uint8 if m <= 128 else np.intp  # codes stay below 2m
        shift = (uniform_below(rng, m - 1, n).astype(small, copy=False) + small(1)) * ~(
            bernoulli_bits(rng, self.p, n)
        )
        codes = values.astype(small, copy=False) + shift
        return np.take(one_hot_table(m, 2), codes, axis=0)


def _default_omega(epsilon: float, m: int) -> int:
    # omega = round(m / (e^eps + 1)), halves rounded up, kept inside [1, m-1].
    return min(max(math.floor(m / (math.exp(epsilon) + 1.0) + 0.5), 1), m - 1)


@register_mechanism
@dataclass(frozen=True)
class SubsetSelection(_DefinedByEpsilon, Mechanism):
    """Subset selection: report an ``omega``-subset, containing the true value w.p. ``p``.

    Every omega-subset containing the true value is ``e^epsilon`` times as likely
    as every one that does not, so the privacy loss is exactly ``epsilon``. In
    bit-vector terms (``lam = e^epsilon``)::

        p = omega lam / (omega lam + m - omega)
        q = (omega (omega-1) lam + (m - omega) omega) / ((m-1) (omega lam + m - omega))

    ``omega`` defaults to ``round(m / (lam + 1))`` (Wang et al. 2016; Ye & Barg
    2018), clamped to ``[1, m-1]``; ``omega = 1`` is k-ary randomised response.
    """

    kind: ClassVar[str] = "subset"
    omega: int | None = None  # None: round(m / (e^epsilon + 1)), set on construction

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.omega is None:
            object.__setattr__(self, "omega", _default_omega(self.epsilon, self.m))
        if isinstance(self.omega, bool) or not isinstance(self.omega, int | np.integer):
            raise TypeError(f"omega must be an integer, got {self.omega!r}")
        check_subset_size(self.omega, self.m)

    @classmethod
    def from_descriptor(cls, descriptor: MechanismDescriptor) -> SubsetSelection:
        """Defined by epsilon, m and the descriptor's subset size ``omega``."""
        return cls(epsilon=descriptor.epsilon, m=descriptor.m, omega=descriptor.omega)

    def _pq(self) -> tuple[float, float]:
        return subset_pq(self.epsilon, self.m, self.omega)

    def pair_moments(self) -> tuple[float, float]:
        """Exactly ω bits are 1: ``r₁ = p(ω−1)/(m−1)``, ``r₀ = (ω−1)(ω−2p)/((m−1)(m−2))``.

        Given the subset holds ``v`` (w.p. ``p``), its other ω−1 members are a
        uniform draw from the other m−1 values, so ``P(B_v B_j) = p(ω−1)/(m−1)``;
        ``r₀`` follows from ``Σ_{i≠j} B_i B_j = ω(ω−1)``. At m = 2 no pair avoids
        ``v`` (r₀ is then never used; 0).
        """
        w, m, p = int(self.omega or 1), self.m, self.p
        r1 = p * (w - 1) / (m - 1)
        r0 = (w - 1) * (w - 2 * p) / ((m - 1) * (m - 2)) if m > 2 else 0.0
        return r0, r1

    def _perturb_indices(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        n, m, w = values.size, self.m, self.omega
        if has_membership_table(m, w):
            # Holds v w.p. p, then uniform among the subsets that (do not) hold v.
            return subsets_by_membership(rng, values, m, w, bernoulli_bits(rng, self.p, n))
        # A uniform omega-subset of the whole domain holds v w.p. w/m and is
        # then uniform among the subsets holding v (and likewise without v).
        # Subsets holding v must have total probability p >= w/m: convert a
        # fraction alpha of the v-free draws by swapping a uniform member for v,
        # which again yields a uniform subset holding v.
        out, members = uniform_subsets(rng, n, m, w)
        flat = out.reshape(-1)
        base = np.arange(n, dtype=np.intp) * m
        alpha = (self.p - w / m) / (1.0 - w / m)
        swap = ~np.take(flat, base + values) & bernoulli_bits(rng, alpha, n)
        rows = np.flatnonzero(swap)
        dropped = members[rows, uniform_below(rng, w, rows.size)]
        flat[base[rows] + dropped] = False
        flat[base[rows] + np.take(values, rows)] = True
        return out
