"""user_window: hand-built datasets with known dropout labels."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from anonml.model import Dataset, Event
from instancers.user_window import UserWindowInstancer

T0 = datetime(2022, 9, 5, 9, tzinfo=UTC)  # a Monday: course start


def _ds(user: str, days: list[float], typ: str = "play_video") -> Dataset:
    return Dataset.of(
        user, [Event(source="edx", type=typ, timestamp=T0 + timedelta(days=d)) for d in days]
    )


def _inst(**params) -> UserWindowInstancer:
    return UserWindowInstancer({"origin": T0, **params})


def test_active_then_silent_is_a_dropout():
    (inst,) = _inst(history_periods=2, label_start=2, label_end=4).make_instances(_ds("a", [0, 3, 9]))
    assert inst.label == 1
    assert inst.entity == "a"
    # the history holds exactly the events before the cutoff (day 14)
    assert [e.timestamp for e in inst.dataset.events] == [T0 + timedelta(days=d) for d in (0, 3, 9)]
    assert inst.dataset.end == T0 + timedelta(days=14)


def test_activity_in_label_window_is_not_a_dropout():
    (inst,) = _inst(history_periods=2, label_start=2, label_end=4).make_instances(
        _ds("b", [1, 15, 27])
    )
    assert inst.label == 0
    assert len(inst.dataset.events) == 1  # day 15 and 27 are after the cutoff


def test_label_window_is_half_open():
    # day 28 is the first instant after [week 2, week 4): not counted
    (inst,) = _inst(history_periods=2, label_start=2, label_end=4).make_instances(_ds("c", [1, 28]))
    assert inst.label == 1


def test_no_history_activity_gives_no_instance():
    assert _inst().make_instances(_ds("d", [20, 30])) == []
    kept = _inst(require_history_activity=False).make_instances(_ds("d", [20]))
    assert [i.label for i in kept] == [0]


def test_first_event_origin_and_activity_filter():
    inst = UserWindowInstancer(
        {"history_periods": 1, "label_start": 1, "label_end": 2, "activity": {"type": "problem_check"}}
    )
    ds = Dataset.of("e", [
        Event(source="edx", type="problem_check", timestamp=T0 + timedelta(days=100)),
        Event(source="edx", type="page_view", timestamp=T0 + timedelta(days=108)),
    ])
    (only,) = inst.make_instances(ds)
    assert only.label == 1  # the page_view in week 1 is not activity under this filter
    active = UserWindowInstancer(inst.params.model_copy(update={"label": "active"}))
    assert active.make_instances(ds)[0].label == 0


def test_min_events_threshold():
    (inst,) = _inst(history_periods=1, label_start=1, label_end=2, min_events=3).make_instances(
        _ds("f", [0, 8, 9])
    )
    assert inst.label == 1  # two events in week 1 is below 3: counts as inactive


def test_label_window_may_not_overlap_history():
    with pytest.raises(ValidationError, match="leak"):
        UserWindowInstancer.Params(history_periods=3, label_start=2, label_end=5)
    with pytest.raises(ValidationError, match="after label_start"):
        UserWindowInstancer.Params(history_periods=1, label_start=3, label_end=3)
