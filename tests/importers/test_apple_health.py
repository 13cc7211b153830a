"""Apple Health importer: real sample, DTD fixture, refused entities, truncation, store round trip."""

from __future__ import annotations

import tracemalloc
from datetime import UTC, datetime
from pathlib import Path

import pytest

from anonml.errors import PluginError, RecordError
from anonml.model import Event
from anonml.store import EventStore
from importers.apple_health import AppleHealthImporter, snake_case
from tests.importers.helpers import parse_failure, reject_reasons

FIX = Path(__file__).parent / "fixtures" / "apple_health"


def _parse(path: Path, **params: object) -> list[Event | RecordError]:
    return list(AppleHealthImporter(params or None).parse(path))


def _by_type(items: list[Event | RecordError]) -> dict[str, list[Event]]:
    out: dict[str, list[Event]] = {}
    for item in items:
        assert isinstance(item, Event), item
        out.setdefault(item.type, []).append(item)
    return out


def test_real_sample_records_workout_summaries_and_me(samples_dir: Path) -> None:
    events = _by_type(_parse(samples_dir / "apple_health" / "export.xml"))
    assert {k: len(v) for k, v in events.items()} == {
        "me": 1,
        "body_mass_index": 1,
        "heart_rate": 1,
        "workout": 1,
        "activity_summary": 2,
    }
    (me,) = events["me"]
    assert me.timestamp is None
    assert me.fields == {"birth_year": 1990, "biological_sex": "male"}  # NotSet values omitted
    (hr,) = events["heart_rate"]
    assert hr.timestamp == datetime(2018, 9, 10, 9, 28, 55, tzinfo=UTC)  # 02:28:55 -0700
    assert hr.fields["value"] == 72.0 and hr.fields["unit"] == "count/min"
    assert hr.fields["device_name"] == "Apple Watch" and hr.fields["device_model"] == "Watch"
    assert hr.fields["created"] == datetime(2018, 9, 10, 9, 47, 35, tzinfo=UTC)
    (bmi,) = events["body_mass_index"]
    assert bmi.fields["value"] == 22.5312 and bmi.fields["was_user_entered"] is False
    (run,) = events["workout"]
    assert run.fields["activity"] == "running"
    assert run.fields["duration_s"] == pytest.approx(5.19412346680959 * 60)
    assert run.fields["distance_m"] == pytest.approx(0.4971749504535062 * 1609.344)
    assert run.fields["energy_kcal"] == pytest.approx(48.745)
    assert run.fields["time_zone"] == "America/Los_Angeles"
    first_day = events["activity_summary"][0]
    # No param: the one zone the export's HKTimeZone metadata states; local midnight, PST = UTC-8.
    assert first_day.timestamp == datetime(2016, 11, 15, 8, tzinfo=UTC)
    assert first_day.fields == {
        "assumed_tz": "America/Los_Angeles",
        "active_energy_kcal": 590.252,
        "active_energy_goal_kcal": 630.0,
        "exercise_min": 68.0,
        "exercise_goal_min": 30.0,
        "stand_hours": 13.0,
        "stand_hours_goal": 12.0,
    }


def test_activity_summary_day_uses_the_timezone_param_first(samples_dir: Path) -> None:
    items = _parse(samples_dir / "apple_health" / "export.xml", timezone="Asia/Tokyo")
    day = _by_type(items)["activity_summary"][0]
    assert day.timestamp == datetime(2016, 11, 14, 15, tzinfo=UTC)  # local midnight, JST = UTC+9
    assert day.fields["assumed_tz"] == "Asia/Tokyo"


def _without_time_zones(sample: Path, target: Path, *, zones: tuple[str, ...] = ()) -> Path:
    text = sample.read_text(encoding="utf-8")
    text = text.replace('<MetadataEntry key="HKTimeZone" value="America/Los_Angeles"/>', "".join(
        f'<MetadataEntry key="HKTimeZone" value="{z}"/>' for z in zones[:1]))
    if len(zones) > 1:  # a second workout stating another zone
        start = text.index("<Workout ")
        end = text.index("</Workout>") + len("</Workout>")
        text = text[:end] + text[start:end].replace(zones[0], zones[1]) + text[end:]
    target.write_text(text, encoding="utf-8")
    return target


