"""One way to open a database for every AnonML table: the store, ledgers, both services.

SQLite is the default everywhere and any SQLAlchemy URL works. A SQLite file
gets write-ahead logging (readers never block the writer, so a daemon can read
while an import writes), ``synchronous=NORMAL`` (durable at transaction
boundaries under WAL), a 30 s busy timeout (concurrent writers queue instead of
failing) and foreign keys; an in-memory database is one connection shared by
every session, or each session would see an empty database.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.pool import StaticPool
from sqlalchemy.types import TypeDecorator

__all__ = ["make_engine", "is_sqlite_memory", "UTCDateTime"]

_BUSY_TIMEOUT_MS = 30_000


def is_sqlite_memory(url: str) -> bool:
    """Whether ``url`` names an in-memory SQLite database."""
    return url in ("sqlite://", "sqlite:///:memory:") or (url.startswith("sqlite") and "mode=memory" in url)


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
        cursor.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()
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
