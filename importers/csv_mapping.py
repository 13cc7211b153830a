"""Any CSV file, read through a declarative mapping given as params.

A CSV export is a header row followed by one record per row. Nothing about
its meaning can be inferred safely, so the mapping says it all::

    {"timestamp_column": "Date", "timestamp_format": "%d/%m/%Y %H:%M",
     "timezone": "Europe/Paris",
     "event_type": "purchase",                     # or "event_type_column": "kind"
     "fields": {"Amount": "float", "Items": "int", "Refunded": "bool",
                "Shop": "categorical", "Note": "text", "Shipped": "datetime"},
     "delimiter": ";", "user_column": "Customer"}

Columns of the mapping (all optional except what the data needs):

``timestamp_column``
    The column holding the event time; ``None`` makes static events (no
    timestamp).
``timestamp_format``
    ``"iso"`` (ISO 8601, the default), ``"epoch_s"`` / ``"epoch_ms"`` (Unix
    time, always UTC), or a ``datetime.strptime`` pattern (``"%d/%m/%Y %H:%M"``).
``timezone``
    The IANA zone (``"Europe/Paris"``) naive values are in. ``None`` (the
    default) means the column carries UTC offsets (``2020-01-05T10:00:00+01:00``,
    ``…Z`` or ``%z`` in the pattern): then a value without one is a bad record.
    A value that carries an offset keeps it even when ``timezone`` is set. A
    timezone is never guessed and never taken from the file's modification time.
``event_type`` / ``event_type_column``
    A constant type (default ``"row"``), or the column whose value (turned to
    snake_case: ``"Page View"`` → ``page_view``) is the type of each row.
``fields``
    Column → declared type. ``float`` and ``int`` parse numbers (``int``
    refuses ``"1.5"``); ``bool`` accepts true/false, yes/no, y/n, t/f, 1/0 in
    any case; ``categorical`` keeps the string (a low-cardinality category);
    ``text`` keeps it as :class:`~anonml.model.Text` (free text: never
    one-hot encoded); ``datetime`` parses like the timestamp (same format and
    zone rule). The field is named after the column in snake_case
    (``"Unit Price"`` → ``unit_price``). An empty cell leaves the field out.
``required``
    Columns whose cells must not be empty.
``delimiter``
    One character, default ``","``; ``quotechar`` default ``'"'``.
``user_column``
    The column naming whose event each row is (else the caller's user).

Errors name the physical line where the row starts (a quoted cell may span
lines; the header is line 1) and the column: ``data.csv:7: column 'Amount':
'12,5' is not a float``. A header lacking a mapped column raises (the file is
not what the mapping describes). ``detect`` is deliberately low (≤ 0.25), so
every importer of a specific CSV export wins over this one.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from anonml.errors import RecordError
from anonml.importer_kit import csv_header
from anonml.model import Event, Text
from anonml.plugins import Importer, PluginParams
from anonml.readers import TimeZoneName, csv_rows, head, open_lines, parse_timestamp, resolve_timezone

__all__ = ["CsvImporter", "CsvMapping", "FieldType", "snake_case"]

FieldType = Literal["float", "int", "bool", "categorical", "text", "datetime"]

_TRUE = frozenset({"true", "t", "yes", "y", "1"})
_FALSE = frozenset({"false", "f", "no", "n", "0"})
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def snake_case(text: str) -> str:
    """``"Unit Price (€)"`` → ``"unit_price"``: lower case, runs of other characters → ``_``."""
    return re.sub(r"[^0-9a-z]+", "_", text.strip().lower()).strip("_")


class CsvMapping(PluginParams):
    """The declarative mapping of one CSV layout (the csv importer's params)."""

    timestamp_column: str | None = Field(default=None, min_length=1, max_length=256)
    timestamp_format: str = Field(default="iso", min_length=1, max_length=128)
    timezone: TimeZoneName | None = None
    event_type: str = Field(default="row", pattern=r"^[a-z][a-z0-9_]{0,63}$")
    event_type_column: str | None = Field(default=None, min_length=1, max_length=256)
    fields: dict[str, FieldType] = Field(default_factory=dict, max_length=1000)
    required: tuple[str, ...] = Field(default=(), max_length=1000)
    delimiter: str = Field(default=",", min_length=1, max_length=1)
    quotechar: str = Field(default='"', min_length=1, max_length=1)
    user_column: str | None = Field(default=None, min_length=1, max_length=256)

    @field_validator("timestamp_format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value not in {"iso", "epoch_s", "epoch_ms"} and "%" not in value:
            raise ValueError("use 'iso', 'epoch_s', 'epoch_ms' or a strptime pattern with % codes")
        return value

    @model_validator(mode="after")
    def _distinct_names(self) -> CsvMapping:
        names = [snake_case(c) for c in self.fields]
        if any(not n for n in names):
            raise ValueError("a field column name has no letters or digits")
        if len(set(names)) != len(names):
            raise ValueError(f"two field columns share one snake_case name: {sorted(names)}")
        return self


class _Time:
    """Parses one timestamp-like cell under the mapping's format and zone rule."""

    def __init__(self, fmt: str, zone: tzinfo | None) -> None:
        self.fmt, self.zone = fmt, zone

    def __call__(self, text: str) -> datetime:
        if self.fmt in ("epoch_s", "epoch_ms"):
            number = float(text)
            if not math.isfinite(number):
                raise ValueError(f"{text!r} is not a Unix time")
            return _EPOCH + timedelta(seconds=number / (1000.0 if self.fmt == "epoch_ms" else 1.0))
        try:
            return parse_timestamp(text, fmt=None if self.fmt == "iso" else self.fmt,
                                   assume_tz=self.zone)
        except ValueError as exc:
            if "no UTC offset" in str(exc):
                raise ValueError(
                    f"{text!r} has no UTC offset and the mapping sets no timezone"
                ) from None
            what = "an ISO 8601 time" if self.fmt == "iso" else f"a time in format {self.fmt!r}"
            raise ValueError(f"{text!r} is not {what}") from None


def _as_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError
    return value


def _as_bool(text: str) -> bool:
    low = text.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError


_CONVERT: dict[str, Callable[[str], object]] = {
    "float": _as_float,
    "int": int,
    "bool": _as_bool,
    "categorical": str,
    "text": Text,
}


class CsvImporter(Importer):
    """Any CSV, mapped declaratively to typed events (see the module docstring)."""

    name: ClassVar[str] = "csv"
    version: ClassVar[str] = "1.0"
    description: ClassVar[str] = "Any CSV file, through a declarative column mapping (params)"
    patterns: ClassVar[tuple[str, ...]] = ("*.csv", "*.tsv")

    Params = CsvMapping

    def detect(self, path: Path) -> float:
        text = head(path)
        if not text or "\x00" in text:
            return 0.0
        first = text.splitlines()[0] if text.splitlines() else ""
        header = next(csv.reader([first], delimiter=self.params.delimiter), [])
        if len(header) < 2:
            return 0.0
        mapped = self._mapped_columns()
        if mapped and mapped <= {h.strip() for h in header}:
            return 0.25  # the header holds every column the mapping names
        return 0.05 if path.suffix.lower() in {".csv", ".tsv"} else 0.0

    def _mapped_columns(self) -> set[str]:
        p = self.params
        cols = set(p.fields) | set(p.required)
        cols |= {c for c in (p.timestamp_column, p.event_type_column, p.user_column) if c}
        return cols

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        p = self.params
        if not p.fields and p.timestamp_column is None and p.event_type_column is None:
            raise RecordError(path, None, "the csv importer needs a mapping: set params "
                              "timestamp_column and fields (see `anonml plugins`)")
        zone = resolve_timezone(p.timezone) if p.timezone else None
        to_time = _Time(p.timestamp_format, zone)
        converters = {col: (to_time if kind == "datetime" else _CONVERT[kind])
                      for col, kind in p.fields.items()}
        names = {col: snake_case(col) for col in p.fields}
        with open_lines(path) as lines:  # decoded line by line: a bad byte is its row's error
            reader = csv.reader(lines, delimiter=p.delimiter, quotechar=p.quotechar, strict=True)
            header = csv_header(reader, lines, path)
            if not header:
                raise RecordError(path, 1, "empty file: no header row")
            header = [h.lstrip("\ufeff").strip() for h in header]
            missing = sorted(self._mapped_columns() - set(header))
            if missing:
                raise RecordError(path, 1, f"header lacks mapped column(s) {missing}; "
                                  f"it has {header}")
            index = {name: i for i, name in enumerate(header)}
            required = set(p.required) | {c for c in (p.timestamp_column, p.event_type_column,
                                                     p.user_column) if c}
            for item in csv_rows(reader, path, len(header), lines):
                if isinstance(item, RecordError):
                    yield item
                    continue
                start, row = item
                yield self._event(path, start, row, index, required, converters, names, to_time)

    def _event(
        self,
        path: Path,
        line: int,
        row: list[str],
        index: dict[str, int],
        required: set[str],
        converters: dict[str, Callable[[str], object]],
        names: dict[str, str],
        to_time: _Time,
    ) -> Event | RecordError:
        """One row as an event, or a RecordError naming the row's line and the column."""
        p = self.params
        column = ""
        try:
            for column in sorted(required):
                if not row[index[column]].strip():
                    raise ValueError("empty cell in a required column")
            timestamp = None
            if p.timestamp_column:
                column = p.timestamp_column
                timestamp = to_time(row[index[column]].strip())
            event_type = p.event_type
            if p.event_type_column:
                column = p.event_type_column
                event_type = snake_case(row[index[column]])
                if not event_type or not event_type[0].isalpha():
                    raise ValueError(f"{row[index[column]]!r} is not a usable event type")
            fields = {}
            for column, convert in converters.items():
                cell = row[index[column]].strip()
                if not cell:
                    continue
                try:
                    fields[names[column]] = convert(cell)
                except ValueError:
                    kind = p.fields[column]
                    if kind == "datetime":
                        raise
                    article = "an" if kind[0] in "aeiou" else "a"
                    raise ValueError(f"{cell!r} is not {article} {kind}") from None
            user = None
            if p.user_column:
                column = p.user_column
                user = row[index[column]].strip()[:256]
            return Event(source=self.name, type=event_type[:256], timestamp=timestamp,
                         fields=fields, user=user)
        except ValueError as exc:
            return RecordError(path, line, f"column {column!r}: {exc}")
