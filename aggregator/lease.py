"""One phase driver at a time: a lease row in the aggregator's database.

``anonml aggregator serve --workers N`` runs N processes on one database.
Every one serves every route, but only one may advance phases (close
registration, ask median questions, publish bins, train, publish the model):
the holder of the ``phases`` row of the ``leases`` table.

Acquire and renew are ONE conditional ``UPDATE``::

    UPDATE leases SET holder = :me, expires = <db now> + ttl, taken = taken + (holder <> :me)
     WHERE name = 'phases' AND (holder = :me OR expires < <db now>)

It changes the row (row count 1) exactly when the caller already holds the
lease or the lease has expired. Two processes can never both get 1 while it
is valid: on SQLite the statement takes the database's write lock; on
PostgreSQL the second ``UPDATE`` waits for the first one's row lock and
re-evaluates its ``WHERE`` on the row the first one wrote (READ COMMITTED),
which names the other holder and a future expiry. Time is the database
server's clock (``clock_timestamp()`` on PostgreSQL, ``julianday('now')`` on
SQLite), so workers on machines whose clocks disagree still agree on expiry.

A holder renews every ``ttl / 4`` seconds; one that dies or hangs loses the
lease ``ttl`` seconds after its last renewal and another worker takes it and
resumes every problem from the database (:mod:`aggregator.rounds`). A holder
that stops cleanly releases it (expiry set to 0), so the next one takes over
at once. A holder killed on this machine need not be waited for either: the
holder string names the machine's boot, the PID namespace and the PID, and a
process of the same boot and namespace may take the lease from a PID that no
longer exists (one compare-and-set ``UPDATE`` on the exact holder string).

What the process itself believes. :attr:`PhaseLease.held` is true until
``ttl`` seconds after the moment the last successful renewal was *sent*
(local monotonic clock), which is never later than the expiry the database
recorded; the phase loop acts only while it is true. A process frozen past
its expiry (SIGSTOP, swapped out) can wake up believing nothing; so every
phase transition also calls :meth:`PhaseLease.guard` inside its own
transaction: a conditional write that succeeds only while this process holds
an unexpired lease, after which nobody can take the lease until the
transition commits (the write lock on SQLite, the row lock on PostgreSQL).
A transition whose guard fails is rolled back (:class:`LeaseLost`).

Renewing under load (issue 26). Each of the lease's statements is a
transaction of one tiny ``UPDATE``. A renewal that finds the
database busy (another transaction holds SQLite's write lock or the row lock)
waits for it — SQLite's busy timeout, PostgreSQL's ``lock_timeout``, and
retries with jittered backoff — for as long as the lease stays valid
(:meth:`PhaseLease.patience`), instead of failing after a fixed 30 s that
outlasts a 20 s lease. Safety does not depend on how long it waits:
:attr:`PhaseLease.held` still runs out ``ttl`` after the last *successful*
renewal was sent, whatever is pending, and a renewal that lands after that
re-takes the lease only through the conditional ``UPDATE`` above.

Limit: a process frozen *inside* a transaction keeps that transaction's locks
(SQLite's write lock, PostgreSQL's row locks) until it wakes or its connection
is closed; until then the others' attempts fail (a busy timeout on SQLite, a
``lock_timeout`` of ``renew_every`` on PostgreSQL) and are retried.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import case, literal, or_, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from aggregator.db import LeaseRow
from anonml.database import is_retryable, upsert_insert

__all__ = ["PhaseLease", "LeaseLost", "LeaseHolder", "PHASES", "database_now", "holder_id", "parse_holder"]

log = logging.getLogger("anonml.aggregator")

#: Name of the lease that lets one process advance phases.
PHASES = "phases"


class LeaseLost(Exception):
    """This process does not hold the lease (any more): the write it guarded was not made."""


def database_now(dialect: str) -> ColumnElement[float]:
    """The database server's current time in seconds since the epoch, as a SQL expression.

    PostgreSQL: ``extract(epoch from clock_timestamp())`` (the wall clock at
    evaluation, not the transaction's start); SQLite:
    ``(julianday('now') - 2440587.5) · 86400`` (millisecond resolution).
    """
    from sqlalchemy import Float, cast, func

    if dialect == "postgresql":
        return cast(func.extract("epoch", func.clock_timestamp()), Float)
    if dialect == "sqlite":
        return (func.julianday("now") - literal(2440587.5)) * literal(86400.0)
    raise ValueError(f"unsupported database dialect {dialect!r} for a lease (use SQLite or PostgreSQL)")


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="ascii").strip()
    except OSError:
        return ""


def _machine_key() -> str:
    """This boot of this machine and this PID namespace (empty where /proc does not say)."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        namespace = os.readlink("/proc/self/ns/pid").removeprefix("pid:[").removesuffix("]")
    except OSError:
        namespace = ""
    if not boot or not namespace:
        return ""
    return f"{boot}/{namespace}"


@dataclass(frozen=True)
class LeaseHolder:
    """The parts of a holder string: ``<host>|<boot>/<pid namespace>|<pid>|<random>``."""

    host: str
    machine: str
    pid: int
    nonce: str


def holder_id() -> str:
    """A fresh holder string for this process (unique per :class:`PhaseLease`)."""
    host = socket.gethostname().replace("|", "_")[:64]
    return f"{host}|{_machine_key()}|{os.getpid()}|{secrets.token_hex(6)}"


def parse_holder(holder: str) -> LeaseHolder | None:
    """The parts of ``holder`` (None when it is not a holder string, e.g. the empty initial one)."""
    parts = holder.split("|")
    if len(parts) != 4 or not parts[2].isdigit():
        return None
    return LeaseHolder(parts[0], parts[1], int(parts[2]), parts[3])


#: PostgreSQL's lock_not_available (a ``lock_timeout`` ran out).
_LOCK_NOT_AVAILABLE = "55P03"
#: Shortest wait one attempt gets (seconds): under it a busy database is hardly waited for at all.
_MIN_WAIT = 0.05


def _busy(exc: BaseException) -> bool:
    """Whether ``exc`` says the database was busy (try again), not that the statement is wrong.

    SQLite: ``database is locked`` / ``database table is locked`` (SQLITE_BUSY, SQLITE_LOCKED);
    PostgreSQL: a ``lock_timeout`` (55P03), a serialization failure or a deadlock (40001, 40P01).
    """
    if not isinstance(exc, DBAPIError):
        return False
    if is_retryable(exc) or getattr(exc.orig, "sqlstate", None) == _LOCK_NOT_AVAILABLE:
        return True
    text = str(exc.orig).lower()
    return "database is locked" in text or "database table is locked" in text


def _process_gone(pid: int) -> bool:
    """Whether no process ``pid`` exists in this PID namespace."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # exists, owned by someone else
        return False
    return False


class PhaseLease:
    """This process's claim on a lease row (module docstring).

    Parameters
    ----------
    engine : Engine
        The aggregator's database (SQLite or PostgreSQL).
    ttl : float
        Seconds a renewal stays valid; renew every ``ttl / 4`` (:attr:`renew_every`).
    name : str
        Which lease (:data:`PHASES`).
    holder : str or None
        This process's holder string (default :func:`holder_id`).
    """

    def __init__(self, engine: Engine, ttl: float, name: str = PHASES, holder: str | None = None) -> None:
        if not ttl > 0:
            raise ValueError(f"lease ttl must be positive, got {ttl}")
        self.engine = engine
        self.ttl = float(ttl)
        self.name = name
        self.holder = holder or holder_id()
        self._now = database_now(engine.dialect.name)
        self._valid_until = 0.0  # local monotonic time; 0: not held
        self._lock = threading.Lock()
        self._created = False

    @property
    def renew_every(self) -> float:
        return self.ttl / 4

    @property
    def held(self) -> bool:
        """True while the last successful :meth:`acquire` is younger than ``ttl`` (local clock)."""
        return time.monotonic() < self._valid_until

    def patience(self) -> float:
        """Seconds an :meth:`acquire` may keep waiting for a busy database: while this process holds the
        lease, until its validity runs out (a renewal late by seconds still keeps it); otherwise (taking
        it, releasing it) at most ``min(1 s, renew_every)``, as the keeper tries again a second later."""
        remaining = self._valid_until - time.monotonic()
        return max(remaining, min(1.0, self.renew_every))

    @contextmanager
    def _transaction(self, wait: float) -> Iterator[Connection]:
        """A transaction of this lease's own statements, waiting at most ``wait``
        seconds for a lock (SQLite's ``busy_timeout``, PostgreSQL's ``lock_timeout``): a holder frozen
        inside a transaction must not hang the others' attempts past the caller's patience."""
        ms = max(1, round(wait * 1000))
        sqlite = self.engine.dialect.name == "sqlite"
        with self.engine.connect() as connection:
            raw = connection.connection.dbapi_connection
            # pysqlite issues no BEGIN for a PRAGMA: set on the pooled connection, restored below
            before = raw.execute("PRAGMA busy_timeout").fetchone()[0] if sqlite else None
            try:
                if sqlite:
                    raw.execute(f"PRAGMA busy_timeout = {ms}")
                with connection.begin():
                    if self.engine.dialect.name == "postgresql":
                        connection.exec_driver_sql(f"SET LOCAL lock_timeout = '{ms}ms'")
                    yield connection
            finally:
                if sqlite:
                    raw.execute(f"PRAGMA busy_timeout = {int(before)}")

    def _write(self, stmt: Any, patience: float) -> tuple[bool, float]:
        """Run one ``UPDATE`` of the lease row in its own transaction, retrying while the database is
        busy for at most ``patience`` seconds; ``(changed a row, when the successful try was sent)``.

        Each try waits for the lock up to what is left of ``patience``; a busy error with time left
        is retried after a jittered pause (full jitter from 10 ms doubling to 0.5 s, Brooker 2015),
        so one that came back at once (a busy answer SQLite gives without waiting) is not final.
        The last busy error, and any other error, propagates.
        """
        deadline = time.monotonic() + patience
        delay = 0.01
        while True:
            sent = time.monotonic()
            try:
                with self._transaction(max(_MIN_WAIT, deadline - sent)) as connection:
                    return connection.execute(stmt).rowcount == 1, sent
            except DBAPIError as exc:
                pause = secrets.SystemRandom().uniform(0.0, delay)
                if not _busy(exc) or time.monotonic() + pause >= deadline:
                    raise
                log.info("the %r lease's write met a busy database; trying again", self.name)
                time.sleep(pause)
                delay = min(delay * 2, 0.5)

    def _ensure_row(self) -> None:
        if self._created:
            return
        with Session(self.engine) as s, s.begin():
            stmt = upsert_insert(s, LeaseRow).values(name=self.name, holder="", expires=0.0, taken=0)
            s.execute(stmt.on_conflict_do_nothing(index_elements=["name"]))
        self._created = True

    def acquire(self) -> bool:
        """Take or renew the lease; True if this process holds it now.

        One conditional ``UPDATE`` (module docstring); when it changes nothing
        and the holder is a dead process of this machine, one compare-and-set
        on that exact holder.
        """
        self._ensure_row()
        patience = self.patience()
        row = LeaseRow.__table__.c
        stmt = (
            update(LeaseRow)
            .where(row.name == self.name, or_(row.holder == self.holder, row.expires < self._now))
            .values(
                holder=self.holder,
                expires=self._now + self.ttl,
                taken=row.taken + case((row.holder == self.holder, 0), else_=1),
            )
        )
        got, sent = self._write(stmt, patience)
        if not got:
            got, sent = self._take_from_the_dead(sent)
        with self._lock:
            self._valid_until = sent + self.ttl if got else 0.0
        return got

    def _take_from_the_dead(self, sent: float) -> tuple[bool, float]:
        """``(taken, when the taking write was sent)`` from a holder that is a dead process of this
        machine; ``(False, sent)`` otherwise."""
        current = self.current()
        if current is None:
            return False, sent
        holder, _ = current
        other, mine = parse_holder(holder), parse_holder(self.holder)
        if other is None or mine is None or not mine.machine or other.machine != mine.machine:
            return False, sent
        if other.pid == mine.pid or not _process_gone(other.pid):
            return False, sent
        row = LeaseRow.__table__.c
        stmt = (
            update(LeaseRow)
            .where(row.name == self.name, row.holder == holder)
            .values(holder=self.holder, expires=self._now + self.ttl, taken=row.taken + 1)
        )
        got, sent = self._write(stmt, self.patience())
        if got:
            log.warning("lease %r taken over from process %d, which is gone", self.name, other.pid)
        return got, sent

    def release(self) -> None:
        """Give the lease up now (if held), so another process takes it without waiting for expiry."""
        with self._lock:
            self._valid_until = 0.0
        row = LeaseRow.__table__.c
        stmt = update(LeaseRow).where(row.name == self.name, row.holder == self.holder).values(expires=0.0)
        self._write(stmt, self.patience())

    def guard(self, session: Session) -> None:
        """Inside the caller's transaction: go on only while this process holds the lease.

        A conditional write on the lease row (``WHERE holder = :me AND expires >
        <db now>``); after it nobody can take the lease until the caller's
        transaction ends. Raises :class:`LeaseLost` (the caller rolls back) otherwise.
        """
        row = LeaseRow.__table__.c
        stmt = (
            update(LeaseRow)
            .where(row.name == self.name, row.holder == self.holder, row.expires > self._now)
            .values(holder=row.holder)
        )
        if session.execute(stmt).rowcount != 1:
            with self._lock:
                self._valid_until = 0.0
            raise LeaseLost(f"this process no longer holds the {self.name!r} lease")

    def current(self) -> tuple[str, float] | None:
        """``(holder, seconds until expiry on the database's clock)``; None before anyone took it."""
        with self.engine.connect() as connection:
            found = connection.execute(
                select(LeaseRow.holder, LeaseRow.expires - self._now).where(LeaseRow.name == self.name)
            ).first()
        if found is None or not found[0]:
            return None
        return str(found[0]), float(found[1])
