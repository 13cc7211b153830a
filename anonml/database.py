"""One way to open a database for every AnonML table: the store, ledgers, both services.

SQLite is the default everywhere and any SQLAlchemy URL works. A SQLite file
gets write-ahead logging (readers never block the writer, so a daemon can read
while an import writes), ``synchronous=NORMAL`` (durable at transaction
boundaries under WAL), a 30 s busy timeout (concurrent writers queue instead of
failing) and foreign keys; an in-memory database is one connection shared by
every session, or each session would see an empty database.

Files. A SQLite file is created mode 0600 before SQLite opens it (its folder,
if missing, 0700: :mod:`anonml.paths`); SQLite gives the ``-wal``, ``-shm``
and ``-journal`` files the database file's mode, and every new connection
re-applies 0600 to whichever of them exist (a file made by an older version
is tightened the next time it is opened). ``secure_delete`` is on, so
deleted rows (e.g. the aggregator's staged reports) are overwritten with
zeros rather than left in free pages.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import DateTime, create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.pool import StaticPool
from sqlalchemy.types import TypeDecorator

from anonml.paths import FILE_MODE, private_file

__all__ = ["make_engine", "is_sqlite_memory", "sqlite_path", "UTCDateTime"]

_BUSY_TIMEOUT_MS = 30_000
_COMPANIONS = ("-wal", "-shm", "-journal")


def is_sqlite_memory(url: str) -> bool:
    """Whether ``url`` names an in-memory SQLite database."""
    return url in ("sqlite://", "sqlite:///:memory:") or (url.startswith("sqlite") and "mode=memory" in url)


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (None for other databases, memory, and ``file:`` URIs)."""
    if not url.startswith("sqlite") or is_sqlite_memory(url):
        return None
    database = make_url(url).database
    if not database or database.startswith("file:"):
        return None
    return Path(database)


def _tighten(path: Path) -> None:
    for name in (path, *(path.with_name(path.name + suffix) for suffix in _COMPANIONS)):
        try:
            os.chmod(name, FILE_MODE)
        except FileNotFoundError:
            pass


def make_engine(url: str, *, immediate: bool = False) -> Engine:
    """An engine for ``url``.

    Parameters
    ----------
    url : str
        Any SQLAlchemy URL.
    immediate : bool, default=False
        Make every transaction take the write lock when it begins (SQLite's
        ``BEGIN IMMEDIATE``; SERIALIZABLE elsewhere), for check-then-write
        logic such as a budget cap that two writers must not interleave.
    """
    if not url.startswith("sqlite"):
        if immediate:
            return create_engine(url, pool_pre_ping=True, isolation_level="SERIALIZABLE")
        return create_engine(url, pool_pre_ping=True)
    memory = is_sqlite_memory(url)
    path = sqlite_path(url)
    if path is not None:
        private_file(path)  # 0600 before SQLite first opens it
    kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False, "timeout": 30}}
    if memory:
        kwargs["poolclass"] = StaticPool
    engine = create_engine(url, **kwargs)

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        if not memory:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA secure_delete=ON")
        cursor.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()
        if path is not None:
            _tighten(path)
        if immediate:
            # pysqlite's own BEGIN is deferred; take transaction control so the
            # "begin" hook below can issue BEGIN IMMEDIATE instead.
            dbapi_connection.isolation_level = None

    if immediate:

        @event.listens_for(engine, "begin")
        def _begin(connection: Any) -> None:
            connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


class UTCDateTime(TypeDecorator[datetime]):
    """Aware datetimes stored as naive UTC and read back as aware UTC.

    SQLite has no timezone type; storing UTC and re-attaching it on read keeps
    every datetime that leaves a table aware. A naive datetime is refused.
    """

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value.isoformat()} given to a database column")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)
