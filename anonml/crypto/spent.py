"""Once-only records: spent tokens (verifier side) and evaluations (issuer side).

Two ledgers with the same shape, each with an in-memory and a SQLAlchemy 2
implementation:

- :class:`SpentSet` holds ``(key id, slot, nonce)`` of every redeemed token; a
  second redemption raises :class:`~anonml.crypto.exceptions.TokenSpent`.
- :class:`IssuanceLedger` holds ``(key id, peer id, slot)`` of every blind
  evaluation; a second request raises :class:`~anonml.crypto.exceptions.AlreadyIssued`.

Atomicity comes from the storage, never from a read-then-write: the memory
versions insert under a lock, the SQL versions ``INSERT … ON CONFLICT DO
NOTHING`` against a unique constraint and look at the row count, so of two
concurrent attempts (threads, processes, servers sharing a database) exactly
one succeeds. :func:`record_spent` and :func:`record_issuance` take a session
and never commit, so a service can spend a token in the same transaction that
stores the report; :class:`SqlSpentSet` / :class:`SqlIssuanceLedger` run one
short transaction per call.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy import LargeBinary, UniqueConstraint, insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from anonml.crypto._util import _ensure_bytes
from anonml.crypto.exceptions import AlreadyIssued, TokenSpent
from anonml.database import UTCDatetimes

__all__ = [
    "SpentSet",
    "MemorySpentSet",
    "SqlSpentSet",
    "IssuanceLedger",
    "MemoryIssuanceLedger",
    "SqlIssuanceLedger",
    "CryptoBase",
    "SpentTokenRow",
    "IssuanceRow",
    "create_crypto_tables",
    "record_spent",
    "record_issuance",
    "insert_once",
    "insert_many_once",
]

_KEY_ID_SIZE = 32
_SLOT_MAX = 64
_NONCE_SIZE = 32
_PEER_ID_MAX = 64


def _spent_key(key_id: bytes, slot: bytes, nonce: bytes) -> tuple[bytes, bytes, bytes]:
    return (
        _ensure_bytes(key_id, "key id", size=_KEY_ID_SIZE),
        _ensure_bytes(slot, "slot", min_size=1, max_size=_SLOT_MAX),
        _ensure_bytes(nonce, "nonce", size=_NONCE_SIZE),
    )


def _issue_key(key_id: bytes, peer_id: bytes, slot: bytes) -> tuple[bytes, bytes, bytes]:
    return (
        _ensure_bytes(key_id, "key id", size=_KEY_ID_SIZE),
        _ensure_bytes(peer_id, "peer id", min_size=1, max_size=_PEER_ID_MAX),
        _ensure_bytes(slot, "slot", min_size=1, max_size=_SLOT_MAX),
    )


class SpentSet(ABC):
    """Where a verifier records redeemed tokens."""

    @abstractmethod
    def spend(self, key_id: bytes, slot: bytes, nonce: bytes) -> None:
        """Atomically record the token as spent; :class:`TokenSpent` if it already was."""

    @abstractmethod
    def is_spent(self, key_id: bytes, slot: bytes, nonce: bytes) -> bool:
        """Whether the token was recorded (for audits; never check-then-spend with it)."""


class IssuanceLedger(ABC):
    """Where an issuer records which peer already got an evaluation for which slot."""

    @abstractmethod
    def record(self, key_id: bytes, peer_id: bytes, slot: bytes) -> None:
        """Atomically record one evaluation; :class:`AlreadyIssued` if there was one."""

    @abstractmethod
    def has_issued(self, key_id: bytes, peer_id: bytes, slot: bytes) -> bool:
        """Whether an evaluation was recorded for (key, peer, slot)."""


class _MemoryOnce:
    """A set of entries under a lock: each entry is added once, a second add raises."""

    def __init__(self) -> None:
        self._seen: set[tuple[bytes, bytes, bytes]] = set()
        self._lock = threading.Lock()

    def _add_once(self, entry: tuple[bytes, bytes, bytes], error: type[Exception], message: str) -> None:
        """Add ``entry`` atomically; ``error(message)`` if it is already there."""
        with self._lock:
            if entry in self._seen:
                raise error(message)
            self._seen.add(entry)

    def __len__(self) -> int:
        return len(self._seen)


class MemorySpentSet(_MemoryOnce, SpentSet):
    """A thread-safe in-process spent set (one process; lost on exit)."""

    def spend(self, key_id: bytes, slot: bytes, nonce: bytes) -> None:
        self._add_once(_spent_key(key_id, slot, nonce), TokenSpent, "token already redeemed")

    def is_spent(self, key_id: bytes, slot: bytes, nonce: bytes) -> bool:
        return _spent_key(key_id, slot, nonce) in self._seen


class MemoryIssuanceLedger(_MemoryOnce, IssuanceLedger):
    """A thread-safe in-process issuance ledger."""

    def record(self, key_id: bytes, peer_id: bytes, slot: bytes) -> None:
        entry = _issue_key(key_id, peer_id, slot)
        self._add_once(entry, AlreadyIssued, "this peer already received an evaluation for this slot")

    def has_issued(self, key_id: bytes, peer_id: bytes, slot: bytes) -> bool:
        return _issue_key(key_id, peer_id, slot) in self._seen


class CryptoBase(UTCDatetimes, DeclarativeBase):
    """Declarative base of the crypto ledgers (``create_crypto_tables`` creates them).

    Datetimes are aware UTC instants and integers 64-bit on every backend
    (:class:`anonml.database.UTCDatetimes`).
    """


class SpentTokenRow(CryptoBase):
    """One redeemed token; the primary key is what makes spending atomic.

    No time and no counter: the key is (key id, slot, nonce) and the nonce is
    the peer's 32 random bytes, so neither a column nor (on SQLite, where the
    table is ``WITHOUT ROWID``) the physical row order records when, or in
    which order, tokens were spent.
    """

    __tablename__ = "spent_tokens"
    __table_args__ = {"sqlite_with_rowid": False}

    key_id: Mapped[bytes] = mapped_column(LargeBinary(_KEY_ID_SIZE), primary_key=True)
    slot: Mapped[bytes] = mapped_column(LargeBinary(_SLOT_MAX), primary_key=True)
    nonce: Mapped[bytes] = mapped_column(LargeBinary(_NONCE_SIZE), primary_key=True)


class IssuanceRow(CryptoBase):
    """One blind evaluation given to a peer for a slot."""

    __tablename__ = "token_issuance"
    __table_args__ = (UniqueConstraint("key_id", "peer_id", "slot", name="uq_token_issuance_peer_slot"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    key_id: Mapped[bytes] = mapped_column(LargeBinary(_KEY_ID_SIZE))
    peer_id: Mapped[bytes] = mapped_column(LargeBinary(_PEER_ID_MAX))
    slot: Mapped[bytes] = mapped_column(LargeBinary(_SLOT_MAX))
    issued_at: Mapped[datetime]


def create_crypto_tables(engine: Engine) -> None:
    """Create ``spent_tokens`` and ``token_issuance`` if missing."""
    CryptoBase.metadata.create_all(engine)


def _upsert_dialect(session: Session):  # noqa: ANN202 - the dialect's insert construct
    """The dialect's ``insert`` with ``ON CONFLICT`` (SQLite, PostgreSQL), or None."""
    dialect = session.get_bind().dialect.name
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    elif dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    else:
        return None
    return dialect_insert


