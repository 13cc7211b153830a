"""DataFrames, names, inferred specs, non-private fits, small groups and K classes."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GridSearchCV

from anonml.learn.frames import encode_matrix, infer_feature_specs, match_specs
from anonml.learn.model import AnonMLClassifier
from anonml.learn.notices import NotPrivateWarning, SmallGroupWarning
from anonml.model import FeatureKind, FeatureSpec


@pytest.fixture
def pd():
    """pandas, for the DataFrame tests (the rest of this file runs without it)."""
    return pytest.importorskip("pandas")


SPECS = [
    FeatureSpec(name="sex", kind=FeatureKind.CATEGORICAL, categories=("Female", "Male")),
    FeatureSpec(name="colour", kind=FeatureKind.CATEGORICAL, categories=("red", "green", "blue")),
    FeatureSpec(name="member", kind=FeatureKind.BOOL),
    FeatureSpec(name="age", low=0.0, high=100.0),
]


def _world(pd, n: int, rng: np.random.Generator) -> tuple[object, np.ndarray, np.ndarray]:
    """A frame with a string, a category, a bool and a numeric column; its index-encoded array; labels."""
    y = (rng.random(n) < 0.4).astype(np.int64)
    sex = np.where(rng.random(n) < np.where(y == 1, 0.7, 0.35), 1, 0)
    colour = np.where(y == 1, rng.choice(3, n, p=[0.2, 0.3, 0.5]), rng.choice(3, n, p=[0.5, 0.3, 0.2]))
    member = rng.random(n) < np.where(y == 1, 0.6, 0.3)
    age = np.clip(rng.normal(np.where(y == 1, 50, 38), 12), 0, 100)
    frame = pd.DataFrame(
        {
            "sex": np.array(["Female", "Male"])[sex],
            "colour": pd.Categorical(
                np.array(["red", "green", "blue"])[colour], categories=["red", "green", "blue"]
            ),
            "member": member,
            "age": age,
        }
    )
    encoded = np.column_stack([sex, colour, member.astype(float), age]).astype(float)
    return frame, encoded, y


def test_string_category_and_bool_columns_are_encoded_through_the_specs(pd):
    frame, encoded, y = _world(pd, 4000, np.random.default_rng(0))
    on_frame = AnonMLClassifier(epsilon=2.0, features=SPECS, random_state=3).fit(frame, y)
    on_array = AnonMLClassifier(epsilon=2.0, features=SPECS, random_state=3).fit(encoded, y)
    # Same seed, same encoded values: the same model, byte for byte in its tables.
    assert np.array_equal(on_frame.decision_function(frame), on_array.decision_function(encoded))
    assert list(on_frame.feature_names_in_) == ["sex", "colour", "member", "age"]
    # Strings in an object array are encoded through the specs too (by position).
    as_objects = frame.to_numpy(dtype=object)
    assert np.array_equal(on_array.predict(as_objects), on_array.predict(encoded))


def test_specs_are_matched_to_columns_by_name_and_mismatches_are_named(pd):
    frame, _, y = _world(pd, 3000, np.random.default_rng(1))
    ordered = AnonMLClassifier(epsilon=2.0, features=SPECS, random_state=4).fit(frame, y)
    shuffled = AnonMLClassifier(epsilon=2.0, features=SPECS[::-1], random_state=4).fit(frame, y)
    assert np.array_equal(ordered.decision_function(frame), shuffled.decision_function(frame))
    with pytest.raises(ValueError, match=r"no column for the feature spec\(s\) \['age'\]"):
        AnonMLClassifier(features=SPECS).fit(frame.drop(columns=["age"]), y)
    with pytest.raises(ValueError, match=r"no feature spec for the column\(s\) \['extra'\]"):
        AnonMLClassifier(features=SPECS).fit(frame.assign(extra=1.0), y)
    with pytest.raises(ValueError, match=r"'purple' is not one of"):
        bad = frame.copy()
        bad["sex"] = bad["sex"].astype(object)
        bad.loc[2, "sex"] = "purple"
        AnonMLClassifier(features=SPECS).fit(bad, y)


def test_json_keeps_the_column_names_and_specs(pd):
    frame, _, y = _world(pd, 3000, np.random.default_rng(2))
    model = AnonMLClassifier(epsilon=2.0, features=SPECS, random_state=5).fit(frame, y)
    loaded = AnonMLClassifier.from_json(model.to_json())
    assert list(loaded.feature_names_in_) == list(model.feature_names_in_)
    swapped = frame[["age", "member", "colour", "sex"]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "fitted without feature names" warning
        assert np.array_equal(loaded.predict_proba(swapped), model.predict_proba(frame))
    with pytest.raises(ValueError, match=r"missing \['member'\]"):
        loaded.predict(frame.drop(columns=["member"]))
    assert loaded.to_json() == model.to_json()


def test_specs_inferred_from_a_frame_need_public_ranges(pd):
    frame, _, y = _world(pd, 3000, np.random.default_rng(3))
    specs, from_data = infer_feature_specs(
        frame, ranges={"age": (0, 100)}, categories={"sex": ["Female", "Male"]}
    )
    assert not from_data
    assert [s.kind for s in specs] == [
        FeatureKind.CATEGORICAL,
        FeatureKind.CATEGORICAL,
        FeatureKind.BOOL,
        FeatureKind.NUMERIC,
    ]
    assert specs[1].categories == ("red", "green", "blue") and (specs[3].low, specs[3].high) == (0.0, 100.0)
    with pytest.raises(ValueError, match=r"numeric column\(s\) \['age'\] have no public range"):
        infer_feature_specs(frame, categories={"sex": ["Female", "Male"]})
    with pytest.raises(ValueError, match="column 'sex' holds strings but no categories"):
        infer_feature_specs(frame, ranges={"age": (0, 100)})
    with pytest.raises(ValueError, match=r"names column\(s\) \['height'\]"):
        infer_feature_specs(frame, ranges={"height": (0, 3)})


def test_features_none_refuses_data_ranges_unless_asked_and_then_marks_the_model():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(3000, 2))
    y = (X[:, 0] > 0).astype(int)
    with pytest.raises(ValueError, match=r"\['x0', 'x1'\] have no public range"):
        AnonMLClassifier(epsilon=2.0).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        private = AnonMLClassifier(epsilon=2.0, ranges={"x0": (-5, 5), "x1": (-5, 5)}, random_state=0).fit(
            X, y
        )
    assert private.privacy_.private
    with pytest.warns(NotPrivateWarning, match="not private"):
        leaky = AnonMLClassifier(epsilon=2.0, ranges="from-data", random_state=0).fit(X, y)
    assert not leaky.privacy_.private
    assert json.loads(leaky.to_json())["privacy"]["private"] is False
    assert AnonMLClassifier.from_json(leaky.to_json()).privacy_.private is False


def test_model_selection_by_grid_search_warns_that_it_is_not_private():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(1500, 2))
    y = (X[:, 0] + rng.normal(size=1500) > 0).astype(int)
    search = GridSearchCV(
        AnonMLClassifier(ranges={"x0": (-5, 5), "x1": (-5, 5)}, random_state=0),
        {"epsilon": [1.0, 4.0]},
        cv=2,
        scoring="roc_auc",
    )
    with pytest.warns(NotPrivateWarning, match="inside GridSearchCV"):
        search.fit(X, y)


def test_tiny_groups_warn_and_healthy_groups_do_not():
    rng = np.random.default_rng(6)
    X = rng.normal(size=(60, 2))
    y = (X[:, 0] > 0).astype(int)
    ranges = {"x0": (-5, 5), "x1": (-5, 5)}
    with pytest.warns(SmallGroupWarning, match="too small to learn from"):
        AnonMLClassifier(epsilon=1.0, n_partitions=20, ranges=ranges, random_state=0).fit(X, y)
    X = rng.normal(size=(20_000, 2))
    y = (X[:, 0] > 0).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallGroupWarning)
        AnonMLClassifier(epsilon=1.0, ranges=ranges, random_state=0).fit(X, y)


def test_k_classes_learn_each_class_and_survive_json():
    rng = np.random.default_rng(7)
    n = 12_000
    y = rng.integers(0, 3, size=n)
    a = np.where(
        y == 0,
        rng.choice(3, n, p=[0.7, 0.2, 0.1]),
        np.where(y == 1, rng.choice(3, n, p=[0.15, 0.7, 0.15]), rng.choice(3, n, p=[0.1, 0.2, 0.7])),
    )
    b = rng.normal(loc=y.astype(float), scale=1.0)
    X = np.column_stack([a, np.clip(b, -3, 5)]).astype(float)
    labels = np.array(["low", "mid", "high"])[y]
    specs = [
        FeatureSpec(name="a", kind=FeatureKind.CATEGORICAL, categories=("p", "q", "r")),
        FeatureSpec(name="b", low=-3.0, high=5.0),
    ]
    model = AnonMLClassifier(epsilon=2.0, features=specs, random_state=1).fit(X[:8000], labels[:8000])
    assert list(model.classes_) == ["high", "low", "mid"]
    proba = model.predict_proba(X[8000:])
    assert proba.shape == (4000, 3) and np.allclose(proba.sum(axis=1), 1.0)
    # One-vs-rest AUC per class: well above chance (the Bayes AUCs are ~0.85-0.9).
    for c, name in enumerate(model.classes_):
        assert roc_auc_score(labels[8000:] == name, proba[:, c]) > 0.75
    assert np.mean(model.predict(X[8000:]) == labels[8000:]) > 0.55  # chance is 1/3
    loaded = AnonMLClassifier.from_json(model.to_json())
    assert np.array_equal(loaded.predict_proba(X[8000:]), proba)


def test_encode_matrix_and_match_specs_name_what_is_wrong(pd):
    with pytest.raises(ValueError, match=r"features name \['a'\] more than once"):
        match_specs(["a"], [FeatureSpec(name="a", low=0, high=1), FeatureSpec(name="a", low=0, high=1)])
    frame = pd.DataFrame({"a": ["x", None]})
    with pytest.raises(ValueError, match="feature 'a' has a missing value in row 1"):
        encode_matrix(frame, [FeatureSpec(name="a", kind=FeatureKind.CATEGORICAL, categories=("x", "y"))])
