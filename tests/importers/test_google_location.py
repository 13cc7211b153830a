"""google_location: every document shape, the streaming reader, errors, and a real store."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from anonml.errors import RecordError
from anonml.model import Event, Text
from anonml.store import EventStore
from importers.google_location import GoogleLocationImporter
from tests.importers.helpers import check_store_round_trip, parse_failure, reject_reasons

FIX = Path(__file__).parent / "fixtures" / "google_location"


def _split(path: Path) -> tuple[list[Event], list[RecordError]]:
    items = list(GoogleLocationImporter().parse(path))
    return ([i for i in items if isinstance(i, Event)],
            [i for i in items if isinstance(i, RecordError)])


@pytest.fixture()
def legacy(samples_dir: Path) -> Path:
    return samples_dir / "google_takeout" / "Takeout" / "Location History" / "Location History.json"


def test_legacy_sample_points_and_activity(legacy: Path) -> None:
    events, errors = _split(legacy)
    assert errors == []
    assert [e.type for e in events] == ["location", "location", "activity"]
    first = events[0]
    assert first.timestamp == datetime(2015, 7, 18, 23, 57, 26, 12000, tzinfo=UTC)
    assert first.fields == {"lat": 37.6955289, "lng": -121.9287261, "accuracy_m": 45.0}
    act = events[2]
    assert act.timestamp == datetime(2015, 7, 18, 23, 58, 2, 66000, tzinfo=UTC)
    # UNKNOWN appears twice (40 and 21): the maximum is kept, and it is the top type.
    assert act.fields["activity"] == "unknown" and act.fields["confidence"] == 40.0
    assert act.fields["confidence_unknown"] == 40.0
    assert act.fields["confidence_in_vehicle"] == 25.0
    assert act.fields["confidence_still"] == 14.0


def test_records_sample(samples_dir: Path) -> None:
    events, errors = _split(samples_dir / "google_location" / "records.json")
    assert errors == []
    locations = [e for e in events if e.type == "location"]
    activities = [e for e in events if e.type == "activity"]
    assert len(locations) == 12
    assert len(activities) == 17  # activity records nested in 8 of the 12 points
    assert locations[0].timestamp == datetime(2015, 10, 10, 18, 47, 2, 597000, tzinfo=UTC)
    assert locations[0].fields == {"lat": 43.7789954, "lng": -79.4176419, "accuracy_m": 30.0,
                                   "source": "WIFI", "device": "1433424142"}
    assert locations[6].fields["device_designation"] == "UNKNOWN"
    assert activities[0].fields["activity"] == "unknown"
    assert activities[0].timestamp == datetime(2015, 10, 10, 18, 47, 31, 321000, tzinfo=UTC)


def test_device_timeline_sample(samples_dir: Path) -> None:
    events, errors = _split(samples_dir / "google_location" / "device-timeline.json")
    assert errors == []
    kinds = [e.type for e in events]
    assert kinds.count("place_visit") == 2
    assert kinds.count("path_point") == 10
    assert kinds.count("location") == 2
    assert kinds.count("activity") == 2
    assert kinds.count("frequent_place") == 5
    visit = events[0]
    assert visit.type == "place_visit"
    assert visit.timestamp == datetime(2023, 10, 1, 8, 0, tzinfo=UTC)
    assert visit.fields["lat"] == 40.712776 and visit.fields["lng"] == -74.005974
    assert visit.fields["semantic_type"] == "INFERRED_WORK"
    assert visit.fields["probability"] == 0.95 and visit.fields["visit_probability"] == 0.85
    assert visit.fields["duration_minutes"] == 60.0
    assert visit.fields["utc_offset_minutes"] == 0
    raw = [e for e in events if e.type == "location"][1]
    assert raw.fields == {"lat": 40.713776, "lng": -74.006974, "accuracy_m": 6.0,
                          "altitude_m": 11.0, "speed_mps": 2.0, "source": "GPS"}
    walking = [e for e in events if e.type == "activity"][0]
    assert walking.fields["activity"] == "walking" and walking.fields["confidence"] == 0.9
    home = [e for e in events if e.type == "frequent_place"][1]
    assert home.timestamp is None and home.fields["label"] == "HOME"


def test_timeline_edits_sample_place_aggregates(samples_dir: Path) -> None:
    events, errors = _split(samples_dir / "google_location" / "timeline-edits.json")
    assert errors == []
    assert len(events) == 9 and {e.type for e in events} == {"place_aggregate"}
    top = events[1]
    assert top.timestamp == datetime(2023, 12, 13, 8, 1, 15, tzinfo=UTC)
    assert top.fields["place_id"] == "ChIJV8SII64E1YkRvAqrnP5G_x8"
    assert top.fields["score"] == 862.0 and top.fields["rank"] == 1
    assert top.fields["lat"] == 43.9362443  # placePoint wins over point
    assert top.fields["window_hours"] == 2016


def test_legacy_fixture_optional_fields_and_e7_wrap() -> None:
    events, errors = _split(FIX / "legacy_full.json")
    assert errors == []
    assert events[0].fields == {"lat": 51.5074, "lng": -0.1278, "accuracy_m": 12.0,
                                "altitude_m": 35.0, "velocity_mps": 4.0, "heading_deg": 270.0,
                                "vertical_accuracy_m": 3.0}
    # Ties on confidence keep the first listed type.
    assert events[1].fields["activity"] == "on_foot"
    # Unsigned-wrapped E7 values (old export bug) are unwrapped by subtracting 2**32.
    assert events[2].fields["lat"] == pytest.approx(-0.09)
    assert events[2].fields["lng"] == pytest.approx(-0.1)


def test_records_bad_fixture_errors_name_line_and_record() -> None:
    events, errors = _split(FIX / "records_bad.json")
    assert len(events) == 2
    assert reject_reasons(errors, FIX / "records_bad.json") == [
        ":8 [locations[1]]: missing field 'latitudeE7'",
        ":12 [locations[2]]: timestamp: timestamp "
        "'2015-10-10 18:49:04' has no UTC offset and no timezone was given",
    ]
    assert events[1].fields["battery_charging"] is False
    assert events[1].fields["platform"] == "ANDROID"


def test_semantic_history_2015_shape_takes_the_mode_from_the_ranked_activities() -> None:
    events, errors = _split(FIX / "2015_MARCH.json")
    assert errors == []
    bus, walk, visit = events
    assert bus.type == walk.type == "activity_segment" and visit.type == "place_visit"
    assert bus.timestamp == datetime(2015, 3, 1, 8, 0, tzinfo=UTC)
    assert bus.fields == {
        "duration_minutes": 30.0, "end": datetime(2015, 3, 1, 8, 30, tzinfo=UTC),
        "start_lat": 51.5074, "start_lng": -0.1278, "end_lat": 51.52, "end_lng": -0.1,
        "activity_type": "in_bus", "activity_probability": 81.25, "confidence": "medium",
        "distance_m": 2410.0,
    }
    assert (walk.fields["activity_type"], walk.fields["activity_probability"]) == ("walking", 97.0)


def test_semantic_history_fixture() -> None:
    events, errors = _split(FIX / "2021_AUGUST.json")
    seg, work, home = events
    assert seg.type == "activity_segment"
    assert seg.fields == {
        "duration_minutes": 15.5, "end": datetime(2021, 8, 1, 7, 45, 30, tzinfo=UTC),
        "start_lat": 47.4, "start_lng": 8.5, "end_lat": 47.38, "end_lng": 8.54,
        "activity_type": "in_passenger_vehicle", "confidence": "high", "distance_m": 3200.0,
        "waypoint_count": 2,
    }
    assert work.fields["name"] == Text("Zürich HB") and isinstance(work.fields["name"], Text)
    assert isinstance(work.fields["address"], Text)
    assert work.fields["place_confidence"] == "HIGH_CONFIDENCE"
    assert work.fields["duration_minutes"] == 510.0
    # The older spelling: string epoch milliseconds.
    assert home.timestamp == datetime(2021, 8, 1, 17, 15, 30, tzinfo=UTC)
    assert [e.record for e in errors] == ["timelineObjects[3]", "timelineObjects[4]"]
    assert errors[0].reason == "end 2021-08-02T09:00:00+00:00 is before start 2021-08-02T10:00:00+00:00"
    assert errors[1].reason == "neither placeVisit nor activitySegment (keys: ['transitPath'])"


def test_android_timeline_fixture_offsets_trips_and_bad_signals() -> None:
    events, errors = _split(FIX / "timeline_android.json")
    kinds = [e.type for e in events]
    assert kinds == ["activity_segment", "trip", "wifi_scan", "frequent_place", "travel_mode_affinity"]
    seg = events[0]
    assert seg.timestamp == datetime(2024, 3, 1, 7, 0, tzinfo=UTC)  # +01:00 honoured
    assert seg.fields["activity_type"] == "in_bus" and seg.fields["distance_m"] == 1850.5
    assert seg.fields["utc_offset_minutes"] == 60
    assert events[1].fields == {"duration_minutes": 2880.0, "destination_count": 2,
                                "distance_from_origin_km": 250.0}
    assert events[2].fields == {"device_count": 3}
    assert [(e.line, e.record) for e in errors] == [
        (24, "semanticSegments[2]"), (28, "semanticSegments[3]"), (37, "rawSignals[1]"),
        (38, "rawSignals[2]"), (40, "userLocationProfile.persona.travelModeAffinities[1]"),
    ]
    assert "has no UTC offset" in errors[1].reason
    assert errors[2].reason == "position.LatLng: '95.0°, 13.4°' is outside the globe"


def test_ios_timeline_array_with_geo_strings() -> None:
    importer = GoogleLocationImporter()
    assert importer.detect(FIX / "timeline_ios.json") == 0.85
    events, errors = _split(FIX / "timeline_ios.json")
    assert errors == []
    visit, walk, p1, p2 = events
    assert visit.fields["place_id"] == "ChIJios" and visit.fields["probability"] == 0.88
    assert visit.fields["hierarchy_level"] == 0
    assert walk.fields["distance_m"] == 1093.8 and walk.fields["activity_type"] == "walking"
    # Path points are offsets in minutes from the segment start (10:00+02:00).
    assert p1.timestamp == datetime(2024, 5, 1, 8, 10, tzinfo=UTC)
    assert p2.timestamp == datetime(2024, 5, 1, 8, 40, tzinfo=UTC)
    assert p2.fields == {"lat": 47.37, "lng": 8.545}


def test_timeline_edits_unsupported_kind_is_refused_not_dropped() -> None:
    events, errors = _split(FIX / "timeline_edits_mixed.json")
    assert [e.type for e in events] == ["place_aggregate", "location"]
    assert events[1].fields["accuracy_m"] == 15.0  # millimetres → metres
    assert len(errors) == 1
    assert errors[0].reason == ("unsupported timeline edit (keys: ['deletion', 'deviceId']); "
                                "only placeAggregates and rawSignal positions are imported")


def test_not_location_and_broken_json_raise() -> None:
    importer = GoogleLocationImporter()
    with pytest.raises(RecordError, match="not a Google location history file"):
        list(importer.parse(FIX / "not_location.json"))
    assert parse_failure(importer, FIX / "broken_syntax.json") == (
        f"{FIX / 'broken_syntax.json'}:4: invalid JSON: Expecting ',' delimiter"
    )


def test_detect_scores(samples_dir: Path, legacy: Path) -> None:
    importer = GoogleLocationImporter()
    assert importer.detect(legacy) == 0.95
    assert importer.detect(samples_dir / "google_location" / "records.json") == 0.95
    assert importer.detect(samples_dir / "google_location" / "device-timeline.json") == 0.95
    assert importer.detect(samples_dir / "google_location" / "timeline-edits.json") == 0.9
    assert importer.detect(FIX / "not_location.json") == 0.0


def test_store_import_reimport_rollback_and_skip_bad(legacy: Path, tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    importer = GoogleLocationImporter()
    first, again, skipped = check_store_round_trip(  # the bad file rolls back: the store unchanged
        store,
        importer,
        legacy,
        3,
        FIX / "records_bad.json",
        r"records_bad.json:8 \[locations\[1\]\]: missing field",
        (2, 2),
    )
    assert (first.accepted, first.rejected) == (3, 0) and again.duplicate == 3
    assert [e.record for e in skipped.errors] == ["locations[1]", "locations[2]"]
    assert store.count(source="google_location") == 5
    store.close()
