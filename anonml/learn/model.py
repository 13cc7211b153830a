"""The trained AnonML model: a scikit-learn classifier on raw feature vectors, stored as JSON.

:class:`AnonMLClassifier` is what the aggregator publishes and a peer downloads:
the published bins plus an :class:`~anonml.learn.ensemble.Ensemble` of lookup
tables, applied to raw feature vectors (binning included). Its ``fit`` runs the
whole AnonML pipeline in simulation, one row = one peer
(:mod:`anonml.learn.simulation`): private medians from a separate peer pool,
binning, one LDP report per (peer, subset) with the least-error mechanism,
debiasing, consistency, and paper- or default-mode training. The aggregator
service, which gets real reports, builds the same object with
:meth:`AnonMLClassifier.from_ensemble`.

Tables are first-class: a DataFrame's columns are matched to the feature
specs by name and string, ``category`` and ``bool`` columns are encoded through
the specs (:mod:`anonml.learn.frames`); the column names travel with the model.

Models serialise to versioned JSON (:meth:`~AnonMLClassifier.to_json`), never
to pickle: the document holds only numbers, strings and lists, is validated on
load, and is byte-for-byte stable (sorted keys, fixed separators, shortest
round-trip float repr), so ``to_json(from_json(s)) == s``.

The class keeps the estimator's API; its parts live with their ideas: input
checking (:mod:`anonml.learn.inputs`), what the hyperparameters accept and set
(:mod:`anonml.learn.hyperparameters`), a central (ε, δ) target
(:mod:`anonml.learn.central_target`), the privacy accounting
(:mod:`anonml.learn.accounting`), the calibration pool's step
(:func:`anonml.learn.calibration.calibrate`), and the published form —
:meth:`~AnonMLClassifier.from_ensemble` and the JSON document
(:class:`anonml.learn.published.PublishedModel`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from anonml.learn.accounting import mark_not_private, warn_not_private
from anonml.learn.binning import Binning
from anonml.learn.calibration import calibrate
from anonml.learn.central_target import (
    CENTRAL_TOLERANCE,
    check_central_target,
    local_epsilon_for_target,
    with_central_target,
)
from anonml.learn.document import MODEL_FORMAT, MODEL_VERSION
from anonml.learn.ensemble import Ensemble
from anonml.learn.frames import Ranges, clip_to_ranges, constant_columns
from anonml.learn.histograms import SubsetHistogram, pooled_label_shares
from anonml.learn.hyperparameters import PARAM_CHECKS, config_from_params, ensemble_from_params
from anonml.learn.inputs import class_labels, fit_matrix, prediction_matrix, warn_rows
from anonml.learn.params import check_params, store_params
from anonml.learn.partition import PartitionPlan
from anonml.learn.published import PublishedModel
from anonml.learn.selection import SelectionAware, fit_selection
from anonml.learn.simulation import SimulationResult, simulate_training
from anonml.learn.simulation_config import SimulationConfig
from anonml.model import FeatureSpec
from anonml.randomness import generator_from

# CENTRAL_TOLERANCE (anonml.learn.central_target) and mark_not_private (anonml.learn.accounting) live with
# their ideas now; both stay importable from here, where callers have imported them.
__all__ = ["AnonMLClassifier", "CENTRAL_TOLERANCE", "MODEL_FORMAT", "MODEL_VERSION"]


def _pool_calibrated(
    ensemble: Ensemble,
    result: SimulationResult,
    X: np.ndarray,
    y_index: np.ndarray,
    epsilon: float,
    rng: np.random.Generator,
) -> Ensemble:
    """``ensemble`` after the calibration pool's step on the pool's rows at ``epsilon``
    (:func:`~anonml.learn.calibration.calibrate`); unchanged when the simulation drew no pool."""
    rows = result.calibration_rows
    if not rows.size:
        return ensemble
    return calibrate(
        ensemble,
        result.binning.transform(X[rows]),
        y_index[rows].astype(np.int64),
        epsilon=epsilon,
        rng=rng,
    )


class AnonMLClassifier(SelectionAware, PublishedModel, ClassifierMixin, BaseEstimator):
    """Classifier trained from locally private histograms (Cyphers 2017, ch. 6).

    Parameters
    ----------
    mode : {"default", "paper"}, default="default"
        ``"paper"`` reproduces the thesis (synthetic samples, partition
        classifiers, eq. 6.2 votes; binary only); ``"default"`` combines
        smoothed cell posteriors (see :mod:`anonml.learn.ensemble`), for K ≥ 2 classes.
    epsilon : float, default=1.0
        ε_T, every peer's total privacy loss under sequential composition. A
        report peer spends ε_T/k_h on each of its k_h reports; a median-pool
        or calibration-pool peer spends ε_T on its one answer.
    n_partitions, n_subsets, subset_size : int, optional
        k_p, k_h, k_s. Defaults: default mode one single-feature partition per
        feature (k_p = F, k_h = k_s = 1); paper mode k_p=5, k_h=2, k_s=3.
    subsets : list of lists of int, optional
        Feature subsets chosen by the data scientist (else random, balanced).
    n_bins : int or "auto", default="auto"
        Bins per numeric feature (private quantiles); ``"auto"`` picks them
        from ε and the partition size (:func:`~anonml.learn.binning.auto_n_bins`).
    features : list of FeatureSpec, optional
        Feature kinds, public ranges and categories. With a DataFrame they are
        matched to the columns by name (any order; a missing or extra column is
        an error). ``None``: inferred from the data
        (:func:`~anonml.learn.frames.infer_feature_specs`) with ``ranges``.
    ranges : dict name → (low, high), "from-data" or None, default=None
        Public bounds of numeric columns when ``features`` is None (columns of
        an array are named ``x0, x1, …``). ``"from-data"`` reads them from
        the rows: the fit then warns :class:`~anonml.learn.notices.NotPrivateWarning`
        and ``privacy_.private`` is False. A numeric column with no range is an error.
    median_fraction : float, default=0.15
        Largest share of the peers set apart to answer median queries (a separate
        pool, so report peers spend nothing on medians). The pool takes only as
        many as give each question's answer share a noise sd of 0.03
        (:func:`~anonml.privacy.median.median_pool_size`): the whole share on
        small rosters, fewer on large ones, whose other peers then report.
    median_steps : int, default=3
        The most questions (fresh peer partitions) per private quantile search; fewer when the
        pool's groups would be too small for a step to move the search
        (:func:`~anonml.privacy.median.search_steps`).
    median_confidence : float, default=0.5
        Confidence of each search's stopping margin (thesis algorithm 1).
    calibration_fraction : float, default=0.2
        The largest share of the peers set apart to report once the model is
        built: binary problems (score bin, label), whose histogram fits the
        Platt map of ``predict_proba``; K ≥ 3 classes (predicted class,
        label), whose histogram gives each predicted class its calibrated
        label distribution, shrunk toward the prior as far as its noise says
        (:mod:`anonml.learn.calibration`). The
        pool takes only as many peers as the map needs at this ε
        (:func:`~anonml.learn.simulation.calibration_pool_size`), none when
        even the cap is too few. 0 turns calibration off.
    pilot_fraction : float, default=0.0
        Default mode with single-feature partitions: share of the report
        peers that report first, one group per feature; the model then keeps
        only the features whose pilot histogram beats the noise and splits
        the other report peers over them
        (:func:`~anonml.learn.simulation.select_features`) — but only when the
        pilot's own histograms measure that the dropped features carry at most
        5 % of the estimated signal energy
        (:func:`~anonml.learn.simulation.selection_pays`); otherwise every
        feature is kept. No extra budget: each peer still reports once.
        ``selected_features_`` lists the kept ones. Off by default.
    consistency : {"norm_sub", "norm_mul", "base_cut", "ibu"} or None, default="norm_sub"
        Consistency step of the histogram estimates.
    smoothing : float, default=1.0
        Default mode: pseudo-count per cell in units of the count noise's sd.
    combine : {"linear", "logit"}, default="linear"
        Default mode: how subset posteriors are summed.
    weighting : {"equal", "lda"}, default="equal"
        Default mode, two classes: ``"lda"`` weights each subset's term by its diagonal-LDA
        coefficient read off its own histogram (:func:`~anonml.learn.ensemble.discriminant_weights`;
        no extra ε), pulled toward equal weights by the shrinkage factor. Off by default: it gains
        at ε_T ≥ 2 but loses up to 0.03 AUC at ε_T = 0.5 on held-out sets (docs/model-quality.md).
    partition_classifier : {"tree", "logistic"}, default="tree"
    partition_scoring : {"f1", "roc_auc"}, default="f1"
    partition_class_weight : {"balanced"} or None, default="balanced"
    partition_cv : int, default=3
        Paper mode: the partition classifiers and their cross-validation.
    central_epsilon : tuple (ε, δ) or None, default=None
        A central target for the unlinkable pools (report and calibration)
        instead of a local ε: the fit uses the largest local ε_T whose
        shuffle-amplified bound (:mod:`anonml.privacy.amplification`, FMT 2021)
        for the group sizes this fit will have is at most ε at δ (bisection to
        :data:`CENTRAL_TOLERANCE`), and ``epsilon`` is then not used. The
        figure holds only if every group's reports are unlinkable to their
        senders and every member is an honest peer; the median pool's signed
        answers are outside it (their peers keep the local ε). ``epsilon_``
        and ``privacy_.central_target`` state both figures and the
        assumptions. A target that no local ε ≥
        :data:`~anonml.privacy.amplification.MIN_LOCAL_EPSILON` meets with
        these rows is refused (:class:`~anonml.privacy.amplification.CentralTargetUnmet`).
    random_state : int, numpy Generator or None, default=None
        ``None`` draws every simulated report from the OS CSPRNG.

    Attributes
    ----------
    classes_ : ndarray of shape (K,)
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Set when fitted on a DataFrame (kept through JSON).
    features_ : list of FeatureSpec
        The specs used, in column order.
    binning_ : Binning
        The published bins.
    ensemble_ : Ensemble
        Component tables, weights and the calibration map.
    epsilon_ : float
        The local ε_T the fit used: ``epsilon``, or the one chosen for ``central_epsilon``.
    n_clipped_ : dict name → int
        Values of each numeric feature that lay outside its public range (clipped).
    privacy_ : PrivacyAccounting
        What each peer spent (report, median and calibration pools), sound
        composition; ``privacy_.shuffle`` the conditional central bound over
        the unlinkable pools only (report and calibration; its
        ``peers_outside`` median-pool peers keep their local ε).
    n_partitions_, n_subsets_, subset_size_ : int
        The plan used (k_p, k_h, k_s).
    n_bins_ : int
        Bins asked for per numeric feature (fewer if private quantiles coincide).
    label_shares_ : ndarray of shape (n_classes,)
        The pooled, unbiased (unshrunk, possibly negative) private label shares of
        every report (:func:`~anonml.learn.histograms.pooled_label_shares`); no
        further privacy cost.

    Notes
    -----
    Model selection with scikit-learn's routines (``GridSearchCV``,
    ``RandomizedSearchCV``, ``cross_validate``, ``validation_curve`` …) fits
    every row many times and scores candidates on raw rows: a model fitted by
    one (the refit ``best_estimator_`` included, at any ``n_jobs``) has
    ``privacy_.private`` False and ``privacy_.selection`` listing the ε_T of
    every fit of the routine (:mod:`anonml.learn.selection`), and the routine
    warns :class:`~anonml.learn.notices.NotPrivateWarning`.

    Values outside a numeric feature's public range are clipped into it and
    counted (``n_clipped_``, :class:`~anonml.learn.notices.DataWarning`); a
    constant column is named in a DataWarning.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(4000, 3)); y = (X[:, 0] + X[:, 1] > 0).astype(int)
    >>> ranges = {f"x{j}": (-4.0, 4.0) for j in range(3)}
    >>> clf = AnonMLClassifier(epsilon=2.0, ranges=ranges, random_state=0).fit(X, y)
    >>> clone = AnonMLClassifier.from_json(clf.to_json())
    >>> bool((clone.predict(X) == clf.predict(X)).all())
    True
    """

    param_checks: dict[str, tuple[Any, ...]] = PARAM_CHECKS

    def __init__(
        self,
        *,
        mode: Literal["default", "paper"] = "default",
        epsilon: float = 1.0,
        n_partitions: int | None = None,
        n_subsets: int | None = None,
        subset_size: int | None = None,
        subsets: Sequence[Sequence[int]] | None = None,
        n_bins: int | Literal["auto"] = "auto",
        features: Sequence[FeatureSpec] | None = None,
        ranges: Ranges = None,
        median_fraction: float = 0.15,
        median_steps: int = 3,
        median_confidence: float = 0.5,
        calibration_fraction: float = 0.2,
        pilot_fraction: float = 0.0,
        consistency: str | None = "norm_sub",
        smoothing: float = 1.0,
        combine: Literal["linear", "logit"] = "linear",
        weighting: Literal["equal", "lda"] = "equal",
        partition_classifier: Literal["tree", "logistic"] = "tree",
        partition_scoring: Literal["f1", "roc_auc"] = "f1",
        partition_class_weight: Literal["balanced"] | None = "balanced",
        partition_cv: int = 3,
        random_state: int | np.random.Generator | None = None,
        central_epsilon: tuple[float, float] | None = None,
    ) -> None:
        store_params(self, locals())

    def __sklearn_tags__(self):  # noqa: D105 - scikit-learn protocol
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = self.mode == "default"
        tags.non_deterministic = self.random_state is None
        tags.input_tags.string = True
        tags.input_tags.categorical = True
        return tags

    # ------------------------------------------------------------------ fitting

    def fit(
        self, X: Any, y: Any, *, plan: PartitionPlan | None = None, binning: Binning | None = None
    ) -> AnonMLClassifier:
        """Simulate the AnonML protocol with one peer per row and train the ensemble.

        Parameters
        ----------
        X : DataFrame or array-like of shape (n_peers, n_features)
            Raw feature vectors. DataFrame columns are matched to ``features``
            by name; string, ``category`` and ``bool`` columns are encoded
            through the specs. An array's categorical columns hold category
            indices (or the category strings, when ``features`` are given).
        y : array-like of shape (n_peers,)
            K ≥ 2 classes (paper mode: exactly 2); ``classes_[c]`` is label index ``c``.
        plan : PartitionPlan, optional
            A real roster's plan (row ``i`` is member ``i``) instead of a drawn one.
        binning : Binning, optional
            Bins to train with instead of the median pool's simulated search.
            With ``plan``, e.g. a protocol run's published plan and bins: what
            its report round should give, only the peers' perturbation drawn
            afresh (:func:`~anonml.learn.simulation.simulate_training`).

        Returns
        -------
        self

        Warns
        -----
        NotPrivateWarning
            With a spec read from the rows (``ranges="from-data"``, naming the
            features), or inside a scikit-learn model-selection routine.
        DataWarning
            Naming the features with values outside their public range (clipped,
            with counts) and the constant ones.
        SmallGroupWarning
            When report partitions are too small for their histograms.
        """
        check_params(self)
        X, y, features, _ = fit_matrix(self, X, y, self.features, self.ranges)
        X, clipped = clip_to_ranges(X, features)
        warn_rows(clipped, constant_columns(X, features), X.shape[0])
        classes, y_index = class_labels(y, self.mode)
        derived = tuple(f.name for f in features if f.from_data)
        context = getattr(self, "_anonml_selection", None)
        selection = fit_selection(self, context, sys._getframe(1))
        warn_not_private(derived, selection, cloned=context is not None)
        rng = generator_from(self.random_state)
        epsilon = self.local_epsilon(X.shape[0], features, classes.size, plan=plan)
        config = self._config(X.shape[1], classes.size, epsilon)
        result = simulate_training(
            X, y_index.astype(np.int64), features, config, rng, plan=plan, binning=binning
        )
        target = check_central_target(self.central_epsilon)
        accounting = with_central_target(result.accounting, target, epsilon)
        ensemble = self.ensemble_from(result.histograms, result.sizes, rng)
        ensemble = _pool_calibrated(ensemble, result, X, y_index, epsilon, rng)
        self.classes_ = classes
        self.features_ = list(features)
        self.n_partitions_ = config.n_partitions
        self.n_subsets_ = config.n_subsets
        self.subset_size_ = config.subset_size
        self.n_bins_ = result.n_bins
        self.selected_features_ = (
            list(range(X.shape[1])) if result.selected_features is None else list(result.selected_features)
        )
        self.binning_ = result.binning
        self.ensemble_ = ensemble
        # The unshrunk private label shares: a regressor's median fallback (anonml.learn.regression).
        self.label_shares_ = pooled_label_shares(result.histograms)[0]
        self.n_clipped_ = dict(clipped)
        self.epsilon_ = epsilon
        self.privacy_ = mark_not_private(accounting, derived, selection)
        return self

    def local_epsilon(
        self,
        n_rows: int,
        features: Sequence[FeatureSpec],
        n_classes: int = 2,
        *,
        plan: PartitionPlan | None = None,
    ) -> float:
        """The local ε_T a fit on ``n_rows`` rows uses: ``epsilon``, or the largest meeting the target.

        For a central target (ε, δ), each candidate local ε₀ fixes the pools the
        fit will have (:func:`~anonml.learn.simulation.planned_pools`: the
        calibration pool's size depends on ε₀) and their shuffle bound at δ
        (:func:`~anonml.privacy.amplification.unlinkable_pools_bound`);
        :func:`~anonml.privacy.amplification.largest_local_epsilon` bisects for
        the largest ε₀ whose bound is at most ε.

        Raises
        ------
        CentralTargetUnmet
            Naming the rows and the target, when no local ε ≥ the floor meets it.
        """
        target = check_central_target(self.central_epsilon)
        if target is None:
            return float(self.epsilon)
        return local_epsilon_for_target(
            target, lambda e0: self._config(len(features), n_classes, e0), n_rows, features, plan
        )

    def ensemble_from(
        self, histograms: Sequence[SubsetHistogram], sizes: Sequence[int], rng: np.random.Generator
    ) -> Ensemble:
        """This learner's ensemble from debiased histograms: what ``fit`` and the aggregator both train.

        Parameters
        ----------
        histograms : list of SubsetHistogram
            One consistent histogram per (partition, subset).
        sizes : list of int
            The partition size behind each histogram (paper mode samples a synthetic set of that size).
        rng : numpy.random.Generator
            Paper mode's sampling and folds.

        Returns
        -------
        Ensemble
            Paper mode: thesis eq. 6.2 votes of partition classifiers
            (:func:`~anonml.learn.ensemble.paper_ensemble`); default mode: smoothed
            cell posteriors (:func:`~anonml.learn.ensemble.default_ensemble`).
        """
        return ensemble_from_params(self.get_params(deep=False), histograms, sizes, rng)

    def _config(self, n_features: int, n_classes: int = 2, epsilon: float | None = None) -> SimulationConfig:
        """The simulated run of a fit on ``n_features`` columns and K classes at local ``epsilon``."""
        target = check_central_target(self.central_epsilon)
        return config_from_params(
            self.get_params(deep=False),
            n_features,
            n_classes,
            epsilon=float(self.epsilon) if epsilon is None else float(epsilon),
            shuffle_delta=None if target is None else target[1],
        )

    # --------------------------------------------------------------- prediction

    def _codes(self, X: Any) -> np.ndarray:
        check_is_fitted(self, ("binning_", "ensemble_"))
        return self.binning_.transform(prediction_matrix(self, X))

    def decision_function(self, X: Any) -> np.ndarray:
        """Ensemble score of each row; for two classes positive means ``classes_[1]``.

        Paper mode: ``Σ s_i h_i(x) / Σ s_i`` (eq. 6.2); default mode: the
        log-odds; through the calibration map ``a·f + b`` when there is one
        (``a > 0``: the ranking is the same). K > 2 classes: shape (n, K).
        """
        codes = self._codes(X)
        return self.ensemble_.calibrated_decision(codes)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Columns follow ``classes_`` (calibrated when the model has a calibration map)."""
        codes = self._codes(X)
        return self.ensemble_.proba(codes)

    def predict(self, X: Any) -> np.ndarray:
        scores = self.decision_function(X)
        if scores.ndim == 2:
            return self.classes_[np.argmax(scores, axis=1)]
        return self.classes_[(scores > 0).astype(np.int64)]
