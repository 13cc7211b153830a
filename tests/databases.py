"""Throwaway databases for tests: a SQLite file, or a fresh PostgreSQL database per test.

``ANONML_TEST_DATABASE_URL`` names a PostgreSQL server (any database on it
the user may connect to, e.g. ``postgresql+psycopg://anonml@127.0.0.1:5432/postgres``);
when it is set, every test that takes the ``database_url`` fixture gets a
database of its own, created from that URL and dropped afterwards. Unset,
the fixture is a SQLite file in the test's temporary folder. ``.ci/run``
runs the database suites both ways.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

SERVER_URL_VARIABLE = "ANONML_TEST_DATABASE_URL"
SERVER_URL: str | None = os.environ.get(SERVER_URL_VARIABLE) or None
ON_POSTGRESQL = SERVER_URL is not None

#: Skips a test that inspects the SQLite file itself (bytes, pragmas, locks).
sqlite_only = pytest.mark.skipif(
    ON_POSTGRESQL, reason=f"reads the SQLite file itself ({SERVER_URL_VARIABLE} is set)"
)


@contextmanager
def postgresql_database(server_url: str) -> Iterator[str]:
    """A new, empty database on the server of ``server_url``; dropped (connections and all) on exit."""
    server = make_url(server_url)
    if server.get_backend_name() != "postgresql":
        backend = server.get_backend_name()
        raise ValueError(f"{SERVER_URL_VARIABLE} must be a postgresql:// URL, got {backend!r}")
    name = f"anonml_test_{secrets.token_hex(6)}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    try:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
        try:
            yield server.set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as connection:
                connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()


@contextmanager
def fresh_database(folder: Path, name: str = "test.db") -> Iterator[str]:
    """A fresh database URL: PostgreSQL when :data:`SERVER_URL` is set, else ``folder/name`` in SQLite."""
    if SERVER_URL is None:
        yield f"sqlite:///{folder / name}"
        return
    with postgresql_database(SERVER_URL) as url:
        yield url


def table_rows(url: str, sql: str) -> list[tuple]:
    """The rows ``sql`` selects from the database at ``url`` (a short-lived engine of its own)."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.exec_driver_sql(sql)]
    finally:
        engine.dispose()
