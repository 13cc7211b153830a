"""The phase lease (:mod:`aggregator.lease`) on the ``database_url`` fixture (SQLite, or PostgreSQL in CI).

Each :class:`PhaseLease` gets its own engine, as separate worker processes would.
Nothing here waits for a fixed time: expiry is observed by polling with a deadline.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from aggregator.db import LeaseRow, RejectRow, count_reject, create_tables
from aggregator.lease import LeaseLost, PhaseLease, holder_id, parse_holder
from anonml.database import make_engine
from tests.waiting import wait_until

LONG = 60.0  # a lease no test outlives: "still valid" never depends on the machine being quick


@pytest.fixture
def engines(database_url: str) -> Iterator[list]:
    made = []

    def engine():
        e = make_engine(database_url)
        made.append(e)
        return e

    create_tables(engine())
    yield [engine]
    for e in made:
        e.dispose()


def _lease(engines, ttl: float = LONG, holder: str | None = None) -> PhaseLease:
    return PhaseLease(engines[0](), ttl, holder=holder)


def _taken(lease: PhaseLease) -> int:
    with Session(lease.engine) as s:
        return int(s.scalar(select(LeaseRow.taken).where(LeaseRow.name == lease.name)))


def _expires(lease: PhaseLease) -> float:
    """The lease row's expiry on the database's clock: a renewal must move it later."""
    with Session(lease.engine) as s:
        return float(s.scalar(select(LeaseRow.expires).where(LeaseRow.name == lease.name)))


def test_the_first_taker_holds_it_and_a_second_is_refused_while_it_is_valid(engines) -> None:
    a, b = _lease(engines), _lease(engines)
    assert a.current() is None  # nobody took it yet
    assert a.acquire() and a.held
    assert not b.acquire() and not b.held
    holder, remaining = b.current()
    assert holder == a.holder and 0 < remaining <= LONG
    assert _taken(a) == 1


def test_renewing_extends_the_expiry_and_does_not_count_as_a_new_tenure(engines) -> None:
    a = _lease(engines)
    assert a.acquire()
    first = _expires(a)
    _, remaining = a.current()
    wait_until(lambda: a.current()[1] < remaining - 0.01, 60, "time passing on the database's clock")
    assert a.acquire()
    # absolute expiries, not remaining times: the latter shrink by however long the machine
    # takes between the renewal and the read
    assert _expires(a) > first
    assert a.current()[1] <= LONG
    assert _taken(a) == 1


def test_an_expired_lease_goes_to_the_next_taker_and_the_old_holder_cannot_write_or_renew(engines) -> None:
    a, b = _lease(engines, ttl=0.5), _lease(engines)
    assert a.acquire()
    wait_until(b.acquire, 60, "the short lease expiring")
    assert b.held and not a.held  # a's own belief ran out no later than the database's expiry
    assert b.current()[0] == b.holder and _taken(b) == 2
    assert not a.acquire()  # b's lease is valid: a cannot take it back
    with Session(a.engine) as s:
        with pytest.raises(LeaseLost), s.begin():
            count_reject(s, "p-x", "written under a lost lease")
            a.guard(s)  # after another write: the whole transaction is rolled back
    with Session(b.engine) as s, s.begin():
        b.guard(s)
        count_reject(s, "p-x", "written by the holder")
    with Session(b.engine) as s:
        reasons = list(s.scalars(select(RejectRow.reason)))
    assert reasons == ["written by the holder"]


def test_a_released_lease_is_taken_at_once(engines) -> None:
    a, b = _lease(engines), _lease(engines)
    assert a.acquire() and not b.acquire()
    a.release()
    assert not a.held
    assert b.acquire() and b.current()[0] == b.holder
    b.release()
    b.release()  # releasing twice, or without holding, changes nothing
    assert a.acquire()


def test_a_holder_that_died_on_this_machine_is_replaced_without_waiting(engines) -> None:
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(child.stdout)
    mine = parse_holder(holder_id())
    assert mine is not None and mine.machine, "this test needs /proc (boot id and PID namespace)"
    dead = f"{mine.host}|{mine.machine}|{dead_pid}|0123456789ab"
    elsewhere = f"other-host|another-boot/4026531836|{dead_pid}|0123456789ab"
    alive = f"{mine.host}|{mine.machine}|{os.getppid()}|0123456789ab"
    for holder, replaced in ((elsewhere, False), (alive, False), (dead, True)):
        old = _lease(engines, holder=holder)
        assert old.acquire()
        new = _lease(engines)
        assert new.acquire() is replaced, holder
        old.release()
        new.release()


def test_of_many_concurrent_takers_exactly_one_gets_it(engines) -> None:
    leases = [_lease(engines) for _ in range(8)]
    for _round in range(3):
        barrier = threading.Barrier(len(leases))
        got: list[PhaseLease] = []
        lock = threading.Lock()

        def race(lease: PhaseLease, barrier=barrier, lock=lock, got=got) -> None:
            barrier.wait()
            if lease.acquire():
                with lock:
                    got.append(lease)

        threads = [threading.Thread(target=race, args=(lease,)) for lease in leases]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert len(got) == 1
        assert leases[0].current()[0] == got[0].holder
        got[0].release()


def test_serve_refuses_several_workers_on_sqlite_with_one_error_line(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "anonml", "aggregator", "serve", "--workers", "2", "--port", "0",
         "--db", f"sqlite:///{tmp_path / 'agg.db'}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --workers 2 needs a PostgreSQL database"), lines
    assert "SQLite lets one process write at a time" in lines[0]
    assert not (tmp_path / "agg.db").exists()  # refused before anything was created
