"""Uber rides: the data-download trips CSV (two header styles) and a saved trips page.

**CSV, ``Request Time`` style** (Uber's "Download your data", ``Rider/trips_data.csv``)::

    City,Product Type,Trip or Order Status,Request Time,Begin Trip Time,Begin Trip Lat,
    Begin Trip Lng,Begin Trip Address,Dropoff Time,Dropoff Lat,Dropoff Lng,Dropoff Address,
    Distance (miles),Fare Amount,Fare Currency
    Boston,UberX,COMPLETED,2019-05-09 06:26:38 +0000 UTC,2019-05-09 06:31:02 +0000 UTC,
    42.35,-71.06,"1 Main St, Boston",2019-05-09 06:50:40 +0000 UTC,42.36,-71.1,"..",3.2,14.87,USD

Times are ``YYYY-MM-DD HH:MM:SS +HHMM <zone name>``: the offset is used, the
trailing name ignored. Trips that never began carry the sentinel
``1970-01-01 00:00:00 +0000 UTC`` for begin/dropoff: treated as absent.

**CSV, snake_case style** (``city,product_type,status,request_time,begin_trip_time,
begintrip_lat,begintrip_lng,begintrip_address,dropoff_time,dropoff_lat,dropoff_lng,
dropoff_address,distance,fare_currency,fare_amount``) with *naive* times
``2017-02-27 12:18:00``. **Timezone rule**: naive times are read in params
``timezone`` (an IANA name, e.g. ``"America/New_York"``, or ``"UTC"``); there
is no default zone — without it such a file raises RecordError at its header
line, and a naive cell in a ``Request Time`` file is a bad record. ``distance``
is taken to be miles like Uber's own column (the layout mirrors Uber's).

**Saved trips page** (``riders.uber.com/trips`` saved as HTML, the table
layout of 2015–2018). Selectors relied on:

* a trip row: ``tr.trip-expand__origin``;
* its cells by ``data-title`` (``Pickup`` or ``Date``, ``Fare``, ``Car``,
  ``City``; ``Driver`` and ``Payment Method`` are never read), else by
  position (arrow, date, driver, fare, car, city, payment);
* the date as ``MM/DD/YY`` or ``MM/DD/YYYY``;
* the fare cell: an amount with a currency symbol or ISO code
  (``$12.34``, ``€8,50``, ``USD 12.34``) and an optional
  ``span.text-danger`` status (``Canceled``);
* the row's ``data-target="#trip-<id>"`` names the detail element, whose two
  ``.trip-address`` blocks hold pickup and dropoff: a ``p`` with the local time
  (``3:04 PM`` or ``15:04``) and an ``h6`` with the address.

A page with no ``tr.trip-expand__origin`` raises RecordError. Page times
are local: the same ``timezone`` param is required.

Events (``source="uber"``, ``type="trip"``, timestamp = request time; on the
page, pickup time or else the pickup date at 00:00 local). Fields: ``city``,
``product_type`` and ``status`` (both lower snake_case, so the ``UberX``,
``uberX`` and ``uberx`` that different exports write are one category:
``uberx``, ``uberx_share``; ``completed``, ``rider_canceled``), ``fare_amount``
(float), ``fare_currency`` (ISO code; a bare ``$`` stays ``"$"``, it is
ambiguous), ``distance_mi`` (float),
``begin_time`` / ``dropoff_time`` (datetime), ``wait_minutes`` (begin −
request), ``duration_minutes`` (dropoff − begin), ``begin_address`` /
``dropoff_address`` (Text), ``begin_lat`` / ``begin_lng`` / ``dropoff_lat`` /
``dropoff_lng`` (float). Empty cells are left out.
"""

from __future__ import annotations

import csv
import functools
import math
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from pathlib import Path
from typing import ClassVar

from bs4 import BeautifulSoup, Tag

from anonml.errors import RecordError
from anonml.importer_kit import csv_header
from anonml.model import Event, Text
from anonml.plugins import Importer, PluginParams
from anonml.readers import TimeZoneName, csv_rows, head, open_lines, open_text, resolve_timezone

__all__ = ["UberImporter"]

