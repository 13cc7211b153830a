"""Apple Health ``export.xml``: records, workouts, activity summaries, streamed.

Format
------
The Health app's "Export All Health Data" zip holds ``apple_health_export/
export.xml`` (often gigabytes), an XML document with an XML declaration and
an internal DTD, then one ``<HealthData locale="...">`` root whose children
are, in order: ``ExportDate``, ``Me``, then many ``Record``, ``Correlation``,
``Workout``, ``ActivitySummary`` (and clinical elements). Sample::

    <?xml version="1.0" encoding="UTF-8"?>
    <!DOCTYPE HealthData [ <!ELEMENT HealthData (ExportDate,Me,(Record|...)*)> ... ]>
    <HealthData locale="en_US">
     <Me HKCharacteristicTypeIdentifierDateOfBirth="1990-02-02"
         HKCharacteristicTypeIdentifierBiologicalSex="HKBiologicalSexMale" .../>
     <Record type="HKQuantityTypeIdentifierHeartRate" sourceName="Apple Watch"
             unit="count/min" creationDate="2018-09-10 02:47:35 -0700"
             startDate="2018-09-10 02:28:55 -0700" endDate="2018-09-10 02:28:55 -0700"
             value="72">
      <MetadataEntry key="HKMetadataKeyHeartRateMotionContext" value="0"/>
     </Record>
     <Workout workoutActivityType="HKWorkoutActivityTypeRunning" duration="5.19"
              durationUnit="min" totalDistance="0.497" totalDistanceUnit="mi"
              totalEnergyBurned="48.7" totalEnergyBurnedUnit="kcal" ...>
      <WorkoutStatistics type="HKQuantityTypeIdentifierDistanceWalkingRunning"
                         sum="0.8" unit="km" .../>   (iOS 16+ instead of total* attributes)
     </Workout>
     <ActivitySummary dateComponents="2016-11-15" activeEnergyBurned="590.252"
                      activeEnergyBurnedGoal="630" activeEnergyBurnedUnit="kcal"
                      appleExerciseTime="68" appleExerciseTimeGoal="30"
                      appleStandHours="13" appleStandHoursGoal="12"/>
    </HealthData>

Timestamps and timezones
------------------------
``startDate``, ``endDate`` and ``creationDate`` read ``YYYY-MM-DD HH:MM:SS
±HHMM``: each carries its own UTC offset and is converted to UTC exactly.
``ActivitySummary/@dateComponents`` is a bare calendar day in the phone's
local zone: its event is stamped at local midnight of that day in
``Params.timezone`` when given, otherwise in the zone the export itself states
— the ``HKTimeZone`` metadata of the records and workouts before the summaries
(Apple writes the summaries last), when they name exactly one zone. With no
param and no single stated zone the import is refused (a zone is never
guessed); the zone used is recorded on each summary as ``assumed_tz``.

Events
------
``Record`` → type = the record's identifier without its ``HK…TypeIdentifier``
prefix, in snake case (``HKQuantityTypeIdentifierHeartRate`` → ``heart_rate``,
``HKCategoryTypeIdentifierSleepAnalysis`` → ``sleep_analysis``); timestamp =
``startDate``. Fields: ``value`` (float: a numeric ``value``) or ``category``
(category: a non-numeric one; ``HKCategoryValueSleepAnalysisAsleep`` becomes
``sleep_analysis_asleep``),
``unit`` (category), ``source_name`` (category), ``device_name`` and
``device_model`` (categories, from the ``device`` description's ``name:`` and
``model:`` parts), ``end`` and ``created`` (datetimes), ``duration_s`` (float,
end − start), ``time_zone`` (category, metadata ``HKTimeZone``) and
``was_user_entered`` (bool, metadata ``HKWasUserEntered``). Other metadata is
not stored (it holds vendor user ids and free text).

``Workout`` → type ``workout``; timestamp = ``startDate``. Fields:
``activity`` (category, ``HKWorkoutActivityTypeRunning`` → ``running``),
``duration_s``, ``distance_m``, ``energy_kcal`` (floats normalised from the
``*Unit`` attributes, or from ``WorkoutStatistics`` sums when the attributes are
absent: any ``Distance*`` statistic and ``ActiveEnergyBurned``),
``heart_rate_avg``/``heart_rate_max`` (floats, from a ``HeartRate`` statistic),
``end``, ``created``, ``source_name``, ``time_zone``, ``indoor`` (bool, metadata
``HKIndoorWorkout``), ``was_user_entered``. Routes (``WorkoutRoute``) and events are not stored.

``ActivitySummary`` → type ``activity_summary`` (timestamp: see above). Fields
(floats, present when the attribute is): ``active_energy_kcal``,
``active_energy_goal_kcal``, ``move_time_min``, ``move_time_goal_min``,
``exercise_min``, ``exercise_goal_min``, ``stand_hours``,
``stand_hours_goal``; and ``assumed_tz``.

``Me`` → one static event (no timestamp) of type ``me``: ``birth_year`` (int),
``biological_sex``, ``blood_type``, ``skin_type`` (categories, snake case,
omitted when "NotSet"). ``ExportDate``, ``Correlation`` (its records also
appear as top-level ``Record`` s) and clinical elements are skipped.

Errors
------
A bad element is yielded as ``RecordError(path, None, reason,
record="Record[17]")``: ``iterparse`` does not report element lines, so the
element is named by tag and 0-based index among elements of that tag. An XML
syntax error (a truncated export) is yielded with its line and ends the parse.
A file that is not a ``<HealthData>`` document, or that declares an external
DTD or an external entity, raises ``RecordError``: the prolog is read with
``expat`` first and such a declaration is refused before anything is parsed.
(Expat ≥ 2.4 also bounds internal-entity expansion, the "billion laughs".)

Memory stays constant: :func:`xml.etree.ElementTree.iterparse` streams the
file and each finished top-level element is removed from the root.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, tzinfo
from functools import cache, lru_cache
from pathlib import Path
from typing import ClassVar
from xml.parsers import expat

from pydantic import Field

from anonml.errors import RecordError
from anonml.importer_kit import finite_number
from anonml.model import Event
from anonml.plugins import Importer, PluginParams
from anonml.readers import TimeZoneName, head, open_bytes, resolve_timezone

__all__ = ["AppleHealthImporter", "snake_case"]

_PROLOG_CHUNK = 1 << 16
_TYPE_PREFIX = re.compile(r"^HK(?:Quantity|Category|Correlation|Data)?Type(?:Identifier)?")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_DEVICE_PART = re.compile(r"\b(name|model):([^,>]*)")

# Unit factors to seconds, metres and kilocalories (HealthKit unit strings).
_SECONDS = {"ms": 1e-3, "s": 1.0, "sec": 1.0, "min": 60.0, "hr": 3600.0, "h": 3600.0, "d": 86400.0}
_METRES = {"m": 1.0, "cm": 0.01, "km": 1000.0, "mi": 1609.344, "ft": 0.3048, "yd": 0.9144}
_KCAL = {"kcal": 1.0, "Cal": 1.0, "cal": 1e-3, "kJ": 1 / 4.184, "J": 1 / 4184.0}
_SUMMARY = {
    "activeEnergyBurned": "active_energy_kcal",
    "activeEnergyBurnedGoal": "active_energy_goal_kcal",
    "appleMoveTime": "move_time_min",
    "appleMoveTimeGoal": "move_time_goal_min",
    "appleExerciseTime": "exercise_min",
    "appleExerciseTimeGoal": "exercise_goal_min",
    "appleStandHours": "stand_hours",
    "appleStandHoursGoal": "stand_hours_goal",
}
_ME = {
    "HKCharacteristicTypeIdentifierBiologicalSex": ("biological_sex", "HKBiologicalSex"),
    "HKCharacteristicTypeIdentifierBloodType": ("blood_type", "HKBloodType"),
    "HKCharacteristicTypeIdentifierFitzpatrickSkinType": ("skin_type", "HKFitzpatrickSkinType"),
}


@cache
def snake_case(identifier: str, prefix: str = "") -> str:
    """``"HKQuantityTypeIdentifierHeartRate"`` → ``"heart_rate"``; ``prefix`` is removed first."""
    core = identifier[len(prefix) :] if prefix and identifier.startswith(prefix) else identifier
    core = _TYPE_PREFIX.sub("", core) or core
    return _CAMEL.sub("_", core).lower()


@lru_cache(maxsize=4096)
def _device_fields(device: str) -> tuple[tuple[str, str], ...]:
    """``device_name``/``device_model`` from an HKDevice description (few distinct per export)."""
    return tuple(
        (f"device_{key}", part.strip()) for key, part in _DEVICE_PART.findall(device) if part.strip()
    )


def _time(elem: ET.Element, attr: str) -> datetime:
    """``YYYY-MM-DD HH:MM:SS ±HHMM`` → aware UTC datetime."""
    raw = elem.get(attr)
    if raw is None:
        raise ValueError(f"missing attribute {attr}")
    text = raw.strip()
    try:
        if len(text) == 25 and text[19] == " ":  # the export's only layout: a fast exact path
            parsed = datetime.fromisoformat(text[:19] + text[20:])
        else:
            parsed = datetime.strptime(text, "%Y-%m-%d %H:%M:%S %z")
    except ValueError:
        raise ValueError(f"{attr}: {raw!r} is not 'YYYY-MM-DD HH:MM:SS ±HHMM'") from None
    if parsed.tzinfo is None:
        raise ValueError(f"{attr}: {raw!r} has no UTC offset")
    return parsed.astimezone(UTC)


def _number(elem: ET.Element, attr: str) -> float | None:
    raw = elem.get(attr)
    return None if raw is None or raw == "" else finite_number(raw, attr)


def _scaled(elem: ET.Element, attr: str, unit_attr: str, table: dict[str, float]) -> float | None:
    value = _number(elem, attr)
    if value is None:
        return None
    unit = elem.get(unit_attr, "")
    if unit not in table:
        raise ValueError(f"{unit_attr}: unknown unit {unit!r} (known: {', '.join(table)})")
    return value * table[unit]


def _metadata(elem: ET.Element, fields: dict[str, object]) -> None:
    for entry in elem.iterfind("MetadataEntry"):
        key, value = entry.get("key"), entry.get("value", "")
        if key == "HKTimeZone" and value:
            fields["time_zone"] = value
        elif key == "HKWasUserEntered":
            fields["was_user_entered"] = value == "1"
        elif key == "HKIndoorWorkout":
            fields["indoor"] = value == "1"


def _interval(elem: ET.Element, fields: dict[str, object]) -> datetime:
    start = _time(elem, "startDate")
    end = _time(elem, "endDate")
    fields["end"] = end
    fields["duration_s"] = (end - start).total_seconds()
    if elem.get("creationDate") is not None:
        fields["created"] = _time(elem, "creationDate")
    source = elem.get("sourceName")
    if source:
        fields["source_name"] = source
    return start


class AppleHealthImporter(Importer):
    """Records, workouts and activity summaries of an Apple Health ``export.xml``, streamed.

    See the module docstring for the format, every field and the timezone rule.
    """

    name: ClassVar[str] = "apple_health"
    version: ClassVar[str] = "1.0"
    description: ClassVar[str] = "Apple Health export.xml: records, workouts, activity summaries"
    patterns: ClassVar[tuple[str, ...]] = ("export.xml", "apple_health_export/export.xml")

    class Params(PluginParams):
        """Options of the Apple Health importer."""

        timezone: TimeZoneName | None = Field(
            default=None,
            description="IANA zone of ActivitySummary calendar days "
            "(default: the one zone the records' HKTimeZone metadata states)",
        )

    def detect(self, path: Path) -> float:
        """0.95 for ``export.xml`` whose head names ``HealthData``, 0.9 under another name."""
        text = head(path)
        if "<HealthData" not in text and "<!DOCTYPE HealthData" not in text:
            return 0.0
        return 0.95 if path.name.lower() == "export.xml" else 0.9

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        _check_prolog(path)
        stated: set[str] = set()  # HKTimeZone values of the records and workouts read so far
        zone: tuple[tzinfo, str] | None = None

        def summary(elem: ET.Element) -> Event:
            nonlocal zone
            if zone is None:
                zone = self._summary_zone(path, stated)
            return self._summary(elem, *zone)

        def stating(handler: Callable[[ET.Element], Event]) -> Callable[[ET.Element], Event]:
            def read(elem: ET.Element) -> Event:
                event = handler(elem)
                if "time_zone" in event.fields:
                    stated.add(str(event.fields["time_zone"]))
                return event

            return read

        handlers: dict[str, Callable[[ET.Element], Event | None]] = {
            "Record": stating(self._record),
            "Workout": stating(self._workout),
            "ActivitySummary": summary,
            "Me": self._me,
        }
        counts: dict[str, int] = {}
        with open_bytes(path) as fh:
            depth = 0
            root: ET.Element | None = None
            try:
                for kind, elem in ET.iterparse(fh, events=("start", "end")):
                    if kind == "start":
                        depth += 1
                        if root is None:
                            root = elem
                        continue
                    depth -= 1
                    if depth != 1:
                        continue
                    index = counts.get(elem.tag, 0)
                    counts[elem.tag] = index + 1
                    handler = handlers.get(elem.tag)
                    if handler is not None:
                        try:
                            event = handler(elem)
                        except RecordError:
                            raise  # the whole file is refused (no zone for the summaries)
                        except (KeyError, ValueError, TypeError) as exc:
                            yield RecordError(path, None, str(exc), record=f"{elem.tag}[{index}]")
                        else:
                            if event is not None:
                                yield event
                    root.clear()  # type: ignore[union-attr]  # finished children: constant memory
            except ET.ParseError as exc:
                line, column = exc.position
                reason = str(exc).split(":")[0]
                yield RecordError(
                    path, line, f"XML syntax error at column {column + 1}: {reason}; parsing stopped"
                )
            except OSError as exc:
                raise RecordError(path, None, f"cannot read: {exc}") from None

    def _record(self, elem: ET.Element) -> Event:
        kind = elem.get("type")
        if not kind:
            raise ValueError("missing attribute type")
        fields: dict[str, object] = {}
        start = _interval(elem, fields)
        raw = elem.get("value")
        if raw is not None and raw != "":
            try:
                value = float(raw)
            except ValueError:
                fields["category"] = (
                    snake_case(raw, "HKCategoryValue") if raw.startswith("HKCategoryValue") else raw
                )
            else:
                if not math.isfinite(value):
                    raise ValueError(f"value: {raw!r} is not finite")
                fields["value"] = value
        unit = elem.get("unit")
        if unit:
            fields["unit"] = unit
        device = elem.get("device")
        if device:
            fields.update(_device_fields(device))
        _metadata(elem, fields)
        return Event(source=self.name, type=snake_case(kind), timestamp=start, fields=fields)

    def _workout(self, elem: ET.Element) -> Event:
        activity = elem.get("workoutActivityType")
        if not activity:
            raise ValueError("missing attribute workoutActivityType")
        fields: dict[str, object] = {"activity": snake_case(activity, "HKWorkoutActivityType")}
        start = _interval(elem, fields)
        duration = _scaled(elem, "duration", "durationUnit", _SECONDS)
        if duration is not None:
            fields["duration_s"] = duration
        distance = _scaled(elem, "totalDistance", "totalDistanceUnit", _METRES)
        energy = _scaled(elem, "totalEnergyBurned", "totalEnergyBurnedUnit", _KCAL)
        for stat in elem.iterfind("WorkoutStatistics"):
            stat_type = snake_case(stat.get("type", ""))
            if distance is None and stat_type.startswith("distance"):
                distance = _scaled(stat, "sum", "unit", _METRES)
            elif energy is None and stat_type == "active_energy_burned":
                energy = _scaled(stat, "sum", "unit", _KCAL)
            elif stat_type == "heart_rate":
                for attr, name in (("average", "heart_rate_avg"), ("maximum", "heart_rate_max")):
                    value = _number(stat, attr)
                    if value is not None:
                        fields[name] = value
        if distance is not None:
            fields["distance_m"] = distance
        if energy is not None:
            fields["energy_kcal"] = energy
        _metadata(elem, fields)
        return Event(source=self.name, type="workout", timestamp=start, fields=fields)

    def _summary_zone(self, path: Path, stated: set[str]) -> tuple[tzinfo, str]:
        """The zone of ActivitySummary days: the param, else the one zone the export states."""
        if self.params.timezone is not None:
            return resolve_timezone(self.params.timezone), self.params.timezone
        if len(stated) == 1:
            (name,) = stated
            try:
                return resolve_timezone(name), name
            except ValueError as exc:
                raise RecordError(path, None, f"the export's HKTimeZone metadata: {exc}") from None
        said = f"its records name {len(stated)} zones ({', '.join(sorted(stated))})" if stated else (
            "its records name none")
        raise RecordError(
            path,
            None,
            f"ActivitySummary days are local dates and the export states no single zone ({said}); "
            "pass params timezone, an IANA name such as 'Europe/Paris'",
        )

    def _summary(self, elem: ET.Element, zone: tzinfo, zone_name: str) -> Event:
        day = elem.get("dateComponents")
        if not day:
            raise ValueError("missing attribute dateComponents")
        try:
            midnight = datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=zone)
        except ValueError:
            raise ValueError(f"dateComponents: {day!r} is not 'YYYY-MM-DD'") from None
        fields: dict[str, object] = {"assumed_tz": zone_name}
        for attr, name in _SUMMARY.items():
            value = _number(elem, attr)
            if value is None:
                continue
            if attr.startswith("activeEnergyBurned"):
                unit = elem.get("activeEnergyBurnedUnit", "kcal")
                if unit not in _KCAL:
                    raise ValueError(f"activeEnergyBurnedUnit: unknown unit {unit!r}")
                value *= _KCAL[unit]
            fields[name] = value
        return Event(
            source=self.name, type="activity_summary", timestamp=midnight.astimezone(UTC), fields=fields
        )

    def _me(self, elem: ET.Element) -> Event | None:
        fields: dict[str, object] = {}
        birth = elem.get("HKCharacteristicTypeIdentifierDateOfBirth", "")
        if birth:
            try:
                fields["birth_year"] = datetime.strptime(birth, "%Y-%m-%d").year
            except ValueError:
                raise ValueError(
                    f"HKCharacteristicTypeIdentifierDateOfBirth: {birth!r} is not 'YYYY-MM-DD'"
                ) from None
        for attr, (name, prefix) in _ME.items():
            raw = elem.get(attr, "")
            if raw and not raw.endswith("NotSet"):
                fields[name] = snake_case(raw, prefix)
        return Event(source=self.name, type="me", fields=fields) if fields else None


class _RootSeen(Exception):
    """Raised from the expat start handler: the prolog is over."""


class _Refused(Exception):
    """Raised from an expat DTD handler: an external declaration was found."""


def _check_prolog(path: Path) -> None:
    """Read up to the root element with expat; refuse external DTDs and entities.

    Raises
    ------
    RecordError
        Not XML, the root is not ``<HealthData>``, or the DTD declares an
        external subset or an external (``SYSTEM``/``PUBLIC``/unparsed) entity.
    """
    parser = expat.ParserCreate()
    root: list[str] = []

    def doctype(name: str, system_id: str | None, public_id: str | None, _internal: int) -> None:
        if system_id or public_id:
            raise _Refused(f"external DTD {system_id or public_id!r} refused")

    def entity(
        name: str,
        _is_parameter: int,
        _value: str | None,
        _base: str | None,
        system_id: str | None,
        public_id: str | None,
        notation: str | None,
    ) -> None:
        if system_id or public_id or notation:
            raise _Refused(f"external entity {name!r} ({system_id or public_id}) refused")

    def start(name: str, _attrs: dict[str, str]) -> None:
        root.append(name)
        raise _RootSeen

    parser.StartDoctypeDeclHandler = doctype
    parser.EntityDeclHandler = entity
    parser.StartElementHandler = start
    try:
        with open_bytes(path) as fh:
            while True:
                chunk = fh.read(_PROLOG_CHUNK)
                parser.Parse(chunk, not chunk)
                if not chunk:
                    break
    except _RootSeen:
        if root[0] != "HealthData":
            raise RecordError(
                path,
                parser.CurrentLineNumber,
                f"not an Apple Health export: root element is <{root[0]}>, expected <HealthData>",
            ) from None
        return
    except _Refused as exc:
        raise RecordError(path, parser.CurrentLineNumber, str(exc)) from None
    except expat.ExpatError as exc:
        raise RecordError(path, exc.lineno, f"not an XML document: {expat.ErrorString(exc.code)}") from None
    except OSError as exc:
        raise RecordError(path, None, f"cannot read: {exc.strerror or exc}") from None
    raise RecordError(path, None, "not an Apple Health export: no root element")
