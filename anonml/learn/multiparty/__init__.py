"""Multiparty private-learning baselines, for parties that each hold many records.

Four published ways for K parties (hospitals, gateways) to learn one classifier
without pooling their data, on the same harness as AnonML:

* :class:`ParameterAveraging` — Pathak, Rane & Raj (2010): average of local
  regularised logistic regressions plus noise for the smallest party.
* :class:`HammMajorityVote`, :class:`HammSoftLabel` — Hamm, Cao & Belkin (2016):
  local classifiers label the aggregator's auxiliary unlabeled data; ERM on the
  majority vote or on vote fractions, output perturbation (multiclass too).
* :class:`FeatureMethod`, :class:`AverageMethod` — Xie, Plis & Sarwate (2017):
  objective-perturbed local classifiers (Chaudhuri et al. 2011), combined on
  public labelled data or averaged.
* :class:`PrivateSGD`, :class:`GaussianObjectivePerturbation` — Rajkumar &
  Agarwal (2012): (ε, δ) Gaussian objective perturbation, by SGD across the
  parties (their Algorithm 1) or in one shot; ``condition="printed"`` is the
  NON-PRIVATE reproduction with σ from the condition as printed.

References: :class:`ObjectivePerturbationLR` (pooled central DP), and in the
harness ``batch`` (non-private pooled), ``indiv`` (one party alone), ``public``
(the aggregator's public rows alone) and ``anonml`` (AnonML's default mode).

Every fitted model carries ``privacy_``, a :class:`PrivacyGuarantee` naming its
privacy unit (one record, one party, one individual's report) and its (ε, δ):
equal ε across different units is not a like-for-like comparison. Features
must lie in the unit ball with the intercept inside (:class:`NormBallScaler`,
bound fixed in advance); labels are mapped to {-1, +1} internally.
"""

from anonml.learn.multiparty.common import (
    MultipartyError,
    NormBallScaler,
    PrivacyGuarantee,
    PrivacyUnit,
    sample_norm_noise,
    to_pm1,
)
from anonml.learn.multiparty.data import DATASETS, Preprocessor, RawDataset, load_dataset
from anonml.learn.multiparty.erm import fit_linear_erm, fit_soft_label_erm, fit_softmax_erm, margin_loss
from anonml.learn.multiparty.hamm import (
    HammMajorityVote,
    HammSoftLabel,
    collect_votes,
    train_local_classifiers,
)
from anonml.learn.multiparty.harness import (
    BenchmarkConfig,
    ResultRow,
    run_multiparty_benchmark,
    write_results,
)
from anonml.learn.multiparty.methods import METHODS
from anonml.learn.multiparty.objective import ObjectivePerturbationLR, compute_slack, objective_perturbation
from anonml.learn.multiparty.pathak import ParameterAveraging
from anonml.learn.multiparty.rajkumar import (
    GaussianObjectivePerturbation,
    PrivateSGD,
    gaussian_sigma,
    printed_condition_sigma,
)
from anonml.learn.multiparty.splits import assign_parties, parse_skew, split_public
from anonml.learn.multiparty.xie import AverageMethod, FeatureMethod

__all__ = [
    "AverageMethod",
    "BenchmarkConfig",
    "DATASETS",
    "FeatureMethod",
    "GaussianObjectivePerturbation",
    "HammMajorityVote",
    "HammSoftLabel",
    "METHODS",
    "MultipartyError",
    "NormBallScaler",
    "ObjectivePerturbationLR",
    "ParameterAveraging",
    "Preprocessor",
    "PrivacyGuarantee",
    "PrivacyUnit",
    "PrivateSGD",
    "RawDataset",
    "ResultRow",
    "assign_parties",
    "collect_votes",
    "compute_slack",
    "fit_linear_erm",
    "fit_soft_label_erm",
    "fit_softmax_erm",
    "gaussian_sigma",
    "load_dataset",
    "margin_loss",
    "objective_perturbation",
    "parse_skew",
    "printed_condition_sigma",
    "run_multiparty_benchmark",
    "sample_norm_noise",
    "split_public",
    "to_pm1",
    "train_local_classifiers",
    "write_results",
]
