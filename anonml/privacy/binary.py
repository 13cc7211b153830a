"""Binary randomised response for single bits (Warner 1965).

A peer answers a yes/no question truthfully with probability
``p = e^epsilon / (1 + e^epsilon)`` and lies otherwise; the likelihood ratio of
the two inputs is ``p / (1 - p) = e^epsilon``. If a fraction ``f`` of ``n``
peers hold "yes", a reported "yes" has probability ``pi = (1-p) + (2p-1) f``,
so ``f_hat = (y_bar - (1-p)) / (2p - 1)`` is unbiased. If the peers are
independent draws from a population with fraction ``f`` (as in the median
search), its variance is ``pi (1 - pi) / (n (2p-1)**2)``; for a fixed set of
peers it is the smaller ``p (1-p) / (n (2p-1)**2)``. Both are at most
``1 / (4 n (2p-1)**2)`` (``pi = 1/2``).
The private median search (:mod:`anonml.privacy.median`) asks its IsGreater
questions this way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike

from anonml.privacy._checks import check_epsilon
from anonml.privacy._sampling import bernoulli_bits
from anonml.randomness import resolve_rng

__all__ = ["BinaryRandomizedResponse", "FractionEstimate"]


@dataclass(frozen=True)
class FractionEstimate:
    """Debiased fraction of "yes" among ``n`` randomised answers.

    Attributes
    ----------
    fraction : float
        Unbiased estimate ``(y_bar - (1-p)) / (2p-1)``; may leave ``[0, 1]``.
    variance : float
        Plug-in variance ``y_bar (1 - y_bar) / (n (2p-1)**2)`` for peers drawn
        from a population (an upper bound for a fixed set of peers).
    n : int
        Number of answers.
    """

    fraction: float
    variance: float
    n: int


@dataclass(frozen=True)
class BinaryRandomizedResponse:
    """Randomised response on one bit with privacy loss ``epsilon``.

    Examples
    --------
    >>> import numpy as np
    >>> rr = BinaryRandomizedResponse(epsilon=1.0)
    >>> answers = rr.perturb(np.ones(10_000, dtype=bool), rng=np.random.default_rng(1))
    >>> round(rr.estimate(answers.sum(), answers.size).fraction, 1)
    1.0
    """

    kind: ClassVar[str] = "binary_rr"
    epsilon: float

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon)

    @property
    def p(self) -> float:
        """Probability of answering truthfully, ``e^epsilon / (1 + e^epsilon)``."""
        return 1.0 / (1.0 + math.exp(-self.epsilon))

    def perturb(self, bits: ArrayLike, rng: np.random.Generator | None = None) -> np.ndarray:
        """Flip each bit independently with probability ``1 - p``.

        Parameters
        ----------
        bits : array-like of bool or 0/1, shape (n,)
            True answers.
        rng : numpy.random.Generator, optional
            ``None`` seeds one from the OS CSPRNG.

        Returns
        -------
        ndarray of bool, shape (n,)
        """
        arr = np.asarray(bits)
        if arr.ndim != 1:
            raise ValueError(f"bits must be 1-D, got shape {arr.shape}")
        if arr.dtype != bool:
            if not np.isin(arr, (0, 1)).all():
                raise ValueError("bits must hold only booleans or 0/1")
            arr = arr.astype(bool)
        flips = bernoulli_bits(resolve_rng(rng), 1.0 - self.p, arr.size)
        return arr ^ flips

    def estimate(self, ones: int | float, n: int) -> FractionEstimate:
        """Debias ``ones`` reported "yes" out of ``n`` answers."""
        if n < 1:
            raise ValueError(f"n (number of answers) must be >= 1, got {n}")
        if not 0 <= ones <= n:
            raise ValueError(f"ones must lie in [0, n={n}], got {ones}")
        p = self.p
        y = float(ones) / n
        return FractionEstimate(
            fraction=(y - (1.0 - p)) / (2.0 * p - 1.0),
            variance=y * (1.0 - y) / (n * (2.0 * p - 1.0) ** 2),
            n=int(n),
        )

    def max_standard_error(self, n: int) -> float:
        """Largest standard error of the debiased fraction: ``1 / (2 (2p-1) sqrt(n))``."""
        if n < 1:
            raise ValueError(f"n (number of answers) must be >= 1, got {n}")
        return 1.0 / (2.0 * (2.0 * self.p - 1.0) * math.sqrt(n))

    def margin_of_error(self, n: int, confidence: float = 0.95) -> float:
        """Two-sided normal-approximation margin ``z * max_standard_error(n)``.

        With probability about ``confidence`` the debiased fraction lies within
        this margin of the true one, whatever the true fraction.
        """
        if not 0.0 < confidence < 1.0:
            raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
        from scipy.special import ndtri  # scipy.special costs 0.3 s at import: only when used

        z = float(ndtri(0.5 + confidence / 2.0))
        return z * self.max_standard_error(n)
