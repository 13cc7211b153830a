"""The event store: a person's events and where they came from, in SQL.

SQLite at ``$ANONML_HOME/events.db`` by default; any SQLAlchemy URL works.
Two tables: ``events`` (keyed by user and content id, indexed by user, source,
type and time) and ``imports`` (provenance: importer name and version, input
file hash, time, and counts accepted / duplicate / rejected).

An import is one transaction (DESIGN §3): a malformed record rolls the whole
import back unless the caller asked to skip bad records, and a re-import of
the same content adds nothing because events are keyed by content hash and
inserted with ``ON CONFLICT DO NOTHING``. Importing with ``replace=True``
removes the earlier imports of the same file content (provenance and the
events they added) in the same transaction, for a re-import with corrected
params.

Functions that read or write take a :class:`~sqlalchemy.orm.Session` and never
commit; :class:`EventStore` owns the engine and the unit of work of each import.
Opening a store brings its schema to this version's (Alembic revisions in
:mod:`anonml.migrations.store`, :func:`anonml.database.migrate`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import ForeignKey, Index, String, Text, delete, func, select
from sqlalchemy.engine import Engine, Row, make_url
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from anonml import parallel_import as par
from anonml.database import UTCDatetimes, describe_database_error, make_engine, migrate
from anonml.errors import RecordError, StoreError
from anonml.event_rows import EVENT_COLUMNS, event_row
from anonml.model import Dataset, Event, decode_fields, timestamp_us, to_utc
from anonml.paths import default_store_url
from anonml.plugins import ChunkedImporter, Importer, RowOwner

__all__ = [
    "EventStore",
    "ImportReport",
    "SourceSummary",
    "ImportRecord",
    "DEFAULT_USER",
    "query_events",
    "add_events",
    "sqlite_file",
]

DEFAULT_USER = "me"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
_BATCH = 5000


class Base(UTCDatetimes, DeclarativeBase):
    """Declarative base of the event store's tables; datetimes are aware UTC."""


class ImportRow(Base):
    """Provenance of one import (one file, one importer run)."""

    __tablename__ = "imports"

    id: Mapped[int] = mapped_column(primary_key=True)
    importer: Mapped[str] = mapped_column(String(64))
    importer_version: Mapped[str] = mapped_column(String(32))
    path: Mapped[str] = mapped_column(Text)
    file_sha256: Mapped[str] = mapped_column(String(64), index=True)
    user_id: Mapped[str] = mapped_column(String(256))
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    accepted: Mapped[int] = mapped_column(default=0)
    duplicate: Mapped[int] = mapped_column(default=0)
    rejected: Mapped[int] = mapped_column(default=0)


