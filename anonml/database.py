"""One way to open a database for every AnonML table: the store, ledgers, both services.

SQLite is the default everywhere and any SQLAlchemy URL works. A SQLite file
gets write-ahead logging (readers never block the writer, so a daemon can read
while an import writes), ``synchronous=NORMAL`` (durable at transaction
boundaries under WAL), a 30 s busy timeout (concurrent writers queue instead of
failing; the URL's ``?timeout=<seconds>`` sets another) and foreign keys; an
in-memory database is one connection shared by every session, or each session
would see an empty database.

Files. A SQLite file is created mode 0600 before SQLite opens it (its folder,
if missing, 0700: :mod:`anonml.paths`); SQLite gives the ``-wal``, ``-shm``
and ``-journal`` files the database file's mode, and every new connection
re-applies 0600 to whichever of them exist (a file made by an older version
is tightened the next time it is opened). ``secure_delete`` is on, so
deleted rows (e.g. the aggregator's staged reports) are overwritten with
zeros rather than left in free pages.

Schema. Each database's tables hang off one declarative base whose
``type_annotation_map`` stores every ``datetime`` as :class:`UTCDateTime`
(``timestamp with time zone`` on PostgreSQL) and every ``int`` as
:data:`BigInt` (64-bit on every backend: microsecond timestamps and 63-bit
round ids overflow PostgreSQL's 32-bit ``INTEGER``) (:class:`UTCDatetimes`).

PostgreSQL. Any ``postgresql+psycopg://`` URL works; transactions that must
not interleave (a budget cap's check-then-insert) run at SERIALIZABLE and are
retried on a serialization failure or deadlock by :func:`retry_serializable`.
:func:`describe_database_error` turns the failures a user can act on (a
locked or full SQLite file, a server that refuses connections) into one line
of advice. Its schema is versioned with Alembic:
:func:`migrate` brings a database to the newest revision of its migration
package (:mod:`anonml.migrations`) when it is opened, so a file written by an
earlier version of AnonML (a peer's privacy ledger must outlive every upgrade)
keeps its rows and gains what the new version needs.
"""

from __future__ import annotations

import ast
import errno
import functools
import importlib
import os
import random
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from sqlalchemy import BigInteger, DateTime, Integer, create_engine, event, inspect
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool
from sqlalchemy.types import TypeDecorator

from anonml.errors import SchemaError
from anonml.paths import FILE_MODE, private_file

if TYPE_CHECKING:  # Alembic itself is imported only when a database needs an upgrade
    from alembic.config import Config
    from alembic.script import ScriptDirectory

__all__ = [
    "storage_failure",
    "make_engine",
    "is_sqlite_memory",
    "sqlite_path",
    "UTCDateTime",
    "UTCDatetimes",
    "BigInt",
    "retry_serializable",
    "is_retryable",
    "describe_database_error",
    "increment",
    "upsert_insert",
    "migrate",
    "schema_revision",
]

_BUSY_TIMEOUT_MS = 30_000
_T = TypeVar("_T")

#: A 64-bit integer column: ``BIGINT`` (``BIGSERIAL`` as a primary key) on
#: PostgreSQL, ``INTEGER`` on SQLite, whose integers are already 64-bit and
#: whose ``INTEGER PRIMARY KEY`` alone aliases the rowid (autoincrement).
BigInt = BigInteger().with_variant(Integer(), "sqlite")
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
    busy_ms = _busy_timeout_ms(url)
    if path is not None:
        private_file(path)  # 0600 before SQLite first opens it
    kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False, "timeout": busy_ms / 1000}}
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
        cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
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

    slow = _slow_write_seconds()
    if slow is not None and not memory:
        watch_write_locks(engine, slow)
    return engine


#: Environment variable: log every SQLite write transaction that holds the write lock longer than
#: this many seconds, with the stack that took it (:func:`watch_write_locks`; unset: not watched).
SLOW_WRITE_ENV = "ANONML_DB_SLOW_WRITE_SECONDS"
_WRITES = ("insert", "update", "delete", "replace", "begin immediate", "pragma wal_checkpoint")


