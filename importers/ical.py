"""iCalendar (``.ics``, RFC 5545) events, read with the ``icalendar`` package.

A file holds one or more ``VCALENDAR`` s; each ``VEVENT`` becomes one event
per occurrence::

    BEGIN:VCALENDAR
    X-WR-TIMEZONE:Europe/Zurich
    BEGIN:VTIMEZONE
    TZID:Europe/Zurich
    ...
    END:VTIMEZONE
    BEGIN:VEVENT
    UID:BFE33ADD-5553-48B5-B5A5-F9DA5CA4C393
    DTSTART;TZID=Europe/Zurich:20161028T140000
    DTEND;TZID=Europe/Zurich:20161028T143000
    RRULE:FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR
    EXDATE;TZID=Europe/Zurich:20161031T140000
    SUMMARY:Daily Sync
    LOCATION:Roadstar 16\\n12764 Happyville
    STATUS:CONFIRMED
    ORGANIZER:mailto:someone@example.com
    ATTENDEE:mailto:a@example.com
    BEGIN:VALARM
    TRIGGER:-PT15M
    END:VALARM
    END:VEVENT
    END:VCALENDAR

Properties read: ``DTSTART`` (required), ``DTEND`` or ``DURATION`` (else 0
for a date-time, one day for a date), ``RRULE``, ``RDATE``, ``EXDATE``,
``RECURRENCE-ID`` (an overridden occurrence replaces the master's one with
the same start), ``SUMMARY``, ``LOCATION``, ``STATUS``, ``ORGANIZER``,
``ATTENDEE``, ``UID`` (only to match overrides) and ``VALARM`` children.

**Timezones.** ``DTSTART;TZID=…`` resolves through the file's own
``VTIMEZONE`` (icalendar builds a tzinfo from its rules) or, when the TZID is
an IANA name, the zoneinfo database; a TZID that is neither is a bad record.
``…Z`` is UTC. *Floating* times (no TZID, no Z) are wall-clock times in
params ``timezone``, else the calendar's ``X-WR-TIMEZONE``; with neither they
are a bad record (never guessed). *All-day* events (``VALUE=DATE``) start at
00:00 in that same zone, or at 00:00 UTC when there is none: a date is a
calendar day, and UTC midnight is a stated convention, not a guess.

**Recurrence.** RRULE is expanded with ``dateutil.rrule`` in the event's own
local time (so 14:00 stays 14:00 across DST), plus RDATE, minus EXDATE and
minus overridden occurrences. Expansion is bounded: only occurrences starting
in ``[window_start, window_end)`` are kept; a rule with neither COUNT nor
UNTIL and no ``window_end`` stops ``horizon_days`` (default 365) after its
first occurrence; and each series stops after ``max_occurrences`` (default
1000) kept occurrences. Microsoft Exchange writes list values with spaces
(``BYDAY=MO, TU``): an RRULE that fails to parse only because of whitespace
is read with the whitespace removed.

**Errors.** icalendar records, per component, the properties it could not
parse. A VEVENT with such a property (or an unusable DTSTART, TZID or RRULE)
is yielded as ``RecordError`` naming the file, the line of its
``BEGIN:VEVENT``, the event's number and UID, and the offending property, so
the import fails, or continues with the good events under ``--skip-bad``. A
file icalendar cannot split into content lines raises.

Events (``source="ical"``, ``type="calendar_event"``, timestamp = occurrence
start in UTC). Fields: ``summary``, ``location`` (Text), ``duration_minutes``
(float), ``all_day``, ``recurring`` (bool; true for every occurrence of a
series and for overrides), ``status`` (lower case: confirmed, tentative,
cancelled), ``organizer_domain`` (lower case, from ``mailto:``),
``attendee_count``, ``alarm_count`` (int). The whole file is held in memory
(icalendar parses it at once): calendars are rarely above a few MB.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from pathlib import Path
from typing import Any, ClassVar

import icalendar
from dateutil.rrule import rrulestr
from icalendar.parser import Contentline
from icalendar.prop import TypesFactory
from pydantic import Field, field_validator, model_validator

from anonml.errors import RecordError
from anonml.model import Event, Text
from anonml.plugins import Importer, PluginParams
from anonml.readers import TimeZoneName, head, resolve_timezone

__all__ = ["IcalImporter"]

_SOURCE = "ical"


class _Params(PluginParams):
    """The recurrence window and the zone of floating times."""

    window_start: datetime | None = None
    window_end: datetime | None = None
    horizon_days: int = Field(default=365, ge=1, le=36_600)
    max_occurrences: int = Field(default=1000, ge=1, le=100_000)
    timezone: TimeZoneName | None = None

    @field_validator("window_start", "window_end")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("window bounds need a UTC offset (e.g. 2024-01-01T00:00:00Z)")
        return value

    @model_validator(mode="after")
    def _ordered(self) -> _Params:
        if self.window_start and self.window_end and self.window_start >= self.window_end:
            raise ValueError("window_start must be before window_end")
        return self


def _vevent_lines(lines: list[str]) -> list[int]:
    """1-based line of each ``BEGIN:VEVENT``, in document order (= icalendar's walk order)."""
    return [i for i, line in enumerate(lines, 1) if line.strip().upper() == "BEGIN:VEVENT"]


def _property_line(lines: list[str], begin: int, name: str) -> int:
    """The line, inside the VEVENT starting at ``begin``, of the first ``name`` value that fails.

    Falls back to ``begin`` when no single content line can be blamed.
    """
    logical: list[tuple[int, str]] = []  # (first physical line, unfolded content line)
    for number in range(begin, len(lines) + 1):
        raw = lines[number - 1]
        if raw[:1] in (" ", "\t") and logical:
            logical[-1] = (logical[-1][0], logical[-1][1] + raw[1:])
            continue
        if raw.strip().upper() == "END:VEVENT":
            break
        logical.append((number, raw))
    factory = TypesFactory()
    for number, content in logical:
        if not re.match(rf"(?i){re.escape(name)}[;:]", content):
            continue
        try:
            prop, params, value = Contentline(content).parts()
            factory.for_property(prop, params.get("VALUE")).from_ical(value)
        except (ValueError, TypeError, KeyError):
            return number
    return begin


def _end_of(lines: list[str], begin: int | None) -> int:
    """The line number of the ``END:VEVENT`` closing the VEVENT that starts at ``begin``."""
    for number in range(begin or 1, len(lines) + 1):
        if lines[number - 1].strip().upper() == "END:VEVENT":
            return number
    return len(lines)


def _first_bad_line(lines: list[str]) -> tuple[int | None, str | None]:
    """The first content line that cannot be split into name, parameters and value."""
    start, content = 0, ""
    for number, raw in enumerate([*lines, "END:EOF"], 1):
        if raw[:1] in (" ", "\t"):
            content += raw[1:]
            continue
        if content.strip():
            try:
                Contentline(content).parts()
            except ValueError:
                return start, f"content line {content[:60]!r} is not NAME[;PARAM=...]:VALUE"
        start, content = number, raw
    return None, None


def _key(value: date | datetime) -> datetime:
    """Comparable identity of an occurrence start: UTC for aware, naive local otherwise."""
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo is not None else value
    return datetime.combine(value, time())


def _domain(address: object) -> str | None:
    text = str(address)
    if text.lower().startswith("mailto:"):
        text = text[7:]
    if "@" not in text:
        return None
    return text.rsplit("@", 1)[1].strip().lower() or None


def _as_list(value: Any) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


class _Series:
    """One VEVENT ready to expand: start, duration, rules and static fields."""

    def __init__(self, ev: icalendar.Event, floating: tzinfo | None) -> None:
        start_prop = ev.get("DTSTART")
        if start_prop is None:
            raise ValueError("property DTSTART: missing")
        if isinstance(start_prop, list):
            raise ValueError("property DTSTART: given more than once")
        start = start_prop.dt
        if isinstance(start, datetime) and start.tzinfo is None and "TZID" in start_prop.params:
            raise ValueError(f"property DTSTART: unknown TZID {start_prop.params['TZID']!r} "
                             "(no VTIMEZONE in the file and not an IANA name)")
        if isinstance(start, datetime) and start.tzinfo is None and floating is None:
            raise ValueError("property DTSTART: floating time (no TZID, no Z) and no timezone; "
                             "set params timezone or X-WR-TIMEZONE")
        self.start = start
        self.all_day = not isinstance(start, datetime)
        try:
            self.duration = ev.duration
        except (icalendar.InvalidCalendar, ValueError, TypeError) as exc:
            raise ValueError(f"property DTEND/DURATION: {exc}") from None
        if self.duration is None:
            self.duration = timedelta(days=1) if self.all_day else timedelta(0)
        if self.duration < timedelta(0):
            raise ValueError("property DTEND: before DTSTART")
        self.floating = floating
        self.rules = [_rule_text(r) for r in _as_list(ev.get("RRULE"))]
        # An RDATE may be a PERIOD (start, end or duration): its start is the occurrence.
        self.rdates = [d.dt[0] if isinstance(d.dt, tuple) else d.dt
                       for prop in _as_list(ev.get("RDATE")) for d in prop.dts]
        for prop in _as_list(ev.get("RDATE")):  # a TZID icalendar could not resolve leaves the time naive
            tzid = getattr(prop, "params", {}).get("TZID")
            starts = [d.dt[0] if isinstance(d.dt, tuple) else d.dt for d in prop.dts]
            if tzid and any(isinstance(d, datetime) and d.tzinfo is None for d in starts):
                raise ValueError(f"property RDATE: unknown TZID {tzid!r} "
                                 "(no VTIMEZONE in the file and not an IANA name)")
        if floating is None and any(isinstance(d, datetime) and d.tzinfo is None for d in self.rdates):
            # what utc() reads a floating time in: refused here, like DTSTART's, naming the property
            raise ValueError("property RDATE: floating time (no TZID, no Z) and no timezone; "
                             "set params timezone or X-WR-TIMEZONE")
        self.exdates = {_key(d.dt) for prop in _as_list(ev.get("EXDATE")) for d in prop.dts}
        self.uid = str(ev.get("UID", ""))
        self.recurrence_id = ev.get("RECURRENCE-ID")
        fields: dict[str, Any] = {
            "duration_minutes": self.duration.total_seconds() / 60.0,
            "all_day": self.all_day,
            "recurring": bool(self.rules or self.rdates or self.recurrence_id is not None),
            "attendee_count": len(_as_list(ev.get("ATTENDEE"))),
            "alarm_count": sum(1 for c in ev.subcomponents if c.name == "VALARM"),
        }
        for name in ("SUMMARY", "LOCATION"):
            if ev.get(name):
                fields[name.lower()] = Text(str(ev[name]))
        if ev.get("STATUS"):
            fields["status"] = str(ev["STATUS"]).strip().lower()
        if ev.get("ORGANIZER") and (domain := _domain(ev["ORGANIZER"])):
            fields["organizer_domain"] = domain
        self.fields = fields

    def utc(self, value: date | datetime) -> datetime:
        """An occurrence start as aware UTC under the module's zone rule."""
        if not isinstance(value, datetime):
            value = datetime.combine(value, time())
            return value.replace(tzinfo=self.floating or UTC).astimezone(UTC)
        if value.tzinfo is None:  # a floating DTSTART or RDATE: __init__ refused either without a zone
            value = value.replace(tzinfo=self.floating)
        return value.astimezone(UTC)

    def occurrences(self, p: _Params, overridden: set[datetime]) -> Iterator[datetime]:
        """Occurrence starts in UTC, in order, bounded by the window, horizon and cap."""
        first = self.utc(self.start)
        if not (self.rules or self.rdates):
            if self._inside(first, p) and _key(self.start) not in self.exdates:
                yield first
            return
        bounded = all(("COUNT=" in r.upper() or "UNTIL=" in r.upper()) for r in self.rules)
        end = p.window_end or (None if bounded else first + timedelta(days=p.horizon_days))
        base = self.start if isinstance(self.start, datetime) else datetime.combine(self.start, time())
        streams = [_expand(rule, base, self.start, self.floating) for rule in self.rules]
        streams.append(iter(sorted(self.rdates, key=_key)))
        if not self.rules:
            streams.append(iter([self.start]))
        seen: set[datetime] = set()
        kept = 0
        for local in _merge(streams):
            when = self.utc(local)
            if end is not None and when >= end:
                break
            key = _key(local)
            if key in seen or key in self.exdates or key in overridden or not self._inside(when, p):
                continue
            seen.add(key)
            yield when
            kept += 1
            if kept >= p.max_occurrences:
                break

    @staticmethod
    def _inside(when: datetime, p: _Params) -> bool:
        return (p.window_start is None or when >= p.window_start) and (
            p.window_end is None or when < p.window_end)


def _rule_text(prop: Any) -> str:
    """An RRULE as text; Exchange's spaces inside lists (``MO, TU``) are removed."""
    text = str(prop) if isinstance(prop, str) else prop.to_ical().decode()
    return re.sub(r"\s+", "", text)


_UNTIL = re.compile(r"(?i)(?:^|;)UNTIL=([0-9TZ]+)")


def _until(text: str, base: datetime, floating: tzinfo | None) -> datetime:
    """RRULE UNTIL as a bound comparable with ``base`` (RFC 5545 §3.3.10: inclusive).

    UNTIL is UTC (``…Z``) for zoned starts and local for floating or all-day
    ones, but files mix them; each mix is mapped onto ``base``'s kind.
    """
    if re.fullmatch(r"\d{8}", text):
        value = datetime.combine(datetime.strptime(text, "%Y%m%d").date(), time(23, 59, 59))
    elif re.fullmatch(r"\d{8}T\d{6}Z?", text):
        value = datetime.strptime(text[:15], "%Y%m%dT%H%M%S")
        if text.endswith("Z"):
            value = value.replace(tzinfo=UTC)
    else:
        raise ValueError(f"property RRULE: UNTIL={text!r} is not a date or date-time")
    if base.tzinfo is not None:
        return value if value.tzinfo is not None else value.replace(tzinfo=base.tzinfo)
    if value.tzinfo is None:
        return value
    # A UTC bound on a floating series: compare in the floating zone's wall time.
    return value.astimezone(floating).replace(tzinfo=None) if floating else value.replace(tzinfo=None)


def _expand(rule: str, base: datetime, start: date | datetime,
            floating: tzinfo | None) -> Iterator[date | datetime]:
    """One RRULE's occurrences in local time (dates for an all-day series)."""
    match = _UNTIL.search(rule)
    bare = _UNTIL.sub("", rule).strip(";") if match else rule
    try:
        recur = rrulestr(f"RRULE:{bare}", dtstart=base)
        if match:
            recur = recur.replace(until=_until(match[1], base, floating))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"property RRULE: {exc}") from None
    as_date = not isinstance(start, datetime)
    return (occ.date() if as_date else occ for occ in recur)


