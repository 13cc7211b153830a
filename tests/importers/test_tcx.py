"""TCX importer: a real Garmin Connect export against a DOM parse, bad records, courses, store."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from xml.dom import minidom

from anonml.errors import RecordError
from anonml.model import Event
from anonml.store import EventStore
from importers.tcx import TcxImporter
from tests.importers.helpers import (
    check_detect,
    check_store_round_trip,
    only_events,
    parse_failure,
    reject_reasons,
)

SAMPLE = Path(__file__).parent / "samples" / "tcx" / "sup_activity_1.tcx"
FIX = Path(__file__).parent / "fixtures" / "tcx"
TCX = "http://www.garmin.com/xmlschemas/TrainingCenterDatabase/v2"
EXT = "http://www.garmin.com/xmlschemas/ActivityExtension/v2"


def _parse(path: Path) -> list[Event | RecordError]:
    return list(TcxImporter().parse(path))


def _text(elem: minidom.Element, namespace: str, name: str) -> str | None:
    found = elem.getElementsByTagNameNS(namespace, name)
    return found[0].firstChild.data if found else None  # type: ignore[union-attr]


def _utc(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def test_real_export_matches_a_dom_parse() -> None:
    events = only_events(_parse(SAMPLE))
    dom = minidom.parse(str(SAMPLE))
    trackpoints = dom.getElementsByTagNameNS(TCX, "Trackpoint")
    points = [e for e in events if e.type == "track_point"]
    assert len(points) == trackpoints.length == 111
    for event, elem in zip(points, trackpoints, strict=True):
        expected: dict[str, object] = {"sport": "other"}
        for name, tag, kind in (
            ("lat", "LatitudeDegrees", float), ("lon", "LongitudeDegrees", float),
            ("elevation_m", "AltitudeMeters", float), ("distance_m", "DistanceMeters", float),
            ("heart_rate", "Value", int), ("speed_mps", "Speed", float),
        ):
            raw = _text(elem, EXT if tag == "Speed" else TCX, tag)
            if raw is not None:
                expected[name] = kind(raw)
        assert event.timestamp == _utc(_text(elem, TCX, "Time"))  # type: ignore[arg-type]
        assert event.fields == expected
    laps = dom.getElementsByTagNameNS(TCX, "Lap")
    assert [(e.timestamp, e.fields["duration_s"], e.fields["distance_m"], e.fields["calories"])
            for e in events if e.type == "lap"] == [
        (_utc(lap.getAttribute("StartTime")), float(_text(lap, TCX, "TotalTimeSeconds")),
         float(_text(lap, TCX, "DistanceMeters")), int(_text(lap, TCX, "Calories")))
        for lap in laps
    ]
    (activity,) = [e for e in events if e.type == "activity"]
    assert activity.timestamp == datetime(2022, 7, 16, 16, 8, 25, tzinfo=UTC)
    assert activity.fields == {
        "sport": "other", "laps": 2, "duration_s": 1112.335, "distance_m": 1157.51, "calories": 92,
        "device": "vívoactive HR",
    }


def test_bad_records_are_reported_and_courses_are_not_read() -> None:
    items = _parse(FIX / "bad_records.tcx")
    assert reject_reasons([i for i in items if isinstance(i, RecordError)], FIX / "bad_records.tcx") == [
        ":14 [Trackpoint[1]]: Time: '2024-05-01T17:00:01' is not an ISO 8601 time with an offset",
        ":15 [Trackpoint[2]]: HeartRateBpm: 'fast' is not a number",
        ":16 [Trackpoint[3]]: Position: a latitude without a longitude or the reverse",
        ":21 [Lap[1]]: TotalTimeSeconds: '-5' is outside [0, inf]",
    ]
    first, last, lap, second_lap, activity = [i for i in items if isinstance(i, Event)]
    assert first.fields == {"speed_mps": 8.5, "power_w": 210.0, "cadence": 90, "sport": "biking"}
    assert last.fields == {"cadence": 88, "sport": "biking"}  # RunCadence of the TPX extension
    assert (lap.fields["intensity"], lap.fields["trigger"]) == ("active", "distance")
    assert second_lap.fields["lap"] == 2  # its index counts the bad lap before it
    assert activity.fields == {
        "sport": "biking", "laps": 2, "duration_s": 660.0, "distance_m": 4500.0, "calories": 100
    }  # the bad lap is left out; the course's trackpoint (year 2000) is not an event
    assert all(e.timestamp.year == 2024 for e in (first, last, lap, second_lap, activity))  # type: ignore[union-attr]


def test_other_documents_are_refused(tmp_path: Path) -> None:
    gpx = Path(__file__).parent / "samples" / "gpx" / "around-visnjan-with-car.gpx"
    assert parse_failure(TcxImporter(), gpx) == f"{gpx}:1: not a TCX file: root element is <gpx>"
    empty = tmp_path / "empty.tcx"
    empty.write_bytes(b"")
    assert parse_failure(TcxImporter(), empty) == f"{empty}:1: not a TCX file: no element found"


def test_detect(tmp_path: Path) -> None:
    gpx = Path(__file__).parent / "samples" / "gpx" / "around-visnjan-with-car.gpx"
    check_detect(TcxImporter(), SAMPLE, tmp_path, "activity.xml", [gpx])


def test_store_round_trip_reimport_rollback_and_skip_bad(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    check_store_round_trip(
        store, TcxImporter(), SAMPLE, 114, FIX / "bad_records.tcx", r":14 \[Trackpoint\[1\]\]", (5, 4)
    )
