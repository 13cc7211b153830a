"""The data model: typed fields, stable content ids, datasets and matrices."""

from __future__ import annotations

import enum
from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from anonml.model import (
    Dataset,
    Event,
    FeatureKind,
    FeatureMatrix,
    FeatureSpec,
    FeatureVector,
    FieldKind,
    Text,
    decode_fields,
    encode_fields,
    field_kind,
)

PARIS = timezone(timedelta(hours=2))


def _event(**kw) -> Event:
    base = dict(source="s", type="t", timestamp=datetime(2020, 5, 1, 12, tzinfo=PARIS))
    base.update(kw)
    return Event(**base)


def test_timestamp_is_normalised_to_utc():
    ev = _event()
    assert ev.timestamp == datetime(2020, 5, 1, 10, tzinfo=UTC)
    assert ev.timestamp.utcoffset() == timedelta(0)


def test_naive_timestamp_is_refused():
    with pytest.raises(ValidationError, match="no timezone"):
        _event(timestamp=datetime(2020, 5, 1, 12))


def test_field_kinds_are_distinct():
    fields = {"f": 1.5, "i": 3, "b": True, "c": "cat", "t": Text("free text"),
              "d": datetime(2021, 1, 1, tzinfo=UTC)}
    kinds = {k: field_kind(v) for k, v in _event(fields=fields).fields.items()}
    assert kinds == {"f": FieldKind.FLOAT, "i": FieldKind.INT, "b": FieldKind.BOOL,
                     "c": FieldKind.CATEGORICAL, "t": FieldKind.TEXT, "d": FieldKind.DATETIME}


def test_non_finite_and_unsupported_values_are_refused():
    with pytest.raises(ValidationError, match="not finite"):
        _event(fields={"x": float("nan")})
    with pytest.raises(ValidationError, match="unsupported"):
        _event(fields={"x": [1, 2]})


def test_id_is_stable_and_content_sensitive():
    a, b = _event(fields={"x": 1}), _event(fields={"x": 1})
    assert a.id == b.id and len(a.id) == 32
    assert _event(fields={"x": 2}).id != a.id
    assert _event(fields={"x": 1.0}).id != a.id  # int and float are different content
    assert a.with_user("alice").id != a.with_user("bob").id
    # same instant in another zone is the same event
    same = _event(fields={"x": 1}, timestamp=datetime(2020, 5, 1, 10, tzinfo=UTC))
    assert same.id == a.id


def test_text_and_category_with_same_string_differ():
    assert _event(fields={"x": "a"}).id != _event(fields={"x": Text("a")}).id


field_values = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**53), max_value=2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.text(max_size=20).map(Text),
    st.datetimes(timezones=st.just(UTC), min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1)),
)


@given(st.dictionaries(st.text(min_size=1, max_size=10), field_values, max_size=6))
def test_event_json_round_trip_preserves_types_and_id(fields):
    ev = _event(fields=fields, user="u")
    back = Event.model_validate_json(ev.model_dump_json())
    assert back == ev
    assert back.id == ev.id
    assert {k: field_kind(v) for k, v in back.fields.items()} == {
        k: field_kind(v) for k, v in ev.fields.items()
    }
    assert decode_fields(encode_fields(ev.fields)) == ev.fields


def test_dataset_window_is_half_open_and_keeps_static_events():
    t0 = datetime(2020, 1, 1, tzinfo=UTC)
    evs = [Event(source="s", type="static", fields={"k": 1})] + [
        Event(source="s", type="t", timestamp=t0 + timedelta(days=d)) for d in range(5)
    ]
    ds = Dataset.of("u", reversed(evs))
    assert ds.events[0].timestamp is None
    assert [e.timestamp for e in ds.events[1:]] == sorted(e.timestamp for e in evs[1:])
    win = ds.window(t0 + timedelta(days=1), t0 + timedelta(days=3))
    assert [e.type for e in win.events] == ["static", "t", "t"]
    assert win.first_time == t0 + timedelta(days=1)
    assert win.last_time == t0 + timedelta(days=2)


def test_feature_spec_validation_and_encoding():
    with pytest.raises(ValidationError, match="range"):
        FeatureSpec(name="x")
    with pytest.raises(ValidationError, match="empty or infinite"):
        FeatureSpec(name="x", low=1, high=1)
    cat = FeatureSpec(name="c", kind=FeatureKind.CATEGORICAL, categories=("a", "b"))
    assert cat.encode("b") == 1.0
    with pytest.raises(ValueError, match="not one of"):
        cat.encode("z")
    assert FeatureSpec(name="b", kind=FeatureKind.BOOL).high == 1.0


