"""make_engine: the SQLite settings every AnonML database relies on."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from anonml.database import is_sqlite_memory, make_engine


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
