"""Google My Activity (Takeout ``My Activity/<Product>/My Activity.json|.html``).

**JSON** (streamed element by element): an array of records::

    [{"header": "Search",
      "title": "Searched for \\"myactivity\\" google export",
      "titleUrl": "https://www.google.com/search?q=%22myactivity%22+google+export",
      "time": "2019-05-30T15:37:14.947Z",
      "products": ["Search"],
      "subtitles": [{"name": "Channel name", "url": "https://www.youtube.com/channel/.."}],
      "details": [{"name": "From Google Ads"}],
      "description": "..",
      "locationInfos": [{"name": "Around this area",
                         "url": "https://www.google.com/maps/@?api=1&map_action=map&center=37.77,-122.42",
                         "source": "From your device", "sourceUrl": ".."}]}]

``products``: the Google product(s) the record belongs to (Search, Maps,
YouTube, Ads, …); ``header``: what the record is about — often the product,
but in real exports as often the website or app (a real Ads file whose 5,796
records all say ``products: ["Ads"]`` has 755 distinct headers such as
``youtube.com`` or ``AirBattery``; Play Music records say ``Google Play Music``
or ``Play Music``); ``title``: the action and its object; ``time``: ISO 8601
in UTC (``Z``); the rest optional.

**HTML** (parsed with beautifulsoup4, whole document in memory: a 50 MB
export needs ~0.5 GB). One record per ``div.outer-cell``::

    <div class="outer-cell mdl-cell mdl-cell--12-col mdl-shadow--2dp"><div class="mdl-grid">
      <div class="header-cell mdl-cell mdl-cell--12-col"><p class="mdl-typography--title">Search<br></p></div>
      <div class="content-cell mdl-cell mdl-cell--6-col mdl-typography--body-1">
        Searched for&nbsp;<a href="https://www.google.com/search?q=foo">foo</a><br>
        Jan 5, 2020, 3:04:05 PM PST</div>
      <div class="content-cell mdl-cell mdl-cell--6-col mdl-typography--body-1
                  mdl-typography--text-right"></div>
      <div class="content-cell mdl-cell mdl-cell--12-col mdl-typography--caption">
        <b>Products:</b><br>&emsp;Search<br>
        <b>Locations:</b><br>&emsp;At <a href="https://www.google.com/maps/@?api=1&amp;center=1.5,2.5">this
        general area</a> - From your device<br>
        <b>Details:</b><br>&emsp;From Google Ads<br></div></div></div>

Selectors relied on: ``div.outer-cell`` (a record); ``.header-cell`` text (the
header, as in JSON); the first ``.content-cell`` whose classes include
``mdl-typography--body-1`` (lines separated by ``<br>``: the first is the
title, with its first ``<a href>`` as the URL; middle lines are subtitles;
the last is the time); the ``.content-cell`` with ``mdl-typography--caption``
(``<b>Products:</b>``, ``<b>Locations:</b>``, ``<b>Details:</b>`` sections).
A page with no ``div.outer-cell`` raises RecordError. Google's page opens with
its whole inline stylesheet (the first record of a real export starts at byte
141,460), so :meth:`GoogleActivityImporter.detect` looks for the first
``outer-cell`` record and its ``content-cell`` in up to
:data:`HTML_DETECT_BYTES` (1 MiB), whatever the file is called.

**HTML time** is local time with a timezone *abbreviation*:
``Jan 5, 2020, 3:04:05 PM PST`` (en-US; the space before AM/PM may be a
narrow no-break space) or ``5 Jan 2020, 15:04:05 CET`` (en-GB). The
abbreviation is resolved through :data:`TZ_ABBREVIATIONS` (below; extend or
override it with params ``abbreviations``), or written ``GMT+2`` /
``UTC-05:30``. An abbreviation in neither is a bad record, never guessed, and
the file's modification time is never used. Abbreviations are ambiguous
world-wide (CST is also China, IST also Ireland and Israel); the table
follows what Google prints for an en-US account, and an account in another
zone sets ``abbreviations``.

Events (``source="google_activity"``): type = the product in snake_case
(``search``, ``maps``, ``youtube``, ``ads``, ``google_play_store``); product =
the first of ``products`` (JSON) or of the caption's ``Products:`` (HTML), else
the header, else the parent folder's name.
Fields: ``product`` (str), ``header`` (str, when given), ``action`` (str: the title's first word, e.g.
``Searched``, ``Visited``, ``Watched``), ``title`` (Text), ``url`` (Text),
``query`` (Text: the rest of a ``Searched for …`` title), ``channel`` (Text:
the first subtitle), ``subtitle_count`` (int), ``from_ads`` (bool: a detail
"From Google Ads"), ``location_source`` (str), ``location_lat`` /
``location_lng`` (float, from the location URL's ``center=`` or ``@lat,lng``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

from bs4 import BeautifulSoup, NavigableString, Tag
from pydantic import Field, field_validator

from anonml.errors import RecordError
from anonml.json_stream import iter_json_items
from anonml.model import Event, Text
from anonml.plugins import Importer, PluginParams
from anonml.readers import READ_ERRORS, head, open_bytes, open_text, parse_timestamp

__all__ = ["GoogleActivityImporter", "TZ_ABBREVIATIONS", "HTML_DETECT_BYTES", "parse_activity_time"]

_SOURCE = "google_activity"

#: How far :meth:`GoogleActivityImporter.detect` reads into an HTML page for its first record.
HTML_DETECT_BYTES = 1 << 20

#: Timezone abbreviation → UTC offset in minutes, as Google prints them for en-US / en-GB.
TZ_ABBREVIATIONS: dict[str, int] = {
    "UTC": 0, "GMT": 0, "Z": 0, "WET": 0, "BST": 60, "IST": 330, "WEST": 60,
    "CET": 60, "CEST": 120, "MET": 60, "MEST": 120, "EET": 120, "EEST": 180, "MSK": 180,
    "HST": -600, "HDT": -540, "AKST": -540, "AKDT": -480,
    "PST": -480, "PDT": -420, "MST": -420, "MDT": -360,
    "CST": -360, "CDT": -300, "EST": -300, "EDT": -240,
    "AST": -240, "ADT": -180, "NST": -210, "NDT": -150,
    "JST": 540, "KST": 540, "HKT": 480, "SGT": 480, "PHT": 480, "WIB": 420,
    "AWST": 480, "ACST": 570, "ACDT": 630, "AEST": 600, "AEDT": 660,
    "NZST": 720, "NZDT": 780, "SAST": 120, "WAT": 60, "CAT": 120, "EAT": 180,
    "TRT": 180,  # Turkey, on +03:00 all year since 2016: a real en-US page of 2024 says "PM TRT"
}

_OFFSET_NAME = re.compile(r"^(?:GMT|UTC)([+-])(\d{1,2})(?::?(\d{2}))?$")
_TIME = re.compile(r"^(?P<local>.+?\d{1,2}:\d{2}:\d{2}(?:\s*[AaPp]\.?[Mm]\.?)?)\s+(?P<tz>\S+)$")
_FORMATS = ("%b %d, %Y, %I:%M:%S %p", "%d %b %Y, %H:%M:%S", "%b %d, %Y, %H:%M:%S")


def parse_activity_time(text: str, table: dict[str, int] | None = None) -> datetime:
    """``"Jan 5, 2020, 3:04:05 PM PST"`` → aware UTC datetime, via an explicit abbreviation table.

    Raises
    ------
    ValueError
        Unparseable text, or an abbreviation that is neither in ``table``
        (default :data:`TZ_ABBREVIATIONS`) nor written ``GMT±H[:MM]``.
    """
    table = TZ_ABBREVIATIONS if table is None else table
    clean = " ".join(text.replace("\u202f", " ").replace("\xa0", " ").split())
    clean = clean.replace("Sept ", "Sep ")
    match = _TIME.match(clean)
    if match is None and re.search(r"\d{1,2}:\d{2}:\d{2}(?:\s*[AaPp]\.?[Mm]\.?)?$", clean):
        raise ValueError(f"time {text!r} has no timezone abbreviation")
    if match is None:
        raise ValueError(f"time {text!r} is not like 'Jan 5, 2020, 3:04:05 PM PST'")
    abbr = match["tz"]
    if abbr.upper().replace(".", "") in {"AM", "PM"}:
        raise ValueError(f"time {text!r} has no timezone abbreviation")
    if abbr in table:
        minutes = table[abbr]
    elif (off := _OFFSET_NAME.match(abbr)) is not None:
        minutes = (int(off[2]) * 60 + int(off[3] or 0)) * (1 if off[1] == "+" else -1)
    else:
        raise ValueError(
            f"unknown timezone abbreviation {abbr!r} in {text!r}; "
            "add it to params abbreviations (e.g. {\"" + abbr + "\": \"+01:00\"})"
        )
    local = re.sub(r"\s*([AaPp])\.?[Mm]\.?$", r" \1M", match["local"])
    for fmt in _FORMATS:
        try:
            naive = datetime.strptime(local, fmt)
        except ValueError:
            continue
        return naive.replace(tzinfo=timezone(timedelta(minutes=minutes))).astimezone(UTC)
    raise ValueError(f"time {text!r} is not like 'Jan 5, 2020, 3:04:05 PM PST'")


def _offset_minutes(value: str) -> int:
    match = re.fullmatch(r"([+-])(\d{2}):?(\d{2})", value.strip())
    if match is None:
        raise ValueError(f"offset {value!r} is not like '+05:30'")
    minutes = int(match[2]) * 60 + int(match[3])
    if minutes > 14 * 60:
        raise ValueError(f"offset {value!r} is beyond ±14:00")
    return minutes if match[1] == "+" else -minutes


def _snake(text: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", text.lower()).strip("_") or "unknown"


def _location_point(url: str) -> tuple[float, float] | None:
    """``…center=37.77,-122.42…`` or ``…/@37.77,-122.42,…`` in a Maps URL → (lat, lng)."""
    parts = urlsplit(url)
    center = parse_qs(parts.query).get("center")
    text = center[0] if center else None
    if text is None and "/@" in parts.path:
        text = parts.path.split("/@", 1)[1]
    if not text:
        return None
    try:
        lat, lng = (float(x) for x in text.split(",")[:2])
    except ValueError:
        return None
    return (lat, lng) if abs(lat) <= 90 and abs(lng) <= 180 else None


def _product(products: list[str], header: str, folder: str) -> str:
    """What the record's type is: its first product, else its header, else the folder's name."""
    return next((p for p in products if p.strip()), None) or header or folder


def _fields(product: str, header: str, title: str, url: str | None, subtitles: list[str],
            details: list[str], location: tuple[str | None, str | None] | None) -> dict[str, Any]:
    fields: dict[str, Any] = {"product": product, "title": Text(title)}
    if header:
        fields["header"] = header
    if title.split():
        fields["action"] = title.split()[0]
    if title.startswith("Searched for "):
        fields["query"] = Text(title[len("Searched for "):])
    if url:
        fields["url"] = Text(url)
    if subtitles:
        fields["channel"] = Text(subtitles[0])
        fields["subtitle_count"] = len(subtitles)
    if details:
        fields["from_ads"] = any("Google Ads" in d for d in details)
    if location is not None:
        source, loc_url = location
        if source:
            fields["location_source"] = source
        point = _location_point(loc_url) if loc_url else None
        if point is not None:
            fields["location_lat"], fields["location_lng"] = point
    return fields


class _Params(PluginParams):
    """Extra or overriding timezone abbreviations for the HTML export."""

    abbreviations: dict[str, str] = Field(default_factory=dict, max_length=200)

    @field_validator("abbreviations")
    @classmethod
    def _offsets(cls, value: dict[str, str]) -> dict[str, str]:
        for abbr, offset in value.items():
            if not re.fullmatch(r"[A-Za-z]{1,6}", abbr):
                raise ValueError(f"abbreviation {abbr!r} must be 1-6 letters")
            _offset_minutes(offset)
        return value


class GoogleActivityImporter(Importer):
    """Google My Activity, JSON and HTML (see the module docstring)."""

    name: ClassVar[str] = "google_activity"
    version: ClassVar[str] = "1.1"  # 1.1: type from products, not header
    description: ClassVar[str] = "Google My Activity (Takeout), JSON or HTML"
    patterns: ClassVar[tuple[str, ...]] = ("My Activity/*/My Activity.json",
                                           "My Activity/*/My Activity.html", "MyActivity.json")
    Params = _Params

    def detect(self, path: Path) -> float:
        text = head(path)
        if not text:
            return 0.0
        named = path.name.lower().replace(" ", "") in {"myactivity.json", "myactivity.html"}
        body = text.lstrip()
        if body.startswith("[") and '"header"' in text and '"time"' in text and (
            '"products"' in text or '"title"' in text
        ):
            return 0.95 if named else 0.85
        if "<" in body[:1] and _has_html_record(path):
            return 0.95
        if named and body.lower().startswith(("<!doctype html", "<html")):
            return 0.6
        return 0.2 if named else 0.0

    def _table(self) -> dict[str, int]:
        extra = {k: _offset_minutes(v) for k, v in self.params.abbreviations.items()}
        return {**TZ_ABBREVIATIONS, **extra}

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        start = head(path, 512).lstrip()
        if start.startswith("["):
            yield from self._parse_json(path)
        elif start.startswith("<"):
            yield from self._parse_html(path)
        else:
            raise RecordError(path, 1, "not a My Activity export (neither a JSON array nor HTML)")

    def _parse_json(self, path: Path) -> Iterator[Event | RecordError]:
        folder = path.parent.name
        for key, index, line, rec in iter_json_items(path):
            if key is not None:
                raise RecordError(path, line, "not a My Activity JSON array")
            try:
                if not isinstance(rec, dict):
                    raise ValueError(f"expected an object, got {type(rec).__name__}")
                if "time" not in rec:
                    raise ValueError("missing field 'time'")
                when = parse_timestamp(str(rec["time"]))
                products = rec.get("products") or []
                if not isinstance(products, list):
                    raise ValueError(f"'products' is a {type(products).__name__}, not a list")
                header = str(rec.get("header") or "").strip()
                product = _product([str(p) for p in products], header, folder)
                locations = rec.get("locationInfos") or []
                location = (locations[0].get("source"), locations[0].get("url")) if locations else None
                fields = _fields(
                    product, header, str(rec.get("title", "")), rec.get("titleUrl"),
                    [str(s["name"]) for s in rec.get("subtitles") or [] if s.get("name")],
                    [str(d["name"]) for d in rec.get("details") or [] if d.get("name")],
                    location,
                )
            except (KeyError, ValueError, TypeError, AttributeError, IndexError) as exc:
                yield RecordError(path, line, str(exc), record=f"[{index}]")
                continue
            yield Event(source=_SOURCE, type=_snake(product), timestamp=when, fields=fields)

    def _parse_html(self, path: Path) -> Iterator[Event | RecordError]:
        try:
            with open_text(path) as fh:
                markup = fh.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise RecordError(path, None, f"cannot read: {exc}") from None
        soup = BeautifulSoup(markup, "html.parser")
        del markup
        cells = soup.find_all("div", class_="outer-cell")
        if not cells:
            raise RecordError(path, None, "not a My Activity HTML page: no div.outer-cell records "
                              "(selectors: div.outer-cell > .header-cell, .content-cell)")
        table = self._table()
        folder = path.parent.name
        for index, cell in enumerate(cells):
            line = cell.sourceline
            try:
                yield self._html_record(cell, table, folder)
            except ValueError as exc:
                yield RecordError(path, line, str(exc), record=f"outer-cell[{index}]")

    def _html_record(self, cell: Tag, table: dict[str, int], folder: str) -> Event:
        header_cell = cell.find(class_="header-cell")
        header = header_cell.get_text(" ", strip=True) if header_cell is not None else ""
        body = next((c for c in cell.find_all("div", class_="content-cell")
                     if "mdl-typography--body-1" in c.get("class", [])), None)
        if body is None:
            raise ValueError("no .content-cell.mdl-typography--body-1 (title and time)")
        lines = _lines(body)
        if len(lines) < 2:
            raise ValueError("the content cell has no title and time lines")
        (title, url), *middle, (when_text, _) = lines
        when = parse_activity_time(when_text, table)
        caption = cell.find("div", class_="mdl-typography--caption")
        sections = _sections(caption) if caption is not None else {}
        location = None
        if sections.get("Locations"):
            text, loc_url = sections["Locations"][0]
            location = (text.rsplit(" - ", 1)[1].strip() if " - " in text else None, loc_url)
        product = _product([t for t, _ in sections.get("Products", [])], header, folder)
        fields = _fields(product, header, title, url, [t for t, _ in middle],
                         [t for t, _ in sections.get("Details", [])], location)
        return Event(source=_SOURCE, type=_snake(product), timestamp=when, fields=fields)


def _has_html_record(path: Path) -> bool:
    """Whether the page's first ``div.outer-cell`` record (with a ``content-cell``) is in its
    first :data:`HTML_DETECT_BYTES`, read 64 KiB at a time and no further than needed."""
    seen = b""
    try:
        with open_bytes(path) as fh:
            while len(seen) < HTML_DETECT_BYTES and (piece := fh.read(1 << 16)):
                seen += piece
                at = seen.find(b'class="outer-cell')
                if at >= 0 and seen.find(b"content-cell", at) >= 0:
                    return True
    except READ_ERRORS:
        return False
    return False


def _lines(node: Tag) -> list[tuple[str, str | None]]:
    """``<br>``-separated lines of a cell as (text, first href on the line), blank lines dropped."""
    lines: list[tuple[str, str | None]] = []
    text: list[str] = []
    href: str | None = None
    for child in node.children:
        if isinstance(child, Tag) and child.name == "br":
            lines.append((" ".join("".join(text).split()), href))
            text, href = [], None
        elif isinstance(child, Tag):
            text.append(child.get_text())
            if href is None:
                found = child if child.name == "a" else child.find("a")
                if found is not None and found.get("href"):
                    href = str(found["href"])
        elif isinstance(child, NavigableString):
            text.append(str(child))
    lines.append((" ".join("".join(text).split()), href))
    return [(t, h) for t, h in lines if t]


def _sections(caption: Tag) -> dict[str, list[tuple[str, str | None]]]:
    """``<b>Name:</b><br>&emsp;value<br>…`` → {"Name": [(value, href), …]}."""
    sections: dict[str, list[tuple[str, str | None]]] = {}
    current: list[tuple[str, str | None]] | None = None
    for text, href in _lines(caption):
        if text.endswith(":") and " " not in text.strip(":").strip():
            current = sections.setdefault(text.rstrip(":").strip(), [])
        elif current is not None:
            current.append((text, href))
    return sections
