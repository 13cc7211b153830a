"""The versioned JSON document of a trained model: canonical bytes out, checked fields in.

A published model is data, never code: peers download it and predict locally,
so it is JSON (never pickle) with a format name and version, and every field
is validated before use. The encoding is canonical — sorted keys, no spaces,
shortest round-trip float repr (Python's ``repr``), no NaN/∞ — so a document
re-encoded after parsing is byte-for-byte the same and can be hashed or signed.

Layout (version 2)::

    {"format": "anonml.model", "version": 2,
     "params": {...estimator hyperparameters...},
     "classes": {"dtype": "int" | "str" | "bool" | "float", "values": [c0, c1, ...]},
     "n_features_in": F,
     "feature_names": [column names the model was fitted on] | null,
     "features": [{...FeatureSpec...}, ...] | null,
     "binning": {"features": [{"name", "kind", "thresholds" | "n_categories"}, ...]},
     "ensemble": {"kind": "vote" | "logit" | "softmax", "intercept": b | [b_c, ...],
                  "components": [{"features", "shape", "table", "weight"}, ...],
                  "calibration": [a, b] (optional)},
     "privacy": {...PrivacyAccounting, "shuffle": {...} (optional)...} | null}

Version 1 documents (two classes, no names, no calibration) are still read.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from anonml.errors import ProtocolError
from anonml.learn.binning import Binning
from anonml.learn.ensemble import Ensemble

__all__ = [
    "MODEL_FORMAT",
    "MODEL_VERSION",
    "ModelDocument",
    "canonical_json",
    "parse_document",
    "encode_classes",
    "decode_classes",
    "check_ensemble_fits_bins",
]

MODEL_FORMAT = "anonml.model"
MODEL_VERSION = 2
#: Versions this library reads.
READABLE_VERSIONS = (1, 2)


class ModelDocument(BaseModel):
    """Shape of a serialised model, checked before any field is used."""

    model_config = ConfigDict(extra="forbid")

    format: str
    version: int
    params: dict[str, Any]
    classes: dict[str, Any]
    n_features_in: int = Field(ge=1)
    feature_names: list[str] | None = None
    features: list[dict[str, Any]] | None = None
    binning: dict[str, Any]
    ensemble: dict[str, Any]
    privacy: dict[str, Any] | None = None


def canonical_json(document: dict[str, Any]) -> str:
    """Sorted keys, fixed separators, ASCII, finite floats only: the same bytes every time."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=True)


def parse_document(text: str | bytes) -> ModelDocument:
    """Validate a document's shape, format and version.

    Raises
    ------
    ProtocolError
        When the text is not a model document this library can read.
    """
    try:
        doc = ModelDocument.model_validate_json(text)
    except ValidationError as exc:
        raise ProtocolError(f"not a valid {MODEL_FORMAT} document: {exc}") from None
    if doc.format != MODEL_FORMAT or doc.version not in READABLE_VERSIONS:
        raise ProtocolError(
            f"model document is {doc.format!r} v{doc.version}; this library reads "
            f"{MODEL_FORMAT!r} v{', v'.join(str(v) for v in READABLE_VERSIONS)}"
        )
    return doc


def encode_classes(classes: np.ndarray) -> dict[str, Any]:
    """The class labels with their type, so they come back as the same numpy dtype kind."""
    kind = classes.dtype.kind
    if kind == "b":
        return {"dtype": "bool", "values": [bool(c) for c in classes]}
    if kind in "iu":
        return {"dtype": "int", "values": [int(c) for c in classes]}
    if kind == "f":
        return {"dtype": "float", "values": [float(c) for c in classes]}
    return {"dtype": "str", "values": [str(c) for c in classes]}


def decode_classes(data: dict[str, Any]) -> np.ndarray:
    """Inverse of :func:`encode_classes`."""
    dtype = {"bool": bool, "int": np.int64, "float": np.float64, "str": str}.get(data.get("dtype"))
    if dtype is None:
        raise ValueError(f"unknown class dtype {data.get('dtype')!r}")
    return np.asarray(data["values"], dtype=dtype)


def check_ensemble_fits_bins(binning: Binning, ensemble: Ensemble, n_features_in: int) -> None:
    """Every component must address existing features with exactly their published bins.

    Raises
    ------
    ProtocolError
        Naming the first component that does not fit.
    """
    if binning.n_features != n_features_in:
        raise ProtocolError(f"model document declares {n_features_in} features but bins {binning.n_features}")
    for c in ensemble.components:
        if (
            any(not 0 <= f < binning.n_features for f in c.features)
            or tuple(binning.n_bins[f] for f in c.features) != c.shape
        ):
            raise ProtocolError(f"component {c.features} does not match the published bins")
