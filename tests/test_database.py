"""make_engine: the SQLite settings every AnonML database relies on; every table on every backend."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from aggregator.db import ProblemRow, RejectRow, count_reject
from aggregator.db import create_tables as create_aggregator_tables
from anonml.crypto.exceptions import AlreadyIssued, TokenSpent
from anonml.crypto.spent import SqlIssuanceLedger, SqlSpentSet
from anonml.database import is_sqlite_memory, make_engine, retry_serializable
from anonml.privacy import PrivacyLedger
from anonml.store import EventStore, ImportReport
from peer.db import PeerDB
from tests.test_store import LinesImporter


def test_sqlite_file_gets_wal_busy_timeout_and_foreign_keys(tmp_path: Path):
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with engine.connect() as con:
        assert con.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert con.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert con.execute(text("PRAGMA busy_timeout")).scalar() == 30_000
        assert con.execute(text("PRAGMA synchronous")).scalar() == 1  # NORMAL


def test_memory_database_is_one_shared_connection():
    engine = make_engine("sqlite://")
    with engine.begin() as con:
        con.execute(text("CREATE TABLE t (x INTEGER)"))
        con.execute(text("INSERT INTO t VALUES (7)"))
    with engine.connect() as other:  # a new checkout sees the same database
        assert other.execute(text("SELECT x FROM t")).scalar() == 7
    assert is_sqlite_memory("sqlite://") and not is_sqlite_memory("sqlite:///file.db")


def test_immediate_transactions_hold_the_write_lock_from_begin(tmp_path: Path):
    import sqlite3

    url = tmp_path / "lock.db"
    engine = make_engine(f"sqlite:///{url}", immediate=True)
    with engine.begin() as con:
        con.execute(text("CREATE TABLE t (x INTEGER)"))
    with engine.begin() as con:
        con.execute(text("SELECT 1"))  # a read only, yet the lock is taken at BEGIN
        outsider = sqlite3.connect(url, timeout=0)
        try:
            outsider.execute("BEGIN IMMEDIATE")
            raise AssertionError("a second writer got the lock")
        except sqlite3.OperationalError as exc:
            assert "locked" in str(exc)
        finally:
            outsider.close()


_CREATE_EVERYTHING = """
from aggregator.settings import AggregatorSettings
from aggregator.state import AggregatorState
from anonml.privacy import PrivacyLedger
from anonml.store import EventStore
from peer.app import load_or_create_identity
from peer.db import PeerDB
from peer.settings import PeerSettings

