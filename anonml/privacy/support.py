"""Which bit vectors a mechanism can output: the intake's check against crafted reports.

The estimator (:func:`anonml.privacy.estimate_counts`) debiases a report
assuming it came from the mechanism its descriptor names. A report outside
that mechanism's support is something no honest peer can send, and it can
weigh far more than an honest one: k-ary randomised response debiases a
report's bits as ``(b_v − q) / (p − q)``, so a vector with several ones adds
``(1 − q)/(p − q)`` to *each* of those cells where an honest report adds one
unit in total on average. The aggregator refuses such a report before its
token is spent.

Support of each kind (``m`` bits, ``w`` = number of ones):

- ``"krr"`` (k-ary randomised response): exactly one 1 (``w = 1``): the
  report is the one value drawn.
- ``"subset"`` (subset selection, Wang et al. 2016): exactly ``omega`` ones:
  the report is an ``omega``-subset of the domain.
- ``"pq"``, ``"rappor"``, ``"oue"`` (per-bit (p, q) perturbation of a unary
  encoding, thesis §7.1; RAPPOR; optimised unary encoding): *every* vector of
  ``m`` bits, since each bit is flipped independently with probability in
  ``(0, 1)``; there is nothing to check beyond the length, and such a report
  adds at most ``m (1 − q)/(p − q)`` — the bound the mechanism itself has.
"""

from __future__ import annotations

import numpy as np

from anonml.privacy.descriptor import MechanismDescriptor

__all__ = ["check_support"]


def check_support(descriptor: MechanismDescriptor, bits: np.ndarray) -> np.ndarray:
    """Return ``bits`` if the mechanism ``descriptor`` names can output them; ValueError otherwise.

    Parameters
    ----------
    descriptor : MechanismDescriptor
        The mechanism the report claims.
    bits : array of bool, shape (m,)
        The report's bits.

    Raises
    ------
    ValueError
        When the length is not ``descriptor.m``, or the number of ones is not
        the one the kind requires (module docstring: one for ``krr``,
        ``omega`` for ``subset``; any for ``pq``, ``rappor``, ``oue``).
    """
    arr = np.asarray(bits)
    if arr.ndim != 1 or arr.shape[0] != descriptor.m:
        raise ValueError(f"a {descriptor.kind} report has {descriptor.m} bits, got shape {arr.shape}")
    ones = int(np.count_nonzero(arr))
    if descriptor.kind == "krr" and ones != 1:
        raise ValueError(f"a k-ary randomised response report has exactly one 1, got {ones}")
    if descriptor.kind == "subset" and ones != descriptor.omega:
        raise ValueError(f"a subset-selection report has exactly omega={descriptor.omega} ones, got {ones}")
    return arr