def _slow_write_seconds() -> float | None:
    raw = os.environ.get(SLOW_WRITE_ENV)
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        raise ValueError(f"{SLOW_WRITE_ENV}={raw!r} is not a number of seconds") from None
    if not seconds >= 0:
        raise ValueError(f"{SLOW_WRITE_ENV}={raw!r} must be a number of seconds >= 0")
    return seconds


def watch_write_locks(engine: Engine, threshold: float) -> None:
    """Log (``anonml.database``, WARNING) each write transaction on ``engine`` that holds SQLite's
    write lock for more than ``threshold`` seconds, and each statement that waited that long for it.

    A diagnostic for "database is locked" (issue 26). pysqlite takes the write lock at the first
    ``INSERT`` / ``UPDATE`` / ``DELETE`` of a transaction (its implicit deferred ``BEGIN``), a
    ``BEGIN IMMEDIATE``, or a checkpoint, and keeps it until commit or rollback; the hold is
    timed from the end of that first statement to the commit, with the stack that issued it.
    """
    import logging
    import traceback

    log = logging.getLogger("anonml.database")
    taken: dict[int, tuple[float, str, str]] = {}  # id(DBAPI connection) -> (when, statement, stack)

    def _where() -> str:
        frames = [f for f in traceback.extract_stack()[:-3] if "/sqlalchemy/" not in f.filename]
        return "".join(traceback.format_list(frames[-8:]))

    @event.listens_for(engine, "before_cursor_execute")
    def _before(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        conn.info["anonml_sent"] = time.monotonic()

    @event.listens_for(engine, "after_cursor_execute")
    def _after(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        now = time.monotonic()
        head = statement.lstrip().lower()
        if not head.startswith(_WRITES):
            return
        waited = now - conn.info.pop("anonml_sent", now)
        if waited > threshold:
            log.warning("write statement waited %.3f s: %s\n%s", waited, statement[:120], _where())
        key = id(conn.connection.dbapi_connection)
        if head.startswith("pragma wal_checkpoint"):
            return  # a checkpoint is its own transaction: timed by ``waited`` above
        taken.setdefault(key, (now, statement[:120], _where()))

    def _ended(conn: Any) -> None:
        started = taken.pop(id(conn.connection.dbapi_connection), None)
        if started is None:
            return
        held = time.monotonic() - started[0]
        if held > threshold:
            log.warning("write lock held %.3f s by a transaction that began with %s\n%s", held, *started[1:])

    event.listen(engine, "commit", _ended)
    event.listen(engine, "rollback", _ended)


def _busy_timeout_ms(url: str) -> int:
    """The SQLite busy timeout: the URL's ``timeout`` query (seconds), else 30 s."""
    raw = make_url(url).query.get("timeout")
    if raw is None:
        return _BUSY_TIMEOUT_MS
    try:
        seconds = float(raw if isinstance(raw, str) else raw[-1])
    except ValueError:
        raise ValueError(f"{url}: timeout={raw!r} is not a number of seconds") from None
    if not 0 <= seconds <= 3600:
        raise ValueError(f"{url}: timeout={seconds:g} must be between 0 and 3600 seconds")
    return round(seconds * 1000)


class UTCDateTime(TypeDecorator[datetime]):
    """Aware datetimes in, aware UTC datetimes out, whatever the server's time zone.

    PostgreSQL stores them as ``timestamp with time zone`` (an instant; the
    session's ``TimeZone`` only changes how it is rendered, and the value is
    converted back to UTC on read). SQLite has no timezone type: the value is
    stored as naive UTC and UTC re-attached on read. A naive datetime is
    refused.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value.isoformat()} given to a database column")
        utc = value.astimezone(UTC)
        return utc.replace(tzinfo=None) if dialect.name == "sqlite" else utc

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class UTCDatetimes:
    """Mixed into every AnonML declarative base: ``Mapped[datetime]`` means :class:`UTCDateTime`.

    Each database declares one base, ``class LedgerBase(UTCDatetimes,
    DeclarativeBase)``, so its tables keep their own metadata while every
    datetime column is stored one way (an instant, aware UTC in Python, a
    naive datetime refused) and every ``Mapped[int]`` is 64-bit (:data:`BigInt`).
    """

    type_annotation_map: ClassVar[dict[Any, Any]] = {datetime: UTCDateTime(), int: BigInt}


#: SQLSTATEs after which PostgreSQL asks the client to run the transaction
#: again: serialization_failure and deadlock_detected.
_RETRY_SQLSTATES = frozenset({"40001", "40P01"})


def is_retryable(exc: BaseException) -> bool:
    """Whether ``exc`` is a serialization failure or deadlock the server asks to retry."""
    if not isinstance(exc, DBAPIError):
        return False
    return getattr(exc.orig, "sqlstate", None) in _RETRY_SQLSTATES


def retry_serializable(
    transaction: Callable[[], _T],
    *,
    attempts: int = 12,
    base_delay: float = 0.005,
    max_delay: float = 0.5,
    rng: random.Random | None = None,
) -> _T:
    """Run ``transaction`` (which opens and commits its own), retrying serialization failures.

    Under SERIALIZABLE isolation PostgreSQL aborts one of two transactions
    whose reads and writes could not have happened one after the other
    (SQLSTATE 40001; 40P01 for a deadlock) and the application must run it
    again. Each retry waits a uniformly random time in [0, min(max_delay,
    base_delay · 2^k)] ("full jitter" exponential backoff, Brooker 2015), so
    contending writers spread out instead of colliding again. Any other
    error, and the last failure after ``attempts`` tries, propagates.
    """
    gen = rng if rng is not None else random.SystemRandom()
    for attempt in range(attempts):
        try:
            return transaction()
        except DBAPIError as exc:
            if not is_retryable(exc) or attempt == attempts - 1:
                raise
            time.sleep(gen.uniform(0.0, min(max_delay, base_delay * 2**attempt)))
    raise AssertionError("unreachable: the last attempt returns or raises")


def upsert_insert(session: Session, table: type[Any]) -> Any:
    """An ``INSERT`` into ``table`` that takes ``ON CONFLICT`` clauses, in the session's dialect.

    Raises
    ------
    ValueError
        The session's database is neither SQLite nor PostgreSQL.
    """
    dialect = session.get_bind().dialect.name
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    elif dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    else:
        raise ValueError(f"unsupported database dialect {dialect!r} (use SQLite or PostgreSQL)")
    return dialect_insert(table)


def increment(session: Session, table: type[Any], key: dict[str, Any], column: str, by: int = 1) -> None:
    """Add ``by`` to ``column`` of ``table``'s row ``key`` (made at ``by`` if missing), in one statement.

    One upsert (``INSERT … ON CONFLICT (key) DO UPDATE SET column = column +
    by``) on SQLite and PostgreSQL: two first increments at once cannot both
    insert (no unique violation), and the addition is atomic, unlike a read
    then a write. ``key`` names every primary-key column of the row.

    Raises
    ------
    ValueError
        The session's database is neither SQLite nor PostgreSQL.
    """
    stmt = upsert_insert(session, table).values(**key, **{column: by})
    session.execute(
        stmt.on_conflict_do_update(index_elements=list(key), set_={column: getattr(table, column) + by})
    )


def describe_database_error(exc: BaseException) -> str | None:
    """One line naming a database failure the user can act on, with advice; None for others.

    Covers a SQLite file locked by another process past the busy timeout,
    a full disk, and a database server that cannot be reached.
    """
    if not isinstance(exc, OperationalError):
        return None
    text = str(exc.orig) if exc.orig is not None else str(exc)
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    lowered = text.lower()
    if "database is locked" in lowered or "database table is locked" in lowered:
        return (
            "database is locked: another process (an import, a peer daemon) is writing to it; "
            "retry later, when it has finished"
        )
    if "database or disk is full" in lowered or "no space left on device" in lowered:
        return f"database or disk is full ({first}): free some space and retry; nothing was changed"
    if "connection refused" in lowered or "could not connect" in lowered or "connection failed" in lowered:
        return (
            f"cannot connect to the database server ({first}): check the database URL "
            "(host, port, user) and that the server is running"
        )
    return None





def _version_table(package: str) -> str:
    """The package's ``VERSION_TABLE`` if it names one, else ``anonml_schema_<last component>``."""
    declared = getattr(importlib.import_module(package), "VERSION_TABLE", None)
    return declared or f"anonml_schema_{package.rsplit('.', 1)[-1]}"


def _config(package: str, connection: Connection | None = None) -> Config:
    """An Alembic config for ``package``'s revisions and the shared :mod:`anonml.migrations.env`."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(files("anonml.migrations")))
    config.set_main_option("version_locations", str(files(package)))
    config.set_main_option("path_separator", "os")
    config.attributes["connection"] = connection
    config.attributes["version_table"] = _version_table(package)
    return config


def schema_revision(connection: Connection, package: str) -> str | None:
    """The revision of ``package``'s schema the database is at (None: not versioned yet)."""
    from alembic.runtime.migration import MigrationContext

    context = MigrationContext.configure(connection, opts={"version_table": _version_table(package)})
    return context.get_current_revision()


def migrate(engine: Engine, package: str) -> str:
    """Bring the database behind ``engine`` to the newest schema in ``package``; its revision.

    Parameters
    ----------
    engine : Engine
        The database (from :func:`make_engine`).
    package : str
        A package of Alembic revisions, e.g. ``"anonml.migrations.store"``.
        Its version table is the package's ``VERSION_TABLE`` (default
        ``anonml_schema_<last component>``), so several packages may share
        one file; a role's own package (``peer.migrations``) names its table.

    Returns
    -------
    str
        The head revision, which the database is now at.

    Notes
    -----
    A database already at the head is only read, without importing Alembic when
    the revision files name their head plainly (:func:`_plain_head`). Otherwise the upgrade runs in
    one transaction that takes the write lock first (SQLite ``BEGIN
    IMMEDIATE``, through a second engine on the same file), so two processes
    opening a new file at once upgrade it once. A database holding every table
    of the package's first revision but no version table was written before
    schema versions existed: it is stamped at that revision, then upgraded.

    Raises
    ------
    SchemaError
        The database is at a revision this version does not know (written by a
        newer AnonML), or holds only some of the first revision's tables.
    """
    plain = _plain_head(package)
    if plain is not None:  # the common case, a database at the head: checked without Alembic
        with engine.connect() as connection:
            if _stored_revision(connection, _version_table(package)) == plain:
                return plain
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(_config(package))
    head = scripts.get_current_head()
    if head is None:
        raise SchemaError(f"migration package {package!r} has no revisions")
    with engine.connect() as connection:
        if schema_revision(connection, package) == head:
            return head
    writer, owned = _writer(engine)
    try:
        with writer.connect() as connection, connection.begin():
            _upgrade(connection, package, scripts, head)
    finally:
        if owned:
            writer.dispose()
    return head


# A revision file's own lines naming it and its parent: ``revision = "x"``, ``down_revision = None``.
_REVISION_LINE = re.compile(r"^(revision|down_revision)\s*(?::[^=\n]*)?=\s*(.+?)\s*$", re.MULTILINE)


@functools.cache
def _plain_head(package: str) -> str | None:
    """The head revision of ``package`` read from its revision files as text, or None.

    Importing Alembic and running every revision file to learn the head costs
    more than the rest of a service's start (benchmarks/cold_start.py); the
    head is plain in the files: each assigns ``revision`` and ``down_revision``
    a string literal (``None`` for the first), and the head is the one
    revision no other names as its parent. None when any file says it
    otherwise (a computed value, a merge of branches, several heads): then
    Alembic decides, as before.
    """
    folder = files(package)
    revisions: dict[str, str | None] = {}
    for entry in folder.iterdir():
        if not entry.name.endswith(".py") or entry.name.startswith("_"):
            continue
        found: dict[str, object] = {}
        for name, value in _REVISION_LINE.findall(entry.read_text(encoding="utf-8")):
            try:
                found.setdefault(name, ast.literal_eval(value))
            except (ValueError, SyntaxError):
                return None
        revision, parent = found.get("revision"), found.get("down_revision")
        if type(revision) is not str or not (parent is None or type(parent) is str) or revision in revisions:
            return None
        revisions[revision] = parent  # type: ignore[assignment]
    heads = set(revisions) - set(revisions.values())
    return heads.pop() if len(heads) == 1 else None


def _stored_revision(connection: Connection, version_table: str) -> str | None:
    """The one revision ``version_table`` holds, read with plain SQL; None when it holds none,
    several, or is missing (then :func:`migrate` asks Alembic, which says which)."""
    try:
        rows = connection.exec_driver_sql(f'SELECT version_num FROM "{version_table}"').all()
    except DBAPIError:
        return None  # no such table: not versioned yet
    finally:
        connection.rollback()  # nothing written; a failed statement leaves PostgreSQL's transaction aborted
    return rows[0][0] if len(rows) == 1 else None


def _writer(engine: Engine) -> tuple[Engine, bool]:
    """An engine whose transactions take the write lock at BEGIN; ``owned``: dispose it after."""
    url = engine.url
    if url.get_backend_name() != "sqlite" or is_sqlite_memory(url.render_as_string(hide_password=False)):
        return engine, False  # one connection (memory) or the server's own locking
    return make_engine(url.render_as_string(hide_password=False), immediate=True), True


def _upgrade(connection: Connection, package: str, scripts: ScriptDirectory, head: str) -> None:
    from alembic import command
    from alembic.util import CommandError

    current = schema_revision(connection, package)  # again: another process may have upgraded
    config = _config(package, connection)
    if current is None:
        (base,) = scripts.get_bases()
        tables = tuple(getattr(scripts.get_revision(base).module, "TABLES", ()))
        present = [t for t in tables if inspect(connection).has_table(t)]
        if present and len(present) < len(tables):
            missing = sorted(set(tables) - set(present))
            raise SchemaError(
                f"{_where(connection)}: has {', '.join(present)} but not {', '.join(missing)}: "
                "not a database this version can upgrade"
            )
        if present:
            command.stamp(config, base)  # written before schema versions existed
    else:
        try:
            scripts.get_revision(current)
        except CommandError:
            raise SchemaError(
                f"{_where(connection)}: schema revision {current!r} is unknown to this version of "
                f"AnonML (newest known: {head!r}); it was written by a newer version"
            ) from None
    command.upgrade(config, "head")


def _where(connection: Connection) -> str:
    return connection.engine.url.render_as_string(hide_password=True)


_MESSAGES = (
    "database or disk is full",
    "disk i/o error",
    "readonly database",
    "read-only file system",
    "no space left on device",
    "could not extend file",
    "read-only transaction",
    "disk quota exceeded",
)
_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EDQUOT})


def storage_failure(exc: BaseException) -> str | None:
    """Why ``exc`` is the disk refusing a write (one short phrase), or None if it is anything else.

    SQLite: ``database or disk is full``, ``attempt to write a readonly database``, ``disk I/O
    error``; PostgreSQL: SQLSTATE 53100 ``could not extend file`` / ``No space left on device``,
    25006 read-only transaction; an ``OSError`` ENOSPC, EROFS or EDQUOT. (The aggregator answers
    these 503 with Retry-After, :mod:`aggregator.storage`; a peer defers the step.)
    Looks through the exception, the DBAPI error it wraps (``orig``) and its causes.
    """
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _ERRNOS:
            return os.strerror(e.errno).lower()
        text = str(e).lower()
        for phrase in _MESSAGES:
            if phrase in text:
                return phrase
        todo.extend([getattr(e, "orig", None), e.__cause__, e.__context__])
    return None
