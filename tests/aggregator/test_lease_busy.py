"""The phase lease on a busy database (issue 26): "database is locked" must not cost the leader its lease.

Measured before the fix (``ANONML_DB_SLOW_WRITE_SECONDS=1``, tests/faults beside ``stress-ng --cpu 2``):
closing registration held SQLite's write lock 12–17 s (the partition plan's first call imports
scikit-learn inside that transaction) and the lease's renewal waited 8–13 s behind it; a renewal
that waited longer than its lease's validity lost the lease. What these tests hold the code to:

- a renewal that meets a write held elsewhere keeps waiting for as long as the lease is valid —
  past a busy timeout (SQLite, the URL's ``timeout``) or a ``lock_timeout`` (PostgreSQL) shorter
  than that — and keeps the lease (it used to give up at that timeout);
- a renewal blocked past the validity never extends what the holder believes: it stops acting
  as leader when the validity runs out, and the next taker gets the lease;
- closing registration holds no write lock while it builds the plan (another connection writes
  the problem's own row meanwhile);
- a real aggregator process whose database is write-locked by another connection for longer than
  its renewal interval keeps its lease and its round proceeds.

Nothing waits for a fixed time for something to happen: each wait polls with a deadline. The holds
themselves last "until the renewal has waited longer than the old failure window", measured from
when the renewal started.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from aggregator.app import start_server_process
from aggregator.db import LeaseRow, create_tables
from aggregator.lease import PhaseLease
from aggregator.state import ProblemContext
from anonml.database import make_engine
from tests.aggregator.helpers import (
    WirePeer,
    aggregator_settings,
    close_registration,
    draft,
    propose,
    register_and_close,
    wait_phase,
)
from tests.waiting import wait_until

#: Longer than the old code's wait for a lock: SQLite's busy timeout in these URLs (1 s) and
#: PostgreSQL's ``lock_timeout`` of ``ttl / 4`` (5 s at TTL); shorter than TTL by a wide margin.
OLD_WINDOW = 6.0
TTL = 20.0


def _short_busy_timeout(url: str) -> str:
    """``url`` with SQLite's busy timeout at 1 s (the old renewal gave up after it); PostgreSQL as is."""
    if not url.startswith("sqlite"):
        return url
    return url + ("&" if "?" in url else "?") + "timeout=1"


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    e = make_engine(_short_busy_timeout(database_url))
    create_tables(e)
    yield e
    e.dispose()


@contextmanager
def lease_row_held(engine: Engine) -> Iterator[Connection]:
    """A transaction of another connection that wrote the lease row and has not committed: SQLite's
    write lock on the whole file, PostgreSQL's row lock on that row, until the block ends."""
    with engine.connect() as connection, connection.begin():
        changed = connection.execute(text("UPDATE leases SET taken = taken WHERE name = 'phases'")).rowcount
        assert changed == 1, "the blocker found no lease row"
        yield connection


def _expires(engine: Engine) -> float:
    with Session(engine) as s:
        return float(s.scalar(select(LeaseRow.expires).where(LeaseRow.name == "phases")))


def _taken(engine: Engine) -> int:
    with Session(engine) as s:
        return int(s.scalar(select(LeaseRow.taken).where(LeaseRow.name == "phases")))


def _renew_in_thread(lease: PhaseLease) -> tuple[threading.Thread, dict[str, object]]:
    outcome: dict[str, object] = {}

    def renew() -> None:
        try:
            outcome["got"] = lease.acquire()
        except Exception as exc:  # the test asserts which
            outcome["error"] = exc

    thread = threading.Thread(target=renew, name="renewal", daemon=True)
    thread.start()
    return thread, outcome


def test_a_renewal_waits_out_a_write_held_past_the_old_timeout_and_keeps_the_lease(
    engine: Engine, database_url: str
) -> None:
    lease = PhaseLease(engine, TTL)
    assert lease.acquire() and lease.held
    before = _expires(engine)
    blocker = make_engine(database_url)
    try:
        with lease_row_held(blocker):
            started = time.monotonic()
            thread, outcome = _renew_in_thread(lease)
            # hold until the renewal has waited longer than the old code waited before giving up
            wait_until(lambda: time.monotonic() > started + OLD_WINDOW or not thread.is_alive(),
                       120, "the renewal waiting behind the held write")
            assert thread.is_alive(), f"the renewal gave up while the lease was valid: {outcome}"
            assert lease.held  # the lease is still valid: the process still leads
        thread.join(timeout=120)
    finally:
        blocker.dispose()
    assert outcome == {"got": True}, outcome
    assert lease.held
    assert _expires(engine) > before  # the renewal was written once the lock was free
    assert lease.current()[0] == lease.holder and _taken(engine) == 1  # never changed hands
    if engine.dialect.name == "sqlite":
        with engine.connect() as connection:  # the pooled connection's own busy timeout is back (1 s)
            assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 1000


