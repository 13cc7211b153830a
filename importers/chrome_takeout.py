"""Chrome history from Google Takeout: ``Takeout/Chrome/BrowserHistory.json`` (older: ``History.json``).

Format
------
One JSON object whose ``"Browser History"`` member is an array of visits
(other members, such as ``"Session"`` or ``"Typed Url"``, are not read)::

    {"Browser History": [
      {"favicon_url": "https://www.python.org/static/favicon.ico",
       "page_transition": "LINK", "page_transition_qualifier": "CLIENT_REDIRECT",
       "title": "Welcome to Python.org", "url": "https://www.python.org/",
       "client_id": "cTdN5tG5nHs0A3yJlq0k1Q==", "time_usec": 1606820400000000}
    ]}

The array is streamed (:func:`anonml.json_stream.iter_json_items`), so a
history of millions of visits is read in constant memory.

Timestamps and timezones
------------------------
``time_usec`` is **microseconds since 1970-01-01 UTC** (not the WebKit
epoch of the ``History`` database); a time outside 1990–2100 means a wrong
unit and is refused.

Events
------
One ``visit`` per element, with the fields of the ``browser`` importer's
Chrome visits so a featurizer reads both alike: ``browser`` (``chrome``),
``url`` (text), ``title`` (text, omitted when empty), ``scheme`` (category),
``host`` (text), ``transition`` (category: ``page_transition`` lower-cased,
e.g. ``link``, ``typed``, ``auto_bookmark``, ``reload``), ``typed`` (bool),
``redirect`` (bool: a ``*_REDIRECT`` qualifier). ``client_id`` (a device
identifier) and ``favicon_url`` are not stored.

Errors
------
A visit without a ``url`` or with a bad ``time_usec`` is yielded as
``RecordError(path, line, reason, record="Browser History[12]")``. A JSON
document without a ``"Browser History"`` array raises ``RecordError``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

from anonml.errors import RecordError
from anonml.json_stream import iter_json_items
from anonml.model import Event, Text
from anonml.plugins import Importer
from anonml.readers import head
from importers.browser import url_fields

__all__ = ["ChromeTakeoutImporter"]

_KEY = "Browser History"
_NAMES = {"browserhistory.json", "history.json"}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EARLIEST = datetime(1990, 1, 1, tzinfo=UTC)
_LATEST = datetime(2100, 1, 1, tzinfo=UTC)


def _time(raw: object) -> datetime:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ValueError(f"time_usec: {raw!r} is not a whole number of microseconds")
    when = _EPOCH + timedelta(microseconds=raw)
    if not _EARLIEST <= when < _LATEST:
        raise ValueError(f"time_usec: {raw} is {when:%Y-%m-%d}, outside 1990-2100 (a wrong unit?)")
    return when


class ChromeTakeoutImporter(Importer):
    """Visits of a Takeout ``BrowserHistory.json``. See the module docstring."""

    name: ClassVar[str] = "chrome_takeout"
    version: ClassVar[str] = "1.0"
    description: ClassVar[str] = "Chrome history from Google Takeout (BrowserHistory.json)"
    patterns: ClassVar[tuple[str, ...]] = ("BrowserHistory.json", "Chrome/History.json")

    def detect(self, path: Path) -> float:
        """0.95 for ``BrowserHistory.json`` opening with ``"Browser History"``, 0.9 under another name."""
        text = head(path, 1024).lstrip()
        if not text.startswith("{") or f'"{_KEY}"' not in text:
            return 0.0
        return 0.95 if path.name.lower() in _NAMES else 0.9

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        seen = False
        for key, index, line, value in iter_json_items(path):
            if key is None:
                raise RecordError(path, line, f"not a Chrome Takeout history: no {_KEY!r} member")
            if key != _KEY:
                continue
            if index is None:
                raise RecordError(path, line, f"not a Chrome Takeout history: {_KEY!r} is not an array")
            seen = True
            try:
                yield self._visit(value)
            except (KeyError, ValueError, TypeError) as exc:
                reason = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
                yield RecordError(path, line, reason, record=f"{_KEY}[{index}]")
        if not seen:
            raise RecordError(path, None, f"not a Chrome Takeout history: no {_KEY!r} array")

    def _visit(self, item: Any) -> Event:
        if not isinstance(item, dict):
            raise ValueError(f"expected an object, got {type(item).__name__}")
        url = item["url"]
        if not isinstance(url, str) or not url:
            raise ValueError(f"url: {url!r} is not a URL")
        when = _time(item["time_usec"])
        fields: dict[str, object] = {"browser": "chrome"}
        url_fields(url, fields)
        if item.get("title"):
            fields["title"] = Text(str(item["title"]))
        transition = str(item.get("page_transition") or "").strip().lower()
        if transition:
            fields["transition"] = transition
        fields["typed"] = transition == "typed"
        fields["redirect"] = "REDIRECT" in str(item.get("page_transition_qualifier") or "").upper()
        return Event(source=self.name, type="visit", timestamp=when, fields=fields)
