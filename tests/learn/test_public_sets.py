"""benchmarks/public_sets.py: the chosen sets load as documented and every method runs on a shared split."""

from __future__ import annotations

import numpy as np
from statsmodels import datasets

from anonml.model import FeatureKind
from benchmarks.public_sets import METHODS, load_sets, run_set


def test_sets_load_with_their_targets_and_boolean_columns():
    anes, fair, randhie = load_sets(["anes96", "fair", "randhie"])
    assert anes.X.shape == (944, 9) and "logpopul" not in [f.name for f in anes.features]
    assert fair.X.shape == (6366, 8)
    assert randhie.X.shape == (20190, 9)
    frame = datasets.randhie.load_pandas().data
    np.testing.assert_array_equal(randhie.y, (frame["mdvis"] > 0).astype(int))
    kinds = {f.name: f.kind for f in randhie.features}
    assert {n for n, k in kinds.items() if k is FeatureKind.BOOL} == {"idp", "hlthg", "hlthf", "hlthp"}
    np.testing.assert_array_equal(fair.y, (datasets.fair.load_pandas().data["affairs"] > 0).astype(int))
    for data in (anes, fair, randhie):
        for j, spec in enumerate(data.features):
            if spec.kind is FeatureKind.NUMERIC:  # padded: every value strictly inside the public range
                assert spec.low < data.X[:, j].min() and data.X[:, j].max() < spec.high


def test_every_method_runs_on_one_split_of_breast_cancer():
    (data,) = load_sets(["breast_cancer"])
    rows = run_set(data, splits=1, epsilons=(4.0,))
    names = {r.method for r in rows}
    expected = (set(METHODS) - {"central"}) | {"central_raw", "central_binned"}
    assert names == expected
    auc = {r.method: r.auc_mean for r in rows}
    assert auc["central_raw"] > 0.95 and auc["majority"] == 0.5
    assert all(r.log_loss_base is not None and r.trials == 1 for r in rows)