def insert_once(session: Session, table: type[CryptoBase], values: dict) -> bool:
    """Insert ``values`` unless the unique constraint already holds them; True if inserted.

    SQLite and PostgreSQL use ``ON CONFLICT DO NOTHING … RETURNING`` the
    primary key: a row comes back exactly when one was inserted (the driver's
    row count is not used: it is −1 on PostgreSQL when the statement returns
    rows). No exception, so the session stays usable; other dialects use a
    SAVEPOINT around a plain insert.
    """
    return insert_many_once(session, table, [values])[0]


def insert_many_once(session: Session, table: type, rows: list[dict]) -> list[bool]:
    """Insert each of ``rows`` unless a unique constraint already holds it; per row, whether it was.

    One statement on SQLite and PostgreSQL: a multi-row ``INSERT … ON
    CONFLICT DO NOTHING RETURNING`` the primary key, so each row is inserted
    or skipped on its own, atomically against concurrent writers, and the
    rows that come back are exactly those inserted (matched by primary key,
    which must be given and distinct among several ``rows``). Elsewhere one
    SAVEPOINT per row.
    ``table`` is any declarative class (the intake stages reports with it).
    """
    if not rows:
        return []
    dialect_insert = _upsert_dialect(session)
    key = tuple(table.__table__.primary_key.columns)
    if dialect_insert is not None:
        # Core (not the ORM's bulk path), executemany: SQLAlchemy sends it as multi-row
        # VALUES ("insertmanyvalues") from one cached compiled statement.
        stmt = dialect_insert(table.__table__).on_conflict_do_nothing().returning(*key)
        inserted = {tuple(row) for row in session.execute(stmt, rows)}
        if len(rows) == 1:  # its key may be generated (an autoincrement id): any row back is it
            return [bool(inserted)]
        return [tuple(values[c.key] for c in key) in inserted for values in rows]
    done = []
    for values in rows:
        try:
            with session.begin_nested():
                session.execute(insert(table).values(**values))
        except IntegrityError:
            done.append(False)
        else:
            done.append(True)
    return done


