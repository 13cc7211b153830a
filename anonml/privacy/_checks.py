"""Argument checks shared by the privacy modules (one place for each message)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

# The ε check lives with the closed forms it protects (NumPy-free, for the descriptor); it is
# re-exported here so every argument check of the privacy modules comes from one import.
from anonml.privacy._closed_form import MAX_EPSILON, check_epsilon

__all__ = ["MAX_EPSILON", "check_epsilon", "check_domain", "check_values", "index_dtype"]


def check_domain(m: int, where: str = "m") -> int:
    """Return the domain size ``m`` after checking it is an integer >= 2."""
    if isinstance(m, bool) or not isinstance(m, int | np.integer):
        raise TypeError(f"{where} must be an integer, got {m!r}")
    if m < 2:
        raise ValueError(f"{where} (domain size) must be >= 2, got {m}")
    return int(m)


def index_dtype(m: int) -> type[np.integer]:
    # The smallest unsigned type holding [0, m): less memory traffic downstream.
    return np.uint8 if m <= 1 << 8 else np.uint16 if m <= 1 << 16 else np.intp


def check_values(values: ArrayLike, m: int) -> np.ndarray:
    """Value indices (1-D, in [0, m), smallest unsigned dtype) from indices or one-hot rows."""
    arr = np.asarray(values)
    if arr.ndim == 2:
        if arr.shape[1] != m:
            raise ValueError(f"one-hot values must have m={m} columns, got shape {arr.shape}")
        if arr.dtype != bool and not np.isin(arr, (0, 1)).all():
            raise ValueError("one-hot values must hold only 0/1 or booleans")
        ones = arr.astype(bool)
        bad = np.flatnonzero(ones.sum(axis=1) != 1)
        if bad.size:
            raise ValueError(f"one-hot row {bad[0]} does not have exactly one set bit")
        return ones.argmax(axis=1).astype(index_dtype(m))
    if arr.ndim != 1:
        raise ValueError(f"values must be 1-D value indices or (n, m) one-hot, got {arr.shape}")
    if arr.size == 0:
        return arr.astype(index_dtype(m))
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"values must be integer value indices, got dtype {arr.dtype}")
    low, high = int(arr.min()), int(arr.max())
    if low < 0 or high >= m:
        bad = low if low < 0 else high
        raise ValueError(f"value index {bad} outside the domain [0, {m})")
    return arr.astype(index_dtype(m), copy=False)
