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
"""

from __future__ import annotations

import dataclasses
import numbers
import sys
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
from scipy import sparse
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_array
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from anonml.errors import ProtocolError
from anonml.learn.binning import Binning
from anonml.learn.calibration import calibrate_classes, calibrate_ensemble
from anonml.learn.document import (
    MODEL_FORMAT,
    MODEL_VERSION,
    canonical_json,
    check_ensemble_fits_bins,
    decode_classes,
    encode_classes,
    parse_document,
)
from anonml.learn.ensemble import Ensemble, default_ensemble, paper_ensemble
from anonml.learn.frames import (
    Ranges,
    clip_to_ranges,
    column_names,
    constant_columns,
    encode_matrix,
    infer_feature_specs,
    is_frame,
    match_specs,
)
from anonml.learn.histograms import SubsetHistogram, pooled_label_shares
from anonml.learn.notices import DataWarning, NotPrivateWarning
from anonml.learn.params import RANDOM_STATE, Interval, Options, check_params
from anonml.learn.partition import PartitionPlan
from anonml.learn.selection import ModelSelection, SelectionAware, fit_selection
from anonml.learn.simulation import PrivacyAccounting, SimulationConfig, planned_pools, simulate_training
from anonml.model import FeatureSpec
from anonml.privacy.amplification import (
    CentralTarget,
    CentralTargetUnmet,
    largest_local_epsilon,
    unlinkable_pools_bound,
)
from anonml.randomness import generator_from

__all__ = ["AnonMLClassifier", "MODEL_FORMAT", "MODEL_VERSION"]

#: Width of the bisection for a central target's local ε: the chosen ε meets the target, ε + this does not.
CENTRAL_TOLERANCE = 1e-3

#: Plan defaults per mode: (k_p, k_h, k_s); None = one partition per feature.
_MODE_PLANS: dict[str, tuple[int | None, int, int]] = {
    "default": (None, 1, 1),
    "paper": (5, 2, 3),  # the thesis's census setting
}


def _warn_not_private(derived: Sequence[str], selection: ModelSelection | None, cloned: bool) -> None:
    """:class:`NotPrivateWarning` for data-derived specs, and for a fit inside model selection.

    A clone made by a model-selection routine has warned already, in the
    routine's process (:class:`~anonml.learn.selection.SelectionAware`).
    """
    if derived:
        warnings.warn(
            f"the range or categories of feature(s) {list(derived)} were read from the rows "
            f"(ranges='from-data' or FeatureSpec(from_data=True)), not declared in public: the model is "
            f"not private (privacy_.private is False, privacy_.data_derived names them); declare "
            f"public ranges with infer_feature_specs(X, ranges={{name: (low, high)}}) instead",
            NotPrivateWarning,
            stacklevel=3,
        )
    if selection is not None and not cloned:
        warnings.warn(
            f"AnonMLClassifier fitted inside {selection.wrapper}: model selection fits each row many "
            f"times and scores candidates on raw rows, so it is not private (privacy_.private is False; "
            f"{selection.note})",
            NotPrivateWarning,
            stacklevel=3,
        )


def _warn_rows(clipped: Mapping[str, int], constant: Sequence[str], n_rows: int) -> None:
    """:class:`DataWarning` naming the features with values outside their public range, and constant ones."""
    if clipped:
        counts = ", ".join(f"{name!r}: {count} of {n_rows}" for name, count in clipped.items())
        warnings.warn(
            f"values outside the declared public range were clipped into it ({counts}); check the "
            f"ranges (a value outside lands in an end bin, as a peer's client clips it)",
            DataWarning,
            stacklevel=3,
        )
    if constant:
        warnings.warn(
            f"feature(s) {list(constant)} hold one value in every row: they carry no information "
            f"and cost report peers; leave them out",
            DataWarning,
            stacklevel=3,
        )


class AnonMLClassifier(SelectionAware, ClassifierMixin, BaseEstimator):
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
        Share of the peers set apart to answer median queries (a separate
        pool, so report peers spend nothing on medians).
    median_steps : int, default=3
        Questions (fresh peer partitions) per private quantile search.
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
        at ε_T ≥ 2 but loses up to 0.03 AUC at ε_T = 0.5 on held-out sets (README).
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

    param_checks: dict[str, tuple[Any, ...]] = {
        "mode": (Options(frozenset({"default", "paper"})),),
        "epsilon": (Interval(numbers.Real, 0, None, closed="neither"),),
        "n_partitions": (Interval(numbers.Integral, 1, None, closed="left"), None),
        "n_subsets": (Interval(numbers.Integral, 1, None, closed="left"), None),
        "subset_size": (Interval(numbers.Integral, 1, None, closed="left"), None),
        "subsets": (list, tuple, np.ndarray, None),
        "n_bins": (Interval(numbers.Integral, 1, None, closed="left"), Options(frozenset({"auto"}))),
        "features": (list, tuple, None),
        "ranges": (Mapping, Options(frozenset({"from-data"})), None),
        "median_fraction": (Interval(numbers.Real, 0, 1, closed="left"),),
        "median_steps": (Interval(numbers.Integral, 1, None, closed="left"),),
        "median_confidence": (Interval(numbers.Real, 0, 1, closed="neither"),),
        "calibration_fraction": (Interval(numbers.Real, 0, 0.5, closed="both"),),
        "pilot_fraction": (Interval(numbers.Real, 0, 1, closed="left"),),
        "consistency": (Options(frozenset({"norm_sub", "norm_mul", "base_cut", "ibu"})), None),
        "smoothing": (Interval(numbers.Real, 0, None, closed="left"),),
        "combine": (Options(frozenset({"linear", "logit"})),),
        "weighting": (Options(frozenset({"equal", "lda"})),),
        "partition_classifier": (Options(frozenset({"tree", "logistic"})),),
        "partition_scoring": (Options(frozenset({"f1", "roc_auc"})),),
        "partition_class_weight": (Options(frozenset({"balanced"})), None),
        "partition_cv": (Interval(numbers.Integral, 2, None, closed="left"),),
        "random_state": RANDOM_STATE,
        "central_epsilon": (tuple, list, None),
    }

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
        self.mode = mode
        self.epsilon = epsilon
        self.n_partitions = n_partitions
        self.n_subsets = n_subsets
        self.subset_size = subset_size
        self.subsets = subsets
        self.n_bins = n_bins
        self.features = features
        self.ranges = ranges
        self.median_fraction = median_fraction
        self.median_steps = median_steps
        self.median_confidence = median_confidence
        self.calibration_fraction = calibration_fraction
        self.pilot_fraction = pilot_fraction
        self.consistency = consistency
        self.smoothing = smoothing
        self.combine = combine
        self.weighting = weighting
        self.partition_classifier = partition_classifier
        self.partition_scoring = partition_scoring
        self.partition_class_weight = partition_class_weight
        self.partition_cv = partition_cv
        self.random_state = random_state
        self.central_epsilon = central_epsilon

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
        X, y, features, _ = self._prepare_fit(X, y)
        X, clipped = clip_to_ranges(X, features)
        _warn_rows(clipped, constant_columns(X, features), X.shape[0])
        check_classification_targets(y)
        classes, y_index = np.unique(y, return_inverse=True)
        if classes.size < 2 or (self.mode == "paper" and classes.size != 2):
            need = (
                "exactly 2 classes (Only binary classification is supported: eq. 6.2 votes ±1)"
                if self.mode == "paper"
                else "at least 2 classes"
            )
            raise ValueError(
                f"AnonMLClassifier in {self.mode} mode needs {need}, got {classes.size} "
                f"class{'es' if classes.size != 1 else ''}: {classes[:5]}"
            )
        derived = tuple(f.name for f in features if f.from_data)
        context = getattr(self, "_anonml_selection", None)
        selection = fit_selection(self, context, sys._getframe(1))
        _warn_not_private(derived, selection, cloned=context is not None)
        rng = generator_from(self.random_state)
        epsilon = self.local_epsilon(X.shape[0], features, classes.size, plan=plan)
        config = self._config(X.shape[1], classes.size, epsilon)
        result = simulate_training(
            X, y_index.astype(np.int64), features, config, rng, plan=plan, binning=binning
        )
        accounting = self._with_central_target(result.accounting, epsilon)
        ensemble = self.ensemble_from(result.histograms, result.sizes, rng)
        if result.calibration_rows.size:
            rows = result.calibration_rows
            calibrate = calibrate_ensemble if ensemble.kind != "softmax" else calibrate_classes
            ensemble = calibrate(
                ensemble,
                result.binning.transform(X[rows]),
                y_index[rows].astype(np.int64),
                epsilon=epsilon,
                rng=rng,
            )
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

    def _central_target(self) -> tuple[float, float] | None:
        """``central_epsilon`` checked: (ε, δ) with ε > 0 finite and 0 < δ < 1, or None."""
        if self.central_epsilon is None:
            return None
        target = tuple(self.central_epsilon)
        if len(target) != 2 or not all(
            isinstance(v, numbers.Real) and not isinstance(v, bool) for v in target
        ):
            raise ValueError(f"central_epsilon must be a pair (epsilon, delta), got {self.central_epsilon!r}")
        eps, delta = float(target[0]), float(target[1])
        if not (eps > 0 and np.isfinite(eps)) or not 0 < delta < 1:
            raise ValueError(
                f"central_epsilon must be (epsilon > 0, 0 < delta < 1), got ({eps}, {delta})"
            )
        return eps, delta

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
        target = self._central_target()
        if target is None:
            return float(self.epsilon)
        eps, delta = target

        def central_of(e0: float) -> float | None:
            config = self._config(len(features), n_classes, e0)
            bound = unlinkable_pools_bound(planned_pools(config, n_rows, features, plan), delta=delta)
            return None if bound is None else bound.epsilon

        return largest_local_epsilon(
            central_of,
            eps,
            tol=CENTRAL_TOLERANCE,
            what=f"n={n_rows} rows (δ={delta:g}, {len(features)} features)",
        )

    def _with_central_target(self, accounting: PrivacyAccounting, epsilon: float) -> PrivacyAccounting:
        """The accounting with the central target's record; refuses a fit whose groups missed it."""
        target = self._central_target()
        if target is None:
            return accounting
        eps, delta = target
        shuffle = accounting.shuffle
        record = None if shuffle is None else CentralTarget.of(eps, delta, epsilon, shuffle)
        if record is None or not record.met:
            got = "no shuffle bound" if record is None else f"central ε {record.central_epsilon:.4g}"
            raise CentralTargetUnmet(
                f"the fit's groups give {got} at local ε={epsilon:g}, above the central target "
                f"ε={eps:g}, δ={delta:g}"
            )
        return dataclasses.replace(accounting, central_target=record)

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
        if self.mode == "paper":
            return paper_ensemble(
                histograms,
                sizes,
                classifier=self.partition_classifier,
                scoring=self.partition_scoring,
                class_weight=self.partition_class_weight,
                cv=self.partition_cv,
                rng=rng,
            )
        return default_ensemble(
            histograms, smoothing=self.smoothing, combine=self.combine, weighting=self.weighting
        )

    def _prepare_fit(self, X: Any, y: Any) -> tuple[np.ndarray, np.ndarray, list[FeatureSpec], bool]:
        """Validate X and y, settle the specs (matched, given or inferred) and encode X to floats."""
        specs = None if self.features is None else list(self.features)
        for spec in specs or ():
            if not isinstance(spec, FeatureSpec):
                raise TypeError(f"features must hold FeatureSpec objects, got {type(spec).__name__}")
        from_data = False
        if is_frame(X):
            names = column_names(X)
            if specs is not None:
                specs = match_specs(names, specs)
            else:
                specs, from_data = infer_feature_specs(X, ranges=self.ranges)
            encoded = encode_matrix(X, specs)
            Xn, y = validate_data(self, encoded, y, dtype=np.float64)
            self.feature_names_in_ = np.asarray(names, dtype=object)
            return Xn, y, specs, from_data
        if specs is None and not sparse.issparse(X) and np.asarray(X).dtype.kind in "OUS":
            # strings in an array: infer first, so a column that is not numbers is named
            specs, from_data = infer_feature_specs(np.asarray(X, dtype=object), ranges=self.ranges)
        if specs is not None and np.asarray(X).dtype.kind in "OUS":
            X = encode_matrix(X, specs)
        Xn, y = validate_data(self, X, y, dtype=np.float64)
        if specs is None:
            specs, from_data = infer_feature_specs(Xn, ranges=self.ranges)
        elif len(specs) != Xn.shape[1]:
            raise ValueError(f"features lists {len(specs)} specs for {Xn.shape[1]} columns of X")
        return Xn, y, specs, from_data

    def _config(self, n_features: int, n_classes: int = 2, epsilon: float | None = None) -> SimulationConfig:
        epsilon = float(self.epsilon) if epsilon is None else float(epsilon)
        target = self._central_target()
        kp, kh, ks = _MODE_PLANS[self.mode]
        ks = self.subset_size if self.subset_size is not None else min(ks, n_features)
        kh = self.n_subsets if self.n_subsets is not None else max(1, min(kh, n_features // ks))
        if self.n_partitions is not None:
            kp = self.n_partitions
        elif kp is None:
            kp = max(1, n_features // (kh * ks))
        subsets = None if self.subsets is None else tuple(tuple(int(f) for f in s) for s in self.subsets)
        return SimulationConfig(
            epsilon=epsilon,
            n_partitions=int(kp),
            n_subsets=int(kh),
            subset_size=int(ks),
            subsets=subsets,
            n_bins=self.n_bins,
            median_fraction=float(self.median_fraction),
            median_steps=int(self.median_steps),
            median_confidence=float(self.median_confidence),
            consistency=self.consistency,
            n_classes=int(n_classes),
            calibration_fraction=float(self.calibration_fraction),
            pilot_fraction=float(self.pilot_fraction),
            shuffle_delta=None if target is None else target[1],
        )

    @classmethod
    def from_ensemble(
        cls,
        binning: Binning,
        ensemble: Ensemble,
        *,
        classes: Sequence[Any] = (0, 1),
        privacy: PrivacyAccounting | None = None,
        feature_names: Sequence[str] | None = None,
        fitted_features: Sequence[FeatureSpec] | None = None,
        **params: Any,
    ) -> AnonMLClassifier:
        """A fitted model from bins and an ensemble built elsewhere (e.g. the aggregator).

        ``feature_names`` are the DataFrame columns the model was fitted on (if
        any); ``fitted_features`` the specs used (default: the ``features`` param).
        """
        model = cls(**params)
        model.classes_ = np.asarray(classes)
        if model.classes_.ndim != 1 or model.classes_.size != ensemble.n_classes:
            raise ValueError(
                f"classes must be {ensemble.n_classes} labels for this ensemble, got {classes!r}"
            )
        model.n_features_in_ = binning.n_features
        if feature_names is not None:
            if len(feature_names) != binning.n_features:
                raise ValueError(f"{len(feature_names)} feature names for {binning.n_features} features")
            model.feature_names_in_ = np.asarray([str(n) for n in feature_names], dtype=object)
        specs = fitted_features if fitted_features is not None else model.features
        model.features_ = None if specs is None else list(specs)
        if model.features_ is not None and len(model.features_) != binning.n_features:
            raise ValueError(f"{len(model.features_)} feature specs for {binning.n_features} binned features")
        model.binning_ = binning
        model.ensemble_ = ensemble
        model.epsilon_ = float(model.epsilon) if privacy is None else float(privacy.epsilon_total)
        derived = [f.name for f in model.features_ or () if f.from_data]
        model.privacy_ = None if privacy is None else mark_not_private(privacy, derived, None)
        return model

    # --------------------------------------------------------------- prediction

    def _codes(self, X: Any) -> np.ndarray:
        check_is_fitted(self, ("binning_", "ensemble_"))
        specs = getattr(self, "features_", None)
        if is_frame(X):
            names = column_names(X)
            fitted = getattr(self, "feature_names_in_", None)
            expected = list(fitted) if fitted is not None else [s.name for s in specs] if specs else None
            if expected is None:
                raise ValueError(
                    "this model knows no feature names (fitted on an array without feature specs): "
                    "pass an array with the columns in training order"
                )
            if sorted(names) != sorted(expected):
                missing = [n for n in expected if n not in names]
                extra = [n for n in names if n not in expected]
                raise ValueError(
                    f"the DataFrame's columns differ from those the model was fitted with: "
                    f"missing {missing}, unexpected {extra}"
                )
            if specs is not None:
                by_name = {s.name: s for s in specs}
                ordered = [by_name.get(n) for n in expected]
                if any(s is None for s in ordered):
                    raise ValueError("the model's feature specs do not name its fitted columns")
                Xn = encode_matrix(X, ordered)  # picked by name: column order does not matter
            else:
                Xn = np.column_stack([np.asarray(X[n], dtype=np.float64) for n in expected])
            Xn = check_array(Xn, dtype=np.float64)
            if Xn.shape[1] != self.n_features_in_:
                raise ValueError(f"X has {Xn.shape[1]} features, the model expects {self.n_features_in_}")
            return self.binning_.transform(Xn)
        if specs is not None and np.asarray(X).dtype.kind in "OUS":
            X = encode_matrix(X, specs)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return self.binning_.transform(X)

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

    # ------------------------------------------------------------ serialisation

    def to_json(self) -> str:
        """The versioned JSON document of the fitted model (byte-for-byte stable)."""
        return canonical_json(self.to_document())

    def to_document(self) -> dict[str, Any]:
        """The fitted model's document as JSON-native values (what :meth:`to_json` writes): for a
        message that carries the model inside its own JSON."""
        check_is_fitted(self, ("binning_", "ensemble_"))
        names = getattr(self, "feature_names_in_", None)
        specs = getattr(self, "features_", None)
        doc = {
            "format": MODEL_FORMAT,
            "version": MODEL_VERSION,
            "params": self._json_params(),
            "classes": encode_classes(self.classes_),
            "n_features_in": int(self.n_features_in_),
            "feature_names": None if names is None else [str(n) for n in names],
            "features": None if specs is None else [f.model_dump(mode="json") for f in specs],
            "binning": self.binning_.to_dict(),
            "ensemble": self.ensemble_.to_dict(),
            "privacy": None if self.privacy_ is None else self.privacy_.to_dict(),
        }
        return doc

    def _json_params(self) -> dict[str, Any]:
        params = self.get_params(deep=False)
        params["random_state"] = (
            int(self.random_state) if isinstance(self.random_state, numbers.Integral) else None
        )
        if self.features is not None:
            params["features"] = [f.model_dump(mode="json") for f in self.features]
        if self.subsets is not None:
            params["subsets"] = [[int(f) for f in s] for s in self.subsets]
        if isinstance(self.ranges, Mapping):
            params["ranges"] = {str(k): [float(v[0]), float(v[1])] for k, v in self.ranges.items()}
        if self.central_epsilon is not None:
            params["central_epsilon"] = [float(v) for v in self.central_epsilon]
        else:
            params.pop("central_epsilon")  # a document without a target stays what it was
        return params

    @classmethod
    def from_json(cls, text: str | bytes) -> AnonMLClassifier:
        """Rebuild a fitted model from :meth:`to_json` output (see :mod:`anonml.learn.document`).

        Raises
        ------
        ProtocolError
            When the document is not a valid AnonML model of a known version.
        """
        doc = parse_document(text)
        params = dict(doc.params)
        try:
            if params.get("features") is not None:
                params["features"] = [FeatureSpec.model_validate(f) for f in params["features"]]
            if isinstance(params.get("central_epsilon"), list):
                params["central_epsilon"] = tuple(float(v) for v in params["central_epsilon"])
            if isinstance(params.get("ranges"), dict):
                params["ranges"] = {k: (float(v[0]), float(v[1])) for k, v in params["ranges"].items()}
            fitted = None if doc.features is None else [FeatureSpec.model_validate(f) for f in doc.features]
            binning = Binning.from_dict(doc.binning)
            ensemble = Ensemble.from_dict(doc.ensemble)
            privacy = None if doc.privacy is None else PrivacyAccounting.from_dict(doc.privacy)
            model = cls.from_ensemble(
                binning,
                ensemble,
                classes=decode_classes(doc.classes),
                privacy=privacy,
                feature_names=doc.feature_names,
                fitted_features=fitted,
                **params,
            )
        except (KeyError, TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
            raise ProtocolError(f"model document has bad contents: {exc}") from None
        check_ensemble_fits_bins(binning, ensemble, doc.n_features_in)
        return model


def mark_not_private(
    accounting: PrivacyAccounting, derived: Sequence[str], selection: ModelSelection | None
) -> PrivacyAccounting:
    """The accounting with ``private=False`` and why: specs read from the rows, or model selection."""
    if not derived and selection is None:
        return accounting
    return dataclasses.replace(
        accounting,
        private=False,
        data_derived=tuple(derived) or accounting.data_derived,
        selection=selection or accounting.selection,
    )
