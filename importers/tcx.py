"""TCX activity files (Garmin Training Center / Garmin Connect export): activities, laps, trackpoints.

Format
------
``<TrainingCenterDatabase>`` in the namespace
``http://www.garmin.com/xmlschemas/TrainingCenterDatabase/v2``::

    <Activities><Activity Sport="Running">
      <Id>2022-07-16T16:08:25.000Z</Id>
      <Lap StartTime="2022-07-16T16:08:25.000Z">
        <TotalTimeSeconds>966.796</TotalTimeSeconds><DistanceMeters>1000.0</DistanceMeters>
        <MaximumSpeed>1.41</MaximumSpeed><Calories>80</Calories>
        <AverageHeartRateBpm><Value>88</Value></AverageHeartRateBpm>
        <MaximumHeartRateBpm><Value>108</Value></MaximumHeartRateBpm>
        <Intensity>Active</Intensity><Cadence>80</Cadence><TriggerMethod>Manual</TriggerMethod>
        <Track><Trackpoint><Time>2022-07-16T16:08:25.000Z</Time>
          <Position><LatitudeDegrees>46.63</LatitudeDegrees><LongitudeDegrees>16.16</LongitudeDegrees></Position>
          <AltitudeMeters>178.9</AltitudeMeters><DistanceMeters>0.75</DistanceMeters>
          <HeartRateBpm><Value>62</Value></HeartRateBpm><Cadence>80</Cadence>
          <Extensions><ns3:TPX><ns3:Speed>0.268</ns3:Speed><ns3:Watts>210</ns3:Watts></ns3:TPX></Extensions>
        </Trackpoint></Track>
      </Lap>
      <Creator><Name>vívoactive HR</Name>...</Creator>
    </Activity></Activities>

Courses and workouts (planned, untimed) are not read.

Timestamps and timezones
------------------------
``Id``, ``StartTime`` and ``Time`` are ISO 8601 ``xsd:dateTime``; Garmin
writes them in UTC with ``Z``. A time without an offset is refused (the
schema does not say which zone it would be in).

Events
------
``track_point`` (one per ``Trackpoint``): ``lat``, ``lon`` (absent indoors),
``elevation_m``, ``distance_m``, ``heart_rate``, ``cadence`` (``Cadence``,
or ``RunCadence`` of the ``TPX`` extension), ``speed_mps`` and ``power_w``
(``Speed``, ``Watts`` of ``TPX``), ``sport``.

``lap`` (one per ``Lap``, at its ``StartTime``): ``sport``, ``lap`` (0-based
index in its activity), ``duration_s``, ``distance_m``, ``calories``,
``avg_heart_rate``, ``max_heart_rate``, ``max_speed_mps``, ``cadence``,
``intensity`` and ``trigger`` (categories, lower-cased).

``activity`` (one per ``Activity``, at its ``Id`` time): ``sport``,
``laps``, ``duration_s``, ``distance_m`` and ``calories`` (sums over its
laps), ``device`` (category: ``Creator/Name``).

Errors
------
A trackpoint or lap with a bad time or number is yielded as
``RecordError(path, line, reason, record="Trackpoint[12]")`` (its start line
and 0-based index among the file's elements of that name); a bad lap is left
out of its activity's sums. A file whose root is not
``<TrainingCenterDatabase>``, or that declares an entity or an external DTD,
raises ``RecordError``; a syntax error further on is yielded with its line and
ends the parse.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import ClassVar

from anonml.errors import RecordError
from anonml.model import Event
from anonml.plugins import Importer
from anonml.readers import head, parse_timestamp
from importers.activity import XmlNode, iter_xml, number, whole

__all__ = ["TcxImporter"]

_ROOTS = frozenset({"TrainingCenterDatabase"})
_STARTS = frozenset({"Activity"})
_KEEP = frozenset({"Activity", "Lap", "Trackpoint", "Courses", "Workouts"})
_HEART_RATES = (("AverageHeartRateBpm", "avg_heart_rate"), ("MaximumHeartRateBpm", "max_heart_rate"))


def _time(raw: str | None, name: str) -> datetime:
    if raw is None:
        raise ValueError(f"missing {name}")
    try:
        return parse_timestamp(raw)
    except ValueError:
        raise ValueError(f"{name}: {raw!r} is not an ISO 8601 time with an offset") from None


def _put(fields: dict[str, object], name: str, value: object) -> None:
    if value is not None:
        fields[name] = value


def _category(text: str | None) -> str | None:
    return text.strip().lower() if text else None


@dataclass(slots=True)
class _ActivitySums:
    sport: str | None
    seen: int = 0  # laps met, good or bad: a lap's index
    laps: int = 0
    duration_s: float = 0.0
    distance_m: float = 0.0
    calories: int = 0


class TcxImporter(Importer):
    """Activities, laps and trackpoints of a TCX file. See the module docstring."""

    name: ClassVar[str] = "tcx"
    version: ClassVar[str] = "1.0"
    description: ClassVar[str] = "TCX activities (Garmin Connect, Strava exports): trackpoints, laps, totals"
    patterns: ClassVar[tuple[str, ...]] = ("*.tcx",)

    def detect(self, path: Path) -> float:
        """0.95 for a ``TrainingCenterDatabase`` root named ``*.tcx``, 0.9 under another name."""
        text = head(path)
        if "<TrainingCenterDatabase" not in text or "TrainingCenterDatabase/v2" not in text:
            return 0.0
        return 0.95 if path.suffix.lower() == ".tcx" else 0.9

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        sums: _ActivitySums | None = None  # None outside an Activity (a Course's trackpoints)
        counts = {"Trackpoint": 0, "Lap": 0, "Activity": 0}
        for item in iter_xml(path, _ROOTS, _STARTS, _KEEP, "TCX"):
            if isinstance(item, RecordError):
                yield item
                continue
            kind, node = item
            if kind == "start":
                sums = _ActivitySums(_category(node.attrs.get("Sport")))
                continue
            if sums is None or node.tag not in counts:
                continue  # Courses and Workouts: planned, not done
            index = counts[node.tag]
            counts[node.tag] += 1
            try:
                if node.tag == "Trackpoint":
                    event = self._point(node, sums.sport)
                elif node.tag == "Lap":
                    event = self._lap(node, sums)
                else:
                    event, sums = self._activity(node, sums), None
            except ValueError as exc:
                if node.tag == "Activity":
                    sums = None
                yield RecordError(path, node.line, str(exc), record=f"{node.tag}[{index}]")
                continue
            yield event

    def _point(self, node: XmlNode, sport: str | None) -> Event:
        when = _time(node.text_of("Time"), "Time")
        fields: dict[str, object] = {}
        lat = number(node.text_of("Position", "LatitudeDegrees"), "LatitudeDegrees", -90, 90)
        lon = number(node.text_of("Position", "LongitudeDegrees"), "LongitudeDegrees", -180, 180)
        if (lat is None) != (lon is None):
            raise ValueError("Position: a latitude without a longitude or the reverse")
        _put(fields, "lat", lat)
        _put(fields, "lon", lon)
        _put(fields, "elevation_m", number(node.text_of("AltitudeMeters"), "AltitudeMeters"))
        _put(fields, "distance_m", number(node.text_of("DistanceMeters"), "DistanceMeters", 0))
        _put(fields, "heart_rate", whole(node.text_of("HeartRateBpm", "Value"), "HeartRateBpm", 300))
        cadence = whole(node.text_of("Cadence"), "Cadence", 400)
        extensions = node.child("Extensions")
        if extensions is not None:
            if cadence is None:
                run = extensions.find("RunCadence")
                cadence = whole(run.text.strip() or None, "RunCadence", 400) if run is not None else None
            speed, watts = extensions.find("Speed"), extensions.find("Watts")
            if speed is not None:
                _put(fields, "speed_mps", number(speed.text.strip() or None, "Speed", 0, 300))
            if watts is not None:
                _put(fields, "power_w", number(watts.text.strip() or None, "Watts", 0, 5000))
        _put(fields, "cadence", cadence)
        _put(fields, "sport", sport)
        return Event(source=self.name, type="track_point", timestamp=when, fields=fields)

    def _lap(self, node: XmlNode, sums: _ActivitySums) -> Event:
        index, sums.seen = sums.seen, sums.seen + 1
        when = _time(node.attrs.get("StartTime"), "StartTime")
        duration = number(node.text_of("TotalTimeSeconds"), "TotalTimeSeconds", 0)
        distance = number(node.text_of("DistanceMeters"), "DistanceMeters", 0)
        calories = whole(node.text_of("Calories"), "Calories", 100_000)
        fields: dict[str, object] = {"lap": index}
        _put(fields, "sport", sums.sport)
        _put(fields, "duration_s", duration)
        _put(fields, "distance_m", distance)
        _put(fields, "calories", calories)
        for element, name in _HEART_RATES:
            _put(fields, name, whole(node.text_of(element, "Value"), element, 300))
        _put(fields, "max_speed_mps", number(node.text_of("MaximumSpeed"), "MaximumSpeed", 0, 300))
        _put(fields, "cadence", whole(node.text_of("Cadence"), "Cadence", 400))
        _put(fields, "intensity", _category(node.text_of("Intensity")))
        _put(fields, "trigger", _category(node.text_of("TriggerMethod")))
        sums.laps += 1
        sums.duration_s += duration or 0.0
        sums.distance_m += distance or 0.0
        sums.calories += calories or 0
        return Event(source=self.name, type="lap", timestamp=when, fields=fields)

    def _activity(self, node: XmlNode, sums: _ActivitySums) -> Event:
        when = _time(node.text_of("Id"), "Id")
        fields: dict[str, object] = {
            "laps": sums.laps,
            "duration_s": round(sums.duration_s, 3),
            "distance_m": round(sums.distance_m, 3),
            "calories": sums.calories,
        }
        _put(fields, "sport", sums.sport)
        _put(fields, "device", node.text_of("Creator", "Name"))
        return Event(source=self.name, type="activity", timestamp=when, fields=fields)
