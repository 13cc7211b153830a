"""Fitbit importer: real sample files, date-suffixed names, timezone rule, bad items, store."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from anonml.errors import PluginError, RecordError
from anonml.model import Event
from anonml.store import EventStore
from importers.fitbit import FitbitImporter, fitbit_metric
from tests.importers.helpers import (
    check_store_round_trip,
    only_events,
    parse_failure,
    reject_reasons,
    rejects,
)

FIX = Path(__file__).parent / "fixtures" / "fitbit"


def _parse(path: Path, **params: object) -> list[Event | RecordError]:
    """Parse with ``timezone="UTC"`` unless given (``timezone=None``: no param at all)."""
    given = {"timezone": "UTC", **params}
    return list(FitbitImporter({k: v for k, v in given.items() if v is not None}).parse(path))


def _events(path: Path, **params: object) -> list[Event]:
    return only_events(_parse(path, **params))


@pytest.mark.parametrize(
    ("name", "metric"),
    [
        ("distance.json", "distance"),
        ("distance-2017-12-31.json", "distance"),
        ("exercise-100.json", "exercise"),
        ("time_in_heart_rate_zones-2018-01-02.json", "heart_rate_zones"),
        ("heart_rate_zones.json", "heart_rate_zones"),
        ("sleep-2018-02-01.json", "sleep"),
        ("sleep_score.csv", "sleep_score"),
        ("weight-2018-01-01.json", None),
        ("distance-2017-12-31.csv", None),
        ("My Activity.json", None),
    ],
)
def test_metric_comes_from_the_file_name(name: str, metric: str | None) -> None:
    assert fitbit_metric(Path(name)) == metric


def test_real_sample_counts(samples_dir: Path) -> None:
    counts = {p.name: len(_events(p)) for p in sorted((samples_dir / "fitbit").iterdir())}
    assert counts == {
        "distance.json": 5,
        "exercise.json": 3,
        "heart_rate_zones.json": 2,
        "lightly_active_minutes.json": 3,
        "moderately_active_minutes.json": 3,
        "resting_heart_rate.json": 2,
        "sedentary_minutes.json": 3,
        "sleep.json": 2,
        "sleep_score.csv": 2,
        "very_active_minutes.json": 3,
    }


def test_local_times_are_read_in_the_given_zone_and_say_so(samples_dir: Path) -> None:
    first = _events(samples_dir / "fitbit" / "distance.json")[0]
    assert first.type == "distance"
    assert first.timestamp == datetime(2017, 12, 31, 16, 42, tzinfo=UTC)
    assert first.fields == {"assumed_tz": "UTC", "value": 4110.0}


@pytest.mark.parametrize("name", ["distance.json", "sleep.json", "exercise.json"])
def test_local_times_without_a_zone_are_refused_not_read_as_utc(samples_dir: Path, name: str) -> None:
    path = samples_dir / "fitbit" / name
    assert parse_failure(FitbitImporter(), path) == (
        f"{path}: Fitbit times are local and this export states no zone (no Personal & Account/"
        "Profile.csv with a timezone beside it); pass params timezone, an IANA name such as 'Europe/Paris'"
    )


def test_sleep_scores_in_utc_need_no_zone(samples_dir: Path) -> None:
    assert len(_events(samples_dir / "fitbit" / "sleep_score.csv", timezone=None)) == 2


def _export_with_profile(samples_dir: Path, root: Path, zone: str) -> Path:
    """An account-archive layout: Personal & Account/Profile.csv beside Sleep/ and Physical Activity/."""
    (root / "Personal & Account").mkdir(parents=True)
    (root / "Personal & Account" / "Profile.csv").write_text(
        "id,full_name,first_name,last_name,display_name_setting,display_name,username,email_address,"
        "date_of_birth,child,country,state,city,timezone,locale,member_since\n"
        f"ABC123,A B,A,B,name,A.,null,null,1990-01-01,false,null,null,null,{zone},en_US,2016-05-01\n",
        encoding="utf-8",
    )
    (root / "Sleep").mkdir()
    shutil.copyfile(samples_dir / "fitbit" / "sleep.json", root / "Sleep" / "sleep-2018-02-01.json")
    return root / "Sleep" / "sleep-2018-02-01.json"


def test_the_zone_the_export_states_in_profile_csv_is_used(samples_dir: Path, tmp_path: Path) -> None:
    sleep = _export_with_profile(samples_dir, tmp_path / "MyFitbitData" / "Ann", "Europe/Paris")
    stages = _events(sleep, timezone=None)[0]
    assert stages.fields["assumed_tz"] == "Europe/Paris"
    assert stages.timestamp == datetime(2018, 2, 1, 21, 36, tzinfo=UTC)  # 22:36 CET
    # the param still wins over the export's own statement
    assert _events(sleep, timezone="UTC")[0].timestamp == datetime(2018, 2, 1, 22, 36, tzinfo=UTC)


def test_an_unknown_zone_in_profile_csv_is_named(samples_dir: Path, tmp_path: Path) -> None:
    sleep = _export_with_profile(samples_dir, tmp_path / "Ann", "Mars/Olympus")
    with pytest.raises(RecordError, match=r"Profile\.csv:2: timezone: unknown timezone 'Mars/Olympus'"):
        _parse(sleep, timezone=None)


def test_timezone_param_is_applied_with_daylight_saving() -> None:
    winter, _, summer = _events(FIX / "steps-2018-01-01.json", timezone="America/New_York")
    assert winter.timestamp == datetime(2018, 1, 1, 13, 0, tzinfo=UTC)  # EST, UTC-5
    assert summer.timestamp == datetime(2018, 7, 1, 12, 2, tzinfo=UTC)  # EDT, UTC-4
    assert summer.fields == {"assumed_tz": "America/New_York", "value": 112}


def test_heart_rate_timezone_overrides_for_heart_rate_only() -> None:
    params = {"timezone": "Europe/Paris", "heart_rate_timezone": "UTC"}
    beat = _events(FIX / "heart_rate-2018-01-02.json", **params)[0]
    assert beat.timestamp == datetime(2018, 1, 2, 7, 0, 5, tzinfo=UTC)
    assert beat.fields == {"assumed_tz": "UTC", "bpm": 61, "confidence": 2}
    step = _events(FIX / "steps-2018-01-01.json", **params)[0]
    assert step.timestamp == datetime(2018, 1, 1, 7, 0, tzinfo=UTC)  # Paris, UTC+1


def test_date_suffixed_and_plain_names_read_alike(samples_dir: Path, tmp_path: Path) -> None:
    for plain, suffixed in (
        ("sleep.json", "sleep-2018-02-01.json"),
        ("exercise.json", "exercise-0.json"),
        ("distance.json", "distance-2017-12-31.json"),
    ):
        copy = tmp_path / suffixed
        shutil.copyfile(samples_dir / "fitbit" / plain, copy)
        assert _events(copy) == _events(samples_dir / "fitbit" / plain)
    zones = _events(FIX / "time_in_heart_rate_zones-2018-01-02.json")
    assert zones == _events(samples_dir / "fitbit" / "heart_rate_zones.json")[:1]
    assert zones[0].fields["in_default_zone_1"] == 154.0
    assert zones[0].fields["below_default_zone_1"] == 1037.0


def test_sleep_fields(samples_dir: Path) -> None:
    stages, classic = _events(samples_dir / "fitbit" / "sleep.json")
    assert stages.timestamp == datetime(2018, 2, 1, 22, 36, tzinfo=UTC)
    assert stages.fields["end"] == datetime(2018, 2, 2, 6, 42, tzinfo=UTC)
    assert stages.fields["duration_s"] == 29160.0
    assert stages.fields["minutes_asleep"] == 452 and stages.fields["efficiency"] == 68
    assert (stages.fields["deep_minutes"], stages.fields["deep_count"]) == (137, 6)
    assert stages.fields["sleep_type"] == "stages" and stages.fields["main_sleep"] is True
    assert classic.fields["restless_minutes"] == 195 and "deep_minutes" not in classic.fields


def test_exercise_fields_normalise_units(samples_dir: Path) -> None:
    walk, _, run = _events(samples_dir / "fitbit" / "exercise.json")
    assert walk.timestamp == datetime(2018, 1, 1, 14, 25, 33, tzinfo=UTC)
    assert walk.fields["activity"] == "Walk" and walk.fields["duration_s"] == 1229.0
    assert walk.fields["very_active_minutes"] == 18 and walk.fields["sedentary_minutes"] == 0
    assert walk.fields["hr_fat_burn_minutes"] == 17
    assert "distance_km" not in walk.fields
    assert run.fields["distance_km"] == pytest.approx(2.087447 * 1.609344)
    assert run.fields["speed_kmh"] == pytest.approx(6.4339119863013705 * 1.609344)
    assert run.fields["pace_s_per_km"] == pytest.approx(559.5351642460862 / 1.609344)
    assert (run.fields["source_type"], run.fields["source_name"]) == ("tracker", "Charge 2")
    bike = _events(FIX / "exercise-100.json")[0]
    assert bike.fields["distance_km"] == 12.5 and bike.fields["has_gps"] is True


def test_resting_heart_rate_placeholder_days_are_dropped() -> None:
    (day,) = _events(FIX / "resting_heart_rate-2018-12-30.json")
    assert day.timestamp == datetime(2018, 12, 30, tzinfo=UTC)
    assert day.fields == {"assumed_tz": "UTC", "value": 59.5, "error": 6.75}


def test_sleep_score_csv_is_utc(samples_dir: Path) -> None:
    first, second = _events(samples_dir / "fitbit" / "sleep_score.csv", timezone="Asia/Tokyo")
    assert first.timestamp == datetime(2019, 8, 29, 6, 30, 30, tzinfo=UTC)
    assert first.fields == {
        "overall_score": 75,
        "composition_score": 18,
        "revitalization_score": 20,
        "duration_score": 37,
        "deep_sleep_minutes": 77,
        "resting_heart_rate": 59,
        "restlessness": 0.070093458,
    }
    assert second.fields["overall_score"] == 82


def test_bad_items_are_yielded_with_their_json_path() -> None:
    items = _parse(FIX / "steps-2018-01-02.json")
    assert [i.fields["value"] for i in items if isinstance(i, Event)] == [12, 9]
    assert reject_reasons(rejects(items), FIX / "steps-2018-01-02.json") == [
        " [$[1]]: dateTime: '2018-01-02 8am' is not 'MM/DD/YY HH:MM:SS'",
        " [$[2]]: value: 'lots' is not an integer",
        " [$[3]]: missing field 'dateTime'",
        " [$[4]]: item: expected an object, got str",
    ]


def test_bad_sleep_score_rows_name_their_line() -> None:
    items = _parse(FIX / "bad" / "sleep_score.csv", timezone="Europe/Berlin")
    assert reject_reasons(rejects(items), FIX / "bad" / "sleep_score.csv") == [
        ":3: timestamp: 'yesterday' is not an ISO 8601 time",
        ":4: overall_score: 'eighty' is not an integer",
    ]
    last = items[-1]
    assert isinstance(last, Event)
    assert last.timestamp == datetime(2019, 9, 1, 4, 0, tzinfo=UTC)  # no Z: Berlin summer time
    assert last.fields["assumed_tz"] == "Europe/Berlin" and "composition_score" not in last.fields


def test_files_that_are_not_fitbit_raise() -> None:
    assert parse_failure(FitbitImporter({"timezone": "UTC"}), FIX / "distance-2018-01-03.json") == (
        f"{FIX / 'distance-2018-01-03.json'}: not a Fitbit export file: expected a JSON array"
    )
    with pytest.raises(RecordError, match="the name is not a known metric"):
        _parse(FIX / "weight-2018-01-01.json")
    with pytest.raises(RecordError, match=r":1: not a Fitbit sleep_score.csv: missing columns"):
        _parse(FIX / "wrong_header" / "sleep_score.csv")


def test_empty_array_has_no_events() -> None:
    assert _parse(FIX / "calories-2018-01-02.json") == []


def test_detect(samples_dir: Path) -> None:
    imp = FitbitImporter()
    for path in (samples_dir / "fitbit").iterdir():
        assert imp.detect(path) == 0.95, path
    assert imp.detect(FIX / "exercise-100.json") == 0.95
    assert imp.detect(FIX / "calories-2018-01-02.json") == 0.4  # name only: an empty array
    assert imp.detect(FIX / "distance-2018-01-03.json") == 0.0
    assert imp.detect(FIX / "weight-2018-01-01.json") == 0.0
    assert imp.detect(FIX / "wrong_header" / "sleep_score.csv") == 0.0


def test_unknown_timezone_is_a_params_error() -> None:
    with pytest.raises(PluginError, match="unknown timezone"):
        FitbitImporter({"timezone": "Europe/Atlantis"})


def test_store_round_trip_reimport_rollback_and_skip_bad(tmp_path: Path, samples_dir: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    imp = FitbitImporter({"timezone": "Europe/London"})
    good, bad = samples_dir / "fitbit" / "sleep.json", FIX / "steps-2018-01-02.json"
    _, _, report = check_store_round_trip(store, imp, good, 2, bad, r"\[\$\[1\]\]: dateTime", (2, 4))
    assert [e.record for e in report.errors] == ["$[1]", "$[2]", "$[3]", "$[4]"]


@pytest.mark.parametrize(
    ("stamp", "expected"),
    [
        ("12/31/17 23:59:59", datetime(2017, 12, 31, 23, 59, 59, tzinfo=UTC)),
        ("02/29/20 00:00:00", datetime(2020, 2, 29, tzinfo=UTC)),
        ("13/01/18 00:00:00", None),
        ("02/30/18 00:00:00", None),
        ("01/01/18T00:00:00", None),
    ],
)
def test_fitbit_date_time_layout(tmp_path: Path, stamp: str, expected: datetime | None) -> None:
    path = tmp_path / "steps-2018-01-01.json"
    path.write_text(f'[{{"dateTime": "{stamp}", "value": "1"}}]')
    (item,) = _parse(path)
    if expected is None:
        assert str(item) == f"{path} [$[0]]: dateTime: '{stamp}' is not 'MM/DD/YY HH:MM:SS'"
    else:
        assert isinstance(item, Event) and item.timestamp == expected