def _merge(streams: list[Iterator[date | datetime]]) -> Iterator[date | datetime]:
    """Merge ascending streams of occurrence starts into one ascending stream."""
    return heapq.merge(*streams, key=_key)


class IcalImporter(Importer):
    """iCalendar VEVENTs, with VTIMEZONE resolution and bounded RRULE expansion."""

    name: ClassVar[str] = "ical"
    version: ClassVar[str] = "1.0"
    description: ClassVar[str] = "iCalendar (.ics) events, recurrences expanded over a bounded window"
    patterns: ClassVar[tuple[str, ...]] = ("*.ics", "*.ical", "*.ifb")
    Params = _Params

    def detect(self, path: Path) -> float:
        text = head(path, 1024)
        if not text:
            return 0.0
        if text.lstrip().upper().startswith("BEGIN:VCALENDAR"):
            return 0.95
        return 0.3 if path.suffix.lower() in {".ics", ".ical"} else 0.0

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise RecordError(path, None, f"cannot read: {exc.strerror or exc}") from None
        text = raw.decode("utf-8", errors="replace")
        if not text.lstrip("\ufeff \r\n\t").upper().startswith("BEGIN:VCALENDAR"):
            raise RecordError(path, 1, "not an iCalendar file: it does not start with BEGIN:VCALENDAR")
        physical = text.splitlines()
        try:
            calendars = icalendar.Calendar.from_ical(raw, multiple=True)
        except (ValueError, IndexError, KeyError, TypeError) as exc:
            line, reason = _first_bad_line(physical)
            raise RecordError(path, line, f"not a valid iCalendar file: {reason or exc}") from None
        if not calendars:
            raise RecordError(path, None, "no complete VCALENDAR (missing END:VCALENDAR?)")
        lines = _vevent_lines(physical)
        number = 0
        for cal in calendars:
            floating = self._floating_zone(path, cal)
            events = list(cal.walk("VEVENT"))
            overridden: dict[str, set[datetime]] = {}
            for ev in events:
                rid = ev.get("RECURRENCE-ID")
                if rid is not None and not isinstance(rid, str):
                    overridden.setdefault(str(ev.get("UID", "")), set()).add(_key(rid.dt))
            for ev in events:
                number += 1
                line = lines[number - 1] if number <= len(lines) else None
                uid = str(ev.get("UID", ""))
                where = f"VEVENT #{number}" + (f" UID {uid}" if uid else "")
                bad = [(name, msg) for c in ev.walk() for name, msg in c.errors
                       if not (name == "RRULE" and _rrule_whitespace_only(ev))]
                if bad:
                    name, msg = bad[0]
                    if name is None:  # a content line icalendar could not split
                        at = _first_bad_line(physical[: _end_of(physical, line)])[0] or line
                        yield RecordError(path, at, str(msg), record=where)
                        continue
                    at = _property_line(physical, line, name) if line else None
                    yield RecordError(path, at, f"property {name}: {msg}", record=where)
                    continue
                try:
                    series = _Series(ev, floating)
                    skip = set() if series.recurrence_id is not None else overridden.get(uid, set())
                    found = [Event(source=_SOURCE, type="calendar_event", timestamp=when,
                                   fields=series.fields)
                             for when in series.occurrences(self.params, skip)]
                except (ValueError, TypeError, KeyError, AttributeError) as exc:
                    yield RecordError(path, line, str(exc), record=where)
                    continue
                yield from found

    def _floating_zone(self, path: Path, cal: icalendar.Calendar) -> tzinfo | None:
        name = self.params.timezone or (str(cal["X-WR-TIMEZONE"]) if cal.get("X-WR-TIMEZONE") else None)
        if name is None:
            return None
        try:
            return resolve_timezone(name)
        except ValueError as exc:
            raise RecordError(path, None, f"X-WR-TIMEZONE: {exc}") from None


def _rrule_whitespace_only(ev: icalendar.Event) -> bool:
    """True when every RRULE parses once Exchange-style whitespace is removed."""
    try:
        for prop in _as_list(ev.get("RRULE")):
            icalendar.vRecur.from_ical(_rule_text(prop))
    except (ValueError, TypeError):
        return False
    return True