def record_spent(session: Session, key_id: bytes, slot: bytes, nonce: bytes) -> None:
    """Record a redeemed token inside the caller's transaction (never commits).

    Raises :class:`TokenSpent` if (key id, slot, nonce) is already recorded —
    including by a concurrent transaction that committed first.
    """
    key_id, slot, nonce = _spent_key(key_id, slot, nonce)
    values = {"key_id": key_id, "slot": slot, "nonce": nonce}
    if not insert_once(session, SpentTokenRow, values):
        raise TokenSpent("token already redeemed")


def record_issuance(session: Session, key_id: bytes, peer_id: bytes, slot: bytes) -> None:
    """Record an evaluation inside the caller's transaction (never commits); :class:`AlreadyIssued`
    if this peer already has one for this slot under this key."""
    key_id, peer_id, slot = _issue_key(key_id, peer_id, slot)
    values = {"key_id": key_id, "peer_id": peer_id, "slot": slot, "issued_at": datetime.now(UTC)}
    if not insert_once(session, IssuanceRow, values):
        raise AlreadyIssued("this peer already received an evaluation for this slot")


class _SqlOnce:
    """A ledger kept in ``engine``'s crypto tables (created unless ``create_tables`` is False)."""

    def __init__(self, engine: Engine, *, create_tables: bool = True) -> None:
        self.engine = engine
        if create_tables:
            create_crypto_tables(engine)

    def _in_transaction(self, record: Callable[..., None], *key: bytes) -> None:
        """``record(session, *key)`` (:func:`record_spent`, :func:`record_issuance`) in one transaction."""
        with Session(self.engine) as session, session.begin():
            record(session, *key)

    def _holds(self, row: type[CryptoBase], **key: bytes) -> bool:
        """Whether ``row``'s table has a row with these (already checked) column values."""
        columns = row.__table__.c
        query = select(*row.__table__.primary_key.columns).where(
            *(columns[name] == value for name, value in key.items())
        )
        with Session(self.engine) as session:
            return session.execute(query).first() is not None


class SqlSpentSet(_SqlOnce, SpentSet):
    """A spent set in any SQLAlchemy database; each :meth:`spend` is one short transaction."""

    def spend(self, key_id: bytes, slot: bytes, nonce: bytes) -> None:
        self._in_transaction(record_spent, key_id, slot, nonce)

    def is_spent(self, key_id: bytes, slot: bytes, nonce: bytes) -> bool:
        key_id, slot, nonce = _spent_key(key_id, slot, nonce)
        return self._holds(SpentTokenRow, key_id=key_id, slot=slot, nonce=nonce)


class SqlIssuanceLedger(_SqlOnce, IssuanceLedger):
    """An issuance ledger in any SQLAlchemy database; one short transaction per record."""

    def record(self, key_id: bytes, peer_id: bytes, slot: bytes) -> None:
        self._in_transaction(record_issuance, key_id, peer_id, slot)

    def has_issued(self, key_id: bytes, peer_id: bytes, slot: bytes) -> bool:
        key_id, peer_id, slot = _issue_key(key_id, peer_id, slot)
        return self._holds(IssuanceRow, key_id=key_id, peer_id=peer_id, slot=slot)
