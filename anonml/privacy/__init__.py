"""Local differential privacy: mechanisms, estimators, private medians, budget ledger.

DESIGN §5. Everything other packages need is re-exported here:

* mechanisms over a domain of size ``m`` (:class:`PQPerturbation`, :class:`RAPPOR`,
  :class:`OUE`, :class:`RandomizedResponse`, :class:`SubsetSelection`), the selector
  :func:`best_mechanism` and the wire form :class:`MechanismDescriptor`;
* :func:`estimate_counts` (debiasing plus a consistency step) and
  :class:`BinaryRandomizedResponse` for single bits;
* :func:`estimate_median` / :func:`estimate_quantile` / :func:`estimate_bin_edges`
  (thesis algorithm 1 over any partition query);
* :class:`PrivacyLedger`, the per-peer budget record.

The names load their module on first use (:mod:`anonml.lazy`): the protocol's wire models need
:class:`MechanismDescriptor` alone, and a service's start-up must not pay for NumPy and every
mechanism to get it (issue 31).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from anonml.lazy import lazy_exports

if TYPE_CHECKING:
    from anonml.privacy.binary import BinaryRandomizedResponse, FractionEstimate
    from anonml.privacy.budget import (
        PER_ATTRIBUTE_LABEL,
        BudgetReport,
        PoolBudget,
        ProblemBudget,
        Release,
        ReleaseSpec,
    )
    from anonml.privacy.descriptor import MECHANISMS, MechanismDescriptor, MechanismKind
    from anonml.privacy.estimation import (
        CONSISTENCY_METHODS,
        Consistency,
        CountEstimate,
        estimate_counts,
        project_to_simplex,
    )
    from anonml.privacy.ledger import PrivacyLedger
    from anonml.privacy.mechanisms import (
        OUE,
        RAPPOR,
        Mechanism,
        PQPerturbation,
        RandomizedResponse,
        SubsetSelection,
        optimal_pq_p,
    )
    from anonml.privacy.median import (
        BinEdges,
        IsGreaterQuery,
        QuantileEstimate,
        SearchStep,
        estimate_bin_edges,
        estimate_median,
        estimate_quantile,
        simulated_query,
    )
    from anonml.privacy.selection import CANDIDATES, best_mechanism
    from anonml.privacy.support import check_support

_EXPORTS: dict[str, str] = {
    "BinaryRandomizedResponse": "anonml.privacy.binary",
    "FractionEstimate": "anonml.privacy.binary",
    "PER_ATTRIBUTE_LABEL": "anonml.privacy.budget",
    "BudgetReport": "anonml.privacy.budget",
    "PoolBudget": "anonml.privacy.budget",
    "ProblemBudget": "anonml.privacy.budget",
    "Release": "anonml.privacy.budget",
    "ReleaseSpec": "anonml.privacy.budget",
    "MECHANISMS": "anonml.privacy.descriptor",
    "MechanismDescriptor": "anonml.privacy.descriptor",
    "MechanismKind": "anonml.privacy.descriptor",
    "CONSISTENCY_METHODS": "anonml.privacy.estimation",
    "Consistency": "anonml.privacy.estimation",
    "CountEstimate": "anonml.privacy.estimation",
    "estimate_counts": "anonml.privacy.estimation",
    "project_to_simplex": "anonml.privacy.estimation",
    "PrivacyLedger": "anonml.privacy.ledger",
    "Mechanism": "anonml.privacy.mechanisms",
    "PQPerturbation": "anonml.privacy.mechanisms",
    "RAPPOR": "anonml.privacy.mechanisms",
    "OUE": "anonml.privacy.mechanisms",
    "RandomizedResponse": "anonml.privacy.mechanisms",
    "SubsetSelection": "anonml.privacy.mechanisms",
    "optimal_pq_p": "anonml.privacy.mechanisms",
    "BinEdges": "anonml.privacy.median",
    "IsGreaterQuery": "anonml.privacy.median",
    "QuantileEstimate": "anonml.privacy.median",
    "SearchStep": "anonml.privacy.median",
    "estimate_bin_edges": "anonml.privacy.median",
    "estimate_median": "anonml.privacy.median",
    "estimate_quantile": "anonml.privacy.median",
    "simulated_query": "anonml.privacy.median",
    "CANDIDATES": "anonml.privacy.selection",
    "best_mechanism": "anonml.privacy.selection",
    "check_support": "anonml.privacy.support",
}

__all__ = [
    "BinaryRandomizedResponse",
    "FractionEstimate",
    "PER_ATTRIBUTE_LABEL",
    "BudgetReport",
    "PoolBudget",
    "ProblemBudget",
    "Release",
    "ReleaseSpec",
    "MECHANISMS",
    "MechanismDescriptor",
    "MechanismKind",
    "CONSISTENCY_METHODS",
    "Consistency",
    "CountEstimate",
    "estimate_counts",
    "project_to_simplex",
    "PrivacyLedger",
    "Mechanism",
    "PQPerturbation",
    "RAPPOR",
    "OUE",
    "RandomizedResponse",
    "SubsetSelection",
    "optimal_pq_p",
    "BinEdges",
    "IsGreaterQuery",
    "QuantileEstimate",
    "SearchStep",
    "estimate_bin_edges",
    "estimate_median",
    "estimate_quantile",
    "simulated_query",
    "CANDIDATES",
    "best_mechanism",
    "check_support",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
