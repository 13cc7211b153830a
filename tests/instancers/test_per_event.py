"""per_event: one example per target event, history strictly before it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from anonml.model import Dataset, Event
from instancers.per_event import PerEventInstancer

T0 = datetime(2019, 5, 1, tzinfo=UTC)


def _trip(day: float, fare: float | None) -> Event:
    fields = {} if fare is None else {"fare_amount": fare}
    return Event(source="uber", type="trip", timestamp=T0 + timedelta(days=day), fields=fields)


def _search(day: float) -> Event:
    return Event(source="google_activity", type="search", timestamp=T0 + timedelta(days=day))


def test_one_instance_per_target_with_label_and_strict_history():
    ds = Dataset.of("u", [_search(0), _trip(1, 10.5), _search(2), _trip(3, 22.0), _trip(3.5, None)])
    insts = PerEventInstancer({"type": "trip", "label_field": "fare_amount"}).make_instances(ds)
    assert [i.label for i in insts] == [10.5, 22.0]
    assert [len(i.dataset.events) for i in insts] == [1, 3]
    for inst, day in zip(insts, (1, 3), strict=True):
        assert all(e.timestamp < T0 + timedelta(days=day) for e in inst.dataset.events)
    assert len({i.entity for i in insts}) == 2 and all(i.entity.startswith("u:") for i in insts)


def test_history_days_limits_the_window():
    ds = Dataset.of("u", [_search(0), _search(9.5), _trip(10, 5.0)])
    (inst,) = PerEventInstancer(
        {"type": "trip", "label_field": "fare_amount", "history_days": 1}
    ).make_instances(ds)
    assert [e.timestamp for e in inst.dataset.events] == [T0 + timedelta(days=9.5)]


def test_missing_label_kept_when_asked():
    ds = Dataset.of("u", [_trip(1, None)])
    assert PerEventInstancer({"type": "trip", "label_field": "fare_amount"}).make_instances(ds) == []
    kept = PerEventInstancer(
        {"type": "trip", "label_field": "fare_amount", "skip_missing_label": False}
    ).make_instances(ds)
    assert [i.label for i in kept] == [None]
