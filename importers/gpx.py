"""GPX activity files (Strava, Garmin Connect, Komoot, phone trackers): tracks, their points, waypoints.

Format
------
GPX 1.0 or 1.1 (``http://www.topografix.com/GPX/1/1``), one ``<gpx>`` root::

    <gpx version="1.1" creator="eTrex 20x" xmlns="http://www.topografix.com/GPX/1/1"
         xmlns:gpxtpx="http://www.garmin.com/xmlschemas/TrackPointExtension/v1">
      <wpt lat="45.27" lon="13.71"><ele>211</ele><time>2020-12-18T06:10:00Z</time><name>Start</name></wpt>
      <trk><name>Morning Run</name><type>running</type>
        <trkseg>
          <trkpt lat="45.2735188510" lon="13.7142099626"><ele>211.15</ele>
            <time>2020-12-18T06:15:50Z</time>
            <extensions><gpxtpx:TrackPointExtension><gpxtpx:hr>142</gpxtpx:hr>
              <gpxtpx:cad>86</gpxtpx:cad></gpxtpx:TrackPointExtension></extensions></trkpt>
        </trkseg></trk>
    </gpx>

Routes (``<rte>``, a planned path without times) are not read.

The file is streamed with :func:`importers.activity.iter_xml` rather than
read with gpxpy: gpxpy builds the whole document and fails it as a whole,
while an import must name each bad point by its line and keep the others
(``--skip-bad``). gpxpy, the field's library, is the independent reading the
tests compare against.

Timestamps and timezones
------------------------
``<time>`` is ISO 8601 and, per the GPX schema ("Date and time are in
Universal Coordinated Time (UTC), not local time"), a time without an offset
is UTC; a stated offset is honoured.

Events
------
``track_point`` (one per ``<trkpt>`` with a ``<time>``; untimed points count
in their track's totals only): ``lat``, ``lon``, ``elevation_m``, and from
the Garmin ``TrackPointExtension`` or a bare extension element ``hr`` →
``heart_rate``, ``cad`` → ``cadence``, ``atemp`` → ``temperature_c``,
``speed`` → ``speed_mps``, ``power`` → ``power_w``; ``sport`` from the
track's ``<type>``.

``activity`` (one per ``<trk>``), at its first point's time (a static event
when no point is timed): ``sport``, ``name`` (text), ``points``,
``segments``, ``distance_m`` (haversine over consecutive points of each
segment), ``ascent_m``/``descent_m`` (unsmoothed sums of elevation steps),
``duration_s`` and ``end`` (datetime), see
:class:`~importers.activity.TrackSums`.

``waypoint`` (one per ``<wpt>``), at its ``<time>`` or static: ``lat``,
``lon``, ``elevation_m``, ``name`` (text), ``symbol`` (category).

Errors
------
A point with a missing or out-of-range ``lat``/``lon``, or a bad time or
number, is yielded as ``RecordError(path, line, reason, record="trkpt[7]")``
(its start line and its 0-based index among the file's ``trkpt``) and left
out of its track's totals. A file whose root is not ``<gpx>``, or that
declares an entity or an external DTD, raises ``RecordError``; a syntax
error further on (a truncated file) is yielded with its line and ends the
parse.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from anonml.errors import RecordError
from anonml.model import Event, Text
from anonml.plugins import Importer, PluginParams
from anonml.readers import head, parse_timestamp
from importers.activity import TrackSums, XmlNode, iter_xml, number, whole

__all__ = ["GpxImporter", "point_fields"]

_ROOTS = frozenset({"gpx"})
_STARTS = frozenset({"trk", "trkseg"})
_KEEP = frozenset({"trk", "trkpt", "wpt", "rte"})
_OPEN_TAG = re.compile(r"<(?:\w+:)?gpx[\s>]")
_EXTENSIONS = (  # (extension element, field, parser)
    ("hr", "heart_rate", lambda t, n: whole(t, n, 300)),
    ("cad", "cadence", lambda t, n: whole(t, n, 400)),
    ("atemp", "temperature_c", lambda t, n: number(t, n, -90, 70)),
    ("speed", "speed_mps", lambda t, n: number(t, n, 0, 300)),
    ("power", "power_w", lambda t, n: number(t, n, 0, 5000)),
)


def _time(node: XmlNode) -> datetime | None:
    raw = node.text_of("time")
    if raw is None:
        return None
    try:
        return parse_timestamp(raw, assume_tz=UTC)
    except ValueError:
        raise ValueError(f"time: {raw!r} is not an ISO 8601 time") from None


def _read_point(
    path: Path, node: XmlNode, record: str
) -> tuple[dict[str, object], datetime | None] | RecordError:
    """A ``trkpt``'s or ``wpt``'s fields and time, or the bad record naming it (``record``: ``trkpt[3]``)."""
    try:
        return point_fields(node), _time(node)
    except ValueError as exc:
        return RecordError(path, node.line, str(exc), record=record)


def point_fields(node: XmlNode) -> dict[str, object]:
    """``lat``, ``lon``, ``elevation_m`` and the extension fields of a ``trkpt`` or ``wpt``.

    Raises ``ValueError`` naming the attribute or element that is missing or wrong.
    """
    fields: dict[str, object] = {}
    for attr, low, high in (("lat", -90.0, 90.0), ("lon", -180.0, 180.0)):
        value = number(node.attrs.get(attr), attr, low, high)
        if value is None:
            raise ValueError(f"missing attribute {attr}")
        fields[attr] = value
    elevation = number(node.text_of("ele"), "ele")
    if elevation is not None:
        fields["elevation_m"] = elevation
    extensions = node.child("extensions")
    if extensions is not None:
        for tag, name, parse in _EXTENSIONS:
            found = extensions.find(tag)
            value = parse(found.text.strip() or None, tag) if found is not None else None
            if value is not None:
                fields[name] = value
    return fields


class GpxImporter(Importer):
    """Tracks, track points and waypoints of a GPX file. See the module docstring."""

    name: ClassVar[str] = "gpx"
    version: ClassVar[str] = "1.0"
    description: ClassVar[str] = "GPX tracks (Strava, Garmin, phone apps): points, track totals, waypoints"
    patterns: ClassVar[tuple[str, ...]] = ("*.gpx",)

    class Params(PluginParams):
        """Options of the GPX importer."""

        points: bool = Field(
            default=True,
            description="one track_point event per timed point (false: only activity totals and waypoints)",
        )

    def detect(self, path: Path) -> float:
        """0.95 for a ``<gpx>`` root in the GPX namespace named ``*.gpx``, 0.9 under another name."""
        text = head(path)
        if _OPEN_TAG.search(text) is None or "topografix.com/GPX/1/" not in text:
            return 0.0
        return 0.95 if path.suffix.lower() == ".gpx" else 0.9

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        sums = TrackSums()
        track: XmlNode | None = None
        tracks = 0
        seen = {"trkpt": 0, "wpt": 0}  # points of each kind so far: a bad one is named by its index
        for item in iter_xml(path, _ROOTS, _STARTS, _KEEP, "GPX"):
            if isinstance(item, RecordError):
                yield item
                continue
            kind, node = item
            if kind == "start":
                if node.tag == "trk":
                    sums, track = TrackSums(), node
                else:
                    sums.new_segment()
            elif node.tag == "trk":
                yield self._activity(node, sums, tracks)
                tracks += 1
                track = None
            elif node.tag in seen:
                read = _read_point(path, node, f"{node.tag}[{seen[node.tag]}]")
                seen[node.tag] += 1
                if isinstance(read, RecordError):
                    yield read
                    continue
                fields, when = read
                if node.tag == "trkpt":
                    sums.add(fields["lat"], fields["lon"], fields.get("elevation_m"), when)  # type: ignore[arg-type]
                    sport = _sport(track)
                    if sport is not None:
                        fields["sport"] = sport
                    if when is not None and self.params.points:
                        yield Event(source=self.name, type="track_point", timestamp=when, fields=fields)
                else:
                    if node.text_of("name"):
                        fields["name"] = Text(node.text_of("name"))
                    if node.text_of("sym"):
                        fields["symbol"] = node.text_of("sym")
                    yield Event(source=self.name, type="waypoint", timestamp=when, fields=fields)

    def _activity(self, node: XmlNode, sums: TrackSums, index: int) -> Event:
        fields: dict[str, object] = {
            "track": index,
            "points": sums.points,
            "segments": sums.segments,
            "distance_m": round(sums.distance_m, 3),
            "ascent_m": round(sums.ascent_m, 3),
            "descent_m": round(sums.descent_m, 3),
        }
        if node.text_of("name"):
            fields["name"] = Text(node.text_of("name"))
        sport = _sport(node)
        if sport is not None:
            fields["sport"] = sport
        if sums.first is not None and sums.last is not None:
            fields["duration_s"] = (sums.last - sums.first).total_seconds()
            fields["end"] = sums.last
        return Event(source=self.name, type="activity", timestamp=sums.first, fields=fields)


def _sport(track: XmlNode | None) -> str | None:
    kind = track.text_of("type") if track is not None else None
    return kind.lower() if kind else None
