"""The event store on real databases (``database_url``): idempotence, rollback, provenance, queries."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from anonml.database import sqlite_path
from anonml.errors import RecordError, StoreError
from anonml.model import Event, Text
from anonml.plugins import Importer, create
from anonml.store import DEFAULT_USER, EventStore, sha256_file
from tests.databases import sqlite_only

T0 = datetime(2021, 3, 1, tzinfo=UTC)
FIXTURES = Path(__file__).parent / "importers" / "fixtures"


class LinesImporter(Importer):
    """Test importer: one event per line ``<hours> <type> <value>``; ``bad`` lines are bad."""

    name = "lines"
    version = "0.1"

    def detect(self, path: Path) -> float:
        return 1.0 if path.suffix == ".lines" else 0.0

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            parts = line.split()
            if len(parts) != 3:
                yield RecordError(path, n, f"expected 3 columns, got {len(parts)}")
                continue
            hours, typ, value = parts
            yield Event(source="lines", type=typ, timestamp=T0 + timedelta(hours=int(hours)),
                        fields={"value": int(value), "note": Text(line)})


@pytest.fixture
def store(database_url: str) -> Iterator[EventStore]:
    with EventStore(database_url) as events:
        yield events


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _table_rows(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as con:
        query = "select user_id, id, source, type, ts_us, fields from events order by id"
        return con.execute(query).fetchall()


def test_import_then_reimport_adds_nothing(store: EventStore, tmp_path: Path):
    f = _write(tmp_path / "a.lines", ["0 a 1", "1 b 2", "2 a 3"])
    first = store.import_file(f, LinesImporter())
    assert (first.accepted, first.inserted, first.duplicate, first.rejected) == (3, 3, 0, 0)
    again = store.import_file(f, LinesImporter())
    assert (again.accepted, again.inserted, again.duplicate) == (3, 0, 3)
    assert store.count() == 3


@sqlite_only
def test_bad_line_rolls_back_and_leaves_store_byte_identical(store: EventStore, tmp_path: Path):
    store.import_file(_write(tmp_path / "ok.lines", ["0 a 1"]), LinesImporter())
    db = sqlite_path(store.url)
    before_rows, before_imports = _table_rows(db), len(store.imports())
    bad = _write(tmp_path / "bad.lines", ["5 a 1", "6 a 2", "oops", "7 a 3"])
    with pytest.raises(RecordError) as info:
        store.import_file(bad, LinesImporter())
    assert str(info.value) == f"{bad}:3: expected 3 columns, got 1"
    assert _table_rows(db) == before_rows
    assert len(store.imports()) == before_imports  # no provenance row for a failed import


def test_skip_bad_imports_the_rest_and_reports_each(store: EventStore, tmp_path: Path):
    bad = _write(tmp_path / "bad.lines", ["5 a 1", "x", "6 a 2", "y y"])
    report = store.import_file(bad, LinesImporter(), skip_bad=True)
    assert (report.accepted, report.inserted, report.rejected) == (2, 2, 2)
    assert [e.line for e in report.errors] == [2, 4]
    assert store.imports()[-1].rejected == 2


@pytest.mark.parametrize("size", [0, 1, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) + 12345])
def test_sha256_file_is_the_hash_of_every_byte(tmp_path: Path, size: int):
    # Sizes at and around the 1 MiB read buffer: a read that fills it, one past it, a short last one.
    import hashlib
    import random

    data = random.Random(size).randbytes(size)
    f = tmp_path / "data.bin"
    f.write_bytes(data)
    assert sha256_file(f) == hashlib.sha256(data).hexdigest()


def test_provenance_records_importer_hash_and_counts(store: EventStore, tmp_path: Path):
    import hashlib

    f = _write(tmp_path / "a.lines", ["0 a 1", "0 a 1", "1 b 2"])
    store.import_file(f, LinesImporter())
    (rec,) = store.imports()
    assert (rec.importer, rec.importer_version) == ("lines", "0.1")
    assert rec.file_sha256 == hashlib.sha256(f.read_bytes()).hexdigest()
    assert (rec.accepted, rec.duplicate, rec.added) == (3, 1, 2)  # in-file duplicate counted
    assert rec.started_at.tzinfo is not None


def test_incremental_export_adds_only_new_events(store: EventStore, tmp_path: Path):
    store.import_file(_write(tmp_path / "old.lines", ["0 a 1", "1 a 2"]), LinesImporter())
    report = store.import_file(
        _write(tmp_path / "new.lines", ["0 a 1", "1 a 2", "2 a 3"]), LinesImporter()
    )
    assert (report.inserted, report.duplicate) == (1, 2)
    assert [r.added for r in store.imports()] == [2, 1]


def test_users_are_separate_and_user_option_overrides(store: EventStore, tmp_path: Path):
    f = _write(tmp_path / "a.lines", ["0 a 1"])
    store.import_file(f, LinesImporter())
    store.import_file(f, LinesImporter(), user="alice")
    assert store.users() == sorted(["alice", DEFAULT_USER])
    assert store.count() == 2  # same content, two people: two events


def test_queries_by_source_type_and_time(store: EventStore, tmp_path: Path):
    f = _write(tmp_path / "a.lines", [f"{h} {'a' if h % 2 else 'b'} {h}" for h in range(10)])
    store.import_file(f, LinesImporter())
    evs = store.events(type="a", start=T0 + timedelta(hours=3), end=T0 + timedelta(hours=7))
    assert [e.fields["value"] for e in evs] == [3, 5]
    assert all(e.user == DEFAULT_USER for e in evs)
    ds = store.dataset(DEFAULT_USER, end=T0 + timedelta(hours=2))
    assert [e.fields["value"] for e in ds.events] == [0, 1]
    assert isinstance(ds.events[0].fields["note"], Text)
    summary = {(s.source, s.type): s for s in store.summary()}
    assert summary[("lines", "a")].count == 5
    assert summary[("lines", "b")].first == T0
    assert summary[("lines", "a")].last == T0 + timedelta(hours=9)


@sqlite_only
def test_stored_ids_equal_event_ids(store: EventStore, tmp_path: Path):
    store.import_file(_write(tmp_path / "a.lines", ["0 a 1"]), LinesImporter())
    (ev,) = store.events()
    (row,) = _table_rows(sqlite_path(store.url))
    assert row[1] == ev.id


def test_default_location_is_anonml_home(anonml_home: Path):
    store = EventStore()
    assert store.url == f"sqlite:///{anonml_home / 'events.db'}"
    assert store.count() == 0
    assert (anonml_home / "events.db").exists()


def test_bad_url_is_a_store_error():
    with pytest.raises(StoreError, match="cannot open event store"):
        EventStore("nosuchdialect://x")


def test_missing_file_is_a_record_error(store: EventStore, tmp_path: Path):
    with pytest.raises(RecordError, match="no such file"):
        store.import_file(tmp_path / "absent.lines", LinesImporter())


def test_import_files_is_one_transaction(store: EventStore, tmp_path: Path):
    good = _write(tmp_path / "good.lines", ["0 a 1", "1 a 2"])
    bad = _write(tmp_path / "bad.lines", ["2 a 3", "broken"])
    with pytest.raises(RecordError, match="bad.lines:2"):
        store.import_files([(good, LinesImporter(), "x.zip!/good"), (bad, LinesImporter(), None)])
    assert store.count() == 0 and store.imports() == []
    reports = store.import_files([(good, LinesImporter(), "x.zip!/good")])
    assert reports[0].path == "x.zip!/good"
    assert store.imports()[0].path == "x.zip!/good"  # provenance names the archive member


class ShiftedLines(LinesImporter):
    """The same lines read ``shift`` hours later (a corrected timezone, say)."""

    def __init__(self, shift: int) -> None:
        super().__init__()
        self.shift = shift

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        for item in super().parse(path):
            if isinstance(item, Event):
                item = Event(source=item.source, type=item.type, fields=item.fields,
                             timestamp=item.timestamp + timedelta(hours=self.shift))
            yield item


def test_replace_swaps_an_earlier_import_of_the_same_file(store: EventStore, tmp_path: Path):
    f = _write(tmp_path / "a.lines", ["0 a 1", "1 b 2", "2 a 3"])
    other = _write(tmp_path / "b.lines", ["9 c 9"])
    store.import_file(other, LinesImporter())
    store.import_file(f, LinesImporter())
    wrong_again = store.import_file(f, ShiftedLines(5))
    assert (wrong_again.inserted, store.count()) == (3, 7)  # without replace: a second copy
    report = store.import_file(f, ShiftedLines(2), replace=True)
    assert (report.replaced, report.inserted) == (6, 3)  # both earlier imports of a.lines went
    assert store.count() == 4
    assert sorted(e.timestamp for e in store.events(source="lines", type="a")) == [
        T0 + timedelta(hours=2), T0 + timedelta(hours=4)]
    assert [(r.path, r.added) for r in store.imports()] == [(str(other.resolve()), 1),
                                                            (str(f.resolve()), 3)]
    first = store.import_file(other, LinesImporter(), replace=True)
    assert (first.replaced, first.inserted, store.count()) == (1, 1, 4)


def test_replace_is_rolled_back_with_a_failed_import(store: EventStore, tmp_path: Path):
    f = _write(tmp_path / "a.lines", ["0 a 1", "oops"])
    store.import_file(f, LinesImporter(), skip_bad=True)
    with pytest.raises(RecordError):
        store.import_file(f, ShiftedLines(1), replace=True)
    assert [e.timestamp for e in store.events()] == [T0]  # the earlier import is still there
    assert len(store.imports()) == 1


class TwoUsers(LinesImporter):
    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        for n, item in enumerate(super().parse(path)):
            yield item.with_user("ann" if n % 2 else "bob")


def test_an_import_of_many_users_says_so_in_its_provenance(store: EventStore, tmp_path: Path):
    f = _write(tmp_path / "a.lines", ["0 a 1", "1 b 2", "2 a 3"])
    report = store.import_file(f, TwoUsers())
    assert (report.user, report.users) == ("2 users", 2)
    assert store.imports()[-1].user == "2 users"
    assert store.import_file(f, TwoUsers(), user="cy").user == "cy"  # --user attributes them all
    single = store.import_file(_write(tmp_path / "b.lines", ["4 a 1"]), TwoUsers())
    assert (single.user, single.users) == ("bob", 1)


# -- database failures reach the command line as one line of advice ----------------


def _edx_log(path: Path, events: int) -> Path:
    """An edX tracking log of ``events`` page views by one learner, a second apart."""
    template = json.loads((FIXTURES / "edx" / "tracking.log").read_text().splitlines()[0])
    with path.open("w") as out:
        for i in range(events):
            when = datetime(2024, 1, 9, tzinfo=UTC) + timedelta(seconds=i)
            out.write(json.dumps({**template, "time": when.isoformat()}) + "\n")
    return path


def _anonml(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "anonml", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _one_error_line(result: subprocess.CompletedProcess[str], *phrases: str) -> str:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "sqlalchemy" not in result.stderr.lower()
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert all(phrase in errors[0] for phrase in phrases), errors[0]
    return errors[0]


@sqlite_only
def test_an_import_into_a_locked_store_is_one_error_line_saying_retry(tmp_path: Path):
    db = tmp_path / "events.db"
    EventStore(f"sqlite:///{db}").close()  # created and migrated
    export = _edx_log(tmp_path / "tracking.log", 5)
    holder = sqlite3.connect(db, timeout=0)
    holder.execute("BEGIN EXCLUSIVE")  # another writer holds the store
    try:
        result = _anonml("import", str(export), "-i", "edx", "--store", f"sqlite:///{db}?timeout=0.2")
    finally:
        holder.rollback()
        holder.close()
    _one_error_line(result, "database is locked", "retry later")
    with EventStore(f"sqlite:///{db}") as after:
        assert after.count() == 0
        assert after.import_file(export, create("importer", "edx")).inserted == 5  # once the lock is gone


def test_an_unreachable_database_server_is_one_error_line_saying_check_the_url(tmp_path: Path):
    from anonml.serving import free_port

    port = free_port()
    export = _edx_log(tmp_path / "tracking.log", 1)
    url = f"postgresql+psycopg://anonml:secret@127.0.0.1:{port}/events?connect_timeout=5"
    result = _anonml("import", str(export), "-i", "edx", "--store", url)
    line = _one_error_line(result, "cannot connect to the database server", "check the database URL")
    assert "secret" not in line  # the password is never printed


@sqlite_only
def test_a_full_database_is_one_error_line_saying_free_space(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from sqlalchemy import event
    from typer.testing import CliRunner

    import anonml.store
    from anonml.cli import app

    db = tmp_path / "events.db"
    EventStore(f"sqlite:///{db}").close()
    pages = db.stat().st_size // 4096 + 2  # a little room, not enough for 3,000 events

    def small_engine(url: str, **kwargs: object):
        engine = anonml.database.make_engine(url, **kwargs)
        event.listen(engine, "connect", lambda con, _: con.execute(f"PRAGMA max_page_count={pages}"))
        return engine

    monkeypatch.setattr(anonml.store, "make_engine", small_engine)
    export = _edx_log(tmp_path / "tracking.log", 3000)
    runner = CliRunner()
    result = runner.invoke(app, ["import", str(export), "-i", "edx", "--store", f"sqlite:///{db}"])
    assert result.exit_code == 1, result.output
    assert "database or disk is full" in result.output and "free some space" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert EventStore(f"sqlite:///{db}").count() == 0  # nothing half-written