store = EventStore()
store.count()
ledger = PrivacyLedger()
ledger.set_cap("p", 1.0, peer="me")
settings = PeerSettings()
PeerDB(settings.state_url)
load_or_create_identity(settings)
AggregatorState(AggregatorSettings())  # its database, identity and admin token
"""


def test_a_real_process_creates_every_database_and_secret_owner_only_in_a_loose_home(tmp_path: Path):
    """Another local user reads nothing: files 0600 (with -wal/-shm), folders 0700, home tightened."""
    import os
    import stat
    import subprocess
    import sys

    home = tmp_path / "home"
    home.mkdir()
    os.chmod(home, 0o755)  # a pre-existing, world-readable home
    env = {**os.environ, "ANONML_HOME": str(home)}
    done = subprocess.run([sys.executable, "-c", _CREATE_EVERYTHING], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    names = {p.relative_to(home).as_posix() for p in home.rglob("*")}
    for expected in ("events.db", "ledger.db", "peer/peer.db", "peer/identity.json",
                     "aggregator/aggregator.db", "aggregator/identity.json", "aggregator/admin-token"):
        assert expected in names
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    for path in home.rglob("*"):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), f"{path.relative_to(home)} is {mode:04o}"


def test_companion_files_of_an_open_database_are_owner_only(tmp_path: Path):
    import os
    import stat

    old = os.umask(0o022)
    try:
        path = tmp_path / "x.db"
        engine = make_engine(f"sqlite:///{path}")
        with engine.begin() as con:  # an open connection keeps -wal and -shm
            con.execute(text("CREATE TABLE t (x INTEGER)"))
            con.execute(text("INSERT INTO t VALUES (1)"))
            for suffix in ("", "-wal", "-shm"):
                companion = path.with_name(path.name + suffix)
                assert companion.exists(), suffix
                assert stat.S_IMODE(companion.stat().st_mode) == 0o600, suffix
        # A database left 0644 by an older version is tightened the next time it is opened.
        os.chmod(path, 0o644)
        engine.dispose()
        with make_engine(f"sqlite:///{path}").connect() as con:
            assert con.execute(text("PRAGMA secure_delete")).scalar() == 1
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        os.umask(old)


# -- every backend: the tests below run on SQLite, and on PostgreSQL when
# ANONML_TEST_DATABASE_URL is set (.ci/run does both) ---------------------------


def _store_with(url: str, tmp_path: Path, lines: list[str]) -> tuple[EventStore, ImportReport]:
    path = tmp_path / f"{len(lines)}-{lines[0].split()[0]}.lines"
    path.write_text("\n".join(lines) + "\n")
    store = EventStore(url)
    return store, store.import_file(path, LinesImporter())


def test_microsecond_timestamps_and_63_bit_ids_fit_every_column(database_url: str, tmp_path: Path):
    # Hours from 2021-03-01: 1900 and 2200 are ~1.6e15..7.3e15 µs from the epoch, far past 2^31.
    far = ["-1060000 a 1", "1570000 a 2", "0 a 3"]
    store, report = _store_with(database_url, tmp_path, far)
    with store:
        assert report.inserted == 3
        years = sorted(e.timestamp.year for e in store.events())
        assert years == [1900, 2021, 2200]
    with PrivacyLedger(database_url) as ledger:
        released = ledger.record(
            peer="alice", problem="p", round=2**62, attributes=["a"], mechanism="oue", epsilon=0.5
        )
        assert released.round == 2**62 and ledger.releases()[0].round == 2**62
    engine = make_engine(database_url)
    try:
        create_aggregator_tables(engine)
        with Session(engine) as session, session.begin():
            session.add(
                ProblemRow(
                    id="p-1",
                    problem_json="{}",
                    seed=b"s",
                    token_secret=b"k",
                    round_id=2**63 - 1,
                    phase="registration",
                    created_at=datetime.now(UTC),
                    phase_started=1.7e9,
                )
            )
        with Session(engine) as session:
            assert session.get(ProblemRow, "p-1").round_id == 2**63 - 1
    finally:
        engine.dispose()


def test_a_token_is_issued_and_spent_once_and_refused_the_second_time(database_url: str):
    engine = make_engine(database_url)
    try:
        issued, spent = SqlIssuanceLedger(engine), SqlSpentSet(engine)
        key, peer, slot, nonce = b"k" * 32, b"p" * 64, b"s" * 16, b"n" * 32
        issued.record(key, peer, slot)  # refused as "already issued" when the insert was misread
        assert issued.has_issued(key, peer, slot)
        with pytest.raises(AlreadyIssued):
            issued.record(key, peer, slot)
        issued.record(key, peer, b"t" * 16)
        spent.spend(key, slot, nonce)
        with pytest.raises(TokenSpent):
            spent.spend(key, slot, nonce)
        assert spent.is_spent(key, slot, nonce) and not spent.is_spent(key, slot, b"m" * 32)
    finally:
        engine.dispose()


def _together(n: int, work: Callable[[int], None]) -> list[BaseException]:
    """Run ``work(i)`` in ``n`` threads released at once; the exceptions they raised."""
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            work(i)
        except BaseException as exc:  # noqa: BLE001 - collected and asserted on
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_concurrent_first_refusals_are_all_counted(database_url: str):
    engine = make_engine(database_url)
    try:
        create_aggregator_tables(engine)

        reasons = [f"reason {k}" for k in range(6)]

        def refuse(_: int) -> None:
            for reason in reasons:  # six first refusals, each raced by every thread
                with Session(engine) as session, session.begin():
                    count_reject(session, "p-1", reason)

        assert _together(12, refuse) == []
        with Session(engine) as session:
            assert [session.get(RejectRow, ("p-1", r)).count for r in reasons] == [12] * 6
    finally:
        engine.dispose()


def test_concurrent_imports_count_their_own_new_and_duplicate_events(database_url: str, tmp_path: Path):
    # Four imports of overlapping files at once: each counts only what it inserted,
    # the counts are never negative, and together they inserted each event once.
    files = []
    for i in range(4):
        path = tmp_path / f"part{i}.lines"
        path.write_text("".join(f"{h} a {h}\n" for h in range(i * 300, i * 300 + 600)))
        files.append(path)
    reports: list[ImportReport] = []
    with EventStore(database_url) as store:
        errors = _together(4, lambda i: reports.append(store.import_file(files[i], LinesImporter())))
        assert errors == []
        assert all(r.inserted >= 0 and r.duplicate >= 0 and r.accepted == 600 for r in reports)
        assert sum(r.inserted for r in reports) == store.count() == 1500
        recorded = {r.id: r for r in store.imports()}
        assert all(recorded[r.import_id].duplicate == r.duplicate for r in reports)


def test_import_times_are_utc_instants_whatever_the_server_time_zone(database_url: str, tmp_path: Path):
    url = make_url(database_url)
    if url.get_backend_name() == "postgresql":  # every new session of this database: UTC+14
        admin = make_engine(database_url)
        with admin.connect() as connection:
            zone = "SET timezone TO 'Pacific/Kiritimati'"
            connection.exec_driver_sql(f'ALTER DATABASE "{url.database}" {zone}')
            connection.commit()
        admin.dispose()
    before = datetime.now(UTC)
    store, report = _store_with(database_url, tmp_path, ["0 a 1"])
    after = datetime.now(UTC)
    with store:
        (record,) = store.imports()
        assert record.started_at.tzinfo is not None and record.started_at.utcoffset() == timedelta(0)
        assert before - timedelta(seconds=1) <= record.started_at <= after + timedelta(seconds=1)
        if url.get_backend_name() == "postgresql":  # the server holds the same instant, not a shifted one
            with store.engine.connect() as connection:
                epoch = connection.exec_driver_sql(
                    "SELECT EXTRACT(EPOCH FROM started_at::timestamptz) FROM imports"
                ).scalar_one()
            assert abs(float(epoch) - record.started_at.timestamp()) < 1e-3


def test_peer_records_keep_their_types(database_url: str):
    db = PeerDB(database_url)
    try:
        assert db.record_proposal("p-1", "http://127.0.0.1:1", "{}")
        assert not db.record_proposal("p-1", "http://127.0.0.1:1", "{}")
        db.decide("p-1", "n", "accept", "fits the policy", 0.75)
        db.save_participation("p-1", "n", "reporting", "{}", None, fingerprint="f" * 64)
        assert db.accepted_epsilon("n") == {"p-1": 0.75}
        participation = db.participation("p-1", "n")
        assert participation.phase == "reporting" and participation.updated_at.tzinfo is not None
    finally:
        db.close()


def test_a_peer_db_lists_only_the_accepts_left_to_start(database_url: str):
    """What a host's every poll asks (peer.host, manual accepts): accepted, and no participation yet.
    A started participation (any phase) and a refusal are not listed; another identity's accept is."""
    db = PeerDB(database_url)
    try:
        decisions = [("p-1", "n", "accept"), ("p-2", "n", "accept"), ("p-1", "m", "accept")]
        decisions.append(("p-3", "n", "refuse"))
        for problem_id, node, verdict in decisions:
            db.decide(problem_id, node, verdict, "by the test", 1.0)
        assert db.unstarted_accepts() == {"n": {"p-1", "p-2"}, "m": {"p-1"}}
        db.save_participation("p-1", "n", "aborted", "{}", None)
        db.save_participation("p-3", "n", "accepted", "{}", None)
        assert db.unstarted_accepts() == {"n": {"p-2"}, "m": {"p-1"}}
        db.save_participation("p-2", "n", "reporting", "{}", None)
        db.save_participation("p-1", "m", "done", "{}", None)
        assert db.unstarted_accepts() == {}
    finally:
        db.close()


