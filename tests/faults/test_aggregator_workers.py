"""Several aggregator processes on one database: one drives the phases, and handing over loses nothing.

Two aggregator processes (:func:`aggregator.app.start_server_process`) on the
``database_url`` fixture (one SQLite file, or a PostgreSQL database in CI), and
a real ``anonml aggregator serve --workers 2`` on PostgreSQL (only with
``ANONML_TEST_DATABASE_URL``). Peers are played over HTTP through whichever
process; the lease row says which process drives the phases. The holder is
SIGKILLed (another takes over at once: it died on this machine) or SIGSTOPped
(another takes over when its lease expires), and the problem still reaches
its end with every report counted.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from aggregator.app import ServerProcess, start_server_process, start_workers_process
from aggregator.lease import parse_holder
from anonml.database import make_engine
from anonml.protocol import ModelDocument, Problem, ReportAccount, verify_message
from tests.aggregator.helpers import (
    ADMIN,
    WirePeer,
    aggregator_settings,
    close_registration,
    draft,
    post,
    propose,
    send_reports,
    wait_phase,
)
from tests.databases import ON_POSTGRESQL, SERVER_URL_VARIABLE, table_rows
from tests.waiting import wait_until

#: Lease of these tests: short enough that an expiry handover fits a test, renewed every 1.5 s.
LEASE = 6.0


def _holder_pid(db_url: str) -> int | None:
    rows = table_rows(db_url, "SELECT holder FROM leases WHERE name = 'phases'")
    parts = parse_holder(rows[0][0]) if rows else None
    return None if parts is None else parts.pid


def _wait_holder(db_url: str, among: set[int] | None = None, *, not_: int | None = None) -> int:
    """The PID holding the phase lease, once it is one of ``among`` (and not ``not_``)."""
    def wanted(pid: int | None) -> int | None:
        return pid if pid is not None and (among is None or pid in among) and pid != not_ else None

    return wait_until(lambda: wanted(_holder_pid(db_url)), 120,
                      lambda: f"a lease holder among {among} (not {not_}): it is {_holder_pid(db_url)}")


def _open_problem(urls: list[str], n: int = 6) -> tuple[Problem, list[WirePeer]]:
    """A problem proposed through the first URL, ``n`` peers registered through each URL in turn."""
    problem = propose(urls[0], draft(kh=2, kp=1, min_peers=4, n_numeric=2, send_window=300.0))
    peers = [WirePeer() for _ in range(n)]
    for i, peer in enumerate(peers):
        assert peer.register(urls[i % len(urls)], problem).status_code == 201
    return problem, peers


def _train_to_the_end(url: str, problem: Problem) -> ModelDocument:
    assert post(f"{url}/problems/{problem.id}/train", b"", ADMIN).status_code == 200
    st = wait_phase(url, problem.id, ("done", "degraded", "failed"), timeout=120)
    assert st.phase == "done", st.message
    assert st.reports == ReportAccount(expected=12, received=12, lost=0, routes_asked=2)
    doc = ModelDocument.model_validate_json(
        requests.get(f"{url}/problems/{problem.id}/model", timeout=60).content
    )
    verify_message(doc, bytes(problem.aggregator))
    assert doc.reports == st.reports and doc.metrics["reports"] == 12
    return doc


def _write_blocked(db_url: str) -> bool:
    """Whether a write to the lease row would wait on a lock (a frozen process holding one)."""
    engine = make_engine(db_url if ON_POSTGRESQL else f"{db_url}?timeout=1")
    try:
        with engine.begin() as connection:
            if ON_POSTGRESQL:
                connection.execute(text("SET LOCAL lock_timeout = '1s'"))
            connection.execute(text("UPDATE leases SET holder = holder WHERE name = 'phases'"))
        return False
    except OperationalError:
        return True
    finally:
        engine.dispose()


def _freeze(pid: int, db_url: str) -> None:
    """SIGSTOP ``pid`` at a moment it holds no database lock (else let it finish and try again)."""
    for _ in range(50):
        os.kill(pid, signal.SIGSTOP)
        if not _write_blocked(db_url):
            return
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.05)
    raise AssertionError(f"process {pid} held a database lock at every one of 50 tries")


@pytest.fixture
def pair(tmp_path: Path, database_url: str) -> Iterator[tuple[str, list[ServerProcess]]]:
    """Two aggregator processes (own ports) on one database and one identity."""
    settings = aggregator_settings(tmp_path, db_url=database_url, port=0, lease_seconds=LEASE)
    servers = [start_server_process(settings)]
    servers.append(start_server_process(settings))
    try:
        yield database_url, servers
    finally:
        for server in servers:
            if server.process.poll() is None:
                os.kill(server.process.pid, signal.SIGCONT)
                server.stop()


def test_one_of_two_processes_holds_the_lease_and_its_death_hands_it_over_mid_round(pair) -> None:
    db_url, servers = pair
    by_pid = {s.process.pid: s for s in servers}
    holder = by_pid[_wait_holder(db_url, set(by_pid))]
    other = next(s for s in servers if s is not holder)
    identity = {requests.get(f"{s.url}/healthz", timeout=60).json()["identity"] for s in servers}
    assert len(identity) == 1  # one aggregator, two processes
    problem, peers = _open_problem([other.url, holder.url])
    # The flag is in the database; the holder acts on it.
    close_registration(other.url, problem.id, timeout=60)
    wait_phase(other.url, problem.id, ("reporting",), timeout=120)
    rng = np.random.default_rng(7)
    assert send_reports(holder.url, problem, peers[:3], rng) == 6
    holder.process.kill()  # SIGKILL: no release, no shutdown handler
    assert holder.process.wait(timeout=60) == -9
    assert _wait_holder(db_url, {other.process.pid}) == other.process.pid  # at once: it died here
    assert table_rows(db_url, "SELECT taken FROM leases WHERE name = 'phases'") == [(2,)]
    assert send_reports(other.url, problem, peers[3:], rng) == 6
    _train_to_the_end(other.url, problem)


def test_a_frozen_holder_loses_the_lease_at_expiry_and_cannot_take_it_back(pair) -> None:
    db_url, servers = pair
    by_pid = {s.process.pid: s for s in servers}
    frozen = by_pid[_wait_holder(db_url, set(by_pid))]
    other = next(s for s in servers if s is not frozen)
    problem, peers = _open_problem([other.url])
    _freeze(frozen.process.pid, db_url)
    try:
        close_registration(other.url, problem.id, timeout=60)
        assert _wait_holder(db_url, {other.process.pid}) == other.process.pid  # after the frozen one's expiry
        wait_phase(other.url, problem.id, ("reporting",), timeout=120)
        assert send_reports(other.url, problem, peers, np.random.default_rng(8)) == 12
        doc = _train_to_the_end(other.url, problem)
    finally:
        os.kill(frozen.process.pid, signal.SIGCONT)
    # Awake again, it serves the same problem (routes are shared) but does not drive it.
    model = requests.get(f"{frozen.url}/problems/{problem.id}/model", timeout=60)
    assert model.status_code == 200 and ModelDocument.model_validate_json(model.content) == doc
    # Its keeper tries at once on waking; two renewals by the holder later, the holder is unchanged.
    seen: set[float] = set()
    wait_until(lambda: seen.add(table_rows(db_url, "SELECT expires FROM leases WHERE name = 'phases'")[0][0])
               or len(seen) >= 3, 60, "two renewals of the lease after the frozen process woke")
    assert _holder_pid(db_url) == other.process.pid
    assert wait_phase(frozen.url, problem.id, ("done",)).phase == "done"


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


@pytest.mark.skipif(not ON_POSTGRESQL, reason=f"serve --workers 2 needs PostgreSQL ({SERVER_URL_VARIABLE})")
def test_serve_with_two_workers_runs_a_round_and_survives_the_death_of_the_driving_worker(
    tmp_path: Path, database_url: str
) -> None:
    settings = aggregator_settings(tmp_path, db_url=database_url, port=0, lease_seconds=LEASE)
    server = start_workers_process(settings, workers=2)
    try:
        parent = server.process.pid
        driving = _wait_holder(database_url)
        assert driving in _children(parent)
        problem, peers = _open_problem([server.url])
        close_registration(server.url, problem.id, timeout=60)
        wait_phase(server.url, problem.id, ("reporting",), timeout=120)
        rng = np.random.default_rng(9)
        assert send_reports(server.url, problem, peers[:3], rng) == 6
        os.kill(driving, signal.SIGKILL)
        successor = _wait_holder(database_url, not_=driving)
        assert successor in _children(parent) and successor != driving
        assert send_reports(server.url, problem, peers[3:], rng) == 6
        _train_to_the_end(server.url, problem)
    finally:
        server.stop()
    assert server.process.returncode == 0