@pytest.mark.parametrize(
    ("zones", "said"),
    [((), "its records name none"),
     (("Europe/Paris", "America/New_York"), "its records name 2 zones (America/New_York, Europe/Paris)")],
)
def test_summaries_are_refused_when_the_export_states_no_single_zone(
    tmp_path: Path, samples_dir: Path, zones: tuple[str, ...], said: str
) -> None:
    path = _without_time_zones(samples_dir / "apple_health" / "export.xml", tmp_path / "export.xml",
                               zones=zones)
    assert parse_failure(AppleHealthImporter(), path) == (
        f"{path}: ActivitySummary days are local dates and the export states no single zone ({said}); "
        "pass params timezone, an IANA name such as 'Europe/Paris'"
    )
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    with pytest.raises(RecordError, match="no single zone"):
        store.import_file(path, AppleHealthImporter(), skip_bad=True)  # refused, not skipped
    assert store.count() == 0
    days = _by_type(_parse(path, timezone="UTC"))["activity_summary"]
    assert [d.timestamp for d in days][0] == datetime(2016, 11, 15, tzinfo=UTC)


def test_declaration_and_internal_dtd_are_read(tmp_path: Path) -> None:
    events = _by_type(_parse(FIX / "with_dtd.xml"))
    assert sorted(events) == [
        "activity_summary",
        "body_mass",
        "me",
        "sleep_analysis",
        "step_count",
        "workout",
    ]  # the Correlation (blood pressure) is skipped
    assert events["me"][0].fields == {
        "birth_year": 1985,
        "biological_sex": "female",
        "blood_type": "a_positive",
    }
    sleep = events["sleep_analysis"][0]
    assert sleep.fields["category"] == "sleep_analysis_asleep_core"
    assert sleep.fields["time_zone"] == "Europe/Berlin"
    assert sleep.fields["duration_s"] == 7.25 * 3600
    assert events["body_mass"][0].fields["was_user_entered"] is True
    ride = events["workout"][0]
    assert ride.timestamp == datetime(2023, 2, 28, 17, tzinfo=UTC)
    assert ride.fields["duration_s"] == 42.5 * 60
    assert ride.fields["distance_m"] == pytest.approx(15200.0)  # WorkoutStatistics, km
    assert ride.fields["energy_kcal"] == pytest.approx(1046 / 4.184)  # kJ to kcal
    assert (ride.fields["heart_rate_avg"], ride.fields["heart_rate_max"]) == (131.5, 162.0)
    assert ride.fields["indoor"] is False
    assert events["activity_summary"][0].fields["active_energy_kcal"] == pytest.approx(500.0)


def test_external_entity_is_refused_before_parsing() -> None:
    assert parse_failure(AppleHealthImporter(), FIX / "external_entity.xml") == (
        f"{FIX / 'external_entity.xml'}:4: external entity 'secret' (file:///etc/hostname) refused"
    )


def test_external_dtd_is_refused() -> None:
    assert parse_failure(AppleHealthImporter(), FIX / "external_dtd.xml") == (
        f"{FIX / 'external_dtd.xml'}:2: external DTD 'http://example.invalid/healthdata.dtd' refused"
    )


def test_entity_expansion_bomb_is_stopped_by_expat() -> None:
    items = _parse(FIX / "billion_laughs.xml")
    assert len(items) == 1 and isinstance(items[0], RecordError)
    assert "amplification" in items[0].reason and items[0].line == 15


def test_truncated_export_keeps_what_was_read_and_reports_the_break() -> None:
    items = _parse(FIX / "truncated.xml")
    assert [e.fields["value"] for e in items[:2]] == [10.0, 20.0]  # type: ignore[union-attr]
    assert str(items[2]) == (
        f"{FIX / 'truncated.xml'}:5: XML syntax error at column 2: unclosed token; parsing stopped"
    )


