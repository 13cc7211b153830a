"""Google location history, in every shape Google has exported it.

Five document shapes are recognised by their first top-level key. All are
streamed element by element with :func:`iter_json_items`, so memory is one
record at a time (plus a 1 MiB read buffer) however large ``Records.json`` is.

1. **Legacy ``Location History.json``** (Takeout until 2019)::

       {"locations": [{"timestampMs": "1437263905529", "latitudeE7": 376955454,
                       "longitudeE7": -1219287454, "accuracy": 43, "altitude": 12,
                       "velocity": 3, "heading": 90, "verticalAccuracy": 4,
                       "activity": [{"timestampMs": "1437263882066",
                                     "activity": [{"type": "STILL", "confidence": 40}]}]}]}

   ``timestampMs``: milliseconds since the Unix epoch as a *string* (UTC).
   ``latitudeE7``/``longitudeE7``: degrees × 10⁷ (ints). Old exports hold a
   known overflow where a value above 900000000 / 1800000000 is an unsigned
   wrap; such values get 2³² subtracted. ``accuracy``, ``verticalAccuracy``
   (m), ``altitude`` (m), ``velocity`` (m/s), ``heading`` (degrees).
2. **``Records.json``** (Takeout 2019–2024): the same ``locations`` array but
   ``timestamp`` is ISO 8601 with ``Z``; adds ``source`` (WIFI, GPS, CELL…),
   ``deviceTag`` (int), ``deviceDesignation``, ``platformType``,
   ``formFactor``, ``batteryCharging``; activity records carry ``timestamp``.
3. **Semantic Location History** (``Semantic Location History/2021/2021_AUGUST.json``)::

       {"timelineObjects": [
         {"placeVisit": {"location": {"latitudeE7": .., "longitudeE7": .., "placeId": "ChIJ..",
                          "address": "..", "name": "..", "semanticType": "TYPE_HOME",
                          "locationConfidence": 91.2},
                         "duration": {"startTimestamp": "2021-08-01T08:00:00Z",
                                      "endTimestamp": "2021-08-01T09:00:00Z"},
                         "placeConfidence": "HIGH_CONFIDENCE", "visitConfidence": 95}},
         {"activitySegment": {"startLocation": {"latitudeE7": .., "longitudeE7": ..},
                              "endLocation": {..}, "duration": {..}, "distance": 1234,
                              "activityType": "IN_PASSENGER_VEHICLE", "confidence": "HIGH",
                              "waypointPath": {"waypoints": [..]}}}]}

   Older files write ``startTimestampMs``/``endTimestampMs`` (string ms).
   ``childVisits`` are not imported separately (their parent covers the span).
4. **On-device ``Timeline.json``** (Google Maps app, 2024+)::

       {"semanticSegments": [{"startTime": "2023-10-01T08:00:00.000+02:00", "endTime": ..,
           "startTimeTimezoneUtcOffsetMinutes": 120,
           "timelinePath": [{"point": "40.712776°, -74.005974°", "time": ".."}],
           "visit": {"hierarchyLevel": 1, "probability": 0.85, "topCandidate": {
               "placeId": "..", "semanticType": "INFERRED_WORK", "probability": 0.95,
               "placeLocation": {"latLng": "40.712776°, -74.005974°"}}},
           "activity": {"start": {"latLng": ".."}, "end": {"latLng": ".."},
               "distanceMeters": 812.5, "probability": 0.9,
               "topCandidate": {"type": "WALKING", "probability": 0.8}},
           "timelineMemory": {"trip": {"distanceFromOriginKms": 120,
               "destinations": [{"identifier": {"placeId": ".."}}]}}}],
        "rawSignals": [{"position": {"LatLng": "..", "accuracyMeters": 5, "altitudeMeters": 10.0,
                         "source": "GPS", "timestamp": "..", "speedMetersPerSecond": 1.5}},
                       {"activityRecord": {"probableActivities": [{"type": "WALKING",
                         "confidence": 0.9}], "timestamp": ".."}},
                       {"wifiScan": {"deliveryTime": "..", "devicesRecords": [..]}}],
        "userLocationProfile": {"frequentPlaces": [{"placeId": "..", "placeLocation": "..",
                                 "label": "HOME"}],
                                "persona": {"travelModeAffinities": [{"mode": "WALKING",
                                 "affinity": 0.4}]}}}

   The iOS export of the same data is a top-level *array* of segments whose
   points are ``"geo:lat,lng"`` strings, numbers are strings, ``placeID`` is
   spelt with a capital D and path points carry
   ``durationMinutesOffsetFromStartTime`` instead of ``time``.
5. **``Timeline Edits.json``** (``timeline-edits.json``): ``{"timelineEdits": [..]}``.
   ``placeAggregates`` entries (Google's per-window ranking of the places
   where the device spent time: ``placeAggregateInfo[]`` with ``score``,
   ``placeId``, ``placePoint.latE7``, ``numBucketsWithLocation``,
   ``bucketSpanDays``; ``windowSizeHrs``, ``topRankedPlacesPlaceIds``,
   ``processWindow.startTime/endTime``) are imported as ``place_aggregate``
   events stamped at the window's end. ``rawSignal.signal.position`` entries
   become ``location`` events. Any other edit kind (user deletions and
   corrections, whose shape Google does not document) is *refused*: it is
   yielded as a RecordError naming its keys, so the default import stops and
   ``--skip-bad`` imports the rest.

Events (``source="google_location"``):

=====================  ==========================================================
type                   fields
=====================  ==========================================================
location               lat, lng (float °); accuracy_m, altitude_m, velocity_mps,
                       heading_deg, vertical_accuracy_m, speed_mps (float); source,
                       device, device_designation, platform, form_factor (str);
                       battery_charging (bool)
activity               activity (top type, lower case), confidence (float), and
                       confidence_<type> for every type listed (max if repeated)
path_point             lat, lng (a Timeline ``timelinePath`` point)
place_visit            lat, lng, place_id, semantic_type, name (Text), address
                       (Text), duration_minutes, end (datetime), place_confidence,
                       visit_confidence, location_confidence, probability,
                       visit_probability, hierarchy_level, utc_offset_minutes
activity_segment       activity_type (``activityType``, or in 2013–2016 exports
                       the first of the ranked ``activities``, whose
                       ``probability`` becomes activity_probability, %),
                       confidence / probability, distance_m,
                       start_lat/lng, end_lat/lng, duration_minutes, end,
                       waypoint_count, utc_offset_minutes
trip                   distance_from_origin_km, destination_count, duration_minutes
wifi_scan              device_count (MAC addresses are never imported)
frequent_place         static: place_id, label, lat, lng
travel_mode_affinity   static: mode, affinity
place_aggregate        place_id, score, lat, lng, rank, window_hours,
                       num_buckets_with_location, bucket_span_days, platform
=====================  ==========================================================

Timezone rule: every timestamp in these formats is absolute (epoch
milliseconds, ``Z`` or an explicit offset); a timestamp without an offset is a
bad record, never guessed. Local offsets that Timeline records are kept as
``utc_offset_minutes``.

Errors name the JSON path (``record="locations[12]"``) and the line where the
record starts.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import ClassVar

from anonml.errors import RecordError
from anonml.importer_kit import finite_number  # numbers or their text: the iOS export writes strings
from anonml.json_stream import iter_json_items
from anonml.model import Event, Text
from anonml.plugins import Importer
from anonml.readers import head, parse_timestamp

__all__ = ["GoogleLocationImporter"]

_SOURCE = "google_location"
# --- value helpers: each raises ValueError/KeyError/TypeError naming the field -----------------


def _ms(value: object, field: str) -> datetime:
    try:
        return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=int(str(value)))
    except (ValueError, OverflowError):
        raise ValueError(f"{field}: {value!r} is not epoch milliseconds") from None


def _iso(value: object, field: str) -> datetime:
    if not isinstance(value, str):
        raise ValueError(f"{field}: {value!r} is not an ISO 8601 timestamp")
    try:
        return parse_timestamp(value)
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from None


def _when(obj: dict, name: str) -> datetime:
    """``name`` as ISO, or ``nameMs`` as epoch milliseconds (the legacy spelling)."""
    if name in obj:
        return _iso(obj[name], name)
    if name + "Ms" in obj:
        return _ms(obj[name + "Ms"], name + "Ms")
    raise KeyError(name)


def _e7(obj: dict, key: str, limit: float) -> float:
    raw = obj[key]
    if not isinstance(raw, int) or isinstance(raw, bool):
        raise ValueError(f"{key}: {raw!r} is not an integer")
    if raw > limit * 1e7:  # the unsigned-wrap bug of old exports
        raw -= 1 << 32
    degrees = raw / 1e7
    if abs(degrees) > limit:
        raise ValueError(f"{key}: {raw} is outside ±{limit:g}°")
    return degrees


def _latlng(text: object, field: str) -> tuple[float, float]:
    """``"40.71°, -74.00°"`` (Android) or ``"geo:40.71,-74.00"`` (iOS) → (lat, lng)."""
    if not isinstance(text, str):
        raise ValueError(f"{field}: {text!r} is not a 'lat°, lng°' string")
    body = text[4:] if text.startswith("geo:") else text
    parts = body.replace("°", "").split(",")
    try:
        lat, lng = (float(p) for p in parts)
    except ValueError:
        raise ValueError(f"{field}: {text!r} is not a 'lat°, lng°' point") from None
    if abs(lat) > 90 or abs(lng) > 180:
        raise ValueError(f"{field}: {text!r} is outside the globe")
    return lat, lng


def _put(fields: dict, name: str, obj: dict, key: str, kind: type = float) -> None:
    """Copy an optional member, typed; absent or null members are left out."""
    value = obj.get(key)
    if value is None:
        return
    if kind is float:
        fields[name] = finite_number(value, key)
    elif kind is int:
        fields[name] = int(finite_number(value, key))
    elif kind is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{key}: {value!r} is not true/false")
        fields[name] = value
    elif kind is Text:
        fields[name] = Text(str(value))
    else:
        fields[name] = str(value)


def _snake(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") or "unknown"


def _activity_fields(candidates: list, key: str) -> dict:
    if not isinstance(candidates, list) or not candidates:
        raise ValueError(f"{key}: expected a non-empty list of {{type, confidence}}")
    scored = [(_snake(str(c["type"])), finite_number(c["confidence"], "confidence")) for c in candidates]
    fields: dict = {}
    for kind, conf in scored:
        name = f"confidence_{kind}"
        fields[name] = max(conf, fields.get(name, conf))
    # max keeps the first of equally confident candidates, as the file lists them
    fields["activity"], fields["confidence"] = max(scored, key=lambda pair: pair[1])
    return fields


# --- one converter per record shape: each returns the record's events -------------------------


def _legacy_location(rec: dict) -> list[Event]:
    ts = _ms(rec["timestampMs"], "timestampMs") if "timestampMs" in rec else _when(rec, "timestamp")
    fields: dict = {"lat": _e7(rec, "latitudeE7", 90), "lng": _e7(rec, "longitudeE7", 180)}
    for name, key in (("accuracy_m", "accuracy"), ("altitude_m", "altitude"),
                      ("velocity_mps", "velocity"), ("heading_deg", "heading"),
                      ("vertical_accuracy_m", "verticalAccuracy")):
        _put(fields, name, rec, key)
    for name, key in (("source", "source"), ("device", "deviceTag"),
                      ("device_designation", "deviceDesignation"),
                      ("platform", "platformType"), ("form_factor", "formFactor")):
        _put(fields, name, rec, key, str)
    _put(fields, "battery_charging", rec, "batteryCharging", bool)
    events = [Event(source=_SOURCE, type="location", timestamp=ts, fields=fields)]
    for act in rec.get("activity") or []:
        events.append(Event(source=_SOURCE, type="activity", timestamp=_when(act, "timestamp"),
                            fields=_activity_fields(act["activity"], "activity")))
    return events


def _span(start: datetime, end: datetime) -> dict:
    if end < start:
        raise ValueError(f"end {end.isoformat()} is before start {start.isoformat()}")
    return {"duration_minutes": (end - start).total_seconds() / 60.0, "end": end}


def _semantic_object(obj: dict) -> list[Event]:
    if "placeVisit" in obj:
        visit = obj["placeVisit"]
        loc, dur = visit["location"], visit["duration"]
        start = _when(dur, "startTimestamp")
        fields = _span(start, _when(dur, "endTimestamp"))
        if "latitudeE7" in loc:
            fields.update(lat=_e7(loc, "latitudeE7", 90), lng=_e7(loc, "longitudeE7", 180))
        _put(fields, "place_id", loc, "placeId", str)
        _put(fields, "semantic_type", loc, "semanticType", str)
        _put(fields, "name", loc, "name", Text)
        _put(fields, "address", loc, "address", Text)
        _put(fields, "location_confidence", loc, "locationConfidence")
        _put(fields, "visit_confidence", visit, "visitConfidence")
        _put(fields, "place_confidence", visit, "placeConfidence", str)
        return [Event(source=_SOURCE, type="place_visit", timestamp=start, fields=fields)]
    if "activitySegment" in obj:
        seg = obj["activitySegment"]
        start = _when(seg["duration"], "startTimestamp")
        fields = _span(start, _when(seg["duration"], "endTimestamp"))
        for prefix in ("start", "end"):
            where = seg.get(f"{prefix}Location") or {}
            if "latitudeE7" in where:
                fields[f"{prefix}_lat"] = _e7(where, "latitudeE7", 90)
                fields[f"{prefix}_lng"] = _e7(where, "longitudeE7", 180)
        if "activityType" in seg:
            fields["activity_type"] = _snake(str(seg["activityType"]))
        elif seg.get("activities"):
            # 2013–2016 exports: only a ranked list, most probable first.
            top = seg["activities"][0]
            if not isinstance(top, dict) or "activityType" not in top:
                raise ValueError("activities[0]: expected an object with 'activityType'")
            fields["activity_type"] = _snake(str(top["activityType"]))
            _put(fields, "activity_probability", top, "probability")
        if "confidence" in seg:
            fields["confidence"] = _snake(str(seg["confidence"]))
        _put(fields, "distance_m", seg, "distance")
        waypoints = (seg.get("waypointPath") or {}).get("waypoints")
        if waypoints is not None:
            fields["waypoint_count"] = len(waypoints)
        return [Event(source=_SOURCE, type="activity_segment", timestamp=start, fields=fields)]
    raise ValueError(f"neither placeVisit nor activitySegment (keys: {sorted(obj)})")


def _point_of(where: object, field: str) -> tuple[float, float]:
    """A Timeline location: ``{"latLng": ".."}`` (Android) or a bare string (iOS)."""
    return _latlng(where["latLng"] if isinstance(where, dict) else where, field)


def _segment(seg: dict) -> list[Event]:
    start, end = _iso(seg["startTime"], "startTime"), _iso(seg["endTime"], "endTime")
    base = _span(start, end)
    _put(base, "utc_offset_minutes", seg, "startTimeTimezoneUtcOffsetMinutes", int)
    events: list[Event] = []
    if "visit" in seg:
        visit = seg["visit"]
        top = visit["topCandidate"]
        fields = dict(base)
        fields["lat"], fields["lng"] = _point_of(top["placeLocation"], "placeLocation")
        _put(fields, "place_id", top, "placeId" if "placeId" in top else "placeID", str)
        _put(fields, "semantic_type", top, "semanticType", str)
        _put(fields, "probability", top, "probability")
        _put(fields, "visit_probability", visit, "probability")
        _put(fields, "hierarchy_level", visit, "hierarchyLevel", int)
        events.append(Event(source=_SOURCE, type="place_visit", timestamp=start, fields=fields))
    if "activity" in seg:
        act = seg["activity"]
        fields = dict(base)
        for prefix in ("start", "end"):
            if prefix in act:
                lat, lng = _point_of(act[prefix], f"activity.{prefix}")
                fields[f"{prefix}_lat"], fields[f"{prefix}_lng"] = lat, lng
        _put(fields, "distance_m", act, "distanceMeters")
        _put(fields, "probability", act, "probability")
        top = act.get("topCandidate") or {}
        if "type" in top:
            fields["activity_type"] = _snake(str(top["type"]))
        _put(fields, "confidence", top, "probability")
        events.append(Event(source=_SOURCE, type="activity_segment", timestamp=start, fields=fields))
    for j, point in enumerate(seg.get("timelinePath") or []):
        if "time" in point:
            when = _iso(point["time"], f"timelinePath[{j}].time")
        else:
            offset = finite_number(
                point["durationMinutesOffsetFromStartTime"], "durationMinutesOffsetFromStartTime"
            )
            when = start + timedelta(minutes=offset)
        lat, lng = _latlng(point["point"], f"timelinePath[{j}].point")
        events.append(Event(source=_SOURCE, type="path_point", timestamp=when,
                            fields={"lat": lat, "lng": lng}))
    if "timelineMemory" in seg:
        trip = seg["timelineMemory"].get("trip") or {}
        fields = {"duration_minutes": base["duration_minutes"],
                  "destination_count": len(trip.get("destinations") or [])}
        _put(fields, "distance_from_origin_km", trip, "distanceFromOriginKms")
        events.append(Event(source=_SOURCE, type="trip", timestamp=start, fields=fields))
    if not events:
        raise ValueError("segment has no visit, activity, timelinePath or timelineMemory")
    return events


def _raw_signal(sig: dict) -> list[Event]:
    """A ``rawSignals`` entry: usually one of position / activityRecord / wifiScan, possibly several."""
    events: list[Event] = []
    if "position" in sig:
        pos = sig["position"]
        lat, lng = _latlng(pos["LatLng"], "position.LatLng")
        fields: dict = {"lat": lat, "lng": lng}
        for name, key in (("accuracy_m", "accuracyMeters"), ("altitude_m", "altitudeMeters"),
                          ("speed_mps", "speedMetersPerSecond")):
            _put(fields, name, pos, key)
        _put(fields, "source", pos, "source", str)
        events.append(Event(source=_SOURCE, type="location",
                            timestamp=_iso(pos["timestamp"], "timestamp"), fields=fields))
    if "activityRecord" in sig:
        rec = sig["activityRecord"]
        events.append(Event(source=_SOURCE, type="activity",
                            timestamp=_iso(rec["timestamp"], "timestamp"),
                            fields=_activity_fields(rec["probableActivities"], "probableActivities")))
    if "wifiScan" in sig:
        scan = sig["wifiScan"]
        events.append(Event(source=_SOURCE, type="wifi_scan",
                            timestamp=_iso(scan["deliveryTime"], "deliveryTime"),
                            fields={"device_count": len(scan.get("devicesRecords") or [])}))
    if not events:
        raise ValueError(f"unknown raw signal (keys: {sorted(sig)})")
    return events


def _profile(profile: dict) -> Iterator[tuple[str, Event | Exception]]:
    """Static events of ``userLocationProfile``; a bad entry comes back as its exception."""
    for j, place in enumerate(profile.get("frequentPlaces") or []):
        try:
            fields: dict = {}
            if "placeLocation" in place:
                fields["lat"], fields["lng"] = _point_of(place["placeLocation"], "placeLocation")
            _put(fields, "place_id", place, "placeId", str)
            _put(fields, "label", place, "label", str)
            yield f"frequentPlaces[{j}]", Event(source=_SOURCE, type="frequent_place", fields=fields)
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            yield f"frequentPlaces[{j}]", exc
    affinities = (profile.get("persona") or {}).get("travelModeAffinities") or []
    for j, aff in enumerate(affinities):
        where = f"persona.travelModeAffinities[{j}]"
        try:
            yield where, Event(
                source=_SOURCE, type="travel_mode_affinity",
                fields={
                    "mode": _snake(str(aff["mode"])),
                    "affinity": finite_number(aff["affinity"], "affinity"),
                },
            )
        except (KeyError, ValueError, TypeError) as exc:
            yield where, exc


def _timeline_edit(edit: dict) -> list[Event]:
    if "placeAggregates" in edit:
        agg = edit["placeAggregates"]
        window_end = _iso(agg["processWindow"]["endTime"], "processWindow.endTime")
        ranked = list(agg.get("topRankedPlacesPlaceIds") or [])
        events = []
        for info in agg["placeAggregateInfo"]:
            point = info.get("placePoint") or info["point"]
            fields: dict = {"score": finite_number(info["score"], "score"),
                            "lat": _e7(point, "latE7", 90), "lng": _e7(point, "lngE7", 180)}
            _put(fields, "place_id", info, "placeId", str)
            _put(fields, "num_buckets_with_location", info, "numBucketsWithLocation", int)
            _put(fields, "bucket_span_days", info, "bucketSpanDays", int)
            _put(fields, "window_hours", agg, "windowSizeHrs", int)
            _put(fields, "platform", agg.get("metadata") or {}, "platform", str)
            if info.get("placeId") in ranked:
                fields["rank"] = ranked.index(info["placeId"]) + 1
            events.append(Event(source=_SOURCE, type="place_aggregate", timestamp=window_end,
                                fields=fields))
        return events
    if "position" in (edit.get("rawSignal") or {}).get("signal", {}):
        pos = edit["rawSignal"]["signal"]["position"]
        point = pos["point"]
        fields = {"lat": _e7(point, "latE7", 90), "lng": _e7(point, "lngE7", 180)}
        if "accuracyMm" in pos:
            fields["accuracy_m"] = finite_number(pos["accuracyMm"], "accuracyMm") / 1000.0
        _put(fields, "altitude_m", pos, "altitudeMeters")
        _put(fields, "source", pos, "source", str)
        return [Event(source=_SOURCE, type="location", timestamp=_iso(pos["timestamp"], "timestamp"),
                      fields=fields)]
    raise ValueError(
        f"unsupported timeline edit (keys: {sorted(edit)}); only placeAggregates and "
        "rawSignal positions are imported"
    )


_ARRAYS = {
    "locations": _legacy_location,
    "timelineObjects": _semantic_object,
    "semanticSegments": _segment,
    "rawSignals": _raw_signal,
    "timelineEdits": _timeline_edit,
    None: _segment,  # the iOS Timeline export: a top-level array of segments
}


def _reason(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"missing field {exc.args[0]!r}"
    if isinstance(exc, TypeError):
        return f"wrong JSON type: {exc}"
    return str(exc)


class GoogleLocationImporter(Importer):
    """Google location history: Location History.json, Records.json, Semantic, Timeline."""

    name: ClassVar[str] = "google_location"
    version: ClassVar[str] = "1.0"
    description: ClassVar[str] = (
        "Google location history (legacy, Records.json, Semantic Location History, "
        "on-device Timeline.json, Timeline Edits)"
    )
    patterns: ClassVar[tuple[str, ...]] = (
        "Location History.json", "Records.json", "Timeline.json", "location-history.json",
        "Semantic Location History/*/*.json", "Timeline Edits.json", "timeline-edits.json",
    )
    _NAMES: ClassVar[frozenset[str]] = frozenset(
        {"location history.json", "records.json", "timeline.json", "location-history.json",
         "timeline edits.json", "timeline-edits.json"}
    )

    def detect(self, path: Path) -> float:
        text = head(path)
        if not text:
            return 0.0
        named = path.name.lower() in self._NAMES or bool(
            re.fullmatch(r"\d{4}_[A-Z]+\.json", path.name)
        )
        start = text.lstrip()[:1]
        if start == "{":
            if '"locations"' in text and ("latitudeE7" in text or "timestampMs" in text):
                return 0.95
            if any(f'"{k}"' in text for k in ("timelineObjects", "semanticSegments", "rawSignals")):
                return 0.95
            if '"timelineEdits"' in text:
                return 0.9
        if start == "[" and '"startTime"' in text and ("geo:" in text or '"visit"' in text):
            return 0.85
        return 0.3 if named else 0.0

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        recognised = False
        for key, index, line, value in iter_json_items(path):
            if key == "userLocationProfile" and index is None:
                recognised = True
                if not isinstance(value, dict):
                    yield RecordError(path, line, "expected an object", record=key)
                    continue
                for where, item in _profile(value):
                    if isinstance(item, Exception):
                        yield RecordError(path, line, _reason(item), record=f"{key}.{where}")
                    else:
                        yield item
                continue
            if key is None and index == 0 and not (isinstance(value, dict) and "startTime" in value):
                raise RecordError(path, line, "a top-level array that is not a Timeline export")
            convert = _ARRAYS.get(key)
            if convert is None or index is None:
                continue  # other top-level members (metadata) carry no events
            recognised = True
            record = f"[{index}]" if key is None else f"{key}[{index}]"
            try:
                if not isinstance(value, dict):
                    raise TypeError(f"expected an object, got {type(value).__name__}")
                events = convert(value)
            except (KeyError, ValueError, TypeError) as exc:
                yield RecordError(path, line, _reason(exc), record=record)
                continue
            yield from events
        if not recognised:
            raise RecordError(
                path, None,
                "not a Google location history file (no locations, timelineObjects, "
                "semanticSegments, rawSignals or timelineEdits)",
            )
