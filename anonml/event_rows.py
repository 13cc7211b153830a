"""An event as the ``events`` table stores it: one tuple per event, keyed by its content.

Both the serial import (:mod:`anonml.store`) and the parse workers of a large
import (:mod:`anonml.parallel_import`) make rows here, so an event stored either
way gets the same id and bytes (DESIGN.md §3: re-importing the same content adds
nothing).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from anonml.errors import RecordError
from anonml.model import Event, content_id, encode_fields, timestamp_us

__all__ = ["EVENT_COLUMNS", "ChunkRows", "event_row", "parts_row", "rows_of"]

#: Column order of :func:`event_row` tuples.
EVENT_COLUMNS = ("user_id", "id", "source", "type", "ts_us", "fields", "import_id")


def event_row(event: Event, user: str, import_id: int) -> tuple:
    """The ``events`` row of ``event`` attributed to ``user``, in :data:`EVENT_COLUMNS` order."""
    return parts_row(user, event.source, event.type, event.timestamp, event.fields, import_id)


def parts_row(
    user: str, source: str, type_: str, timestamp: datetime | None, fields: dict[str, object], import_id: int
) -> tuple:
    """:func:`event_row` of the event these parts make, without the event: for parts that
    :func:`~anonml.model.canonical_parts` accepts (they are then the event's own values)."""
    fields_json = encode_fields(fields)
    ts_us = None if timestamp is None else timestamp_us(timestamp)
    row_id = content_id(user, source, type_, ts_us, fields_json)
    return (user, row_id, source, type_, ts_us, fields_json, import_id)


@dataclass(slots=True)
class ChunkRows:
    """One chunk, ready to store: ``events`` rows and bad records, each in line order."""

    rows: list[tuple]
    errors: list[RecordError]
    users: set[str]
    fatal: RecordError | None = None
    opened: bool = True
    state: Any = None


def rows_of(
    items: Iterable[Event | RecordError], user: str | None, fallback: str, import_id: int
) -> ChunkRows:
    """Events as rows attributed as the serial import attributes them (``user`` overrides, then the
    event's own user, then ``fallback``), bad records kept apart."""
    rows: list[tuple] = []
    errors: list[RecordError] = []
    users: set[str] = set()
    for item in items:
        if isinstance(item, RecordError):
            errors.append(item)
            continue
        who = user or item.user or fallback
        users.add(who)
        rows.append(event_row(item, who, import_id))
    return ChunkRows(rows, errors, users)
