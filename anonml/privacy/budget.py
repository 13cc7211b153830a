"""Composing a peer's releases into a privacy guarantee.

Composition
-----------
The **headline** guarantee, shown and enforced, is sequential composition:
a peer's total in a problem is the sum of the epsilons of *all* its releases
there (Dwork & Roth 2014, thm. 3.16). Across peers nothing adds up: each peer
randomises only its own data, so disjoint peer pools compose in parallel
(McSherry 2009) and the problem's guarantee is the largest peer total.

The thesis's **per-attribute view** (Cyphers 2017, eq. 7.4,
``eps_T = max(max_i eps_h(i) + eps_e^i, sum_j eps_h^j)``) adds, per attribute,
the epsilons of the releases that touched it and takes the largest. List the
label among the attributes of every histogram report and this is eq. 7.4. It
treats releases about different attributes as composing in parallel, which
holds only if the attributes are statistically independent; it is reported as
a labelled breakdown and never used as the guarantee.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType

__all__ = [
    "ReleaseSpec",
    "Release",
    "BudgetReport",
    "PoolBudget",
    "ProblemBudget",
    "PER_ATTRIBUTE_LABEL",
    "peer_budget",
    "problem_budget",
]

#: Label of the per-attribute breakdown wherever it is shown.
PER_ATTRIBUTE_LABEL = (
    "per-attribute view (Cyphers 2017, eq. 7.4): valid only if the attributes are "
    "independent; not a guarantee"
)


@dataclass(frozen=True)
class ReleaseSpec:
    """A release about to be made (input of :meth:`PrivacyLedger.record_many`)."""

    peer: str
    problem: str
    round: int
    attributes: tuple[str, ...]
    mechanism: str
    epsilon: float
    pool: str | None = None


@dataclass(frozen=True, kw_only=True)
class Release(ReleaseSpec):
    """A recorded release: a :class:`ReleaseSpec` with its row id and time (UTC)."""

    id: int
    recorded_at: datetime


@dataclass(frozen=True)
class BudgetReport:
    """A peer's spend in a problem.

    Attributes
    ----------
    total : float
        Headline guarantee: sequential composition, the sum of all its releases' epsilons.
    cap, remaining : float or None
        The cap in force and ``cap - total`` (``None`` without a cap).
    per_attribute : Mapping[str, float]
        Sum of the epsilons of the releases touching each attribute.
    per_attribute_total : float
        ``max(per_attribute.values())``: eq. 7.4, valid only under independence.
    per_attribute_label : str
        How to present the per-attribute numbers.
    """

    peer: str
    problem: str
    total: float
    cap: float | None
    remaining: float | None
    n_releases: int
    per_attribute: Mapping[str, float]
    per_attribute_total: float
    per_attribute_label: str = PER_ATTRIBUTE_LABEL


@dataclass(frozen=True)
class PoolBudget:
    """A peer pool's releases: its size and the largest spend of one member inside it."""

    pool: str | None
    peers: int
    epsilon: float


@dataclass(frozen=True)
class ProblemBudget:
    """Spend across all peers recorded for a problem.

    ``headline`` is the largest peer total: pools of distinct peers compose in
    parallel, and a peer in several pools has all its releases summed.
    ``shared_peers`` counts peers found in more than one pool.
    """

    problem: str
    headline: float
    per_peer: Mapping[str, float]
    pools: tuple[PoolBudget, ...]
    shared_peers: int


def peer_budget(mine: Sequence[Release], peer: str, problem: str, cap: float | None) -> BudgetReport:
    """Compose one peer's releases in one problem (``mine`` holds exactly those)."""
    total = math.fsum(r.epsilon for r in mine)
    by_attribute: dict[str, list[float]] = defaultdict(list)
    for release in mine:
        for name in release.attributes:
            by_attribute[name].append(release.epsilon)
    per_attribute = {name: math.fsum(eps) for name, eps in sorted(by_attribute.items())}
    return BudgetReport(
        peer=peer,
        problem=problem,
        total=total,
        cap=cap,
        remaining=None if cap is None else cap - total,
        n_releases=len(mine),
        per_attribute=MappingProxyType(per_attribute),
        per_attribute_total=max(per_attribute.values(), default=0.0),
    )


def problem_budget(rows: Sequence[Release], problem: str) -> ProblemBudget:
    """Compose all peers' releases in ``problem`` (``rows`` holds exactly those)."""
    per_peer: dict[str, list[float]] = defaultdict(list)
    in_pool: dict[str | None, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for release in rows:
        per_peer[release.peer].append(release.epsilon)
        in_pool[release.pool][release.peer].append(release.epsilon)
    totals = {peer: math.fsum(eps) for peer, eps in sorted(per_peer.items())}
    pools = tuple(
        PoolBudget(
            pool=pool,
            peers=len(members),
            epsilon=max(math.fsum(eps) for eps in members.values()),
        )
        for pool, members in sorted(in_pool.items(), key=lambda item: str(item[0]))
    )
    membership: dict[str, int] = defaultdict(int)
    for members in in_pool.values():
        for peer in members:
            membership[peer] += 1
    return ProblemBudget(
        problem=problem,
        headline=max(totals.values(), default=0.0),
        per_peer=MappingProxyType(totals),
        pools=pools,
        shared_peers=sum(1 for count in membership.values() if count > 1),
    )
