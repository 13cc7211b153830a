"""GPX importer: a real Garmin eTrex track against gpxpy's parse, bad points, hostile and truncated files."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from xml.etree import ElementTree

import gpxpy
import gpxpy.geo
import pytest

from anonml.errors import RecordError
from anonml.model import Event, Text
from anonml.store import EventStore
from importers.activity import EARTH_RADIUS_M
from importers.gpx import GpxImporter
from tests.importers.helpers import (
    check_detect,
    check_store_round_trip,
    only_events,
    parse_failure,
    reject_reasons,
)

SAMPLE = Path(__file__).parent / "samples" / "gpx" / "around-visnjan-with-car.gpx"
APPLE = Path(__file__).parent / "samples" / "gpx" / "route_2019-06-11_3.00pm.gpx"
GPX11 = "{http://www.topografix.com/GPX/1/1}"
FIX = Path(__file__).parent / "fixtures" / "gpx"


def _parse(path: Path, **params: object) -> list[Event | RecordError]:
    return list(GpxImporter(params or None).parse(path))


def test_real_track_matches_gpxpy_point_by_point() -> None:
    events = only_events(_parse(SAMPLE))
    reference = gpxpy.parse(SAMPLE.read_text(encoding="utf-8"))
    ((segment,),) = [track.segments for track in reference.tracks]
    points = [e for e in events if e.type == "track_point"]
    assert len(points) == len(segment.points) == 104
    assert [(e.timestamp, e.fields["lat"], e.fields["lon"], e.fields["elevation_m"]) for e in points] == [
        (p.time, p.latitude, p.longitude, p.elevation) for p in segment.points
    ]
    assert all(e.timestamp.tzinfo is UTC for e in points)  # type: ignore[union-attr]
    (activity,) = [e for e in events if e.type == "activity"]
    start, end = reference.get_time_bounds()
    assert activity.timestamp == start == datetime(2020, 12, 18, 6, 15, 50, tzinfo=UTC)
    assert activity.fields["end"] == end and activity.fields["duration_s"] == (end - start).total_seconds()
    assert activity.fields["name"] == Text(reference.tracks[0].name) == "2020-12-18 07:24:29"
    assert (activity.fields["points"], activity.fields["segments"]) == (104, 1)
    # gpxpy's haversine uses the equatorial radius; the formula is the same, so the sums agree exactly
    # once the radius is swapped.
    theirs = sum(
        gpxpy.geo.haversine_distance(a.latitude, a.longitude, b.latitude, b.longitude)
        for a, b in zip(segment.points, segment.points[1:], strict=False)
    )
    ours = theirs * EARTH_RADIUS_M / gpxpy.geo.EARTH_RADIUS
    assert activity.fields["distance_m"] == pytest.approx(ours, abs=1e-3)
    steps = [b.elevation - a.elevation for a, b in zip(segment.points, segment.points[1:], strict=False)]
    assert activity.fields["ascent_m"] == pytest.approx(sum(s for s in steps if s > 0), abs=1e-3)
    assert activity.fields["descent_m"] == pytest.approx(-sum(s for s in steps if s < 0), abs=1e-3)


def test_real_apple_health_route_matches_an_element_tree_reading() -> None:
    points = [e for e in only_events(_parse(APPLE)) if e.type == "track_point"]
    trkpts = list(ElementTree.parse(APPLE).getroot().iter(f"{GPX11}trkpt"))
    assert len(points) == len(trkpts) == 3
    for event, trkpt in zip(points, trkpts, strict=True):
        when = datetime.strptime(trkpt.findtext(f"{GPX11}time") or "", "%Y-%m-%dT%H:%M:%SZ")
        assert event.timestamp == when.replace(tzinfo=UTC)
        assert event.fields == {
            "lat": float(trkpt.get("lat") or "nan"),
            "lon": float(trkpt.get("lon") or "nan"),
            "elevation_m": float(trkpt.findtext(f"{GPX11}ele") or "nan"),
            "speed_mps": float(trkpt.findtext(f"{GPX11}extensions/{GPX11}speed") or "nan"),  # bare element
        }


def test_points_param_false_keeps_only_the_totals() -> None:
    events = only_events(_parse(SAMPLE, points=False))
    assert [e.type for e in events] == ["activity"] and events[0].fields["points"] == 104


def test_bad_points_are_reported_with_line_and_index_and_left_out_of_the_totals() -> None:
    items = _parse(FIX / "bad_points.gpx")
    events = [i for i in items if isinstance(i, Event)]
    assert reject_reasons([i for i in items if isinstance(i, RecordError)], FIX / "bad_points.gpx") == [
        ":5 [wpt[1]]: lat: 'north' is not a number",
        ":11 [trkpt[1]]: missing attribute lat",
        ":13 [trkpt[3]]: ele: 'high' is not a number",
        ":14 [trkpt[4]]: time: 'yesterday' is not an ISO 8601 time",
        ":15 [trkpt[5]]: hr: '12.5' is not a whole number",
        ":19 [trkpt[6]]: lat: '91' is outside [-90, 90]",
    ]
    spring, first, offset, activity = events
    assert spring.type == "waypoint" and spring.timestamp is None
    assert spring.fields == {"lat": 46.0, "lon": 14.5, "name": Text("Spring"), "symbol": "Drinking Water"}
    assert first.fields == {
        "lat": 46.0, "lon": 14.5, "elevation_m": 300.0, "heart_rate": 120, "cadence": 80, "sport": "cycling"
    }
    assert offset.timestamp == datetime(2024, 5, 1, 17, 0, 20, tzinfo=UTC)  # "+02:00" honoured
    assert activity.type == "activity" and activity.fields["points"] == 3  # two good, one untimed
    assert activity.fields["segments"] == 2 and activity.fields["sport"] == "cycling"
    assert activity.fields["duration_s"] == 20.0 and activity.fields["ascent_m"] == 5.0


def test_untimed_track_is_a_static_activity_and_routes_are_not_read() -> None:
    (activity,) = only_events(_parse(FIX / "route_only.gpx"))
    assert activity.type == "activity" and activity.timestamp is None
    assert activity.fields["points"] == 2 and "duration_s" not in activity.fields
    # 0.1° of longitude along 46° N: the haversine reduces to 2R·asin(cos φ·sin(Δλ/2))
    along = 2 * EARTH_RADIUS_M * math.asin(math.cos(math.radians(46)) * math.sin(math.radians(0.05)))
    assert activity.fields["distance_m"] == pytest.approx(along, abs=1e-3)


def test_truncated_file_yields_its_points_then_the_syntax_error() -> None:
    items = _parse(FIX / "truncated.gpx")
    assert [i.type for i in items if isinstance(i, Event)] == ["track_point"]
    assert reject_reasons(items, FIX / "truncated.gpx", events=1) == [
        ":5: XML syntax error at column 62: unclosed token; parsing stopped"
    ]


def test_entity_declarations_and_other_xml_are_refused() -> None:
    assert parse_failure(GpxImporter(), FIX / "entity.gpx") == (
        f"{FIX / 'entity.gpx'}:2: entity declaration 'a' refused (a GPX file declares none)"
    )
    tcx = Path(__file__).parent / "samples" / "tcx" / "sup_activity_1.tcx"
    assert parse_failure(GpxImporter(), tcx) == (
        f"{tcx}:8: not a GPX file: root element is <TrainingCenterDatabase>"  # where its start tag ends
    )


def test_detect(tmp_path: Path) -> None:
    tcx = Path(__file__).parent / "samples" / "tcx" / "sup_activity_1.tcx"
    check_detect(GpxImporter(), SAMPLE, tmp_path, "track.xml", [tcx])
    assert GpxImporter().detect(FIX / "route_only.gpx") == 0.95  # GPX 1.0 namespace


def test_store_round_trip_reimport_rollback_and_skip_bad(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    check_store_round_trip(
        store, GpxImporter(), SAMPLE, 105, FIX / "bad_points.gpx", r":5 \[wpt\[1\]\]: lat", (4, 6)
    )
