"""importers/activity.py: the haversine distance, track sums, number parsing and the streaming XML reader."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import pytest

from anonml.errors import RecordError
from importers.activity import EARTH_RADIUS_M, TrackSums, XmlNode, haversine_m, iter_xml, number, whole

ROOTS = frozenset({"gpx"})


def test_haversine_on_a_meridian_and_the_equator_is_the_arc_length() -> None:
    # along a great circle through the poles or along the equator, d = R·Δσ exactly
    assert haversine_m(10.0, 5.0, 11.0, 5.0) == pytest.approx(EARTH_RADIUS_M * math.pi / 180, rel=1e-12)
    assert haversine_m(0.0, 0.0, 0.0, 90.0) == pytest.approx(EARTH_RADIUS_M * math.pi / 2, rel=1e-12)
    assert haversine_m(45.0, 7.0, 45.0, 7.0) == 0.0
    antipodes = haversine_m(0.0, 0.0, 0.0, 180.0)
    assert antipodes == pytest.approx(EARTH_RADIUS_M * math.pi, rel=1e-12)


def test_track_sums_do_not_bridge_segments_and_split_climbs() -> None:
    sums = TrackSums()
    t0 = datetime(2024, 5, 1, 17, 0, tzinfo=UTC)
    sums.new_segment()
    sums.add(0.0, 0.0, 100.0, t0)
    sums.add(1.0, 0.0, 110.0, None)  # untimed: counted, no effect on the time range
    sums.new_segment()
    sums.add(50.0, 50.0, 90.0, t0.replace(minute=5))
    sums.add(51.0, 50.0, None, t0.replace(minute=1))  # no elevation: no climb step
    assert (sums.points, sums.segments) == (4, 2)
    assert sums.distance_m == pytest.approx(2 * EARTH_RADIUS_M * math.pi / 180, rel=1e-12)
    assert (sums.ascent_m, sums.descent_m) == (10.0, 0.0)  # the jump between segments is no descent
    assert (sums.first, sums.last) == (t0, t0.replace(minute=5))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x", "hr: 'x' is not a number"),
        ("nan", "hr: 'nan' is outside [0, 300]"),
        ("301", "hr: '301' is outside"),
    ],
)
def test_number_refuses_what_is_not_a_bounded_finite_number(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        number(text, "hr", 0, 300)


def test_whole_accepts_integral_decimals_only() -> None:
    assert (whole("142", "hr", 300), whole("142.0", "hr", 300), whole(None, "hr", 300)) == (142, 142, None)
    with pytest.raises(ValueError, match="not a whole number"):
        whole("142.5", "hr", 300)


def _items(path: Path) -> list[tuple[str, XmlNode] | RecordError]:
    return list(iter_xml(path, ROOTS, frozenset({"trk"}), frozenset({"trkpt"}), "GPX"))


def test_kept_elements_come_with_their_children_and_line_then_leave_their_parent(tmp_path: Path) -> None:
    path = tmp_path / "t.gpx"
    path.write_text('<gpx xmlns="http://www.topografix.com/GPX/1/1">\n<trk><name>a</name>\n'
                    '<trkpt lat="1" lon="2"><ele> 3 </ele></trkpt>\n<trkpt lat="4" lon="5"/></trk></gpx>\n')
    items = _items(path)
    (start, trk), (_, first), (_, second) = items  # type: ignore[misc]
    assert start == "start" and trk.tag == "trk"
    assert (first.line, first.attrs, first.text_of("ele")) == (3, {"lat": "1", "lon": "2"}, "3")
    assert second.line == 4 and second.children == []
    assert [c.tag for c in trk.children] == ["name"]  # the points were handed over, not kept


def test_external_dtd_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.gpx"
    path.write_text('<?xml version="1.0"?>\n<!DOCTYPE gpx SYSTEM "http://example.org/gpx.dtd">\n<gpx/>\n')
    with pytest.raises(RecordError, match="external DTD 'http://example.org/gpx.dtd' refused"):
        _items(path)
