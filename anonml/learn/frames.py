"""Tables in, numbers out: DataFrame columns matched to feature specs by name and encoded.

Any object with ``columns`` and column access by name (a pandas DataFrame,
and anything shaped like one) is a *frame*: its columns are matched to the
:class:`~anonml.model.FeatureSpec` list by name — order does not matter, a
missing or unexpected column is an error naming it — and every value is
encoded through its spec (:meth:`FeatureSpec.encode`: a category's index, 0/1
for a bool, the number otherwise), so string, ``category`` and ``bool``
columns work as they are. A NumPy array is matched by position.

:func:`infer_feature_specs` writes the specs for a frame: ``category``
columns keep their declared categories, ``bool`` columns become BOOL, and
numeric columns need a public range — given in ``ranges`` (name → (low,
high)), or taken from the data with ``ranges="from-data"``, which is not
private (a range read from the rows bounds the private median search and
leaks the extremes) and marks the model so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from anonml.model import FeatureKind, FeatureSpec

__all__ = [
    "Ranges",
    "is_frame",
    "column_names",
    "match_specs",
    "encode_matrix",
    "infer_feature_specs",
    "prefixed_names_hint",
    "clip_to_ranges",
    "constant_columns",
]

Ranges = Mapping[str, tuple[float, float]] | Literal["from-data"] | None


def is_frame(X: Any) -> bool:
    """True for a table with named columns (pandas and the like), not for an array."""
    return hasattr(X, "columns") and hasattr(X, "__getitem__") and not isinstance(X, np.ndarray)


def column_names(X: Any) -> list[str]:
    """The column names of a frame, as strings."""
    return [str(c) for c in X.columns]


def _column(X: Any, name: str) -> np.ndarray:
    """One column of a frame as a NumPy array (pandas' ``category``/``boolean`` values kept)."""
    lookup = {str(c): c for c in X.columns}
    col = X[lookup[name]]
    return np.asarray(col.to_numpy() if hasattr(col, "to_numpy") else col, dtype=object)


def match_specs(names: Sequence[str], specs: Sequence[FeatureSpec]) -> list[FeatureSpec]:
    """The specs in the frame's column order, each matched by name.

    Raises
    ------
    ValueError
        Naming every column without a spec and every spec without a column.
    """
    by_name = {s.name: s for s in specs}
    if len(by_name) != len(specs):
        dupes = sorted({s.name for s in specs if sum(t.name == s.name for t in specs) > 1})
        raise ValueError(f"features name {dupes} more than once")
    missing = [s.name for s in specs if s.name not in names]
    extra = [n for n in names if n not in by_name]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"no column for the feature spec(s) {missing}")
        if extra:
            parts.append(f"no feature spec for the column(s) {extra}")
        raise ValueError(
            "the DataFrame's columns do not match the feature specs: "
            + "; ".join(parts)
            + f" (columns: {list(names)})"
            + prefixed_names_hint(extra, missing)
        )
    return [by_name[n] for n in names]


def prefixed_names_hint(columns: Sequence[str], wanted: Sequence[str]) -> str:
    """A fix for columns named like a ColumnTransformer's output (``num__age`` for ``age``), else "".

    ``ColumnTransformer(...).set_output(transform="pandas")`` prefixes each
    column with its transformer's name and ``__``. The specs (and ranges) are
    public declarations about the raw columns, so the names are not rewritten
    here: a silent rename could pair a spec with the wrong column.
    """
    stripped = {c: c.split("__", 1)[1] for c in columns if "__" in c}
    matched = sorted(c for c, bare in stripped.items() if bare in set(wanted))
    if not matched:
        return ""
    example = matched[0]
    return (
        f"; the column(s) {matched} look like a ColumnTransformer's prefixed output "
        f"({example!r} for {stripped[example]!r}): build it with verbose_feature_names_out=False "
        f"so the columns keep their names, or name the specs/ranges after the prefixed columns"
    )


