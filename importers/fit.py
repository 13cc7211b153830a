"""FIT activity files (Garmin, Wahoo, Coros, Strava's originals), plain or gzipped, read with fitdecode.

Format
------
Garmin's binary Flexible and Interoperable data Transfer protocol: a 12- or
14-byte header whose bytes 8–11 are ``.FIT``, then definition and data
messages, then a CRC. An activity file holds ``file_id`` (the device),
``record`` messages (one per sample), ``lap``, ``session`` and ``activity``
messages. Strava's bulk export gzips them (``activities/123.fit.gz``); both
are read. Decoding (compressed timestamps, developer fields, chained files,
scale and offset of every field of the profile) is left to ``fitdecode``, the
maintained reader of the FIT SDK profile; a hand parser would re-implement
the SDK.

Timestamps and timezones
------------------------
FIT times count seconds from 1989-12-31T00:00:00Z and are UTC; fitdecode
returns them as aware UTC datetimes. A value below ``0x10000000`` is the
profile's "system time" (seconds since the device was switched on), which no
zone turns into a date: such a record is refused. ``local_timestamp`` is not
used.

Events
------
``track_point`` (one per ``record``): ``lat``, ``lon`` (semicircles × 180 / 2³¹
degrees), ``elevation_m`` (``enhanced_altitude`` or ``altitude``),
``distance_m``, ``heart_rate``, ``cadence``, ``speed_mps``
(``enhanced_speed`` or ``speed``), ``power_w``, ``temperature_c``, ``sport``
(of the file's ``sport`` message, when it comes first).

``lap`` (one per ``lap``, at its ``start_time``, or, when a device left
that out, at its ``timestamp`` (the lap's end) less ``total_elapsed_time``): ``lap`` (its
``message_index``), ``sport``, ``duration_s`` (``total_elapsed_time``),
``timer_s`` (``total_timer_time``), ``distance_m``, ``calories``,
``avg_heart_rate``, ``max_heart_rate``, ``max_speed_mps``, ``ascent_m``,
``descent_m``, ``trigger`` (``lap_trigger``).

``activity`` (one per ``session``, at its start as a lap's): the lap's fields
(``trigger`` from ``trigger``) plus ``sub_sport``, ``laps`` (``num_laps``)
and ``device`` (``<manufacturer> <product>`` of ``file_id``).

Absent or invalid FIT values (the protocol's "invalid" markers) are left out.

Errors
------
A message without its time, or with a value of the wrong kind, is yielded as
``RecordError(path, None, reason, record="record[3] at byte 1234")``. A file
that is not FIT (bad header) raises ``RecordError``; a truncated file, a
malformed message or a CRC mismatch is yielded as a ``RecordError`` naming the
byte offset, and ends the parse (what was read before it stands). A
definition declaring a field of impossible size (a firmware bug seen on Coros
watches) does not end it: fitdecode reads that field as raw bytes, and only a
record that needs it here is refused.
"""

from __future__ import annotations

import gzip
import warnings
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import fitdecode

from anonml.errors import RecordError
from anonml.model import Event
from anonml.plugins import Importer
from anonml.readers import READ_ERRORS, open_bytes, open_checked

__all__ = ["FitImporter", "SEMICIRCLE_DEG"]

#: Degrees per semicircle: the FIT profile stores an angle as a 32-bit share of 180°.
SEMICIRCLE_DEG = 180.0 / 2**31

# (FIT field, event field, kind) in the order of preference: the first present wins per event field.
_POINT = (
    ("position_lat", "lat", "angle"),
    ("position_long", "lon", "angle"),
    ("enhanced_altitude", "elevation_m", float),
    ("altitude", "elevation_m", float),
    ("distance", "distance_m", float),
    ("heart_rate", "heart_rate", int),
    ("cadence", "cadence", int),
    ("enhanced_speed", "speed_mps", float),
    ("speed", "speed_mps", float),
    ("power", "power_w", float),
    ("temperature", "temperature_c", float),
)
_SUMMARY = (
    ("message_index", "lap", int),
    ("sport", "sport", str),
    ("sub_sport", "sub_sport", str),
    ("total_elapsed_time", "duration_s", float),
    ("total_timer_time", "timer_s", float),
    ("total_distance", "distance_m", float),
    ("total_calories", "calories", int),
    ("avg_heart_rate", "avg_heart_rate", int),
    ("max_heart_rate", "max_heart_rate", int),
    ("enhanced_max_speed", "max_speed_mps", float),
    ("max_speed", "max_speed_mps", float),
    ("total_ascent", "ascent_m", float),
    ("total_descent", "descent_m", float),
    ("lap_trigger", "trigger", str),
    ("trigger", "trigger", str),
    ("num_laps", "laps", int),
)


def _is_fit_header(start: bytes) -> bool:
    return len(start) >= 12 and start[0] in (12, 14) and start[8:12] == b".FIT"


def _value(raw: Any, kind: object, name: str) -> object:
    if kind == "angle":
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise ValueError(f"{name}: {raw!r} is not a semicircle count")
        return raw * SEMICIRCLE_DEG
    if kind is str:
        return str(raw).lower()
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise ValueError(f"{name}: {raw!r} is not a number")
    if kind is int:
        if not float(raw).is_integer():
            raise ValueError(f"{name}: {raw!r} is not a whole number")
        return int(raw)
    return float(raw)


