"""The serialisable name of a mechanism, sent with every report.

The aggregator must debias a report with the ``p`` and ``q`` of the mechanism
that produced it, and a peer picks the mechanism per report
(:func:`~anonml.privacy.selection.best_mechanism`), so the choice travels with
the report as a :class:`MechanismDescriptor`. The descriptor carries the
defining parameters of its kind *and* the derived ``p``, ``q``, ``epsilon``;
validation recomputes the derived numbers with the closed forms the mechanisms
themselves use (:mod:`anonml.privacy._closed_form`) and refuses a descriptor
whose numbers disagree, so a tampered or mistyped descriptor never reaches the
estimator.

This module never imports :mod:`anonml.privacy.mechanisms` (which imports it):
checking a descriptor needs neither the mechanism classes nor NumPy, so a
service parsing wire messages loads neither (issue 31). The classes register
themselves in :data:`MECHANISMS` as their module runs, and
:meth:`MechanismDescriptor.to_mechanism` builds one from that registry.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from anonml.privacy._closed_form import implied_parameters

__all__ = ["MechanismDescriptor", "MechanismKind", "MECHANISMS", "DescribedMechanism", "register_mechanism"]

MechanismKind = Literal["pq", "rappor", "oue", "krr", "subset"]


class DescribedMechanism(Protocol):
    """What a descriptor needs of a mechanism class: its wire name, a rebuild, the derived numbers."""

    kind: ClassVar[str]

    @classmethod
    def from_descriptor(cls, descriptor: MechanismDescriptor) -> DescribedMechanism:
        """The mechanism the descriptor's defining parameters name."""
        ...

    p: float
    q: float
    epsilon: float


_M = TypeVar("_M", bound=type[DescribedMechanism])

#: Every mechanism class by its wire name, filled by :func:`register_mechanism`
#: as :mod:`anonml.privacy.mechanisms` defines them; only
#: :meth:`MechanismDescriptor.to_mechanism` reads it.
MECHANISMS: dict[str, type[DescribedMechanism]] = {}


def register_mechanism(cls: _M) -> _M:
    """Class decorator: ``cls`` is the mechanism a descriptor of kind ``cls.kind`` names."""
    if cls.kind in MECHANISMS and MECHANISMS[cls.kind] is not cls:
        raise ValueError(f"mechanism kind {cls.kind!r} is already registered to {MECHANISMS[cls.kind]}")
    MECHANISMS[cls.kind] = cls
    return cls


#: Relative tolerance when checking derived numbers (JSON round-trips floats
#: exactly; this only absorbs differences in evaluation order across versions).
_RTOL = 1e-9


class MechanismDescriptor(BaseModel):
    """Which mechanism produced a report, with its parameters.

    Attributes
    ----------
    kind : {"pq", "rappor", "oue", "krr", "subset"}
        The mechanism (``PQPerturbation``, ``RAPPOR``, ``OUE``,
        ``RandomizedResponse``, ``SubsetSelection``).
    m : int
        Domain size.
    p, q : float
        Per-bit probabilities: true bit set w.p. ``p``, any other w.p. ``q``.
    epsilon : float
        The mechanism's privacy loss.
    omega : int or None
        Subset size; required for ``"subset"``, absent otherwise.

    Examples
    --------
    >>> from anonml.privacy import OUE
    >>> d = OUE.from_epsilon(1.0, 8).descriptor()
    >>> MechanismDescriptor.model_validate_json(d.model_dump_json()).to_mechanism()
    OUE(epsilon=1.0, m=8)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: MechanismKind
    m: int = Field(ge=2)
    p: float = Field(gt=0.0, lt=1.0)
    q: float = Field(gt=0.0, lt=1.0)
    epsilon: float = Field(gt=0.0, allow_inf_nan=False)
    omega: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _consistent(self) -> MechanismDescriptor:
        if (self.kind == "subset") != (self.omega is not None):
            raise ValueError("omega is required for kind 'subset' and not allowed otherwise")
        implied = implied_parameters(self.kind, self.m, self.p, self.q, self.epsilon, self.omega)
        for name, derived in zip(("p", "q", "epsilon"), implied, strict=True):
            given = getattr(self, name)
            if not math.isclose(given, derived, rel_tol=_RTOL, abs_tol=0.0):
                raise ValueError(
                    f"{self.kind} descriptor: {name}={given!r} disagrees with the "
                    f"value {derived!r} implied by its other parameters"
                )
        return self

    def to_mechanism(self) -> DescribedMechanism:
        """The mechanism this descriptor names (an :class:`~anonml.privacy.mechanisms.Mechanism`).

        Raises
        ------
        LookupError
            When no class is registered for ``kind``: :mod:`anonml.privacy.mechanisms` (which
            registers them all) has not been imported in this process.
        """
        if self.kind not in MECHANISMS:
            raise LookupError(
                f"no mechanism class is registered for kind {self.kind!r}: "
                "import anonml.privacy.mechanisms before building a mechanism from a descriptor"
            )
        return MECHANISMS[self.kind].from_descriptor(self)
