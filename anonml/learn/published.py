"""A fitted classifier as the aggregator publishes it and a peer downloads it.

The published model is data: the bins, the ensemble of lookup tables, the
classes, the fitted column names and feature specs, the hyperparameters and
the privacy accounting. :class:`PublishedModel` gives an estimator the three
ways in and out of that form — assembled from bins and an ensemble built
elsewhere (:meth:`~PublishedModel.from_ensemble`, what the aggregator does with
real reports), written to its versioned JSON document
(:meth:`~PublishedModel.to_json`, :meth:`~PublishedModel.to_document`) and
read back from it (:meth:`~PublishedModel.from_json`), never pickle. The
document's layout and canonical encoding are :mod:`anonml.learn.document`'s:
sorted keys, fixed separators, shortest round-trip float repr, so
``to_json(from_json(s)) == s``.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any, Self

import numpy as np
from sklearn.utils.validation import check_is_fitted

from anonml.errors import ProtocolError
from anonml.learn.accounting import PrivacyAccounting, mark_not_private
from anonml.learn.binning import Binning
from anonml.learn.document import (
    MODEL_FORMAT,
    MODEL_VERSION,
    canonical_json,
    check_ensemble_fits_bins,
    decode_classes,
    encode_classes,
    parse_document,
)
from anonml.learn.ensemble import Ensemble
from anonml.model import FeatureSpec

__all__ = ["PublishedModel"]


class PublishedModel:
    """The published form of a fitted estimator: a mixin, listed before ``BaseEstimator``.

    Mixed into :class:`~anonml.learn.model.AnonMLClassifier`. The host is a
    scikit-learn estimator whose hyperparameters include ``features``,
    ``epsilon``, ``random_state``, ``subsets``, ``ranges`` and
    ``central_epsilon`` (``get_params`` lists them all), and whose fitted state
    is ``classes_``, ``n_features_in_``, ``feature_names_in_`` (optional),
    ``features_``, ``binning_``, ``ensemble_``, ``epsilon_`` and ``privacy_``.
    """

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
    ) -> Self:
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
        """The hyperparameters as JSON values (a Generator ``random_state`` is not data: null)."""
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
    def from_json(cls, text: str | bytes) -> Self:
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
