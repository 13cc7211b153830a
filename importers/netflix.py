"""Netflix viewing activity: ``CONTENT_INTERACTION/ViewingActivity.csv`` from "Download your information".

Format
------
A UTF-8 CSV (often with a byte-order mark), one row per playback. Its header
line names the columns ``Profile Name, Start Time, Duration, Attributes,
Title, Supplemental Video Type, Device Type, Bookmark, Latest Bookmark,
Country``; two sample rows::

    Alex,2021-01-02 20:15:33,00:45:12,,"Show: S1: ""Pilot"" (E1)",,Windows App,00:45:12,00:45:12,DE (Germany)
    Alex,2021-01-02 20:10:02,00:00:31,Autoplayed: user action: None; ,Show: S1 (Trailer),TRAILER,
        (continued) Apple iPhone 12,00:00:31,Not latest view,DE (Germany)

``Profile Name``, ``Start Time``, ``Duration`` and ``Title`` are required;
older exports lack ``Attributes``, ``Latest Bookmark`` or ``Country``, whose
fields are then omitted.

Timestamps and timezones
------------------------
``Start Time`` is ``YYYY-MM-DD HH:MM:SS`` in UTC (stated in the export's cover
sheet); it becomes the event timestamp as is. ``Duration``, ``Bookmark`` and
``Latest Bookmark`` are elapsed times ``H:MM:SS``.

Events
------
One event of type ``viewing`` per row. Fields:

``profile`` (category)
    The profile name. The account may be shared, so each viewing names its
    profile; ``Params.profiles`` keeps only the listed ones (rows of other
    profiles are left out, not reported as errors). The event's ``user`` is
    not set: the store's user is whoever imports the file.
``title`` (text), ``duration_s`` (int)
``supplemental`` (bool), ``supplemental_type`` (category, lower-cased:
``trailer``, ``hook``, ``teaser_trailer``, …; present when supplemental)
``device_type`` (category)
``bookmark_s`` (int), ``latest_bookmark_s`` (int, absent on "Not latest
view"), ``is_latest_view`` (bool)
``country`` (category): the ISO code before the parenthesis of ``DE (Germany)``
``autoplayed`` (bool), ``autoplay_user_action`` (category, e.g. ``none``,
``user_interaction``), ``branched`` (bool: "Has branched playback") — from
``Attributes``.

Errors
------
A bad row is yielded as ``RecordError(path, line, reason)`` with the line its
record starts on; a file without the required columns raises ``RecordError``.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from anonml.errors import RecordError
from anonml.importer_kit import csv_header
from anonml.model import Event, Text
from anonml.plugins import Importer, PluginParams
from anonml.readers import head, open_lines

__all__ = ["NetflixImporter", "parse_elapsed"]

_REQUIRED = ("Profile Name", "Start Time", "Duration", "Title")
_ELAPSED = re.compile(r"^(\d+):([0-5]\d):([0-5]\d)$")
_USER_ACTION = re.compile(r"user action:\s*([^;]+)", re.IGNORECASE)
_NOT_LATEST = "not latest view"


def parse_elapsed(value: str, column: str) -> int:
    """``"0:45:12"`` → 2712 seconds; anything else raises ``ValueError`` naming ``column``."""
    match = _ELAPSED.match(value.strip())
    if match is None:
        raise ValueError(f"{column}: {value!r} is not H:MM:SS")
    hours, minutes, seconds = (int(g) for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def _snake(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.strip().lower()).strip("_")


class NetflixImporter(Importer):
    """Netflix ``ViewingActivity.csv`` playbacks.

    See the module docstring for the format, every field and the timezone rule.
    """

    name: ClassVar[str] = "netflix"
    version: ClassVar[str] = "1.0"
    description: ClassVar[str] = "Netflix ViewingActivity.csv (what was watched, when, how long)"
    patterns: ClassVar[tuple[str, ...]] = ("ViewingActivity.csv",)

    class Params(PluginParams):
        """Options of the Netflix importer."""

        profiles: tuple[str, ...] = Field(
            default=(),
            max_length=64,
            description="import only these profile names (empty: every profile)",
        )

    def detect(self, path: Path) -> float:
        """0.95 for ``ViewingActivity.csv`` with the Netflix header, 0.9 for the header alone."""
        first = head(path).split("\n", 1)[0]
        if all(column in first for column in _REQUIRED):
            return 0.95 if path.name.lower() == "viewingactivity.csv" else 0.9
        return 0.0

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        keep = set(self.params.profiles)
        with open_lines(path) as lines:  # decoded line by line: a bad byte is its row's error
            reader = csv.reader(lines)
            columns = [c.strip() for c in csv_header(reader, lines, path, "CSV header") or []]
            missing = [c for c in _REQUIRED if c not in columns]
            if missing:
                raise RecordError(path, 1, f"not a Netflix ViewingActivity.csv: missing columns {missing}")
            start_line = reader.line_num + 1  # csv.reader counts physical lines read so far
            try:
                for cells in reader:
                    line, start_line = start_line, reader.line_num + 1
                    if lines.bad and (bad := lines.undecodable(line, reader.line_num)) is not None:
                        yield bad
                        continue
                    if not cells:
                        continue
                    row = dict(zip(columns, cells, strict=False))  # a length mismatch is reported below
                    profile = (row.get("Profile Name") or "").strip()
                    if keep and profile not in keep:
                        continue
                    try:
                        if len(cells) != len(columns):
                            raise ValueError(f"{len(cells)} cells for {len(columns)} columns")
                        yield self._event(row, profile)
                    except ValueError as exc:
                        yield RecordError(path, line, str(exc))
            except csv.Error as exc:
                raise RecordError(path, reader.line_num, f"unreadable CSV: {exc}") from None

    def _event(self, row: dict[str, str], profile: str) -> Event:
        def cell(column: str) -> str:
            return (row.get(column) or "").strip()

        raw_start = cell("Start Time")
        try:
            when = datetime.strptime(raw_start, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
        except ValueError:
            raise ValueError(f"Start Time: {raw_start!r} is not 'YYYY-MM-DD HH:MM:SS'") from None
        title = cell("Title")
        if not title:
            raise ValueError("Title: empty")
        if not profile:
            raise ValueError("Profile Name: empty")
        supplemental = cell("Supplemental Video Type")
        fields: dict[str, object] = {
            "profile": profile,
            "title": Text(title),
            "duration_s": parse_elapsed(cell("Duration"), "Duration"),
            "supplemental": bool(supplemental),
        }
        if supplemental:
            fields["supplemental_type"] = _snake(supplemental)
        if cell("Device Type"):
            fields["device_type"] = cell("Device Type")
        if cell("Bookmark"):
            fields["bookmark_s"] = parse_elapsed(cell("Bookmark"), "Bookmark")
        latest = cell("Latest Bookmark")
        if latest:
            fields["is_latest_view"] = latest.lower() != _NOT_LATEST
            if fields["is_latest_view"]:
                fields["latest_bookmark_s"] = parse_elapsed(latest, "Latest Bookmark")
        country = cell("Country")
        if country:
            fields["country"] = country.split("(", 1)[0].strip() or country
        if "Attributes" in row:
            attributes = cell("Attributes")
            fields["autoplayed"] = "autoplayed" in attributes.lower()
            fields["branched"] = "has branched playback" in attributes.lower()
            action = _USER_ACTION.search(attributes)
            if action is not None:
                fields["autoplay_user_action"] = _snake(action.group(1))
        return Event(source=self.name, type="viewing", timestamp=when, fields=fields)