def test_feature_matrix_to_numpy_and_width_check():
    specs = (FeatureSpec(name="a", low=0, high=1), FeatureSpec(name="b", low=0, high=9))
    m = FeatureMatrix.from_rows(specs, [FeatureVector(entity="e1", values=(0.5, 3), label=1),
                                        FeatureVector(entity="e2", values=(1, 4), label=0)])
    X, y = m.to_numpy()
    np.testing.assert_array_equal(X, [[0.5, 3], [1, 4]])
    np.testing.assert_array_equal(y, [1, 0])
    with pytest.raises(ValidationError, match="2 features"):
        FeatureMatrix.from_rows(specs, [FeatureVector(entity="e", values=(1.0,))])
    unlabelled = FeatureMatrix.from_rows(specs, [FeatureVector(entity="e", values=(1, 2))])
    assert unlabelled.to_numpy()[1] is None


def test_canonical_encoding_is_sorted_compact_and_tagged():
    import enum

    class Level(enum.IntEnum):
        HIGH = 3

    fields = {"z": 1.5, "a": "$dollar", "t": Text("é"), "d": datetime(2020, 1, 1, 2, tzinfo=PARIS),
              "n": Level.HIGH, "big": 2**70}
    assert encode_fields(fields) == (
        '{"a":"$s:$dollar","big":1180591620717411303424,"d":"$d:2020-01-01T00:00:00+00:00",'
        '"n":3,"t":"$t:é","z":1.5}'
    )
    assert decode_fields(encode_fields(fields))["a"] == "$dollar"
    assert decode_fields(encode_fields(fields))["big"] == 2**70


@pytest.mark.parametrize("bad", [[1], None, object(), float("inf")])
def test_canonical_encoding_refuses_what_is_not_a_field_value(bad):
    with pytest.raises((TypeError, ValueError)):
        encode_fields({"x": bad})


def _same_event(made: Event, built: Event) -> None:
    assert made == built
    assert made.__dict__ == built.__dict__
    assert made.model_fields_set == built.model_fields_set
    assert made.id == built.id
    assert made.model_dump_json() == built.model_dump_json()
    assert type(made.fields) is dict and made.fields is not built.fields


_UTC_TIME = datetime(2024, 1, 8, 9, 15, 2, 123456, tzinfo=UTC)


class _Level(enum.IntEnum):
    HIGH = 3


@given(fields=st.dictionaries(
    st.text(max_size=8),
    st.one_of(st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
              st.text(max_size=20), st.text(max_size=20).map(Text)),
    max_size=6,
))
def test_make_builds_what_the_constructor_builds(fields):
    args = ("edx", "play_video", _UTC_TIME, fields, "learner7")
    _same_event(Event.make(*args), Event(source="edx", type="play_video", timestamp=_UTC_TIME,
                                          fields=fields, user="learner7"))
    static = Event.make("s", "t", None, fields, None)
    _same_event(static, Event(source="s", type="t", timestamp=None, fields=fields, user=None))


def test_make_copies_the_field_mapping_and_stays_frozen():
    fields = {"a": 1}
    ev = Event.make("s", "t", _UTC_TIME, fields, "u")
    fields["a"] = 2
    assert ev.fields == {"a": 1}
    with pytest.raises(ValidationError):
        ev.source = "x"  # type: ignore[misc]
    moved = ev.with_user("v")
    assert moved.user == "v" and moved.id != ev.id and moved.model_fields_set == ev.model_fields_set


@pytest.mark.parametrize("change", [
    {"source": ""}, {"source": "s" * 65}, {"type": ""}, {"type": "t" * 257}, {"user": ""},
    {"user": "u" * 257}, {"user": "\ud800"}, {"type": "caf\ud800"}, {"timestamp": datetime(2024, 1, 8)},
    {"fields": {"x": float("nan")}}, {"fields": {"x": None}}, {"fields": {1: "x"}}, {"fields": [("x", 1)]},
    {"user": 7}, {"fields": {"page": "x\ud800"}}, {"fields": {"x\udfff": 1}},
    {"fields": {"t": Text("\ud800")}},
])
def test_make_refuses_what_the_constructor_refuses_with_the_same_error(change):
    args = dict(source="s", type="t", timestamp=_UTC_TIME, fields={}, user="u") | change
    with pytest.raises(ValidationError) as built:
        Event(**args)
    with pytest.raises(ValidationError) as made:
        Event.make(**args)
    assert made.value.errors(include_context=False) == built.value.errors(include_context=False)
    assert str(made.value) == str(built.value)


@pytest.mark.parametrize("change", [
    {"timestamp": datetime(2024, 1, 8, 10, tzinfo=PARIS)},  # converted to UTC
    {"fields": {"when": datetime(2024, 1, 8, 10, tzinfo=PARIS)}},  # converted to UTC
    {"user": "léa"}, {"type": "vidéo"},  # non-ASCII: the full check
    {"fields": {"level": _Level.HIGH}},  # an int subclass: kept as given, by the full check
    {"fields": {"b": True, "t": Text("$t:x"), "c": "$x", "x": -0.0}},  # already canonical
])
def test_make_hands_values_validation_would_change_to_the_constructor(change):
    args = dict(source="s", type="t", timestamp=_UTC_TIME, fields={}, user="u") | change
    _same_event(Event.make(**args), Event(**args))