def test_serialization_failures_are_retried_and_other_errors_are_not():
    class Failure(Exception):
        def __init__(self, sqlstate: str) -> None:
            super().__init__(sqlstate)
            self.sqlstate = sqlstate

    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise OperationalError("COMMIT", {}, Failure("40001"))
        return "committed"

    assert retry_serializable(flaky, base_delay=0.0) == "committed" and len(calls) == 3

    def broken() -> None:
        calls.append(1)
        raise OperationalError("INSERT", {}, Failure("23505"))

    calls.clear()
    with pytest.raises(OperationalError):
        retry_serializable(broken, base_delay=0.0)
    assert len(calls) == 1

    def always() -> None:
        calls.append(1)
        raise OperationalError("COMMIT", {}, Failure("40P01"))

    calls.clear()
    with pytest.raises(OperationalError):
        retry_serializable(always, attempts=4, base_delay=0.0)
    assert len(calls) == 4


def test_a_store_and_ledger_made_by_the_first_revisions_are_widened_when_opened(
    database_url: str, tmp_path: Path
):
    from alembic import command

    from anonml.database import _config

    engine = make_engine(database_url)
    try:
        with engine.begin() as connection:  # the schema as the first revisions made it (32-bit on PostgreSQL)
            command.upgrade(_config("anonml.migrations.store", connection), "store_0001")
            command.upgrade(_config("anonml.migrations.ledger", connection), "ledger_0002")
    finally:
        engine.dispose()
    store, report = _store_with(database_url, tmp_path, ["1570000 a 2"])  # 2200: past 2^31 µs
    with store:
        assert report.inserted == 1 and store.events()[0].timestamp.year == 2200
    with PrivacyLedger(database_url) as ledger:
        assert ledger.record(
            peer="a", problem="p", round=2**40, attributes=["x"], mechanism="oue", epsilon=0.1
        ).round == 2**40


