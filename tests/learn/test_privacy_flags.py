"""Flags that tell the truth: data-read specs, model selection at any n_jobs, clipped and bad columns."""

from __future__ import annotations

import json
import warnings
from collections import Counter

import numpy as np
import pytest
from sklearn.metrics import get_scorer
from sklearn.model_selection import (
    GridSearchCV,
    RandomizedSearchCV,
    StratifiedKFold,
    cross_validate,
    validation_curve,
)
from sklearn.model_selection._validation import _fit_and_score

from anonml.learn.frames import infer_feature_specs
from anonml.learn.model import AnonMLClassifier
from anonml.learn.notices import DataWarning, NotPrivateWarning
from anonml.learn.regression import AnonMLRegressor
from anonml.learn.selection import ModelSelection
from anonml.model import FeatureSpec

RANGES = {"x0": (-5.0, 5.0), "x1": (-5.0, 5.0)}


@pytest.fixture
def pd():
    return pytest.importorskip("pandas")


def _data(n: int = 1200, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = (X[:, 0] + rng.normal(size=n) > 0).astype(int)
    return X, y


def test_specs_read_from_the_rows_carry_the_fact_through_the_model_and_its_json():
    X, y = _data()
    specs, _ = infer_feature_specs(X, ranges="from-data")  # the flag discarded, as a README reader might
    assert all(s.from_data for s in specs)
    assert json.loads(specs[0].model_dump_json())["from_data"] is True
    # a public spec's document is what it always was: no from_data key
    assert "from_data" not in FeatureSpec(name="a", low=0.0, high=1.0).model_dump(mode="json")
    with pytest.warns(NotPrivateWarning, match=r"feature\(s\) \['x0', 'x1'\] were read from the rows"):
        model = AnonMLClassifier(epsilon=2.0, features=specs, random_state=0).fit(X, y)
    assert model.privacy_.private is False
    assert model.privacy_.data_derived == ("x0", "x1")
    loaded = AnonMLClassifier.from_json(model.to_json())
    assert loaded.privacy_.private is False and loaded.privacy_.data_derived == ("x0", "x1")
    assert all(s.from_data for s in loaded.features_)
    assert loaded.to_json() == model.to_json()
    # one data-read spec among public ones is enough, and only it is named
    mixed = [FeatureSpec(name="x0", low=-5.0, high=5.0), specs[1]]
    with pytest.warns(NotPrivateWarning, match=r"\['x1'\]"):
        assert AnonMLClassifier(features=mixed, random_state=0).fit(X, y).privacy_.private is False
    # the aggregator's path (bins and ensemble built elsewhere) marks it too
    rebuilt = AnonMLClassifier.from_ensemble(
        model.binning_,
        model.ensemble_,
        classes=(0, 1),
        privacy=AnonMLClassifier(
            features=[FeatureSpec(name="x0", low=-5.0, high=5.0), FeatureSpec(name="x1", low=-5.0, high=5.0)],
            random_state=0,
        )
        .fit(X, y)
        .privacy_,
        fitted_features=specs,
    )
    assert rebuilt.privacy_.private is False


def test_categories_read_from_the_rows_make_the_model_not_private(pd):
    X, y = _data(800, 1)
    frame = pd.DataFrame({"colour": np.where(X[:, 0] > 0, "red", "blue"), "x1": X[:, 1]})
    specs, from_data = infer_feature_specs(frame, ranges="from-data")
    assert from_data and specs[0].from_data and specs[0].categories == ("blue", "red")
    public, read = infer_feature_specs(frame, ranges={"x1": (-5, 5)}, categories={"colour": ["red", "blue"]})
    assert not read and not any(s.from_data for s in public)
    with pytest.warns(NotPrivateWarning, match="colour"):
        assert AnonMLClassifier(features=specs, random_state=0).fit(frame, y).privacy_.private is False


def _grid_expectation(grid_eps: list[float], n_splits: int, best: float) -> Counter:
    return Counter([e for e in grid_eps for _ in range(n_splits)] + [best])


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_grid_search_leaves_the_refit_model_marked_with_every_fit(n_jobs):
    X, y = _data()
    search = GridSearchCV(
        AnonMLClassifier(ranges=RANGES, random_state=0),
        {"epsilon": [1.0, 4.0], "smoothing": [0.5, 1.0]},
        cv=2,
        scoring="roc_auc",
        n_jobs=n_jobs,
    )
    with pytest.warns(NotPrivateWarning, match="inside GridSearchCV"):
        search.fit(X, y)
    privacy = search.best_estimator_.privacy_
    assert privacy.private is False
    sel = privacy.selection
    assert sel.wrapper == "GridSearchCV" and sel.complete
    # 4 candidates × 2 splits at their own ε, plus the refit at the best ε
    assert sel.fits == 9
    assert Counter(sel.fit_epsilons) == _grid_expectation(
        [1.0, 1.0, 4.0, 4.0], 2, search.best_params_["epsilon"]
    )
    assert sel.epsilon_sum == pytest.approx(sum(sel.fit_epsilons))
    loaded = AnonMLClassifier.from_json(search.best_estimator_.to_json())
    assert loaded.privacy_.selection == sel and loaded.privacy_.private is False


def test_randomized_search_in_worker_processes_counts_its_candidates():
    X, y = _data(900, 2)
    search = RandomizedSearchCV(
        AnonMLClassifier(ranges=RANGES, random_state=0),
        {"epsilon": [0.5, 1.0, 2.0, 4.0]},
        n_iter=3,
        cv=StratifiedKFold(2),
        random_state=0,
        n_jobs=2,
    )
    with pytest.warns(NotPrivateWarning, match="inside RandomizedSearchCV"):
        search.fit(X, y)
    sel = search.best_estimator_.privacy_.selection
    tried = [c["epsilon"] for c in search.cv_results_["params"]]
    assert sel.complete and sel.fits == 3 * 2 + 1
    assert Counter(sel.fit_epsilons) == _grid_expectation(tried, 2, search.best_params_["epsilon"])


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_cross_validate_and_validation_curve_warn_and_mark_their_fits(n_jobs):
    X, y = _data(900, 3)
    with pytest.warns(NotPrivateWarning, match="inside cross_validate"):
        out = cross_validate(
            AnonMLClassifier(epsilon=2.0, ranges=RANGES, random_state=0),
            X,
            y,
            cv=3,
            n_jobs=n_jobs,
            return_estimator=True,
        )
    for model in out["estimator"]:  # fitted in worker processes when n_jobs=2
        sel = model.privacy_.selection
        assert model.privacy_.private is False
        assert (sel.wrapper, sel.fits, sel.fit_epsilons, sel.complete) == (
            "cross_validate",
            3,
            (2.0,) * 3,
            True,
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        validation_curve(
            AnonMLClassifier(ranges=RANGES, random_state=0),
            X,
            y,
            param_name="epsilon",
            param_range=[0.5, 2.0],
            cv=2,
            n_jobs=n_jobs,
        )
    messages = [str(w.message) for w in caught if issubclass(w.category, NotPrivateWarning)]
    assert messages and all("inside validation_curve" in m for m in messages)
    assert "2 split(s) × 2 fit(s) per split" in messages[0]


def test_a_fit_inside_model_selection_without_a_clone_record_is_still_marked():
    """As in a worker whose estimator did not come through clone: the stack shows the routine."""
    X, y = _data(600, 4)
    model = AnonMLClassifier(epsilon=1.0, ranges=RANGES, random_state=0)  # not cloned
    with pytest.warns(NotPrivateWarning, match="_fit_and_score"):
        _fit_and_score(
            model,
            X,
            y,
            scorer=get_scorer("accuracy"),
            train=np.arange(400),
            test=np.arange(400, 600),
            verbose=0,
            parameters=None,
            fit_params=None,
            score_params=None,
        )
    sel = model.privacy_.selection
    assert model.privacy_.private is False and not sel.complete and sel.fit_epsilons == (1.0,)


def test_a_plain_fit_stays_private_and_silent():
    X, y = _data(600, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = AnonMLClassifier(epsilon=1.0, ranges=RANGES, random_state=0).fit(X, y)
    assert model.privacy_.private and model.privacy_.selection is None and model.privacy_.data_derived is None
    assert "selection" not in json.loads(model.to_json())["privacy"]


def test_regressor_in_grid_search_is_marked():
    rng = np.random.default_rng(6)
    X = rng.uniform(0, 10, size=(900, 1))
    y = X[:, 0] + rng.normal(size=900)
    specs = [FeatureSpec(name="x0", low=0.0, high=10.0)]
    search = GridSearchCV(
        AnonMLRegressor(target_range=(-3.0, 13.0), classifier_params={"features": specs, "random_state": 0}),
        {"classifier_params": [{"features": specs, "epsilon": e, "random_state": 0} for e in (1.0, 2.0)]},
        cv=2,
    )
    with pytest.warns(NotPrivateWarning, match="inside GridSearchCV"):
        search.fit(X, y)
    sel = search.best_estimator_.privacy_.selection
    assert search.best_estimator_.privacy_.private is False
    best = search.best_params_["classifier_params"]["epsilon"]
    assert sel.complete and sel.fits == 5
    assert Counter(sel.fit_epsilons) == _grid_expectation([1.0, 2.0], 2, best)


def test_model_selection_record_validates():
    with pytest.raises(ValueError):
        ModelSelection.from_dict({"wrapper": "GridSearchCV", "fits": "many"})


def test_values_outside_the_public_range_are_clipped_and_counted(pd):
    X, y = _data(1000, 7)
    frame = pd.DataFrame({"age": np.clip(40 + 10 * X[:, 0], 0, 99), "x1": X[:, 1]})
    frame.loc[[3, 50, 70], "age"] = 150.0
    frame.loc[[5], "x1"] = -9.0
    specs = [FeatureSpec(name="age", low=0.0, high=100.0), FeatureSpec(name="x1", low=-5.0, high=5.0)]
    with pytest.warns(DataWarning, match=r"clipped into it \('age': 3 of 1000, 'x1': 1 of 1000\)"):
        model = AnonMLClassifier(epsilon=2.0, features=specs, random_state=0).fit(frame, y)
    assert model.n_clipped_ == {"age": 3, "x1": 1}
    clipped = frame.assign(age=frame["age"].clip(0, 100), x1=frame["x1"].clip(-5, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        same = AnonMLClassifier(epsilon=2.0, features=specs, random_state=0).fit(clipped, y)
    # clipping is all that happened: the same seed gives the same model
    assert np.array_equal(model.predict_proba(frame), same.predict_proba(frame))


def test_constant_and_unconvertible_columns_are_named(pd):
    X, y = _data(800, 8)
    frame = pd.DataFrame({"age": 40 + 10 * X[:, 0], "flat": np.full(800, 3.0)})
    specs = [FeatureSpec(name="age", low=-10.0, high=100.0), FeatureSpec(name="flat", low=0.0, high=10.0)]
    with pytest.warns(DataWarning, match=r"feature\(s\) \['flat'\] hold one value in every row"):
        AnonMLClassifier(features=specs, random_state=0).fit(frame, y)
    words = frame.assign(age=[f"{int(a)} yrs" for a in frame["age"]])
    with pytest.raises(
        ValueError, match=r"numeric feature 'age' holds '\d+ yrs', not a finite number in row 0"
    ):
        AnonMLClassifier(features=specs).fit(words, y)
    with pytest.raises(ValueError, match=r"column 'age' holds strings .*convert it to numbers"):
        infer_feature_specs(words, ranges={"flat": (0, 10)})
    as_array = words.to_numpy(dtype=object)
    with pytest.raises(ValueError, match=r"column 'x0' holds strings"):
        AnonMLClassifier(ranges={"x1": (0, 10)}).fit(as_array, y)


def test_column_transformer_prefixes_are_refused_with_the_fix(pd):
    from sklearn.compose import ColumnTransformer  # noqa: PLC0415
    from sklearn.pipeline import make_pipeline  # noqa: PLC0415

    X, y = _data(800, 9)
    frame = pd.DataFrame({"age": 40 + 10 * X[:, 0], "x1": X[:, 1]})
    specs = [FeatureSpec(name="age", low=-10.0, high=100.0), FeatureSpec(name="x1", low=-5.0, high=5.0)]
    prefixed = ColumnTransformer([("num", "passthrough", ["age", "x1"])]).set_output(transform="pandas")
    pipe = make_pipeline(prefixed, AnonMLClassifier(features=specs, random_state=0))
    with pytest.raises(
        ValueError, match=r"'num__age' for 'age'\): build it with verbose_feature_names_out=False"
    ):
        pipe.fit(frame, y)
    with pytest.raises(ValueError, match="verbose_feature_names_out=False"):
        infer_feature_specs(prefixed.fit_transform(frame), ranges={"age": (-10, 100), "x1": (-5, 5)})
    plain = ColumnTransformer(
        [("num", "passthrough", ["age", "x1"])], verbose_feature_names_out=False
    ).set_output(transform="pandas")
    fitted = make_pipeline(plain, AnonMLClassifier(features=specs, random_state=0)).fit(frame, y)
    assert list(fitted[-1].feature_names_in_) == ["age", "x1"]


def test_a_pipeline_step_in_a_search_is_marked_with_its_step_parameters():
    from sklearn.pipeline import make_pipeline  # noqa: PLC0415
    from sklearn.preprocessing import FunctionTransformer  # noqa: PLC0415

    X, y = _data(900, 10)
    pipe = make_pipeline(FunctionTransformer(), AnonMLClassifier(ranges=RANGES, random_state=0))
    search = GridSearchCV(pipe, {"anonmlclassifier__epsilon": [0.5, 2.0]}, cv=2)
    with pytest.warns(NotPrivateWarning, match="inside GridSearchCV"):
        search.fit(X, y)
    sel = search.best_estimator_[-1].privacy_.selection
    best = search.best_params_["anonmlclassifier__epsilon"]
    assert sel.complete and Counter(sel.fit_epsilons) == _grid_expectation([0.5, 2.0], 2, best)
