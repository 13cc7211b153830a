"""benchmarks/central_dp: the encoding diffprivlib sees, and a worker failure named with its set."""

from __future__ import annotations

import numpy as np
import pytest

from anonml.datasets.tabular import TabularData
from anonml.model import FeatureKind, FeatureSpec
from benchmarks.central_dp import diffprivlib_rows, encode_unit


def _specs() -> tuple[FeatureSpec, ...]:
    return (
        FeatureSpec(name="age", low=0.0, high=100.0),
        FeatureSpec(name="member", kind=FeatureKind.BOOL),
        FeatureSpec(name="colour", kind=FeatureKind.CATEGORICAL, categories=("r", "g", "b")),
    )


def test_encode_unit_scales_by_public_range_clips_and_one_hots():
    # diffprivlib's data_norm = √d holds only if every coordinate is in [0, 1]: a value outside the
    # public range (150, −10) is clipped, a category becomes its indicator over the declared levels.
    X = np.array([[50.0, 1.0, 2.0], [150.0, 0.0, 0.0], [-10.0, 1.0, 1.0]])
    Z = encode_unit(X, _specs())
    assert Z.shape == (3, 5)
    np.testing.assert_allclose(Z[:, 0], [0.5, 1.0, 0.0])
    np.testing.assert_allclose(Z[:, 1], [1.0, 0.0, 1.0])
    np.testing.assert_allclose(Z[:, 2:], [[0, 0, 1], [1, 0, 0], [0, 1, 0]])
    assert np.all(np.linalg.norm(Z, axis=1) <= np.sqrt(Z.shape[1]))


def test_a_worker_without_diffprivlib_is_named_with_its_set(tmp_path):
    # An empty --dp-path: the subprocess cannot import diffprivlib, and the run stops naming the set.
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.uniform(0, 100, 60), rng.integers(0, 2, 60), rng.integers(0, 3, 60)])
    data = TabularData("toy", X.astype(float), (rng.random(60) < 0.4).astype(np.int64), _specs())
    with pytest.raises(SystemExit, match="diffprivlib worker failed on toy"):
        diffprivlib_rows(data, 1, 1.0, str(tmp_path))