def test_bad_elements_are_yielded_by_tag_and_index() -> None:
    items = _parse(FIX / "bad_records.xml", timezone="UTC")
    assert reject_reasons(items, FIX / "bad_records.xml", events=1) == [
        " [Record[1]]: startDate: '28/02/2023 08:11' is not 'YYYY-MM-DD HH:MM:SS ±HHMM'",
        " [Record[2]]: value: 'NaN' is not finite",
        " [Workout[0]]: totalDistanceUnit: unknown unit 'furlong' (known: m, cm, km, mi, ft, yd)",
        " [Record[3]]: missing attribute type",
        " [ActivitySummary[0]]: dateComponents: '2023-02-30' is not 'YYYY-MM-DD'",
    ]


def test_other_documents_raise(samples_dir: Path) -> None:
    with pytest.raises(RecordError, match=r"root element is <ClinicalDocument>, expected <HealthData>"):
        _parse(FIX / "export_cda.xml")
    with pytest.raises(RecordError, match="not an XML document: syntax error"):
        _parse(samples_dir / "fitbit" / "sleep.json")


def test_detect(samples_dir: Path) -> None:
    imp = AppleHealthImporter()
    assert imp.detect(samples_dir / "apple_health" / "export.xml") == 0.95
    assert imp.detect(FIX / "with_dtd.xml") == 0.9
    assert imp.detect(FIX / "export_cda.xml") == 0.0
    assert imp.detect(FIX) == 0.0


def test_snake_case_of_identifiers() -> None:
    assert snake_case("HKQuantityTypeIdentifierHeartRateVariabilitySDNN") == ("heart_rate_variability_sdnn")
    assert snake_case("HKQuantityTypeIdentifierVO2Max") == "vo2_max"
    assert snake_case("HKDataTypeSleepDurationGoal") == "sleep_duration_goal"
    assert snake_case("HKWorkoutActivityTypeHighIntensityIntervalTraining", "HKWorkoutActivityType") == (
        "high_intensity_interval_training"
    )


def test_unknown_timezone_is_a_params_error() -> None:
    with pytest.raises(PluginError, match="timezone"):
        AppleHealthImporter({"timezone": "Mars/Olympus"})


def test_memory_does_not_grow_with_the_number_of_records(tmp_path: Path) -> None:
    # 10,000 records with metadata (~2.4 MB of XML). Keeping the parsed elements
    # would hold about 12 MB of Python objects; clearing each finished
    # top-level element keeps the peak to the parser's buffers (< 3 MB).
    big = tmp_path / "export.xml"
    record = (
        ' <Record type="HKQuantityTypeIdentifierStepCount" sourceName="Phone" unit="count" '
        'startDate="2023-02-28 08:01:00 +0100" endDate="2023-02-28 08:11:00 +0100" value="{}">'
        '<MetadataEntry key="HKWasUserEntered" value="0"/></Record>\n'
    )
    with open(big, "w") as fh:
        fh.write('<HealthData locale="en_US">\n')
        for i in range(10_000):
            fh.write(record.format(i))
        fh.write("</HealthData>\n")
    tracemalloc.start()
    try:
        count = sum(1 for _ in AppleHealthImporter().parse(big))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 10_000
    assert peak < 3 * 2**20, f"peak traced memory {peak / 2**20:.1f} MiB"


def test_store_round_trip_reimport_rollback_and_skip_bad(tmp_path: Path, samples_dir: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    imp = AppleHealthImporter({"timezone": "UTC"})
    first = store.import_file(samples_dir / "apple_health" / "export.xml", imp)
    assert first.inserted == 6
    assert store.import_file(samples_dir / "apple_health" / "export.xml", imp).inserted == 0
    with pytest.raises(RecordError, match=r"\[Record\[1\]\]: startDate"):
        store.import_file(FIX / "bad_records.xml", imp)
    assert store.count() == 6
    report = store.import_file(FIX / "bad_records.xml", imp, skip_bad=True)
    assert (report.inserted, report.rejected) == (1, 5)
    assert store.count(source="apple_health", type="step_count") == 1