def test_a_renewal_blocked_past_the_validity_stops_the_holder_and_the_next_taker_gets_it(
    engine: Engine, database_url: str
) -> None:
    a, b = PhaseLease(engine, 2.0), PhaseLease(make_engine(database_url), TTL)
    try:
        assert a.acquire()
        blocker = make_engine(database_url)
        try:
            with lease_row_held(blocker):
                thread, outcome = _renew_in_thread(a)
                # the validity runs out while the renewal waits: the holder stops acting as leader
                wait_until(lambda: not a.held, 60, "the short lease running out")
                assert "got" not in outcome  # nothing was renewed while the write was held
                thread.join(timeout=120)
                assert not thread.is_alive()
                # it waited only while the lease was valid (plus one try), then said why
                error = outcome.get("error")
                assert isinstance(error, OperationalError), outcome
                assert not a.held
        finally:
            blocker.dispose()
        wait_until(b.acquire, 60, "the next taker getting the expired lease")
        assert b.held and not a.held
        assert not a.acquire() and not a.held  # b's lease is valid: a cannot take it back
        assert a.current()[0] == b.holder and _taken(engine) == 2
    finally:
        b.engine.dispose()


def test_closing_registration_holds_no_write_lock_while_it_builds_the_plan(
    aggregator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The known long transaction (issue 26): the plan (scikit-learn's import on its first call)
    was built inside the write transaction that closed registration."""
    entered, release = threading.Event(), threading.Event()
    real_plan_for = ProblemContext.plan_for

    def slow_plan_for(self, roster, beacon=b""):
        if not entered.is_set():  # the first call: the close's size check
            entered.set()
            assert release.wait(120), "the test never let the close go on"
        return real_plan_for(self, roster, beacon)

    monkeypatch.setattr(ProblemContext, "plan_for", slow_plan_for)
    problem = propose(aggregator.url, draft(kh=1, kp=1, min_peers=4, send_window=120.0))
    register_and_close(aggregator.url, problem)
    try:
        wait_until(entered.is_set, 120, "the close building the plan")
        other = make_engine(_short_busy_timeout(aggregator.settings.db_url))
        try:
            with other.begin() as connection:
                if other.dialect.name == "postgresql":
                    connection.exec_driver_sql("SET LOCAL lock_timeout = '1s'")
                # the row the close wrote first: another writer gets it while the plan is built
                changed = connection.execute(
                    text("UPDATE problems SET message = message WHERE id = :pid"), {"pid": problem.id}
                ).rowcount
                phase, closing = connection.execute(
                    text("SELECT phase, close_requested FROM problems WHERE id = :pid"), {"pid": problem.id}
                ).one()
        finally:
            other.dispose()
        assert changed == 1
        assert phase == "registration" and closing  # registration is closed to newcomers meanwhile
        late = WirePeer().register(aggregator.url, problem)
        assert late.status_code == 409, late.text  # the registered set was final before the plan
    finally:
        release.set()
    wait_phase(aggregator.url, problem.id, ("medians", "reporting"))


def test_an_aggregator_whose_database_is_write_locked_for_a_while_keeps_its_lease(tmp_path: Path) -> None:
    """A real process (SQLite file): another connection holds the write lock across at least one
    renewal while a round closes; the process keeps the lease and the round proceeds."""
    log = tmp_path / "aggregator.log"
    settings = aggregator_settings(tmp_path, port=0, lease_seconds=12.0)  # renews every 3 s
    server = start_server_process(settings, stderr=log)
    try:
        problem = propose(server.url, draft(kh=1, kp=1, min_peers=4, send_window=120.0))
        for peer in [WirePeer() for _ in range(4)]:
            assert peer.register(server.url, problem).status_code == 201
        engine = make_engine(settings.db_url)
        try:
            assert _taken(engine) == 1
            renewal = 12.0 / 4
            with lease_row_held(engine):
                started = time.monotonic()
                close = threading.Thread(target=close_registration, args=(server.url, problem.id, 120.0))
                close.start()  # its write waits for the lock too
                # held across at least one renewal and a half: the renewal waits, the lease stays valid
                wait_until(lambda: time.monotonic() > started + 1.5 * renewal, 120, "the hold")
                assert server.process.poll() is None
            close.join(timeout=120)
            wait_phase(server.url, problem.id, ("medians", "reporting"))
            assert _taken(engine) == 1  # the lease never changed hands
        finally:
            engine.dispose()
    finally:
        server.stop()
    text_of_log = log.read_text()
    assert "not held any more" not in text_of_log, text_of_log
    assert "taking or renewing the phase lease failed" not in text_of_log, text_of_log