class EventRow(Base):
    """One stored event. ``ts_us`` is microseconds since the Unix epoch, UTC (null: static)."""

    __tablename__ = "events"
    __table_args__ = (
        Index("ix_events_user_time", "user_id", "ts_us"),
        Index("ix_events_source_type_time", "source", "type", "ts_us"),
    )

    user_id: Mapped[str] = mapped_column(String(256), primary_key=True)
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    source: Mapped[str] = mapped_column(String(64))
    type: Mapped[str] = mapped_column(String(256))
    ts_us: Mapped[int | None]
    fields: Mapped[str] = mapped_column(Text)
    # Not indexed: an import's new events are counted as they are inserted, so
    # nothing looks events up by import, and one index fewer speeds every insert.
    import_id: Mapped[int] = mapped_column(ForeignKey("imports.id"))


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What one import did. ``errors`` are the skipped records (``--skip-bad``)."""

    import_id: int
    path: str
    importer: str
    user: str
    accepted: int
    inserted: int
    duplicate: int
    rejected: int
    errors: tuple[RecordError, ...] = ()
    #: How many users its events were stored under (an edX log names many).
    users: int = 1
    #: Events of earlier imports of the same file removed first (``replace=True``).
    replaced: int = 0


@dataclass(frozen=True, slots=True)
class SourceSummary:
    """Counts and date range of one (source, type) in the store."""

    source: str
    type: str
    count: int
    first: datetime | None
    last: datetime | None


@dataclass(frozen=True, slots=True)
class ImportRecord:
    """One row of import provenance, with the events it brought."""

    id: int
    importer: str
    importer_version: str
    path: str
    file_sha256: str
    user: str
    started_at: datetime
    accepted: int
    duplicate: int
    rejected: int
    added: int = 0


def _from_us(us: int | None) -> datetime | None:
    return None if us is None else _EPOCH + us * _US


_SQLITE_INSERT = (
    f"INSERT OR IGNORE INTO events ({', '.join(EVENT_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(EVENT_COLUMNS))})"
)


def _insert_ignoring_duplicates(session: Session, rows: list[tuple]) -> int:
    """Insert :func:`event_row` tuples, skipping ids already stored; returns how many were new.

    On SQLite the rows go straight to the driver's ``executemany`` inside the
    session's transaction: the ORM's per-row parameter processing cost more
    than SQLite itself (benchmarks/import_throughput.py), and the driver's
    row count of ``INSERT OR IGNORE`` is exactly the number of new rows.
    """
    dialect = session.get_bind().dialect.name
    if dialect == "sqlite":
        return session.connection().exec_driver_sql(_SQLITE_INSERT, rows).rowcount
    if dialect != "postgresql":
        raise StoreError(f"unsupported database dialect {dialect!r} (use SQLite or PostgreSQL)")
    from sqlalchemy.dialects.postgresql import insert

    # One statement per batch; RETURNING yields exactly the rows this
    # transaction inserted (a concurrent import's rows are neither counted
    # nor subtracted, as a before/after count(*) would).
    stmt = (
        insert(EventRow)
        .values([dict(zip(EVENT_COLUMNS, r, strict=True)) for r in rows])
        .on_conflict_do_nothing()
        .returning(EventRow.id)
    )
    return len(session.execute(stmt).all())


def add_events(
    session: Session, events: Iterable[Event], *, user: str, import_id: int
) -> int:
    """Insert events in batches, ignoring ones already stored; returns how many were new."""
    batch: list[tuple] = []
    inserted = 0
    for ev in events:
        batch.append(event_row(ev, ev.user or user, import_id))
        if len(batch) >= _BATCH:
            inserted += _insert_ignoring_duplicates(session, batch)
            batch.clear()
    if batch:
        inserted += _insert_ignoring_duplicates(session, batch)
    return inserted


_EVENT_COLUMNS = (EventRow.source, EventRow.type, EventRow.ts_us, EventRow.fields, EventRow.user_id)


def _row_to_event(row: Row) -> Event:
    """The event of one ``_EVENT_COLUMNS`` row, checked as it was when stored (:meth:`Event.make`)."""
    source, type_, ts_us, fields, user = row
    return Event.make(source, type_, _from_us(ts_us), decode_fields(fields), user)


def query_events(
    session: Session,
    *,
    user: str | None = None,
    source: str | None = None,
    type: str | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
    include_static: bool = True,
) -> list[Event]:
    """Events matching every given filter, static first then oldest first.

    ``start`` is inclusive and ``end`` exclusive; static events (no timestamp)
    match any interval unless ``include_static`` is false.
    """
    stmt = select(*_EVENT_COLUMNS)
    if user is not None:
        stmt = stmt.where(EventRow.user_id == user)
    if source is not None:
        stmt = stmt.where(EventRow.source == source)
    if type is not None:
        stmt = stmt.where(EventRow.type == type)
    time_filters = []
    if start is not None:
        time_filters.append(EventRow.ts_us >= timestamp_us(to_utc(start)))
    if end is not None:
        time_filters.append(EventRow.ts_us < timestamp_us(to_utc(end)))
    if time_filters:
        cond = time_filters[0] if len(time_filters) == 1 else time_filters[0] & time_filters[1]
        stmt = stmt.where(cond | EventRow.ts_us.is_(None)) if include_static else stmt.where(cond)
    elif not include_static:
        stmt = stmt.where(EventRow.ts_us.is_not(None))
    stmt = stmt.order_by(EventRow.ts_us.is_not(None), EventRow.ts_us, EventRow.id)
    return [_row_to_event(r) for r in session.execute(stmt)]


def sqlite_file(url: str | None) -> Path | None:
    """The file an event-store URL names (``None``: the default store), or None if not a SQLite file.

    Lets reading commands tell "no store yet" from an empty one without
    creating anything.
    """
    from sqlalchemy.engine import make_url

    parsed = make_url(url or default_store_url(create=False))
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database).expanduser()


def sha256_file(path: Path) -> str:
    """SHA-256 of the file's bytes, read into one reused 1 MiB buffer.

    A fresh ``bytes`` per read made the allocator map and fault in new pages
    for most reads (about 500 page faults for a 35 MiB log, in the process
    that holds the import's transaction); one buffer is faulted in once.
    """
    digest = hashlib.sha256()
    buffer = bytearray(1 << 20)
    with open(path, "rb", buffering=0) as fh, memoryview(buffer) as view:
        while size := fh.readinto(buffer):
            digest.update(view[:size])
    return digest.hexdigest()


class EventStore:
    """A person's event store.

    Parameters
    ----------
    url : str, optional
        SQLAlchemy URL; default ``sqlite:///$ANONML_HOME/events.db``.

    Examples
    --------
    >>> store = EventStore("sqlite://")
    >>> store.count()
    0
    """

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_store_url()
        try:
            self.engine: Engine = make_engine(self.url)
        except (SQLAlchemyError, ValueError) as exc:
            raise StoreError(f"cannot open event store {self.url!r}: {exc}") from exc
        try:
            migrate(self.engine, "anonml.migrations.store")
        except SQLAlchemyError as exc:
            advice = describe_database_error(exc)
            if advice is not None:
                raise StoreError(f"cannot open event store {self._where}: {advice}") from exc
            raise StoreError(f"cannot open event store {self._where}: {exc.orig or exc}") from exc
        self.sessionmaker = sessionmaker(self.engine, expire_on_commit=False)

    @property
    def _where(self) -> str:
        """The store's URL for messages, any password hidden."""
        return make_url(self.url).render_as_string(hide_password=True)

    def session(self) -> Session:
        """A new session; use as ``with store.session() as s, s.begin(): ...``."""
        return self.sessionmaker()

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> EventStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing -------------------------------------------------------------

    def import_file(
        self,
        path: str | Path,
        importer: Importer,
        *,
        user: str | None = None,
        skip_bad: bool = False,
        on_event: Callable[[int], None] | None = None,
        origin: str | None = None,
        replace: bool = False,
        workers: int | None = None,
    ) -> ImportReport:
        """Import one file as one transaction.

        Events carrying their own user (an edX log names its user) keep it
        unless ``user`` is given, which overrides; others get ``user`` or
        :data:`DEFAULT_USER`. ``origin`` is what provenance records as the
        file's name (e.g. ``takeout.zip!/Takeout/...`` for an archive member);
        by default the resolved path. ``replace=True`` first removes every
        earlier import of a file with the same content (its provenance and the
        events it added), in the same transaction: re-importing with corrected
        params (another timezone) then replaces instead of adding a second copy.
        ``workers``: processes parsing a large file while this one stores it
        (default one per CPU; 1 parses in this process).

        Raises
        ------
        RecordError
            The first bad record (``file:line: reason``) when ``skip_bad`` is
            false; the store is left exactly as it was.
        """
        (report,) = self.import_files(
            [(Path(path), importer, origin)],
            user=user,
            skip_bad=skip_bad,
            on_event=on_event,
            replace=replace,
            workers=workers,
        )
        return report

    def import_files(
        self,
        items: Sequence[tuple[Path, Importer, str | None]],
        *,
        user: str | None = None,
        skip_bad: bool = False,
        on_event: Callable[[int], None] | None = None,
        replace: bool = False,
        workers: int | None = None,
    ) -> list[ImportReport]:
        """Import several ``(path, importer, origin)`` files in ONE transaction.

        All or nothing: without ``skip_bad``, the first bad record of any file
        rolls back every file of the batch. Each file still gets its own
        provenance row and report. ``replace``, ``workers``: see :meth:`import_file`.
        """
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise ValueError(f"workers must be a whole number of processes, at least 1; got {workers!r}")
        try:
            with self.session() as s, s.begin():
                return [
                    _import_into(s, Path(path), importer, origin, user, skip_bad, on_event, replace, workers)
                    for path, importer, origin in items
                ]
        except OperationalError as exc:  # locked past the busy timeout, disk full, server gone
            advice = describe_database_error(exc)
            if advice is None:
                raise
            raise StoreError(f"event store {self._where}: {advice}") from exc

    # --- reading -------------------------------------------------------------

    def count(self, **filters: object) -> int:
        with self.session() as s:
            stmt = select(func.count()).select_from(EventRow)
            for name, value in filters.items():
                stmt = stmt.where(getattr(EventRow, _COLUMN[name]) == value)
            return s.scalar(stmt) or 0

    def events(self, **filters) -> list[Event]:
        """See :func:`query_events` for the filters."""
        with self.session() as s:
            return query_events(s, **filters)

    def users(self) -> list[str]:
        with self.session() as s:
            return list(s.scalars(select(EventRow.user_id).distinct().order_by(EventRow.user_id)))

    def dataset(
        self, user: str, start: datetime | None = None, end: datetime | None = None
    ) -> Dataset:
        """The user's events in ``[start, end)`` as a :class:`~anonml.model.Dataset`."""
        events = self.events(user=user, start=start, end=end)
        return Dataset(user=user, start=start, end=end, events=tuple(events))

    def summary(self, user: str | None = None) -> list[SourceSummary]:
        """Per (source, type): count and date range."""
        with self.session() as s:
            stmt = select(
                EventRow.source,
                EventRow.type,
                func.count(),
                func.min(EventRow.ts_us),
                func.max(EventRow.ts_us),
            ).group_by(EventRow.source, EventRow.type)
            if user is not None:
                stmt = stmt.where(EventRow.user_id == user)
            rows = s.execute(stmt.order_by(EventRow.source, EventRow.type)).all()
        return [SourceSummary(src, typ, n, _from_us(lo), _from_us(hi)) for src, typ, n, lo, hi in rows]

    def imports(self) -> list[ImportRecord]:
        """Import provenance, oldest first, each with the number of events it added.

        Events are deleted only together with the import that added them
        (``replace=True``), so what an import added is what it accepted minus
        what was already stored.
        """
        with self.session() as s:
            rows = s.scalars(select(ImportRow).order_by(ImportRow.id)).all()
        return [
            ImportRecord(
                id=r.id,
                importer=r.importer,
                importer_version=r.importer_version,
                path=r.path,
                file_sha256=r.file_sha256,
                user=r.user_id,
                started_at=r.started_at,
                accepted=r.accepted,
                duplicate=r.duplicate,
                rejected=r.rejected,
                added=r.accepted - r.duplicate,
            )
            for r in rows
        ]


def _import_into(
    session: Session,
    path: Path,
    importer: Importer,
    origin: str | None,
    user: str | None,
    skip_bad: bool,
    on_event: Callable[[int], None] | None,
    replace: bool = False,
    workers: int | None = None,
) -> ImportReport:
    """One file's import inside the caller's transaction (provenance row, events, counts).

    A large file of a :class:`~anonml.plugins.ChunkedImporter` is parsed by
    ``workers`` processes (default: one per CPU) while this one stores the
    rows in file order (:mod:`anonml.parallel_import`); ``workers=1`` parses
    here. Both give the same rows, counts and errors.
    """
    if not path.exists():
        raise RecordError(path, None, "no such file or folder")
    content = _ContentHash(path)
    replaced = _remove_imports_of(session, content.compute()) if replace else 0
    tally = _Tally(fallback=user or DEFAULT_USER, skip_bad=skip_bad, on_event=on_event)
    record = ImportRow(
        importer=importer.name,
        importer_version=importer.version,
        path=origin or str(path.resolve()),
        file_sha256=content.hexdigest or "",  # until it is hashed, below (nothing is committed before)
        user_id=tally.fallback,
        started_at=datetime.now(UTC),
    )
    session.add(record)
    session.flush()
    inserted = _store_events(session, path, importer, user, record.id, tally, workers, content.compute)
    who = _who(tally.users, tally.fallback)
    record.file_sha256 = content.compute()
    record.user_id = who
    record.accepted = tally.accepted
    record.duplicate = tally.accepted - inserted
    record.rejected = len(tally.errors)
    record.finished_at = datetime.now(UTC)
    if on_event is not None:
        on_event(tally.accepted)
    return ImportReport(
        import_id=record.id,
        path=origin or str(path),
        importer=importer.name,
        user=who,
        accepted=tally.accepted,
        inserted=inserted,
        duplicate=tally.accepted - inserted,
        rejected=len(tally.errors),
        errors=tuple(tally.errors),
        users=max(len(tally.users), 1),
        replaced=replaced,
    )


@dataclass
class _ContentHash:
    """The SHA-256 of an import's input (a file, or a folder's files) as provenance records it,
    computed once: first when asked for (``replace`` needs it before anything is stored), else
    while a parallel parse leaves the importing process waiting for its first rows (the hash
    then costs the import no time: :func:`anonml.parallel_import.parallel_chunk_rows`), else
    once the events are stored."""

    path: Path
    hexdigest: str | None = None

    def compute(self) -> str:
        if self.hexdigest is None:
            self.hexdigest = sha256_file(self.path) if self.path.is_file() else _hash_tree(self.path)
        return self.hexdigest


@dataclass
class _Tally:
    """What one file's import has met so far, whether parsed here or by worker processes.

    ``accepted`` counts the events parsed (duplicates included), ``errors`` the
    records refused (kept only with ``skip_bad``; otherwise the first is
    raised), ``users`` the users the events belong to (``fallback`` for an
    event naming none). ``on_event`` hears the running count of accepted events.
    """

    fallback: str
    skip_bad: bool
    on_event: Callable[[int], None] | None
    accepted: int = 0
    errors: list[RecordError] = field(default_factory=list)
    users: set[str] = field(default_factory=set)

    def refuse(self, errors: Sequence[RecordError]) -> None:
        """Keep ``errors`` under ``skip_bad``; otherwise raise the first of them."""
        if errors and not self.skip_bad:
            raise errors[0]
        self.errors.extend(errors)


def _store_events(
    session: Session,
    path: Path,
    importer: Importer,
    user: str | None,
    import_id: int,
    tally: _Tally,
    workers: int | None,
    while_waiting: Callable[[], object],
) -> int:
    """Parse ``path`` (in ``workers`` processes where it pays) and store its events; rows inserted.

    ``while_waiting``: see :func:`anonml.parallel_import.parallel_chunk_rows`.
    """

    workers = par.default_workers() if workers is None else workers
    with par.fewer_collections():  # the parse keeps a chunk of events alive: see there
        if not isinstance(importer, ChunkedImporter):
            events = _parsed_events(path, importer, user, tally)
            return add_events(session, events, user=tally.fallback, import_id=import_id)
        # In rows, which a chunked importer may make without events; in this process unless
        # workers pay (a large file).
        parsers = workers if par.use_parallel(path, importer, workers) else 1
        owner = RowOwner(user, tally.fallback, import_id)
        chunks = par.parallel_chunk_rows(
            path, importer, workers=parsers, owner=owner, while_waiting=while_waiting
        )
        with closing(chunks):  # a refused chunk ends the workers now, not when the traceback goes
            return _store_chunks(session, chunks, tally)


def _parsed_events(path: Path, importer: Importer, user: str | None, tally: _Tally) -> Iterator[Event]:
    """``importer``'s events of ``path``, parsed here, as stored (``user`` imposed); counted in ``tally``."""
    for item in importer.parse(path):
        if isinstance(item, RecordError):
            tally.refuse([item])
            continue
        tally.accepted += 1
        if tally.on_event is not None and tally.accepted % 1000 == 0:
            tally.on_event(tally.accepted)
        event = item.with_user(user) if user is not None else item
        tally.users.add(event.user or tally.fallback)
        yield event


def _store_chunks(session: Session, chunks: Iterable[par.ChunkRows], tally: _Tally) -> int:
    """Store parsed chunks (:func:`anonml.parallel_import.parallel_chunk_rows`) in file order.

    Counts their events, errors and users in ``tally``; raises the first error
    unless ``skip_bad``, and a worker's fatal error always. Returns the rows inserted.
    """
    inserted = 0
    for chunk in chunks:
        tally.refuse(chunk.errors)
        if chunk.rows:
            inserted += _insert_ignoring_duplicates(session, chunk.rows)
        tally.accepted += len(chunk.rows)
        tally.users.update(chunk.users)
        if chunk.fatal is not None:
            raise chunk.fatal
        if tally.on_event is not None:
            tally.on_event(tally.accepted)
    return inserted


def _who(users: set[str], fallback: str) -> str:
    """The import's user as provenance shows it: the one user, or how many (an edX log names many)."""
    if not users:
        return fallback
    if len(users) == 1:
        return next(iter(users))
    return f"{len(users):,} users"


def _remove_imports_of(session: Session, file_hash: str) -> int:
    """Delete earlier imports of the content ``file_hash`` and the events they added; how many."""
    ids = list(session.scalars(select(ImportRow.id).where(ImportRow.file_sha256 == file_hash)))
    if not ids:
        return 0
    removed = session.execute(delete(EventRow).where(EventRow.import_id.in_(ids))).rowcount or 0
    session.execute(delete(ImportRow).where(ImportRow.id.in_(ids)))
    return removed


_COLUMN = {"user": "user_id", "source": "source", "type": "type"}


def _hash_tree(folder: Path) -> str:
    digest = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            digest.update(str(p.relative_to(folder)).encode() + b"\0")
            digest.update(sha256_file(p).encode())
    return digest.hexdigest()