_SOURCE = "uber"
# Canonical key → (header in the "Request Time" style, header in the snake_case style).
_HEADERS = {
    "city": ("City", "city"), "product_type": ("Product Type", "product_type"),
    "status": ("Trip or Order Status", "status"), "request": ("Request Time", "request_time"),
    "begin": ("Begin Trip Time", "begin_trip_time"), "begin_lat": ("Begin Trip Lat", "begintrip_lat"),
    "begin_lng": ("Begin Trip Lng", "begintrip_lng"),
    "begin_address": ("Begin Trip Address", "begintrip_address"), "dropoff": ("Dropoff Time", "dropoff_time"),
    "dropoff_lat": ("Dropoff Lat", "dropoff_lat"), "dropoff_lng": ("Dropoff Lng", "dropoff_lng"),
    "dropoff_address": ("Dropoff Address", "dropoff_address"), "distance": ("Distance (miles)", "distance"),
    "fare": ("Fare Amount", "fare_amount"), "currency": ("Fare Currency", "fare_currency"),
}
_REQUEST_STYLE = {key: request for key, (request, _) in _HEADERS.items()}
_SNAKE_STYLE = {key: snake for key, (_, snake) in _HEADERS.items()}
_SENTINEL = datetime(1970, 1, 1, tzinfo=UTC)
_STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)(?:\s*([+-]\d{2}:?\d{2}|Z))?"
                    r"(?:\s+[A-Za-z_/]+)?$")
_CURRENCY = {
    "US$": "USD", "CA$": "CAD", "C$": "CAD", "A$": "AUD", "AU$": "AUD", "NZ$": "NZD",
    "S$": "SGD", "HK$": "HKD", "R$": "BRL", "MX$": "MXN", "€": "EUR", "£": "GBP",
    "₹": "INR", "¥": "JPY", "₩": "KRW", "₺": "TRY", "₱": "PHP", "₪": "ILS", "$": "$",
}
_AMOUNT = re.compile(r"(?P<cur>[A-Z]{3}|[A-Z]{0,3}\$|[€£₹¥₩₺₱₪])?\s*(?P<num>\d[\d,]*(?:\.\d+)?)")


