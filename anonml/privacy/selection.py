"""Pick the mechanism with the least expected error for a report.

All mechanisms in :mod:`anonml.privacy.mechanisms` share the error formula of
thesis eq. 7.2 (with their own ``p`` and ``q``), so ranking them is evaluating
that formula. The ranking does not depend on ``n`` (every error scales as
``1/sqrt(n)``); ``n`` is taken so the chosen error can be reported.
"""

from __future__ import annotations

from collections.abc import Sequence

from anonml.privacy._checks import check_domain, check_epsilon
from anonml.privacy.mechanisms import (
    OUE,
    RAPPOR,
    Mechanism,
    PQPerturbation,
    RandomizedResponse,
    SubsetSelection,
)

__all__ = ["best_mechanism", "CANDIDATES"]

#: Default candidates, in tie-break order (simplest first; at m = 2 k-RR and
#: subset selection with omega = 1 coincide).
CANDIDATES: tuple[type[Mechanism], ...] = (
    RandomizedResponse,
    SubsetSelection,
    PQPerturbation,
    OUE,
    RAPPOR,
)

#: Relative margin under which two errors count as a tie.
_TIE = 1e-12


def best_mechanism(
    epsilon: float,
    m: int,
    n: int,
    candidates: Sequence[type[Mechanism]] = CANDIDATES,
) -> Mechanism:
    """Return the mechanism with the least expected L2 error (eq. 7.2) at ``epsilon``.

    Parameters
    ----------
    epsilon : float
        Privacy loss each candidate is built for (``from_epsilon``).
    m : int
        Domain size.
    n : int
        Number of reports that will be aggregated (>= 1).
    candidates : sequence of Mechanism subclasses, default=CANDIDATES
        Kinds to consider; ties go to the earlier one.

    Returns
    -------
    Mechanism
        Put its :meth:`~anonml.privacy.mechanisms.Mechanism.descriptor` in the
        report so the aggregator debiases with the same ``p`` and ``q``.

    Notes
    -----
    (p,q)-perturbation at eq. 7.3's ``p`` is never worse than RAPPOR or OUE
    (both are (p,q)-perturbations of the same epsilon). Against OUE, k-RR has the
    smaller *per-value* variance at zero count exactly when ``m < 3 e^epsilon + 2``
    (Wang et al. 2017); for the *total* error of eq. 7.2 the crossover is at
    ``m - 1 = ((1 + 2 lam) + sqrt((1 + 2 lam)**2 + 4 (lam + 1)**2)) / 2``,
    slightly earlier, because eq. 7.2 also counts the true values' own variance.

    Examples
    --------
    >>> best_mechanism(1.0, 2, 1000)
    RandomizedResponse(epsilon=1.0, m=2)
    >>> best_mechanism(1.0, 128, 1000)
    SubsetSelection(epsilon=1.0, m=128, omega=34)
    """
    epsilon = check_epsilon(epsilon)
    m = check_domain(m)
    if n < 1:
        raise ValueError(f"n (number of reports) must be >= 1, got {n}")
    if not candidates:
        raise ValueError("candidates must name at least one mechanism kind")
    first, *others = (kind.from_epsilon(epsilon, m) for kind in candidates)
    best, best_error = first, first.expected_l2_error(n)
    for mechanism in others:  # a later kind must be better by more than the tie margin
        error = mechanism.expected_l2_error(n)
        if error < best_error * (1.0 - _TIE):
            best, best_error = mechanism, error
    return best
