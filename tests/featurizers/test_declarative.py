"""The declarative featurizer against hand-computed values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from anonml.errors import PluginError
from anonml.model import Dataset, Event, FeatureKind, Text
from anonml.plugins import PluginRef, create
from featurizers.declarative import DeclarativeFeaturizer

T0 = datetime(2020, 1, 1, tzinfo=UTC)
END = T0 + timedelta(days=10)


def _ev(day: float, typ: str, **fields) -> Event:
    return Event(source="edx", type=typ, timestamp=T0 + timedelta(days=day), fields=fields)


DATASET = Dataset(
    user="u",
    start=T0,
    end=END,
    events=(
        _ev(0, "problem_check", grade=1, max_grade=2, problem="p1", success=False),
        _ev(2, "problem_check", grade=2, max_grade=2, problem="p1", success=True),
        _ev(5, "play_video", code="v1"),
        _ev(8, "problem_check", grade=0, max_grade=2, problem="p2", success=False),
        _ev(9.5, "play_video", code="v2"),
        _ev(9.9, "page_view", path=Text("/courses/x")),
    ),
)


def _feat(**kw) -> dict:
    return {"name": "f", "low": 0, "high": 100, **kw}


@pytest.mark.parametrize(
    ("definition", "expected"),
    [
        (_feat(aggregation="count"), 6),
        (_feat(type="problem_check"), 3),
        (_feat(type="problem_check", aggregation="sum", field="grade"), 3),
        (_feat(type="problem_check", aggregation="mean", field="grade"), 1),
        (_feat(type="problem_check", aggregation="min", field="grade"), 0),
        (_feat(type="problem_check", aggregation="max", field="grade"), 2),
        (_feat(type="problem_check", aggregation="last", field="grade"), 0),
        (_feat(type="problem_check", aggregation="distinct", field="problem"), 2),
        (_feat(type="problem_check", where=[{"field": "success", "op": "eq", "value": True}]), 1),
        (_feat(type="problem_check", where=[{"field": "grade", "op": "ge", "value": 1}]), 2),
        (_feat(where=[{"field": "code", "op": "in", "value": ["v2", "v9"]}]), 1),
        (_feat(where=[{"field": "path", "op": "exists"}]), 1),
        (_feat(type="play_video", window_days=1), 1),  # only day 9.5 is in [9, 10)
        (_feat(type="problem_check", window_days=3), 1),
        (_feat(type="forum", aggregation="mean", field="x", default=7), 7),
        ({"name": "f", "type": "page_view", "aggregation": "exists"}, 1),
        ({"name": "f", "type": "forum", "aggregation": "exists"}, 0),
        (_feat(aggregation="count", high=4), 4),  # clipped to the declared range
        (_feat(type="problem_check", where=[{"field": "problem", "op": "lt", "value": 3}]), 0),
    ],
)
def test_feature_values(definition, expected):
    featurizer = DeclarativeFeaturizer({"features": [definition]})
    assert featurizer.featurize(DATASET) == [pytest.approx(expected)]


def test_window_without_cutoff_ends_at_last_event():
    open_ended = Dataset.of("u", DATASET.events)
    featurizer = DeclarativeFeaturizer({"features": [_feat(window_days=0.5)]})
    assert featurizer.featurize(open_ended) == [2.0]  # 9.5 and 9.9, the last included


def test_specs_carry_ranges_and_kinds():
    featurizer = DeclarativeFeaturizer(
        {"features": [_feat(name="a", high=50), {"name": "b", "aggregation": "exists"}]}
    )
    specs = featurizer.features()
    assert [(s.name, s.kind, s.low, s.high) for s in specs] == [
        ("a", FeatureKind.NUMERIC, 0, 50),
        ("b", FeatureKind.BOOL, 0, 1),
    ]


def test_definitions_are_validated_as_data():
    with pytest.raises(ValidationError, match="needs a field"):
        DeclarativeFeaturizer.Params(features=[_feat(aggregation="sum")])
    with pytest.raises(ValidationError, match="duplicate feature names"):
        DeclarativeFeaturizer.Params(features=[_feat(), _feat()])
    with pytest.raises(ValidationError, match="empty"):
        DeclarativeFeaturizer.Params(features=[_feat(low=5, high=5)])
    with pytest.raises(ValidationError, match="'in' needs a list"):
        DeclarativeFeaturizer.Params(features=[_feat(where=[{"field": "x", "op": "in", "value": 1}])])
    with pytest.raises(PluginError, match="Extra inputs"):
        create("featurizer", PluginRef(name="declarative",
                                       params={"features": [_feat(lambda_="x")]}))
