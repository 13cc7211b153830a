"""Learning from private histograms: partition plans, ensembles, multiparty baselines.

DESIGN §6. The public surface:

* partition plans from committed randomness — :func:`make_plan`,
  :func:`verify_assignment`, :func:`commit_seed`, :class:`PartitionPlan`;
* bins — :class:`Binning`, :func:`auto_n_bins`;
* subset histograms — :class:`SubsetHistogram`, :func:`estimate_histogram`;
* ensembles — :func:`paper_ensemble` (thesis eq. 6.2), :func:`default_ensemble`;
* the model — :class:`AnonMLClassifier` (scikit-learn API, DataFrames, K classes,
  calibrated probabilities, versioned JSON); specs from a table —
  :func:`infer_feature_specs`; warnings — :class:`NotPrivateWarning`,
  :class:`SmallGroupWarning`, :class:`DataWarning`; the record of a
  model-selection routine's fits — :class:`ModelSelection`;
* a numeric target as ordered bins — :class:`AnonMLRegressor`;
* the LDP naive-Bayes reference — :func:`fit_ldp_naive_bayes`;
* simulation and the Adult experiment — :func:`simulate_training`,
  :func:`run_benchmark` (Adult: ``run_benchmark(adult.load())``).

The multiparty baselines live in :mod:`anonml.learn.multiparty`.
"""

from anonml.learn.baselines import LdpNaiveBayes, fit_ldp_naive_bayes
from anonml.learn.binning import Binning, FeatureBins, auto_n_bins, quantile_thresholds
from anonml.learn.ensemble import (
    Component,
    Ensemble,
    cell_posteriors,
    default_ensemble,
    paper_ensemble,
    vote_ensemble,
)
from anonml.learn.frames import infer_feature_specs
from anonml.learn.harness import ResultRow, run_benchmark
from anonml.learn.histograms import (
    SubsetHistogram,
    estimate_histogram,
    exact_histogram,
    pool_histograms,
    report_values,
)
from anonml.learn.model import AnonMLClassifier
from anonml.learn.notices import DataWarning, NotPrivateWarning, SmallGroupWarning
from anonml.learn.partition import (
    PartitionPlan,
    PeerAssignment,
    commit_seed,
    make_plan,
    membership_order,
    roster_digest,
    verify_assignment,
)
from anonml.learn.regression import AnonMLRegressor
from anonml.learn.selection import ModelSelection
from anonml.learn.settings import learner_settings, roster_plan, simulated_learner
from anonml.learn.simulation import (
    PrivacyAccounting,
    SimulationConfig,
    SimulationResult,
    select_features,
    simulate_training,
)

__all__ = [
    "AnonMLClassifier",
    "AnonMLRegressor",
    "LdpNaiveBayes",
    "NotPrivateWarning",
    "DataWarning",
    "ModelSelection",
    "SmallGroupWarning",
    "fit_ldp_naive_bayes",
    "infer_feature_specs",
    "run_benchmark",
    "select_features",
    "Binning",
    "Component",
    "Ensemble",
    "FeatureBins",
    "PartitionPlan",
    "PeerAssignment",
    "PrivacyAccounting",
    "ResultRow",
    "SimulationConfig",
    "SimulationResult",
    "SubsetHistogram",
    "auto_n_bins",
    "cell_posteriors",
    "commit_seed",
    "default_ensemble",
    "estimate_histogram",
    "exact_histogram",
    "make_plan",
    "membership_order",
    "paper_ensemble",
    "pool_histograms",
    "quantile_thresholds",
    "report_values",
    "roster_digest",
    "simulate_training",
    "learner_settings",
    "roster_plan",
    "simulated_learner",
    "verify_assignment",
    "vote_ensemble",
]