def _snake(text: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", text.lower()).strip("_")


@functools.cache
def _offset_zone(offset: str) -> tzinfo:
    """``"+0000"``, ``"-05:00"`` or ``"Z"`` as a fixed-offset tzinfo (cached: exports repeat one)."""
    if offset == "Z":
        return UTC
    minutes = int(offset[1:3]) * 60 + int(offset[-2:])
    return timezone(timedelta(minutes=-minutes if offset[0] == "-" else minutes))


def _time(text: str, zone: tzinfo | None, column: str) -> datetime | None:
    """A trips-CSV time; ``None`` for the 1970 sentinel. Naive values need ``zone``."""
    match = _STAMP.match(text)
    if match is None:
        raise ValueError(f"{column}: {text!r} is not like '2019-05-09 06:26:38 +0000 UTC'")
    local = datetime.fromisoformat(match[1])
    offset = match[2]
    if offset:
        when = local.replace(tzinfo=_offset_zone(offset)).astimezone(UTC)
    elif zone is None:
        raise ValueError(f"{column}: {text!r} has no UTC offset; pass params timezone (IANA name)")
    else:
        when = local.replace(tzinfo=zone).astimezone(UTC)
    return None if when == _SENTINEL else when


def _coordinate(text: str, column: str, limit: float) -> float:
    value = float(text)
    if not math.isfinite(value) or abs(value) > limit:
        raise ValueError(f"{column}: {text!r} is not a coordinate within ±{limit:g}")
    return value


def _trip_fields(cells: dict[str, str], zone: tzinfo | None, cols: dict[str, str]
                 ) -> tuple[datetime, dict]:
    """The timestamp and fields of one CSV row given as canonical key → cell text."""
    fields: dict = {}
    if cells.get("city"):
        fields["city"] = cells["city"]
    if cells.get("product_type") and (product := _snake(cells["product_type"])):
        fields["product_type"] = product
    if cells.get("status"):
        fields["status"] = _snake(cells["status"])
    times = {}
    for key in ("request", "begin", "dropoff"):
        if cells.get(key):
            times[key] = _time(cells[key], zone, cols[key])
    request = times.get("request")
    if request is None:
        raise ValueError(f"{cols['request']}: missing request time")
    begin, dropoff = times.get("begin"), times.get("dropoff")
    if begin is not None:
        fields["begin_time"] = begin
        fields["wait_minutes"] = (begin - request).total_seconds() / 60.0
    if dropoff is not None:
        fields["dropoff_time"] = dropoff
        if begin is not None:
            fields["duration_minutes"] = (dropoff - begin).total_seconds() / 60.0
    for key, limit in (("begin_lat", 90), ("begin_lng", 180), ("dropoff_lat", 90), ("dropoff_lng", 180)):
        if cells.get(key):
            try:
                fields[key] = _coordinate(cells[key], cols[key], limit)
            except ValueError as exc:
                raise ValueError(str(exc) if "coordinate" in str(exc)
                                 else f"{cols[key]}: {cells[key]!r} is not a number") from None
    for key, name in (("distance", "distance_mi"), ("fare", "fare_amount")):
        if cells.get(key):
            try:
                value = float(cells[key].replace(",", ""))
            except ValueError:
                raise ValueError(f"{cols[key]}: {cells[key]!r} is not a number") from None
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{cols[key]}: {cells[key]!r} is not a non-negative number")
            fields[name] = value
    if cells.get("currency"):
        fields["fare_currency"] = cells["currency"].upper()
    for key in ("begin_address", "dropoff_address"):
        if cells.get(key):
            fields[key] = Text(cells[key])
    return request, fields


class _Params(PluginParams):
    """Where naive local times are (snake_case CSV, saved page)."""

    timezone: TimeZoneName | None = None


class UberImporter(Importer):
    """Uber trips: data-download CSV (both header styles) and the saved trips page."""

    name: ClassVar[str] = "uber"
    version: ClassVar[str] = "1.0"
    description: ClassVar[str] = "Uber ride history: trips_data.csv (both styles) or a saved trips page"
    patterns: ClassVar[tuple[str, ...]] = ("trips_data.csv", "trips_data-*.csv", "*trips*.html")
    Params = _Params

    def _zone(self) -> tzinfo | None:
        return resolve_timezone(self.params.timezone) if self.params.timezone else None

    def detect(self, path: Path) -> float:
        text = head(path)
        if not text:
            return 0.0
        first = text.splitlines()[0] if text.strip() else ""
        if "Request Time" in first and "Product Type" in first and "Dropoff Time" in first:
            return 0.95
        if "begintrip_lat" in first and "product_type" in first and "request_time" in first:
            return 0.95
        if text.lstrip().startswith("<") and ("trip-expand__origin" in text or "trips-table" in text):
            return 0.9
        if "uber" in text.lower()[:4096] and text.lstrip().startswith("<"):
            return 0.3
        return 0.3 if path.name.lower().startswith("trips_data") else 0.0

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        if head(path, 256).lstrip().startswith("<"):
            yield from self._parse_html(path)
        else:
            yield from self._parse_csv(path)

    def _parse_csv(self, path: Path) -> Iterator[Event | RecordError]:
        zone = self._zone()
        with open_lines(path) as lines:  # decoded line by line: a bad byte is its row's error
            reader = csv.reader(lines, strict=True)
            header = [h.strip() for h in csv_header(reader, lines, path) or []]
            if "Request Time" in header:
                cols = _REQUEST_STYLE
            elif "request_time" in header:
                cols = _SNAKE_STYLE
                if zone is None:
                    raise RecordError(path, 1, "this trips CSV (snake_case header) has times without "
                                      "a UTC offset; pass params timezone, an IANA name such as "
                                      "'America/New_York' or 'UTC'")
            else:
                raise RecordError(path, 1, "not an Uber trips CSV: no 'Request Time' or "
                                  f"'request_time' column in header {header}")
            index = {h: i for i, h in enumerate(header)}
            present = {key: index[col] for key, col in cols.items() if col in index}
            for item in csv_rows(reader, path, len(header), lines):
                if isinstance(item, RecordError):
                    yield item
                    continue
                line, row = item
                cells = {key: row[i].strip() for key, i in present.items()}
                try:
                    when, fields = _trip_fields(cells, zone, cols)
                except ValueError as exc:
                    yield RecordError(path, line, str(exc))
                    continue
                yield Event(source=_SOURCE, type="trip", timestamp=when, fields=fields)

    def _parse_html(self, path: Path) -> Iterator[Event | RecordError]:
        try:
            with open_text(path) as fh:
                soup = BeautifulSoup(fh.read(), "html.parser")
        except (OSError, UnicodeDecodeError) as exc:
            raise RecordError(path, None, f"cannot read: {exc}") from None
        rows = soup.select("tr.trip-expand__origin")
        if not rows:
            raise RecordError(path, None, "page structure not recognised: no tr.trip-expand__origin "
                              "trip rows (expected a saved riders.uber.com/trips page)")
        zone = self._zone()
        if zone is None:
            raise RecordError(path, None, "a saved trips page shows local times; pass params "
                              "timezone, an IANA name such as 'Europe/London' or 'UTC'")
        for index, row in enumerate(rows):
            try:
                when, fields = _html_trip(soup, row, zone)
            except ValueError as exc:
                yield RecordError(path, row.sourceline, str(exc), record=f"trip row {index + 1}")
                continue
            yield Event(source=_SOURCE, type="trip", timestamp=when, fields=fields)


_POSITIONS = {"date": 1, "fare": 3, "product_type": 4, "city": 5}
_TITLES = {"pickup": "date", "date": "date", "fare": "fare", "car": "product_type",
           "vehicle": "product_type", "city": "city"}


def _html_cells(row: Tag) -> dict[str, Tag]:
    tds = row.find_all("td", recursive=False)
    titled = {_TITLES[t]: td for td in tds
              if (t := str(td.get("data-title", "")).strip().lower()) in _TITLES}
    if "date" in titled:
        return titled
    if len(tds) < 6:
        raise ValueError(f"trip row has {len(tds)} cells and no data-title attributes; "
                         "expected arrow, date, driver, fare, car, city, payment")
    return {key: tds[i] for key, i in _POSITIONS.items()}


def _clock(text: str) -> tuple[int, int]:
    for fmt in ("%I:%M %p", "%H:%M", "%I:%M%p"):
        try:
            parsed = datetime.strptime(text.strip().upper().replace(".", ""), fmt)
        except ValueError:
            continue
        return parsed.hour, parsed.minute
    raise ValueError(f"time {text!r} is not like '3:04 PM' or '15:04'")


def _html_trip(soup: BeautifulSoup, row: Tag, zone: tzinfo) -> tuple[datetime, dict]:
    cells = _html_cells(row)
    date_text = cells["date"].get_text(" ", strip=True)
    day = None
    for fmt in ("%m/%d/%y", "%m/%d/%Y"):
        try:
            day = datetime.strptime(date_text, fmt)
            break
        except ValueError:
            continue
    if day is None:
        raise ValueError(f"date {date_text!r} is not MM/DD/YY")
    fields: dict = {}
    if "city" in cells and (text := cells["city"].get_text(" ", strip=True)):
        fields["city"] = text
    if "product_type" in cells and (text := _snake(cells["product_type"].get_text(" ", strip=True))):
        fields["product_type"] = text
    if "fare" in cells:
        fare = cells["fare"]
        status_tag = fare.select_one(".text-danger")
        text = fare.get_text(" ", strip=True)
        if status_tag is not None and status_tag.get_text(strip=True):
            fields["status"] = _snake(status_tag.get_text(strip=True))
        elif "cancel" in text.lower():
            fields["status"] = "canceled"
        amount = _AMOUNT.search(text)
        if amount is not None:
            number = amount["num"]
            # "8,50" is a decimal comma; "1,234.50" has a thousands separator.
            decimal_comma = re.fullmatch(r"\d+,\d{2}", number) is not None
            number = number.replace(",", ".") if decimal_comma else number.replace(",", "")
            fields["fare_amount"] = float(number)
            if amount["cur"]:
                fields["fare_currency"] = _CURRENCY.get(amount["cur"], amount["cur"])
            fields.setdefault("status", "completed")
    local = day.replace(tzinfo=zone)
    timestamp = local.astimezone(UTC)
    target = str(row.get("data-target", "")).lstrip("#")
    detail = soup.find(id=target) if target else None
    if detail is not None:
        stops = detail.select(".trip-address")
        prev: datetime | None = None
        for key, stop in zip(("begin", "dropoff"), stops[:2], strict=False):
            clock, place = stop.find("p"), stop.find("h6")
            if place is not None and place.get_text(strip=True):
                fields[f"{key}_address"] = Text(place.get_text(" ", strip=True))
            if clock is not None and clock.get_text(strip=True):
                hour, minute = _clock(clock.get_text(strip=True))
                at = local.replace(hour=hour, minute=minute)
                if prev is not None and at < prev:
                    at += timedelta(days=1)  # a ride past midnight
                fields[f"{key}_time"] = at.astimezone(UTC)
                prev = at
        if "begin_time" in fields:
            timestamp = fields["begin_time"]
            if "dropoff_time" in fields:
                span = fields["dropoff_time"] - fields["begin_time"]
                fields["duration_minutes"] = span.total_seconds() / 60.0
    return timestamp, fields
