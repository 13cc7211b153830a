"""The classifier's input boundary: X and y checked once, feature specs settled, X encoded to floats.

A fit's X is a frame (columns matched to the specs by name and encoded through
them, :mod:`anonml.learn.frames`) or an array (by position; string columns are
encoded through the specs, inferring them first when none are given). The
specs are given (``features``) or inferred with the public ``ranges``
(:func:`~anonml.learn.frames.infer_feature_specs`); ``from_data`` says whether
any range or category set was read from the rows. A prediction's X must have
the fitted columns (a frame's in any order). Values outside a numeric
feature's public range are clipped by the caller and named here, as are
constant features (:func:`warn_rows`, :class:`~anonml.learn.notices.DataWarning`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import sparse
from sklearn.base import BaseEstimator
from sklearn.utils import check_array
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import validate_data

from anonml.learn.frames import (
    Ranges,
    column_names,
    encode_matrix,
    infer_feature_specs,
    is_frame,
    match_specs,
)
from anonml.learn.notices import DataWarning
from anonml.model import FeatureSpec

__all__ = ["fit_matrix", "class_labels", "prediction_matrix", "warn_rows"]


def fit_matrix(
    estimator: BaseEstimator,
    X: Any,
    y: Any,
    features: Sequence[FeatureSpec] | None,
    ranges: Ranges,
) -> tuple[np.ndarray, np.ndarray, list[FeatureSpec], bool]:
    """Validate X and y, settle the specs (matched, given or inferred) and encode X to floats.

    ``estimator`` records the fitted width (``n_features_in_``) and, for a
    frame, the column names (``feature_names_in_``). Returns the float matrix,
    y, the specs in column order, and whether a spec was read from the rows.

    Raises
    ------
    TypeError
        When ``features`` holds something other than FeatureSpec objects.
    ValueError
        When the specs do not fit the columns (by name for a frame, by count for an array).
    """
    specs = None if features is None else list(features)
    for spec in specs or ():
        if not isinstance(spec, FeatureSpec):
            raise TypeError(f"features must hold FeatureSpec objects, got {type(spec).__name__}")
    from_data = False
    if is_frame(X):
        names = column_names(X)
        if specs is not None:
            specs = match_specs(names, specs)
        else:
            specs, from_data = infer_feature_specs(X, ranges=ranges)
        encoded = encode_matrix(X, specs)
        Xn, y = validate_data(estimator, encoded, y, dtype=np.float64)
        estimator.feature_names_in_ = np.asarray(names, dtype=object)
        return Xn, y, specs, from_data
    if specs is None and not sparse.issparse(X) and np.asarray(X).dtype.kind in "OUS":
        # strings in an array: infer first, so a column that is not numbers is named
        specs, from_data = infer_feature_specs(np.asarray(X, dtype=object), ranges=ranges)
    if specs is not None and np.asarray(X).dtype.kind in "OUS":
        X = encode_matrix(X, specs)
    Xn, y = validate_data(estimator, X, y, dtype=np.float64)
    if specs is None:
        specs, from_data = infer_feature_specs(Xn, ranges=ranges)
    elif len(specs) != Xn.shape[1]:
        raise ValueError(f"features lists {len(specs)} specs for {Xn.shape[1]} columns of X")
    return Xn, y, specs, from_data


def class_labels(y: np.ndarray, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """The sorted classes of ``y`` and each row's class index; refuses too few (or, paper mode, too many).

    Raises
    ------
    ValueError
        When y is not a classification target, has one class, or (paper mode) not exactly two.
    """
    check_classification_targets(y)
    classes, y_index = np.unique(y, return_inverse=True)
    if classes.size < 2 or (mode == "paper" and classes.size != 2):
        need = (
            "exactly 2 classes (Only binary classification is supported: eq. 6.2 votes ±1)"
            if mode == "paper"
            else "at least 2 classes"
        )
        raise ValueError(
            f"AnonMLClassifier in {mode} mode needs {need}, got {classes.size} "
            f"class{'es' if classes.size != 1 else ''}: {classes[:5]}"
        )
    return classes, y_index


def warn_rows(clipped: Mapping[str, int], constant: Sequence[str], n_rows: int) -> None:
    """:class:`DataWarning` naming the features with values outside their public range, and constant ones.

    Called from ``fit`` itself: ``stacklevel=3`` points the warning at the line that called ``fit``.
    """
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


def prediction_matrix(estimator: BaseEstimator, X: Any) -> np.ndarray:
    """A fitted estimator's X to predict on, as floats in the fitted column order.

    A frame must hold exactly the fitted columns (by ``feature_names_in_``, else
    the specs' names), in any order; an array holds them in training order.

    Raises
    ------
    ValueError
        Naming the missing and unexpected columns, or the width expected.
    """
    specs = getattr(estimator, "features_", None)
    if is_frame(X):
        names = column_names(X)
        fitted = getattr(estimator, "feature_names_in_", None)
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
        if Xn.shape[1] != estimator.n_features_in_:
            raise ValueError(f"X has {Xn.shape[1]} features, the model expects {estimator.n_features_in_}")
        return Xn
    if specs is not None and np.asarray(X).dtype.kind in "OUS":
        X = encode_matrix(X, specs)
    return validate_data(estimator, X, dtype=np.float64, reset=False)
