"""ical: the five real samples, timezones, recurrence bounds, located errors, a store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from anonml.errors import PluginError, RecordError
from anonml.model import Event, Text
from anonml.store import EventStore
from importers.ical import IcalImporter
from tests.importers.helpers import check_store_round_trip, parse_failure, reject_reasons

FIX = Path(__file__).parent / "fixtures" / "ical"


def _items(path: Path, params: dict | None = None) -> list[Event | RecordError]:
    return list(IcalImporter(params).parse(path))


@pytest.fixture()
def ical(samples_dir: Path) -> Path:
    return samples_dir / "ical"


def test_google_sample_utc_event_with_four_alarms(ical: Path) -> None:
    (event,) = _items(ical / "alarm_google_future.ics")
    assert event.source == "ical" and event.type == "calendar_event"
    assert event.timestamp == datetime(2024, 10, 4, 18, 15, tzinfo=UTC)
    assert event.fields == {"duration_minutes": 45.0, "all_day": False, "recurring": False,
                            "attendee_count": 0, "alarm_count": 4,
                            "summary": Text("event with alarms"), "status": "confirmed"}


def test_thunderbird_sample_resolves_its_vtimezone(ical: Path) -> None:
    (event,) = _items(ical / "alarm_thunderbird_future.ics")
    # 15:00 Europe/London in October 2024 is BST (+01:00).
    assert event.timestamp == datetime(2024, 10, 23, 14, 0, tzinfo=UTC)
    assert event.fields["alarm_count"] == 2 and event.fields["duration_minutes"] == 60.0


def test_exchange_sample_custom_tzid_and_spaced_byday(ical: Path) -> None:
    items = _items(ical / "issue_165_missing_event.ics")
    assert all(isinstance(i, Event) for i in items)
    # Weekdays from Fri 3 July to Wed 22 July 2015 inclusive: 1 + 5 + 5 + 3.
    assert len(items) == 14
    starts = [i.timestamp for i in items]
    assert starts[0] == datetime(2015, 7, 3, 8, 0, tzinfo=UTC)  # 10:00 at +02:00 (VTIMEZONE)
    assert starts[-1] == datetime(2015, 7, 22, 8, 0, tzinfo=UTC)  # UNTIL is inclusive
    assert all(s.weekday() < 5 for s in starts)
    assert items[0].fields["recurring"] is True
    assert items[0].fields["summary"] == Text("Sprint 25 Daily Standup")


def test_broken_sample_fails_clearly_naming_file_line_and_property(ical: Path) -> None:
    items = _items(ical / "parsing_error.ics")
    events = [i for i in items if isinstance(i, Event)]
    errors = [i for i in items if isinstance(i, RecordError)]
    # The good all-day series: 3–23 March 2008 daily, minus EXDATE 11 March.
    assert len(events) == 20
    assert events[0].timestamp == datetime(2008, 3, 3, tzinfo=UTC)  # all-day: 00:00 UTC
    assert datetime(2008, 3, 11, tzinfo=UTC) not in {e.timestamp for e in events}
    assert events[0].fields == {"duration_minutes": 1440.0, "all_day": True, "recurring": True,
                                "attendee_count": 0, "alarm_count": 0}
    (error,) = errors
    assert str(error) == (f"{ical / 'parsing_error.ics'}:19 [VEVENT #2]: property EXDATE: "
                          "Expected datetime, date, or time. Got: ''")


def test_x_location_sample_weekly_rule_across_dst(ical: Path) -> None:
    items = _items(ical / "x_location.ics")
    # Open-ended MO–FR rule from Fri 28 Oct 2016: 365-day horizon = 52 weeks × 5 + 1.
    assert len(items) == 261
    assert items[0].timestamp == datetime(2016, 10, 28, 12, 0, tzinfo=UTC)  # 14:00 CEST
    assert items[1].timestamp == datetime(2016, 10, 31, 13, 0, tzinfo=UTC)  # 14:00 CET
    assert items[0].fields["location"] == Text("Roadstar 16\n12764 Happyville\nDenmark")
    november = _items(ical / "x_location.ics", {
        "window_start": "2016-11-01T00:00:00Z", "window_end": "2016-12-01T00:00:00Z"})
    assert len(november) == 22  # weekdays in November 2016


def test_recurrence_exdate_rdate_override_and_fields() -> None:
    items = _items(FIX / "recurrence.ics")
    assert [i.timestamp for i in items] == [
        datetime(2024, 3, 11, 8, 0, tzinfo=UTC),   # 09:00 CET
        datetime(2024, 3, 30, 11, 0, tzinfo=UTC),  # RDATE 12:00 CET
        datetime(2024, 4, 1, 7, 0, tzinfo=UTC),    # 09:00 CEST after the switch
        datetime(2024, 4, 8, 7, 0, tzinfo=UTC),
        datetime(2024, 3, 25, 10, 0, tzinfo=UTC),  # the override, 11:00 CET
    ]  # 18 March is an EXDATE; the master's 25 March is replaced by the override
    master, moved = items[0], items[-1]
    assert master.fields == {"duration_minutes": 30.0, "all_day": False, "recurring": True,
                             "attendee_count": 3, "alarm_count": 1, "summary": Text("Team standup"),
                             "location": Text("Room 4"), "status": "tentative",
                             "organizer_domain": "example.com"}
    assert moved.fields["recurring"] is True and moved.fields["duration_minutes"] == 60.0


def test_all_day_and_floating_times_use_x_wr_timezone() -> None:
    holiday, breakfast = _items(FIX / "allday_floating.ics")
    assert holiday.timestamp == datetime(2024, 4, 28, 15, 0, tzinfo=UTC)  # 00:00 JST
    assert holiday.fields["all_day"] is True and holiday.fields["duration_minutes"] == 3 * 1440.0
    assert breakfast.timestamp == datetime(2024, 5, 31, 23, 0, tzinfo=UTC)  # 08:00 JST
    assert breakfast.fields["duration_minutes"] == 90.0 and breakfast.fields["status"] == "cancelled"
    # params timezone wins over X-WR-TIMEZONE
    _, paris = _items(FIX / "allday_floating.ics", {"timezone": "Europe/Paris"})
    assert paris.timestamp == datetime(2024, 6, 1, 6, 0, tzinfo=UTC)


def test_floating_time_without_any_zone_is_a_bad_record() -> None:
    error, lunch = _items(FIX / "floating_no_zone.ics")
    assert str(error) == (f"{FIX / 'floating_no_zone.ics'}:4 [VEVENT #1 UID floating@example.com]: "
                          "property DTSTART: floating time (no TZID, no Z) and no timezone; "
                          "set params timezone or X-WR-TIMEZONE")
    assert lunch.timestamp == datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
    fixed = _items(FIX / "floating_no_zone.ics", {"timezone": "UTC"})
    assert fixed[0].timestamp == datetime(2024, 6, 1, 8, 0, tzinfo=UTC)


def test_open_ended_rule_bounds() -> None:
    default = _items(FIX / "open_ended.ics")
    assert len(default) == 365  # horizon_days
    assert default[-1].timestamp == datetime(2023, 12, 31, 7, 0, tzinfo=UTC)
    assert len(_items(FIX / "open_ended.ics", {"horizon_days": 10})) == 10
    assert len(_items(FIX / "open_ended.ics", {"max_occurrences": 7})) == 7
    window = _items(FIX / "open_ended.ics", {"window_start": "2024-02-27T00:00:00Z",
                                             "window_end": "2024-03-02T00:00:00+00:00"})
    assert [w.timestamp.date().isoformat() for w in window] == [
        "2024-02-27", "2024-02-28", "2024-02-29", "2024-03-01"]


def test_unknown_tzid_missing_start_and_backwards_end() -> None:
    items = _items(FIX / "unknown_tzid.ics")
    assert reject_reasons(items, FIX / "unknown_tzid.ics") == [
        ":4 [VEVENT #1 UID mystery@example.com]: property DTSTART: unknown TZID "
        "'Atlantis/Capital' (no VTIMEZONE in the file and not an IANA name)",
        ":10 [VEVENT #2 UID nostart@example.com]: property DTSTART: missing",
        ":14 [VEVENT #3 UID backwards@example.com]: property DTEND: before DTSTART",
    ]


def test_unsplittable_content_line_and_non_calendar() -> None:
    (error,) = _items(FIX / "bad_content_line.ics")
    assert error.line == 5 and "this line has no colon" in error.reason
    assert parse_failure(IcalImporter(), FIX / "not_ical.ics") == (
        f"{FIX / 'not_ical.ics'}:1: not an iCalendar file: it does not start with BEGIN:VCALENDAR"
    )


def test_params_are_validated() -> None:
    with pytest.raises(PluginError, match="UTC offset"):
        IcalImporter({"window_start": "2024-01-01T00:00:00"})
    with pytest.raises(PluginError, match="before window_end"):
        IcalImporter({"window_start": "2024-02-01T00:00:00Z", "window_end": "2024-01-01T00:00:00Z"})
    with pytest.raises(PluginError, match="max_occurrences"):
        IcalImporter({"max_occurrences": 0})
    with pytest.raises(PluginError, match="unknown timezone"):
        IcalImporter({"timezone": "Nowhere/Land"})


def test_detect_scores(ical: Path) -> None:
    importer = IcalImporter()
    for name in ("alarm_google_future.ics", "alarm_thunderbird_future.ics",
                 "issue_165_missing_event.ics", "parsing_error.ics", "x_location.ics"):
        assert importer.detect(ical / name) == 0.95
    assert importer.detect(FIX / "not_ical.ics") == 0.3


def test_store_broken_sample_rolls_back_or_skips(ical: Path, tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    importer = IcalImporter()
    _, _, report = check_store_round_trip(
        store,
        importer,
        ical / "issue_165_missing_event.ics",
        14,
        ical / "parsing_error.ics",
        r"parsing_error.ics:19 \[VEVENT #2\]: property EXDATE",
        (20, 1),
    )
    assert store.count() == 34
    assert report.errors[0].record == "VEVENT #2"
    first = min(e.timestamp for e in store.events(source="ical") if e.fields["all_day"])
    assert first == datetime(2008, 3, 3, tzinfo=UTC)
    assert store.count() == 34
    store.close()


def test_occurrence_count_cap_applies_per_series() -> None:
    capped = _items(FIX / "recurrence.ics", {"max_occurrences": 2})
    # The master series is cut after 2 occurrences; the override is its own series.
    assert [c.timestamp for c in capped] == [
        datetime(2024, 3, 11, 8, 0, tzinfo=UTC), datetime(2024, 3, 30, 11, 0, tzinfo=UTC),
        datetime(2024, 3, 25, 10, 0, tzinfo=UTC)]
    assert capped[1].timestamp - capped[0].timestamp == timedelta(days=19, hours=3)


def test_rdate_period_contributes_its_start(tmp_path: Path) -> None:
    path = tmp_path / "period.ics"
    path.write_text("BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nUID:p\r\nDTSTART:20240101T100000Z\r\n"
                    "DURATION:PT1H\r\nRDATE;VALUE=PERIOD:20240105T100000Z/PT2H\r\n"
                    "END:VEVENT\r\nEND:VCALENDAR\r\n", encoding="utf-8")
    first, extra = _items(path)
    assert first.timestamp == datetime(2024, 1, 1, 10, 0, tzinfo=UTC)
    assert extra.timestamp == datetime(2024, 1, 5, 10, 0, tzinfo=UTC)
    assert extra.fields["recurring"] is True and extra.fields["duration_minutes"] == 60.0
