"""Browser history: Chrome/Chromium ``History`` and Firefox ``places.sqlite`` (desktop and Android).

Format
------
Both are SQLite databases, recognised by the SQLite header and their tables.

*Chrome, Chromium, Edge, Brave* (profile file ``History``): ``urls(id, url,
title, ...)`` and ``visits(id, url → urls.id, visit_time, from_visit,
transition, visit_duration, ...)``. ``visit_time`` is the WebKit/Windows
epoch: **microseconds since 1601-01-01 00:00 UTC**. ``transition`` is a 32-bit
``ui::PageTransition``: the low byte is the core type (0 link, 1 typed,
2 auto_bookmark, 3 auto_subframe, 4 manual_subframe, 5 generated,
6 auto_toplevel, 7 form_submit, 8 reload, 9 keyword, 10 keyword_generated)
and the high bits are qualifiers (0x01000000 forward/back, 0x02000000 from the
address bar, 0x04000000 home page, 0x10000000/0x20000000 chain start/end,
0x40000000 client redirect, 0x80000000 server redirect).
``visit_duration`` is in microseconds (0: unknown).

*Firefox desktop* (``places.sqlite``): ``moz_places(id, url, title, ...)`` and
``moz_historyvisits(id, from_visit, place_id → moz_places.id, visit_date,
visit_type, session)``; ``visit_date`` is **microseconds since 1970-01-01
UTC**. *Firefox for Android* (Fenix, ``places.sqlite`` of application-services)
has the same two tables with ``moz_historyvisits.is_local`` and
``moz_places.visit_count_local`` columns, and its ``visit_date`` is in
**milliseconds** since 1970. ``visit_type`` (nsINavHistoryService): 1 link,
2 typed, 3 bookmark, 4 embed, 5 redirect_permanent, 6 redirect_temporary,
7 download, 8 framed_link, 9 reload (Android also 10 update_place).

Sample rows (Chrome)::

    urls:   (37, 'http://localhost:9999/', 'Development Server', 5, 1, 13256855625868056, 0)
    visits: (493, 37, 13255337781335930, 0, 838860801, 2, 0, ...)
            → 2021-01-17 06:16:21.335930 UTC; 838860801 = 0x32000001:
              typed | from_address_bar | chain start | chain end

Reading safely
--------------
A running browser keeps its history open and locked. The importer never opens
the original: it copies the database **and** its ``-wal`` / ``-journal``
companions into a private temporary folder and opens the copy with the SQLite
URI ``mode=ro``. A copy that caught the browser mid-write fails
``PRAGMA quick_check`` and is copied again (``Params.copy_attempts`` times).
A copied hot rollback journal cannot be replayed read-only, so the private
copy alone is opened read-write once to let SQLite roll it back. The
temporary folder is deleted when parsing ends.

Events
------
One event of type ``visit`` per visit row, timestamp = the visit time (UTC).
Fields: ``browser`` (category: ``chrome``, ``firefox``, ``firefox_mobile``),
``url`` (text), ``title`` (text, omitted when empty), ``host`` (text, lower
case, omitted for URLs without one) and ``scheme`` (category),
``transition`` (category: the core type name above), ``typed`` (bool),
``redirect`` (bool); Chrome only: ``forward_back``, ``from_address_bar``
(bools) and ``duration_s`` (float, when known).

Errors
------
A visit whose time is outside 1990–2100 (a wrong epoch or unit) or whose
url id is missing is yielded as ``RecordError(path, None, reason,
record="visits.id=493")``. A file that is not SQLite or lacks both table pairs
raises ``RecordError``.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlsplit

from pydantic import Field

from anonml.errors import RecordError
from anonml.model import Event, Text
from anonml.plugins import Importer, PluginParams

__all__ = ["BrowserHistoryImporter", "open_sqlite_copy", "sqlite_tables", "url_fields"]

_SQLITE_MAGIC = b"SQLite format 3\x00"
_WEBKIT_EPOCH = datetime(1601, 1, 1, tzinfo=UTC)
_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EARLIEST = datetime(1990, 1, 1, tzinfo=UTC)
_LATEST = datetime(2100, 1, 1, tzinfo=UTC)
_CHROME_CORE = (
    "link",
    "typed",
    "auto_bookmark",
    "auto_subframe",
    "manual_subframe",
    "generated",
    "auto_toplevel",
    "form_submit",
    "reload",
    "keyword",
    "keyword_generated",
)
_FORWARD_BACK = 0x01000000
_FROM_ADDRESS_BAR = 0x02000000
_REDIRECT_MASK = 0xC0000000
_FIREFOX_TYPES = {
    1: "link",
    2: "typed",
    3: "bookmark",
    4: "embed",
    5: "redirect_permanent",
    6: "redirect_temporary",
    7: "download",
    8: "framed_link",
    9: "reload",
    10: "update_place",
}
_SIDECARS = ("-wal", "-journal")


def _is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(16) == _SQLITE_MAGIC
    except OSError:
        return False


def sqlite_tables(path: Path) -> set[str]:
    """Table names of a SQLite file, read without locks or writes (URI ``immutable=1``).

    Only for cheap recognition: ``immutable`` ignores a ``-wal`` file, which is
    harmless for a schema that has existed since the database was created.
    Returns an empty set for anything unreadable.
    """
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    except sqlite3.Error:
        return set()
    try:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.Error:
        return set()
    finally:
        conn.close()


def open_sqlite_copy(path: Path, folder: Path, attempts: int = 3) -> sqlite3.Connection:
    """Copy ``path`` and its ``-wal``/``-journal`` into ``folder`` and open the copy read-only.

    The original is only ever read as a file. Each attempt copies, then runs
    ``PRAGMA quick_check``; a failed check (a copy torn by a concurrent
    writer) copies again. A hot rollback journal in the copy is rolled back by
    opening the private copy read-write once (SQLite cannot do it read-only).

    Raises
    ------
    RecordError
        The file cannot be read, or no attempt gave a consistent copy.
    """
    target = folder / "db.sqlite"
    last_error = "unknown error"
    for _attempt in range(attempts):
        for stale in folder.glob("db.sqlite*"):
            stale.unlink()
        try:
            shutil.copyfile(path, target)
            for suffix in _SIDECARS:
                companion = path.with_name(path.name + suffix)
                if companion.is_file():
                    shutil.copyfile(companion, target.with_name(target.name + suffix))
        except OSError as exc:
            raise RecordError(path, None, f"cannot copy the database: {exc.strerror or exc}") from None
        uri = f"{target.as_uri()}?mode=ro"
        try:
            conn = _connect_checked(uri, target)
        except sqlite3.DatabaseError as exc:
            last_error = str(exc)
            continue
        return conn
    raise RecordError(
        path,
        None,
        f"no consistent copy after {attempts} attempts ({last_error}); close the browser and retry",
    )


def _connect_checked(uri: str, target: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(uri, uri=True)
    try:
        result = conn.execute("PRAGMA quick_check").fetchone()
    except sqlite3.OperationalError as exc:
        conn.close()
        if getattr(exc, "sqlite_errorname", "") != "SQLITE_READONLY_ROLLBACK":
            raise
        # A hot journal was copied: let SQLite roll it back in our private copy.
        with sqlite3.connect(target) as writable:
            writable.execute("SELECT count(*) FROM sqlite_master").fetchone()
        writable.close()
        conn = sqlite3.connect(uri, uri=True)
        result = conn.execute("PRAGMA quick_check").fetchone()
    if result is None or result[0] != "ok":
        conn.close()
        raise sqlite3.DatabaseError(f"quick_check: {result[0] if result else 'no answer'}")
    return conn


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def url_fields(url: str, fields: dict[str, object]) -> None:
    """Put ``url`` (text) and, when it parses, its ``scheme`` (category) and ``host`` (text) in ``fields``."""
    fields["url"] = Text(url)
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:  # e.g. an invalid IPv6 literal: keep the URL, skip its parts
        return
    if parts.scheme:
        fields["scheme"] = parts.scheme.lower()
    if host:
        fields["host"] = Text(host)


class BrowserHistoryImporter(Importer):
    """Visits from Chrome/Chromium ``History`` and Firefox ``places.sqlite``, read from a copy.

    See the module docstring for both schemas, the epochs, every field and
    how the database is copied and opened.
    """

    name: ClassVar[str] = "browser"
    version: ClassVar[str] = "1.0"
    description: ClassVar[str] = "Chrome/Chromium History and Firefox places.sqlite visits"
    patterns: ClassVar[tuple[str, ...]] = ("History", "places.sqlite")

    class Params(PluginParams):
        """Options of the browser-history importer."""

        copy_attempts: int = Field(
            default=3, ge=1, le=10, description="copies tried before giving up on a busy database"
        )

    def detect(self, path: Path) -> float:
        """0.95 for SQLite with Chrome's or Firefox's history tables; 0 otherwise."""
        if not path.is_file() or not _is_sqlite(path):
            return 0.0
        tables = sqlite_tables(path)
        if {"urls", "visits"} <= tables or {"moz_places", "moz_historyvisits"} <= tables:
            return 0.95
        if not tables and path.name in ("History", "places.sqlite"):
            return 0.5  # schema unreadable without the WAL: trust the name a little
        return 0.0

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        if not _is_sqlite(path):
            raise RecordError(path, None, "not a SQLite database (no 'SQLite format 3' header)")
        with tempfile.TemporaryDirectory(prefix="anonml-browser-") as folder:
            conn = open_sqlite_copy(path, Path(folder), self.params.copy_attempts)
            try:
                tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
                if {"urls", "visits"} <= tables:
                    yield from self._chrome(path, conn)
                elif {"moz_places", "moz_historyvisits"} <= tables:
                    mobile = "is_local" in _columns(conn, "moz_historyvisits")
                    yield from self._firefox(path, conn, mobile)
                else:
                    raise RecordError(
                        path,
                        None,
                        "not a browser history: no urls/visits (Chrome) or "
                        "moz_places/moz_historyvisits (Firefox) tables",
                    )
            except sqlite3.Error as exc:
                raise RecordError(path, None, f"cannot read the database: {exc}") from None
            finally:
                conn.close()

    def _chrome(self, path: Path, conn: sqlite3.Connection) -> Iterator[Event | RecordError]:
        duration = "v.visit_duration" if "visit_duration" in _columns(conn, "visits") else "0"
        rows = conn.execute(
            f"SELECT v.id, v.url, v.visit_time, v.transition, {duration}, u.url, u.title "
            "FROM visits AS v LEFT JOIN urls AS u ON u.id = v.url ORDER BY v.id"
        )
        for visit_id, url_id, visit_time, transition, micros, url, title in rows:
            record = f"visits.id={visit_id}"
            if url is None:
                yield RecordError(path, None, f"url id {url_id} is not in urls", record=record)
                continue
            when = _instant(_WEBKIT_EPOCH, visit_time, 1, "visit_time", "WebKit µs since 1601")
            if isinstance(when, str):
                yield RecordError(path, None, when, record=record)
                continue
            bits = int(transition or 0) & 0xFFFFFFFF  # stored signed by some versions
            core = bits & 0xFF
            fields: dict[str, object] = {
                "browser": "chrome",
                "transition": _CHROME_CORE[core] if core < len(_CHROME_CORE) else f"core_{core}",
                "typed": core == 1,
                "redirect": bool(bits & _REDIRECT_MASK),
                "forward_back": bool(bits & _FORWARD_BACK),
                "from_address_bar": bool(bits & _FROM_ADDRESS_BAR),
            }
            url_fields(url, fields)
            if title:
                fields["title"] = Text(title)
            if micros:
                fields["duration_s"] = int(micros) / 1e6
            yield Event(source=self.name, type="visit", timestamp=when, fields=fields)

    def _firefox(self, path: Path, conn: sqlite3.Connection, mobile: bool) -> Iterator[Event | RecordError]:
        rows = conn.execute(
            "SELECT v.id, v.place_id, v.visit_date, v.visit_type, p.url, p.title "
            "FROM moz_historyvisits AS v LEFT JOIN moz_places AS p ON p.id = v.place_id "
            "ORDER BY v.id"
        )
        scale, unit = (1000, "ms since 1970") if mobile else (1, "µs since 1970")
        browser = "firefox_mobile" if mobile else "firefox"
        for visit_id, place_id, visit_date, visit_type, url, title in rows:
            record = f"moz_historyvisits.id={visit_id}"
            if url is None:
                yield RecordError(path, None, f"place id {place_id} is not in moz_places", record=record)
                continue
            when = _instant(_UNIX_EPOCH, visit_date, scale, "visit_date", unit)
            if isinstance(when, str):
                yield RecordError(path, None, when, record=record)
                continue
            kind = int(visit_type or 0)
            fields: dict[str, object] = {
                "browser": browser,
                "transition": _FIREFOX_TYPES.get(kind, f"type_{kind}"),
                "typed": kind == 2,
                "redirect": kind in (5, 6),
            }
            url_fields(url, fields)
            if title:
                fields["title"] = Text(title)
            yield Event(source=self.name, type="visit", timestamp=when, fields=fields)


def _instant(epoch: datetime, value: object, scale: int, column: str, unit: str) -> datetime | str:
    """``epoch + value·scale µs``, or the reason it is not a plausible visit time."""
    if not isinstance(value, int):
        return f"{column} {value!r} is not an integer ({unit})"
    try:
        when = epoch + timedelta(microseconds=value * scale)
    except OverflowError:
        when = None
    if when is None or not _EARLIEST <= when < _LATEST:
        return f"{column} {value} is not a time in 1990-2100 ({unit})"
    return when
