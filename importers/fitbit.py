"""Fitbit account-archive files: per-minute and daily metrics, sleep logs, exercises, sleep scores.

Format
------
A Fitbit data export ("Export your account archive", or Google Takeout's
``Fitbit/Global Export Data``) holds one JSON array per metric and period,
named ``<metric>-<YYYY-MM-DD>.json`` (``distance-2017-12-31.json``) or
``<metric>-<N>.json`` (``exercise-100.json``); older tools flatten them to
``<metric>.json``. **The metric comes from the file name**; the suffix is
ignored. Supported metrics and their items::

    distance, steps, calories, altitude,          {"dateTime": "12/31/17 16:42:00", "value": "4110"}
    sedentary_minutes, lightly_active_minutes,
    moderately_active_minutes, very_active_minutes
    heart_rate                                     {"dateTime": ..., "value": {"bpm": 61, "confidence": 2}}
    resting_heart_rate                             {"dateTime": ..., "value": {"date": "12/30/18",
                                                    "value": 59.42, "error": 6.79}}
    time_in_heart_rate_zones (or heart_rate_zones) {"dateTime": ..., "value": {"valuesInZones":
                                                    {"IN_DEFAULT_ZONE_1": 154.0, ...}}}
    sleep                                          {"logId", "startTime": "2018-02-01T22:36:00.000",
                                                    "endTime", "duration" (ms), "minutesAsleep", ...,
                                                    "levels": {"summary": {"deep": {"count", "minutes"}}}}
    exercise                                       {"activityName", "startTime": "01/01/18 14:25:33",
                                                    "duration" (ms), "calories", "steps", ...}

and one CSV, ``sleep_score.csv`` (header ``sleep_log_entry_id,timestamp,
overall_score,composition_score,revitalization_score,duration_score,
deep_sleep_in_minutes,resting_heart_rate,restlessness``).

Timestamps and timezones
------------------------
``dateTime`` (``MM/DD/YY HH:MM:SS``, two-digit years read as 20YY) and the
sleep and exercise ``startTime``/``endTime`` are **local wall-clock times of
the account, with no zone in the file**. They are interpreted in
``Params.timezone`` (an IANA name such as ``"Europe/Paris"``) or, without it,
in the zone the export itself states: the ``timezone`` column of the account
archive's ``Personal & Account/Profile.csv`` (looked for beside the file and up
to three folders above it, so a whole export imports as it is). With neither,
a file with local times is refused, never read as UTC. Every event built from
a local time carries the zone used as its ``assumed_tz`` field, so the
assumption stays visible in the store. Reports differ on whether
``heart_rate`` files are local or UTC; ``Params.heart_rate_timezone`` overrides
the zone for that metric only. A wall time that a DST change makes ambiguous
takes the earlier instant (``fold=0``). ``sleep_score.csv`` timestamps end in
``Z`` and are UTC already (no ``assumed_tz``; a value without an offset is read
like the JSON times and gets one).

Events
------
type = the metric (``time_in_heart_rate_zones`` → ``heart_rate_zones``).

* simple metrics: ``value`` — int for ``steps`` and ``*_minutes``, float for
  ``distance`` (as exported, centimetres per minute in the archives seen),
  ``calories`` (kcal) and ``altitude``.
* ``heart_rate``: ``bpm`` (int), ``confidence`` (int).
* ``resting_heart_rate``: ``value``, ``error`` (floats). Items with
  ``"date": null`` are Fitbit's placeholder for a day without a measurement and
  produce no event.
* ``heart_rate_zones``: one float (minutes) per zone key, lower-cased
  (``in_default_zone_1``, ``below_default_zone_1``, …).
* ``sleep`` (timestamp ``startTime``): ``end`` (datetime), ``duration_s``,
  ``minutes_asleep``, ``minutes_awake``, ``minutes_to_fall_asleep``,
  ``minutes_after_wakeup``, ``time_in_bed_min``, ``efficiency`` (ints),
  ``sleep_type`` (``stages``/``classic``), ``main_sleep`` (bool), and for each
  level of ``levels.summary`` ``<level>_minutes`` and ``<level>_count``.
  ``logId`` and the 30-second ``levels.data`` are not stored.
* ``exercise`` (timestamp ``startTime``): ``activity`` (category),
  ``duration_s``, ``active_duration_s``, ``calories``, ``distance_km``,
  ``speed_kmh``, ``pace_s_per_km``, ``elevation_gain`` (floats; distance,
  speed and pace normalised from ``distanceUnit``), ``steps``,
  ``average_heart_rate`` (ints), ``log_type``, ``source_type``,
  ``source_name`` (categories), ``has_gps`` (bool), minutes per
  ``activityLevel`` (``sedentary_minutes``, ``lightly_active_minutes``,
  ``fairly_active_minutes``, ``very_active_minutes``) and ``hr_<zone>_minutes``
  per ``heartRateZones`` entry (``hr_fat_burn_minutes``, …).
* ``sleep_score``: ``overall_score``, ``composition_score``,
  ``revitalization_score``, ``duration_score``, ``deep_sleep_minutes``,
  ``resting_heart_rate`` (ints), ``restlessness`` (float); empty cells omitted.

Errors
------
An unreadable item is yielded as ``RecordError(path, None, reason,
record="$[12]")`` (JSONPath of the item); a bad CSV row as
``RecordError(path, line, reason)``. A file that is not a JSON array, or whose
name is not a known metric, raises ``RecordError``.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from anonml.errors import RecordError
from anonml.importer_kit import finite_number
from anonml.model import Event
from anonml.plugins import Importer, PluginParams
from anonml.readers import (
    TimeZoneName,
    head,
    load_json,
    open_checked,
    open_text,
    parse_timestamp,
    resolve_timezone,
)

__all__ = ["FitbitImporter", "fitbit_metric", "stated_timezone"]

_NAME = re.compile(r"^(?P<metric>[a-z_]+?)(?:-\d{4}-\d{2}-\d{2}|-\d+)?\.json$")
_INT_METRICS = {
    "steps",
    "sedentary_minutes",
    "lightly_active_minutes",
    "moderately_active_minutes",
    "very_active_minutes",
}
_FLOAT_METRICS = {"distance", "calories", "altitude"}
_ALIASES = {"time_in_heart_rate_zones": "heart_rate_zones"}
_JSON_METRICS = (
    _INT_METRICS
    | _FLOAT_METRICS
    | {"heart_rate", "resting_heart_rate", "heart_rate_zones", "sleep", "exercise"}
)
_KM_PER_UNIT = {"kilometer": 1.0, "mile": 1.609344, "meter": 0.001}
_SLEEP_INTS = {
    "minutesAsleep": "minutes_asleep",
    "minutesAwake": "minutes_awake",
    "minutesToFallAsleep": "minutes_to_fall_asleep",
    "minutesAfterWakeup": "minutes_after_wakeup",
    "timeInBed": "time_in_bed_min",
    "efficiency": "efficiency",
}
_SCORE_COLUMNS = {
    "overall_score": ("overall_score", int),
    "composition_score": ("composition_score", int),
    "revitalization_score": ("revitalization_score", int),
    "duration_score": ("duration_score", int),
    "deep_sleep_in_minutes": ("deep_sleep_minutes", int),
    "resting_heart_rate": ("resting_heart_rate", int),
    "restlessness": ("restlessness", float),
}
_HINTS = {"sleep": '"dateOfSleep"', "exercise": '"activityName"'}


def fitbit_metric(path: Path) -> str | None:
    """The metric a Fitbit export file holds, from its name (``None``: not a known one)."""
    name = path.name.lower()
    if name == "sleep_score.csv":
        return "sleep_score"
    match = _NAME.match(name)
    if match is None:
        return None
    metric = _ALIASES.get(match["metric"], match["metric"])
    return metric if metric in _JSON_METRICS else None


def _snake(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def _local_time(value: object, key: str, zone: tzinfo) -> datetime:
    """``MM/DD/YY HH:MM:SS`` or ISO ``YYYY-MM-DDTHH:MM:SS(.fff)`` local time → UTC."""
    if not isinstance(value, str):
        raise ValueError(f"{key}: {value!r} is not a date-time string")
    try:
        if len(value) == 17 and value[2] == "/" and value[5] == "/":
            if value[8] != " " or value[11] != ":" or value[14] != ":":
                raise ValueError(value)
            # The archive's own layout, sliced directly: strptime costs 5x more per item.
            parsed = datetime(
                2000 + int(value[6:8]),
                int(value[0:2]),
                int(value[3:5]),
                int(value[9:11]),
                int(value[12:14]),
                int(value[15:17]),
            )
        else:
            parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{key}: {value!r} is not 'MM/DD/YY HH:MM:SS'") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=zone)
    return parsed.astimezone(UTC)


def _integer(value: object, key: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{key}: {value!r} is not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            pass
        else:
            if number.is_integer():
                return int(number)
    raise ValueError(f"{key}: {value!r} is not an integer")


def _real(value: object, key: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{key}: {value!r} is not a number")
    return finite_number(value, key)


def _obj(value: object, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{key}: expected an object, got {type(value).__name__}")
    return value


_PROFILE_PLACES = (Path("Personal & Account") / "Profile.csv", Path("Profile.csv"))


def stated_timezone(path: Path, levels: int = 3) -> str | None:
    """The zone an account archive states for itself, or None.

    Fitbit's archive holds ``Personal & Account/Profile.csv`` whose
    ``timezone`` column is the account's IANA zone; it is looked for beside
    ``path`` and in up to ``levels`` folders above it. A zone the archive
    names but Python does not know raises :class:`RecordError` naming it.
    """
    for folder in list(Path(path).parents)[: levels + 1]:
        for place in _PROFILE_PLACES:
            profile = folder / place
            if not profile.is_file():
                continue
            try:
                with open_text(profile, encoding="utf-8-sig") as fh:
                    row = next(csv.DictReader(fh), None)
            except (OSError, csv.Error, UnicodeDecodeError):
                continue
            name = (row or {}).get("timezone") or ""
            if name.strip():
                try:
                    resolve_timezone(name.strip())
                except ValueError as exc:
                    raise RecordError(profile, 2, f"timezone: {exc}") from None
                return name.strip()
    return None


class FitbitImporter(Importer):
    """Fitbit account-archive JSON and CSV files; the metric comes from the file name.

    See the module docstring for the format, every field and the timezone rule.
    """

    name: ClassVar[str] = "fitbit"
    version: ClassVar[str] = "1.0"
    description: ClassVar[str] = "Fitbit account archive: activity, heart rate, sleep, exercise"
    patterns: ClassVar[tuple[str, ...]] = (
        "<metric>-YYYY-MM-DD.json",
        "<metric>.json",
        "exercise-<N>.json",
        "sleep_score.csv",
    )

    class Params(PluginParams):
        """Options of the Fitbit importer."""

        timezone: TimeZoneName | None = Field(
            default=None,
            description="IANA zone of the account's local times (default: Profile.csv's, else refused)",
        )
        heart_rate_timezone: TimeZoneName | None = Field(
            default=None,
            description="zone of heart_rate files only, if it differs (None: same as timezone)",
        )

    def detect(self, path: Path) -> float:
        """0.95 for a known metric's file name with the expected content, 0.4 for the name alone."""
        metric = fitbit_metric(path)
        if metric is None:
            return 0.0
        text = head(path)
        if metric == "sleep_score":
            return 0.95 if text.startswith("sleep_log_entry_id,timestamp,") else 0.0
        if not text.lstrip().startswith("["):
            return 0.0
        expected = _HINTS.get(metric, '"dateTime"')
        return 0.95 if expected in text else 0.4

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        metric = fitbit_metric(path)
        if metric is None:
            raise RecordError(
                path,
                None,
                "not a Fitbit export file: the name is not a known metric "
                f"({', '.join(sorted(_JSON_METRICS | {'sleep_score'}))})",
            )
        if metric == "sleep_score":
            yield from self._sleep_scores(path)
            return
        items = load_json(path)
        if not isinstance(items, list):
            raise RecordError(path, None, "not a Fitbit export file: expected a JSON array")
        zone_name = self._zone_name(path, metric)
        zone = resolve_timezone(zone_name)
        for index, item in enumerate(items):
            try:
                event = self._item(metric, _obj(item, "item"), zone, zone_name)
            except (KeyError, ValueError, TypeError) as exc:
                reason = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
                yield RecordError(path, None, reason, record=f"$[{index}]")
                continue
            if event is not None:
                yield event

    def _zone_name(self, path: Path, metric: str) -> str:
        """The zone of ``path``'s local times: the params, else the export's Profile.csv, else refused."""
        if metric == "heart_rate" and self.params.heart_rate_timezone is not None:
            return self.params.heart_rate_timezone
        if self.params.timezone is not None:
            return self.params.timezone
        stated = stated_timezone(path)
        if stated is None:
            raise RecordError(
                path,
                None,
                "Fitbit times are local and this export states no zone (no Personal & Account/"
                "Profile.csv with a timezone beside it); pass params timezone, an IANA name "
                "such as 'Europe/Paris'",
            )
        return stated

    def _item(self, metric: str, item: dict[str, Any], zone: tzinfo, zone_name: str) -> Event | None:
        fields: dict[str, object] = {"assumed_tz": zone_name}
        if metric == "sleep":
            when = self._sleep(item, zone, fields)
        elif metric == "exercise":
            when = self._exercise(item, zone, fields)
        else:
            when = _local_time(item["dateTime"], "dateTime", zone)
            value = item["value"]
            if metric in _INT_METRICS:
                fields["value"] = _integer(value, "value")
            elif metric in _FLOAT_METRICS:
                fields["value"] = _real(value, "value")
            elif metric == "heart_rate":
                value = _obj(value, "value")
                fields["bpm"] = _integer(value["bpm"], "value.bpm")
                if "confidence" in value:
                    fields["confidence"] = _integer(value["confidence"], "value.confidence")
            elif metric == "resting_heart_rate":
                value = _obj(value, "value")
                if value.get("date") is None:
                    return None  # Fitbit's placeholder for a day without a measurement
                fields["value"] = _real(value["value"], "value.value")
                if value.get("error") is not None:
                    fields["error"] = _real(value["error"], "value.error")
            else:  # heart_rate_zones
                zones = _obj(_obj(value, "value")["valuesInZones"], "value.valuesInZones")
                for zone_key, minutes in sorted(zones.items()):
                    fields[_snake(zone_key)] = _real(minutes, f"value.valuesInZones.{zone_key}")
        return Event(source=self.name, type=metric, timestamp=when, fields=fields)

    @staticmethod
    def _sleep(item: dict[str, Any], zone: tzinfo, fields: dict[str, object]) -> datetime:
        start = _local_time(item["startTime"], "startTime", zone)
        fields["end"] = _local_time(item["endTime"], "endTime", zone)
        fields["duration_s"] = _real(item["duration"], "duration") / 1000.0
        for key, name in _SLEEP_INTS.items():
            if item.get(key) is not None:
                fields[name] = _integer(item[key], key)
        if item.get("type") is not None:
            fields["sleep_type"] = str(item["type"])
        if item.get("mainSleep") is not None:
            fields["main_sleep"] = bool(item["mainSleep"])
        summary = _obj(item.get("levels", {}), "levels").get("summary", {})
        for level, stats in sorted(_obj(summary, "levels.summary").items()):
            stats = _obj(stats, f"levels.summary.{level}")
            for stat in ("minutes", "count"):
                if stats.get(stat) is not None:
                    fields[f"{_snake(level)}_{stat}"] = _integer(
                        stats[stat], f"levels.summary.{level}.{stat}"
                    )
        return start

    @staticmethod
    def _exercise(item: dict[str, Any], zone: tzinfo, fields: dict[str, object]) -> datetime:
        start = _local_time(item["startTime"], "startTime", zone)
        fields["activity"] = str(item["activityName"])
        for key, name in (("duration", "duration_s"), ("activeDuration", "active_duration_s")):
            if item.get(key) is not None:
                fields[name] = _real(item[key], key) / 1000.0
        for key, name in (("steps", "steps"), ("averageHeartRate", "average_heart_rate")):
            if item.get(key) is not None:
                fields[name] = _integer(item[key], key)
        for key, name in (("calories", "calories"), ("elevationGain", "elevation_gain")):
            if item.get(key) is not None:
                fields[name] = _real(item[key], key)
        if item.get("distance") is not None:
            unit = str(item.get("distanceUnit", "")).lower()
            if unit not in _KM_PER_UNIT:
                raise ValueError(f"distanceUnit: unknown unit {item.get('distanceUnit')!r}")
            km = _KM_PER_UNIT[unit]
            fields["distance_km"] = _real(item["distance"], "distance") * km
            if item.get("speed") is not None:  # distance units per hour
                fields["speed_kmh"] = _real(item["speed"], "speed") * km
            if item.get("pace") is not None:  # seconds per distance unit
                fields["pace_s_per_km"] = _real(item["pace"], "pace") / km
        if item.get("logType") is not None:
            fields["log_type"] = str(item["logType"])
        if item.get("hasGps") is not None:
            fields["has_gps"] = bool(item["hasGps"])
        source = item.get("source")
        if isinstance(source, dict):
            for key in ("type", "name"):
                if source.get(key):
                    fields[f"source_{key}"] = str(source[key])
        for i, level in enumerate(item.get("activityLevel") or []):
            level = _obj(level, f"activityLevel[{i}]")
            level_name = _snake(str(level["name"]))
            if level_name != "sedentary":  # Fitbit's own names: lightly_active_minutes, ...
                level_name += "_active"
            fields[f"{level_name}_minutes"] = _integer(level["minutes"], f"activityLevel[{i}].minutes")
        for i, hr_zone in enumerate(item.get("heartRateZones") or []):
            hr_zone = _obj(hr_zone, f"heartRateZones[{i}]")
            fields[f"hr_{_snake(str(hr_zone['name']))}_minutes"] = _integer(
                hr_zone["minutes"], f"heartRateZones[{i}].minutes"
            )
        return start

    def _sleep_scores(self, path: Path) -> Iterator[Event | RecordError]:
        zone: tuple[tzinfo, str] | None = None  # resolved at the first row without an offset

        def local_zone() -> tuple[tzinfo, str]:
            nonlocal zone
            if zone is None:
                name = self._zone_name(path, "sleep_score")
                zone = (resolve_timezone(name), name)
            return zone

        with open_checked(path, encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            missing = {"timestamp", *_SCORE_COLUMNS} - set(reader.fieldnames or ())
            if missing:
                raise RecordError(path, 1, f"not a Fitbit sleep_score.csv: missing columns {sorted(missing)}")
            try:
                for row in reader:
                    line = reader.line_num
                    try:
                        yield self._score_row(row, local_zone)
                    except RecordError:
                        raise
                    except ValueError as exc:
                        yield RecordError(path, line, str(exc))
            except (csv.Error, UnicodeDecodeError) as exc:
                raise RecordError(path, reader.line_num, f"unreadable CSV: {exc}") from None

    def _score_row(self, row: dict[str, str | None], local_zone: Callable[[], tuple[tzinfo, str]]) -> Event:
        raw = (row.get("timestamp") or "").strip()
        fields: dict[str, object] = {}
        try:
            when = parse_timestamp(raw)
        except ValueError:
            try:  # no offset: the account's local time, like the JSON files
                naive = datetime.fromisoformat(raw)
            except ValueError:
                raise ValueError(f"timestamp: {raw!r} is not an ISO 8601 time") from None
            zone, fields["assumed_tz"] = local_zone()
            when = naive.replace(tzinfo=zone).astimezone(UTC)
        for column, (name, kind) in _SCORE_COLUMNS.items():
            cell = (row.get(column) or "").strip()
            if cell:
                fields[name] = _integer(cell, column) if kind is int else _real(cell, column)
        return Event(source=self.name, type="sleep_score", timestamp=when, fields=fields)