def _fields(message: fitdecode.FitDataMessage, table: tuple[tuple[str, str, object], ...]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for fit_name, name, kind in table:
        if name in fields:
            continue
        raw = _get(message, fit_name)
        if raw is None or isinstance(raw, tuple):  # invalid marker, or an array this table does not read
            continue
        fields[name] = _value(raw, kind, fit_name)
    return fields


def _get(message: fitdecode.FitDataMessage, name: str) -> Any:
    """The decoded value of field ``name``, ``None`` when absent or invalid."""
    return message.get_value(name, fallback=None) if message.has_field(name) else None


def _time(message: fitdecode.FitDataMessage, name: str) -> datetime:
    raw = _get(message, name)
    if isinstance(raw, int) and not isinstance(raw, bool):
        # fitdecode leaves a date_time below 0x10000000 as a number: the profile's "system time"
        raise ValueError(f"{name}: {raw} counts seconds from the device's power-on, not a UTC time")
    if not isinstance(raw, datetime):
        raise ValueError(f"missing {name}")
    return raw.astimezone(UTC)


def _lap_start(message: fitdecode.FitDataMessage) -> datetime:
    """``start_time``; without it, the lap's end (``timestamp``) less ``total_elapsed_time``."""
    if _get(message, "start_time") is not None:
        return _time(message, "start_time")
    elapsed = _get(message, "total_elapsed_time")
    if not isinstance(elapsed, int | float) or isinstance(elapsed, bool):
        raise ValueError("missing start_time (and no timestamp with total_elapsed_time to derive it)")
    return _time(message, "timestamp") - timedelta(seconds=elapsed)


class FitImporter(Importer):
    """Records, laps and sessions of a FIT activity file. See the module docstring."""

    name: ClassVar[str] = "fit"
    version: ClassVar[str] = "1.0"
    description: ClassVar[str] = "FIT activity files (Garmin, Wahoo, Strava .fit.gz): samples, laps, sessions"
    patterns: ClassVar[tuple[str, ...]] = ("*.fit", "*.fit.gz")

    def detect(self, path: Path) -> float:
        """0.95 for a FIT header (bytes 8–11 ``.FIT``) named ``*.fit[.gz]``, 0.9 under another name."""
        try:
            if not path.is_file():
                return 0.0
            with open_bytes(path) as fh:
                start = fh.read(14)
        except READ_ERRORS:
            return 0.0
        if not _is_fit_header(start):
            return 0.0
        named = path.name.lower().endswith((".fit", ".fit.gz"))
        return 0.95 if named else 0.9

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        counts: dict[str, int] = {}
        sport: str | None = None
        device: str | None = None
        offset = 0
        with open_checked(path, open_bytes) as fh:
            reader = fitdecode.FitReader(
                fh,
                check_crc=fitdecode.CrcCheck.RAISE,
                error_handling=fitdecode.ErrorHandling.WARN,
                keep_raw_chunks=True,
            )
            frames = iter(reader)
            while True:
                try:
                    with warnings.catch_warnings():
                        # A definition field of an impossible size (a firmware bug) is read as raw
                        # bytes and warned about; a record that needs such a field is refused below.
                        warnings.simplefilter("ignore")
                        frame = next(frames)
                except StopIteration:
                    return
                except fitdecode.FitHeaderError as exc:
                    if offset == 0:
                        raise RecordError(path, None, f"not a FIT file: {exc}") from None
                    yield RecordError(path, None, f"bad FIT header at byte {offset}: {exc}; parsing stopped")
                    return
                except fitdecode.FitEOFError as exc:
                    yield RecordError(path, None, f"truncated after byte {offset}: {exc}; parsing stopped")
                    return
                except fitdecode.FitCRCError as exc:
                    yield RecordError(path, None, f"CRC mismatch: {exc}; the data may be corrupt")
                    return
                except (fitdecode.FitError, OSError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
                    yield RecordError(path, None, f"unreadable after byte {offset}: {exc}; parsing stopped")
                    return
                if frame.chunk is not None:
                    offset = frame.chunk.offset
                if not isinstance(frame, fitdecode.FitDataMessage):
                    continue
                kind = frame.name
                index = counts.get(kind, 0)
                counts[kind] = index + 1
                try:
                    if kind == "file_id":
                        device = self._device(frame)
                    elif kind == "sport":
                        sport = _fields(frame, _SUMMARY).get("sport", sport)  # type: ignore[assignment]
                    elif kind == "record":
                        yield self._point(frame, sport)
                    elif kind in ("lap", "session"):
                        yield self._summary(frame, kind, device)
                except ValueError as exc:
                    yield RecordError(path, None, str(exc), record=f"{kind}[{index}] at byte {offset}")

    def _device(self, message: fitdecode.FitDataMessage) -> str | None:
        maker = _get(message, "manufacturer")
        product = _get(message, "garmin_product")  # the product subfield a Garmin file names
        if product is None:
            product = _get(message, "product")
        parts = [str(part) for part in (maker, product) if part is not None]
        return " ".join(parts) or None

    def _point(self, message: fitdecode.FitDataMessage, sport: str | None) -> Event:
        when = _time(message, "timestamp")
        fields = _fields(message, _POINT)
        if ("lat" in fields) != ("lon" in fields):
            raise ValueError("a latitude without a longitude or the reverse")
        if sport is not None:
            fields["sport"] = sport
        return Event(source=self.name, type="track_point", timestamp=when, fields=fields)

    def _summary(self, message: fitdecode.FitDataMessage, kind: str, device: str | None) -> Event:
        when = _lap_start(message)
        fields = _fields(message, _SUMMARY)
        if kind == "lap":
            fields.pop("laps", None)
            fields.pop("sub_sport", None)
            return Event(source=self.name, type="lap", timestamp=when, fields=fields)
        fields.pop("lap", None)
        if device is not None:
            fields["device"] = device
        return Event(source=self.name, type="activity", timestamp=when, fields=fields)