def _encode_column(values: np.ndarray, spec: FeatureSpec, where: str) -> np.ndarray:
    """Encode one column through its spec, vectorised per distinct value."""
    out = np.empty(values.shape[0], dtype=np.float64)
    if values.size == 0:
        return out
    if spec.kind is FeatureKind.NUMERIC:
        out[:] = _numbers(values, spec.name, where)
        return out
    missing = np.flatnonzero([v is None or (isinstance(v, float) and np.isnan(v)) for v in values])
    if missing.size:
        raise ValueError(f"{where}: feature {spec.name!r} has a missing value in row {int(missing[0])}")
    uniques, inverse = np.unique(
        values.astype(str) if spec.kind is FeatureKind.CATEGORICAL else values, return_inverse=True
    )
    codes = np.empty(uniques.size, dtype=np.float64)
    for i, value in enumerate(uniques):
        try:
            codes[i] = spec.encode(value.item() if isinstance(value, np.generic) else value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None
    out[:] = codes[inverse.ravel()]
    return out


def encode_matrix(X: Any, specs: Sequence[FeatureSpec], *, where: str = "X") -> np.ndarray:
    """A float matrix of ``X`` with every column encoded through its spec (by position)."""
    if is_frame(X):
        columns = [_column(X, s.name) for s in specs]
    else:
        arr = np.asarray(X, dtype=object)
        if arr.ndim != 2 or arr.shape[1] != len(specs):
            raise ValueError(f"{where} has shape {arr.shape}; the features list {len(specs)} specs")
        columns = [arr[:, j] for j in range(arr.shape[1])]
    encoded = [_encode_column(np.asarray(c), s, where) for c, s in zip(columns, specs, strict=True)]
    n = len(encoded[0]) if encoded else 0
    return np.column_stack(encoded) if encoded else np.empty((n, 0))


def _is_bool(values: np.ndarray) -> bool:
    return values.dtype.kind == "b" or (
        values.size > 0 and all(isinstance(v, (bool, np.bool_)) for v in values)
    )


def infer_feature_specs(
    X: Any, *, ranges: Ranges = None, categories: Mapping[str, Sequence[str]] | None = None
) -> tuple[list[FeatureSpec], bool]:
    """Feature specs for a frame (or an array, whose columns are named ``x0, x1, …``).

    Parameters
    ----------
    X : frame or 2-D array
    ranges : mapping name → (low, high), or "from-data", or None
        Public bounds of the numeric columns. ``"from-data"`` takes each
        numeric column's observed [min, max] (not private).
    categories : mapping name → categories, optional
        Public category lists of string columns; a pandas ``category`` column
        brings its own. A string column with neither is refused unless
        ``ranges="from-data"`` (then its observed values are the categories).

    Returns
    -------
    specs : list of FeatureSpec, in column order
    from_data : bool
        True when anything was read from the rows (the model is then not private).

    Raises
    ------
    ValueError
        Naming every numeric column without a public range (and how to give one).
    """
    categories = dict(categories or {})
    if ranges is not None and ranges != "from-data" and not isinstance(ranges, Mapping):
        raise ValueError(f"ranges must be a mapping name -> (low, high), 'from-data' or None; got {ranges!r}")
    given = dict(ranges) if isinstance(ranges, Mapping) else {}
    from_data = ranges == "from-data"
    if is_frame(X):
        names = column_names(X)
        lookup = {str(c): c for c in X.columns}
        dtypes = {n: getattr(X[lookup[n]], "dtype", None) for n in names}
        columns = {n: _column(X, n) for n in names}
    else:
        arr = np.asarray(X)
        if arr.ndim != 2:
            raise ValueError(f"X must be 2-D, got shape {arr.shape}")
        names = [f"x{j}" for j in range(arr.shape[1])]
        dtypes = {n: arr.dtype for n in names}
        columns = {n: arr[:, j] for j, n in enumerate(names)}
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ValueError(
            f"ranges names column(s) {unknown} that X does not have (columns: {names})"
            + prefixed_names_hint(names, unknown)
        )
    specs: list[FeatureSpec] = []
    used_data = False
    lacking: list[str] = []
    for name in names:
        spec, read = _column_spec(name, columns[name], dtypes[name], given, categories, from_data)
        if spec is None:
            lacking.append(name)
        else:
            specs.append(spec)
            used_data = used_data or read
    if lacking:
        raise ValueError(
            f"numeric column(s) {lacking} have no public range: pass ranges={{name: (low, high)}} "
            f"with bounds fixed before seeing the data, or features=[FeatureSpec(...)]; "
            f"ranges='from-data' reads them from the rows and the model is then not private"
        )
    return specs, used_data


def _column_spec(
    name: str,
    values: np.ndarray,
    dtype: Any,
    given: Mapping[str, tuple[float, float]],
    categories: Mapping[str, Sequence[str]],
    from_data: bool,
) -> tuple[FeatureSpec | None, bool]:
    """One column's spec (None: a numeric column without a range) and whether the rows were read."""
    declared = getattr(getattr(dtype, "categories", None), "tolist", None)
    if declared is not None:  # pandas category dtype: the categories are declared
        cats = tuple(str(c) for c in declared())
        return FeatureSpec(name=name, kind=FeatureKind.CATEGORICAL, categories=cats), False
    if _is_bool(values):
        return FeatureSpec(name=name, kind=FeatureKind.BOOL), False
    if np.asarray(values).dtype.kind in "OUS" and not _all_numbers(values):
        if name in categories:
            cats, read = tuple(str(c) for c in categories[name]), False
        elif from_data:
            cats, read = tuple(sorted({str(v) for v in values})), True
        else:
            first = next(v for v in values if not _all_numbers(np.asarray([v], dtype=object)))
            raise ValueError(
                f"column {name!r} holds strings but no categories were declared (e.g. {first!r}): pass "
                f"categories={{{name!r}: [...]}}, give it a pandas 'category' dtype, "
                f"or ranges='from-data'; if it is a numeric column, convert it to numbers first "
                f"(e.g. pandas.to_numeric)"
            )
        return FeatureSpec(name=name, kind=FeatureKind.CATEGORICAL, categories=cats, from_data=read), read
    if name in given:
        low, high = given[name]
        return FeatureSpec(name=name, kind=FeatureKind.NUMERIC, low=float(low), high=float(high)), False
    if from_data:
        numbers = _numbers(values, name)
        low, high = float(np.min(numbers)), float(np.max(numbers))
        if not high > low:
            low, high = low - 0.5, high + 0.5
        return FeatureSpec(name=name, kind=FeatureKind.NUMERIC, low=low, high=high, from_data=True), True
    return None, False


def _numbers(values: np.ndarray, name: str, where: str = "X") -> np.ndarray:
    """A numeric column as floats, or an error naming the column, row and value that is not a number."""
    arr = np.asarray(values)
    try:
        fast = arr.astype(np.float64)
    except (TypeError, ValueError):
        fast = None
    if fast is not None and np.all(np.isfinite(fast)):
        return fast
    out = np.empty(arr.shape[0], dtype=np.float64)
    for i, value in enumerate(arr):
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if value is None or not math.isfinite(number):
            what = "a missing value" if value is None or value != value else f"{value!r}, not a finite number"
            raise ValueError(
                f"{where}: numeric feature {name!r} holds {what} in row {i}: convert the column to numbers "
                f"first (e.g. pandas.to_numeric, and decide what a missing value means), or declare it "
                f"categorical"
            )
        out[i] = number
    return out


def clip_to_ranges(X: np.ndarray, specs: Sequence[FeatureSpec]) -> tuple[np.ndarray, dict[str, int]]:
    """Numeric columns clipped into their public ``[low, high]``, and how many values each had outside.

    A public range is a promise about every peer's value: a peer's client
    clips its own value before binning (one row at a time, so clipping costs
    no privacy). Values outside land in the end bins either way; the count
    says how far the declared range is from the data.
    """
    clipped = X.copy()
    counts: dict[str, int] = {}
    for j, spec in enumerate(specs):
        if spec.kind is not FeatureKind.NUMERIC:
            continue
        outside = int(np.count_nonzero((X[:, j] < spec.low) | (X[:, j] > spec.high)))
        if outside:
            counts[spec.name] = outside
            clipped[:, j] = np.clip(X[:, j], spec.low, spec.high)
    return clipped, counts


def constant_columns(X: np.ndarray, specs: Sequence[FeatureSpec]) -> list[str]:
    """Names of the columns that hold one value in every row (they cannot tell the classes apart)."""
    if X.shape[0] < 2:
        return []
    return [s.name for j, s in enumerate(specs) if np.all(X[:, j] == X[0, j])]


def _all_numbers(values: np.ndarray) -> bool:
    return all(
        isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in np.asarray(values).ravel()
    )
