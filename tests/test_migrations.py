"""Schema versions: databases written before migrations open, keep their rows and are upgraded.

The fixtures write the schema the event store and the privacy ledger had
before schema versions existed (commit cf75dc6: the ledger had no lifetime
caps yet), with the DDL those versions emitted, then open them with the
current code.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from anonml.database import make_engine, migrate, schema_revision
from anonml.errors import BudgetExceeded, SchemaError
from anonml.privacy.ledger import LedgerBase, PrivacyLedger
from anonml.store import Base, EventStore

STORE_HEAD = "store_0002"
LEDGER_HEAD = "ledger_0003"

#: The event store's tables as the code before schema versions created them.
OLD_STORE_DDL = """
CREATE TABLE imports (
    id INTEGER NOT NULL, importer VARCHAR(64) NOT NULL, importer_version VARCHAR(32) NOT NULL,
    path TEXT NOT NULL, file_sha256 VARCHAR(64) NOT NULL, user_id VARCHAR(256) NOT NULL,
    started_at DATETIME NOT NULL, finished_at DATETIME, accepted INTEGER NOT NULL,
    duplicate INTEGER NOT NULL, rejected INTEGER NOT NULL, PRIMARY KEY (id)
);
CREATE INDEX ix_imports_file_sha256 ON imports (file_sha256);
CREATE TABLE events (
    user_id VARCHAR(256) NOT NULL, id VARCHAR(32) NOT NULL, source VARCHAR(64) NOT NULL,
    type VARCHAR(256) NOT NULL, ts_us INTEGER, fields TEXT NOT NULL, import_id INTEGER NOT NULL,
    PRIMARY KEY (user_id, id), FOREIGN KEY(import_id) REFERENCES imports (id)
);
CREATE INDEX ix_events_source_type_time ON events (source, type, ts_us);
CREATE INDEX ix_events_user_time ON events (user_id, ts_us);
INSERT INTO imports VALUES (1, 'edx', '1.0', '/data/tracking.log', 'ab12', 'me',
                            '2024-05-01 09:30:00.000000', '2024-05-01 09:30:01.500000', 2, 0, 0);
INSERT INTO events VALUES ('me', 'e1', 'edx', 'play_video', 1714555800000000, '{"position": 12.5}', 1);
INSERT INTO events VALUES ('me', 'e2', 'edx', 'problem_check', 1714555860000000, '{"grade": 1}', 1);
"""

#: The privacy ledger's tables as the code at cf75dc6 created them (no lifetime caps).
OLD_LEDGER_DDL = """
CREATE TABLE privacy_releases (
    id INTEGER NOT NULL, peer VARCHAR(256) NOT NULL, problem VARCHAR(256) NOT NULL,
    round INTEGER NOT NULL, mechanism VARCHAR(64) NOT NULL, epsilon DOUBLE NOT NULL,
    pool VARCHAR(256), recorded_at DATETIME NOT NULL, PRIMARY KEY (id)
);
CREATE INDEX ix_privacy_releases_problem ON privacy_releases (problem);
CREATE INDEX ix_privacy_releases_peer ON privacy_releases (peer);
CREATE TABLE privacy_caps (
    problem VARCHAR(256) NOT NULL, peer VARCHAR(256) NOT NULL, cap DOUBLE NOT NULL,
    PRIMARY KEY (problem, peer)
);
CREATE TABLE privacy_release_attributes (
    release_id INTEGER NOT NULL, position INTEGER NOT NULL, name VARCHAR(256) NOT NULL,
    PRIMARY KEY (release_id, position), FOREIGN KEY(release_id) REFERENCES privacy_releases (id)
);
CREATE INDEX ix_privacy_release_attributes_name ON privacy_release_attributes (name);
INSERT INTO privacy_releases VALUES (1, 'alice', 'dropout', 0, 'binary_rr', 0.25, NULL,
                                     '2026-11-23 13:02:42.674411');
