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
"""

from anonml.privacy import mechanisms
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
from anonml.privacy.mechanisms import *  # noqa: F403 - the module's __all__, listed once there
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

__all__ = [
    *mechanisms.__all__,
    "best_mechanism",
    "check_support",
    "CANDIDATES",
    "MechanismDescriptor",
    "MechanismKind",
    "MECHANISMS",
    "estimate_counts",
    "CountEstimate",
    "Consistency",
    "CONSISTENCY_METHODS",
    "project_to_simplex",
    "BinaryRandomizedResponse",
    "FractionEstimate",
    "estimate_median",
    "estimate_quantile",
    "estimate_bin_edges",
    "simulated_query",
    "IsGreaterQuery",
    "QuantileEstimate",
    "SearchStep",
    "BinEdges",
    "PrivacyLedger",
    "Release",
    "ReleaseSpec",
    "BudgetReport",
    "ProblemBudget",
    "PoolBudget",
    "PER_ATTRIBUTE_LABEL",
]