def test_another_process_sees_every_commit_of_a_database_opened_twice_in_one_process(tmp_path: Path):
    """A second engine on an open file (a migration makes one) must not drop the first one's locks.

    Closing any descriptor of a file drops the process's POSIX locks on it; if
    opening an engine opened and closed the database file, another process
    closing its connection would delete the write-ahead log under the first
    engine, and what it commits afterwards would be invisible elsewhere.
    """
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'shared.db'}"
    code = (
        "import sys\nfrom sqlalchemy import text\nfrom anonml.database import make_engine\n"
        "e = make_engine(sys.argv[1])\n"
        "with e.begin() as c:\n    c.execute(text('CREATE TABLE t (x INTEGER)'))\n"
        "    c.execute(text('INSERT INTO t VALUES (1)'))\n"
        "make_engine(sys.argv[1]).dispose()  # a second engine, opened and closed\n"
        "print('ready', flush=True)\nsys.stdin.readline()\n"
        "with e.begin() as c:\n    c.execute(text('INSERT INTO t VALUES (2)'))\n"
        "print('written', flush=True)\nsys.stdin.readline()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    assert child.stdin is not None and child.stdout is not None

    def rows() -> list[int]:
        engine = make_engine(url)
        try:
            with engine.connect() as c:
                return [r[0] for r in c.execute(text("SELECT x FROM t ORDER BY x"))]
        finally:
            engine.dispose()  # this process's last connection: it checkpoints if it may

    try:
        assert child.stdout.readline().strip() == "ready"
        assert rows() == [1]
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "written"
        assert rows() == [1, 2]  # the child's commit, seen while it still runs
    finally:
        child.stdin.close()
        child.wait(timeout=60)
