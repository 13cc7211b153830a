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
