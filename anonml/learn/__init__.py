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

from __future__ import annotations

from typing import TYPE_CHECKING

from anonml.lazy import lazy_exports

if TYPE_CHECKING:
    from anonml.learn.accounting import PrivacyAccounting
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
    from anonml.learn.simulation import SimulationResult, select_features, simulate_training
    from anonml.learn.simulation_config import SimulationConfig

# Names are imported on first use (anonml.lazy): importing one submodule of this
# package (the aggregator's bins and plans) does not import scikit-learn.
_EXPORTS: dict[str, str] = {
    "PrivacyAccounting": "anonml.learn.accounting",
    "LdpNaiveBayes": "anonml.learn.baselines",
    "fit_ldp_naive_bayes": "anonml.learn.baselines",
    "Binning": "anonml.learn.binning",
    "FeatureBins": "anonml.learn.binning",
    "auto_n_bins": "anonml.learn.binning",
    "quantile_thresholds": "anonml.learn.binning",
    "Component": "anonml.learn.ensemble",
    "Ensemble": "anonml.learn.ensemble",
    "cell_posteriors": "anonml.learn.ensemble",
    "default_ensemble": "anonml.learn.ensemble",
    "paper_ensemble": "anonml.learn.ensemble",
    "vote_ensemble": "anonml.learn.ensemble",
    "infer_feature_specs": "anonml.learn.frames",
    "ResultRow": "anonml.learn.harness",
    "run_benchmark": "anonml.learn.harness",
    "SubsetHistogram": "anonml.learn.histograms",
    "estimate_histogram": "anonml.learn.histograms",
    "exact_histogram": "anonml.learn.histograms",
    "pool_histograms": "anonml.learn.histograms",
    "report_values": "anonml.learn.histograms",
    "AnonMLClassifier": "anonml.learn.model",
    "DataWarning": "anonml.learn.notices",
    "NotPrivateWarning": "anonml.learn.notices",
    "SmallGroupWarning": "anonml.learn.notices",
    "PartitionPlan": "anonml.learn.partition",
    "PeerAssignment": "anonml.learn.partition",
    "commit_seed": "anonml.learn.partition",
    "make_plan": "anonml.learn.partition",
    "membership_order": "anonml.learn.partition",
    "roster_digest": "anonml.learn.partition",
    "verify_assignment": "anonml.learn.partition",
    "AnonMLRegressor": "anonml.learn.regression",
    "ModelSelection": "anonml.learn.selection",
    "learner_settings": "anonml.learn.settings",
    "roster_plan": "anonml.learn.settings",
    "simulated_learner": "anonml.learn.settings",
    "SimulationConfig": "anonml.learn.simulation_config",
    "SimulationResult": "anonml.learn.simulation",
    "select_features": "anonml.learn.simulation",
    "simulate_training": "anonml.learn.simulation",
}

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

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