INSERT INTO privacy_release_attributes VALUES (1, 0, 'age');
INSERT INTO privacy_release_attributes VALUES (1, 1, 'label');
INSERT INTO privacy_caps VALUES ('dropout', '', 2.0);
"""


def _old_database(path: Path, ddl: str) -> str:
    with sqlite3.connect(path) as con:
        con.executescript(ddl)
    con.close()
    return f"sqlite:///{path}"


def _revision(url: str, package: str) -> str | None:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return schema_revision(connection, package)
    finally:
        engine.dispose()


def test_an_event_store_written_before_schema_versions_keeps_its_rows(tmp_path: Path):
    url = _old_database(tmp_path / "events.db", OLD_STORE_DDL)
    with EventStore(url) as store:
        assert store.count() == 2
        assert [e.type for e in store.events(user="me")] == ["play_video", "problem_check"]
        assert store.events(user="me")[0].fields == {"position": 12.5}
        (record,) = store.imports()
        assert record.started_at == datetime(2024, 5, 1, 9, 30, tzinfo=UTC)  # aware UTC, read back
        assert (record.importer, record.accepted, record.added) == ("edx", 2, 2)
    assert _revision(url, "anonml.migrations.store") == STORE_HEAD


def test_a_ledger_written_before_lifetime_caps_is_upgraded_and_keeps_its_releases(tmp_path: Path):
    url = _old_database(tmp_path / "ledger.db", OLD_LEDGER_DDL)
    with PrivacyLedger(url) as ledger:
        assert ledger.budget("alice", "dropout").total == pytest.approx(0.25)
        assert ledger.budget("alice", "dropout").remaining == pytest.approx(1.75)  # the stored cap
        (release,) = ledger.releases(peer="alice")
        assert release.attributes == ("age", "label")
        assert release.recorded_at == datetime(2026, 11, 23, 13, 2, 42, 674411, tzinfo=UTC)
        # The table the upgrade added works: a lifetime cap is stored and enforced.
        ledger.set_lifetime_cap("alice", 0.5)
        with pytest.raises(BudgetExceeded):
            ledger.record(peer="alice", problem="other", round=0, attributes=["age"],
                          mechanism="binary_rr", epsilon=0.3)
    assert _revision(url, "anonml.migrations.ledger") == LEDGER_HEAD
    with sqlite3.connect(tmp_path / "ledger.db") as con:
        assert con.execute("SELECT count(*) FROM privacy_release_attributes").fetchone() == (2,)
    con.close()


def test_a_ledger_that_already_made_its_lifetime_table_on_open_is_stamped_not_recreated(tmp_path: Path):
    lifetime = "CREATE TABLE privacy_lifetime_caps (peer VARCHAR(256) NOT NULL, cap DOUBLE NOT NULL, " \
               "PRIMARY KEY (peer)); INSERT INTO privacy_lifetime_caps VALUES ('alice', 3.0);"
    url = _old_database(tmp_path / "ledger.db", OLD_LEDGER_DDL + lifetime)
    with PrivacyLedger(url) as ledger:
        assert ledger.lifetime_cap("alice") == 3.0
    assert _revision(url, "anonml.migrations.ledger") == LEDGER_HEAD


@pytest.mark.parametrize(("package", "base"), [("anonml.migrations.store", Base),
                                               ("anonml.migrations.ledger", LedgerBase)])
def test_migrations_build_exactly_the_tables_the_models_declare(package: str, base: type):
    engine = make_engine("sqlite://")
    migrate(engine, package)
    with engine.connect() as connection:
        context = MigrationContext.configure(
            connection, opts={"version_table": f"anonml_schema_{package.rsplit('.', 1)[-1]}"}
        )
        assert compare_metadata(context, base.metadata) == []


def test_store_and_ledger_in_one_file_are_versioned_apart(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'both.db'}"
    EventStore(url).close()
    PrivacyLedger(url).close()
    assert _revision(url, "anonml.migrations.store") == STORE_HEAD
    assert _revision(url, "anonml.migrations.ledger") == LEDGER_HEAD
    engine = make_engine(url)
    names = set(inspect(engine).get_table_names())
    engine.dispose()
    assert {"events", "imports", "privacy_releases", "anonml_schema_store", "anonml_schema_ledger"} <= names


def test_a_database_from_a_newer_version_is_refused_by_name(tmp_path: Path):
    url = _old_database(tmp_path / "ledger.db", OLD_LEDGER_DDL)
    PrivacyLedger(url).close()
    with sqlite3.connect(tmp_path / "ledger.db") as con:
        con.execute("UPDATE anonml_schema_ledger SET version_num = 'ledger_9999'")
    con.close()
    with pytest.raises(SchemaError, match="revision 'ledger_9999' is unknown to this version"):
        PrivacyLedger(url)


def test_a_half_made_database_is_refused_not_stamped(tmp_path: Path):
    partial = OLD_LEDGER_DDL.split("CREATE TABLE privacy_caps")[0]
    url = _old_database(tmp_path / "ledger.db", partial)
    expected = "has privacy_releases but not privacy_caps, privacy_release_attributes"
    with pytest.raises(SchemaError, match=expected):
        PrivacyLedger(url)


def test_two_processes_opening_a_new_ledger_at_once_both_succeed(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    code = "import sys; from anonml.privacy.ledger import PrivacyLedger; PrivacyLedger(sys.argv[1]).close()"
    procs = [subprocess.Popen([sys.executable, "-c", code, url], stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    assert _revision(url, "anonml.migrations.ledger") == LEDGER_HEAD


MIGRATION_PACKAGES = (
    "anonml.migrations.store", "anonml.migrations.ledger", "aggregator.migrations",
    "peer.migrations.state", "witness.migrations",
)


@pytest.mark.parametrize("package", MIGRATION_PACKAGES)
def test_the_head_read_from_the_revision_files_is_alembics(package: str):
    from alembic.script import ScriptDirectory

    from anonml.database import _config, _plain_head

    assert _plain_head(package) == ScriptDirectory.from_config(_config(package)).get_current_head()


def test_a_store_at_the_head_is_opened_without_importing_alembic(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'events.db'}"
    code = ("import sys; from anonml.store import EventStore; EventStore(sys.argv[1]).close(); "
            "print('alembic' in sys.modules)")
    runs = [subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True, timeout=120)
            for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
    # The first opening creates the schema (Alembic), the second only reads the revision.
    assert [r.stdout.strip() for r in runs] == ["True", "False"]
    assert _revision(url, "anonml.migrations.store") == STORE_HEAD


def test_a_database_behind_the_head_is_still_upgraded(tmp_path: Path):
    url = _old_database(tmp_path / "ledger.db", OLD_LEDGER_DDL)
    PrivacyLedger(url).close()
    with sqlite3.connect(tmp_path / "ledger.db") as con:
        con.execute("UPDATE anonml_schema_ledger SET version_num = 'ledger_0001'")
        con.execute("DROP TABLE privacy_lifetime_caps")  # what ledger_0002 makes
    con.close()
    PrivacyLedger(url).close()
    assert _revision(url, "anonml.migrations.ledger") == LEDGER_HEAD
    with sqlite3.connect(tmp_path / "ledger.db") as con:
        assert con.execute("SELECT name FROM sqlite_master WHERE name = 'privacy_lifetime_caps'").fetchall()
    con.close()


def _revision_package(root: Path, name: str, files: dict[str, str]) -> str:
    package = root / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    for file, text in files.items():
        (package / file).write_text(text)
    return name


def test_revision_files_that_do_not_name_their_head_plainly_are_left_to_alembic(tmp_path: Path, monkeypatch):
    from anonml.database import _plain_head

    monkeypatch.syspath_prepend(str(tmp_path))
    linear = {"a.py": 'revision = "r1"\ndown_revision = None\n',
              "b.py": 'revision: str = "r2"\ndown_revision = "r1"\n'}
    assert _plain_head(_revision_package(tmp_path, "plain_linear", linear)) == "r2"
    computed = {"a.py": 'revision = "r1"\ndown_revision = None\n',
                "b.py": 'revision = "r" + "2"\ndown_revision = "r1"\n'}
    assert _plain_head(_revision_package(tmp_path, "plain_computed", computed)) is None
    branched = {"a.py": 'revision = "r1"\ndown_revision = None\n',
                "b.py": 'revision = "r2"\ndown_revision = "r1"\n',
                "c.py": 'revision = "r3"\ndown_revision = "r1"\n'}
    assert _plain_head(_revision_package(tmp_path, "plain_branched", branched)) is None
    merge = {"a.py": 'revision = "r1"\ndown_revision = None\n',
             "b.py": 'revision = "r2"\ndown_revision = ("r1", "r0")\n'}
    assert _plain_head(_revision_package(tmp_path, "plain_merge", merge)) is None
