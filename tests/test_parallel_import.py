"""Parsing in worker processes (anonml.parallel_import): the same rows, counts and errors as one process,
one transaction, and no worker outliving a killed import."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from anonml import parallel_import
from anonml.datasets.mooc import simulate_students
from anonml.errors import RecordError
from anonml.event_rows import ChunkRows
from anonml.plugins import RowOwner
from anonml.readers import block_lines, iter_line_blocks, open_text
from anonml.store import EventStore
from importers.edx import EdxImporter
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(
    "fork" not in __import__("multiprocessing").get_all_start_methods(), reason="workers are forked"
)


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file goes to the workers, in blocks of about 4 KiB: many blocks from a small log."""
    monkeypatch.setattr(parallel_import, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(parallel_import, "_FIRST_BYTES", 2048)
    monkeypatch.setattr(parallel_import, "_BLOCK_BYTES", 4096)


def _course_log(path: Path, students: int = 12, seed: int = 3) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for student in simulate_students(students, weeks=3, seed=seed):
            for line in student.lines:
                fh.write(json.dumps(line) + "\n")
    return path


def _rows(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as con:
        return con.execute(
            "select user_id, id, source, type, ts_us, fields from events order by user_id, id"
        ).fetchall()


def _replace_line(path: Path, number: int, text: str) -> None:
    lines = path.read_text(encoding="utf-8").split("\n")
    lines[number - 1] = text
    path.write_text("\n".join(lines), encoding="utf-8")


def test_workers_store_exactly_what_one_process_stores(small_chunks, tmp_path: Path) -> None:
    log = _course_log(tmp_path / "tracking.log")
    assert parallel_import.use_parallel(log, EdxImporter(), 2)
    reports, dropped = {}, {}
    for workers in (1, 2, 3):
        store = EventStore(f"sqlite:///{tmp_path / f'w{workers}.db'}")
        importer = EdxImporter()
        reports[workers] = store.import_file(log, importer, workers=workers)
        dropped[workers] = dict(importer.dropped)
        again = store.import_file(log, EdxImporter(), workers=workers)  # content-keyed: adds nothing
        assert (again.inserted, again.duplicate) == (0, reports[workers].accepted)
        # The file is hashed while the workers parse, and provenance records it all the same.
        assert {r.file_sha256 for r in store.imports()} == {hashlib.sha256(log.read_bytes()).hexdigest()}
        store.close()
    serial = reports[1]
    assert serial.inserted > 500 and serial.users == 12
    for workers in (2, 3):
        r = reports[workers]
        assert (r.accepted, r.inserted, r.duplicate, r.rejected, r.users, r.user) == (
            serial.accepted,
            serial.inserted,
            serial.duplicate,
            serial.rejected,
            serial.users,
            serial.user,
        )
        assert dropped[workers] == dropped[1]
        assert _rows(tmp_path / f"w{workers}.db") == _rows(tmp_path / "w1.db")


def test_while_waiting_runs_once_and_only_when_workers_parse(small_chunks, tmp_path: Path) -> None:
    log = _course_log(tmp_path / "tracking.log")
    calls: list[tuple[int, int]] = []
    stored = {"rows": 0}  # rows handed over so far, as the hook sees it
    for workers in (1, 2):
        stored["rows"] = 0
        chunks = parallel_import.parallel_chunk_rows(
            log,
            EdxImporter(),
            workers=workers,
            owner=RowOwner(None, "me", 1),
            while_waiting=lambda workers=workers: calls.append((workers, stored["rows"])),
        )
        for chunk in chunks:
            stored["rows"] += len(chunk.rows)
        assert stored["rows"] > 500
    # With workers: once, after the rows of the blocks parsed here (the format check), before any of theirs.
    assert len(calls) == 1 and calls[0][0] == 2 and 0 < calls[0][1] < 100


def test_a_bad_line_in_a_late_chunk_names_file_and_line_and_rolls_everything_back(
    small_chunks, tmp_path: Path
) -> None:
    log = _course_log(tmp_path / "tracking.log")
    _replace_line(log, 437, '{"username": "x", "time": ')
    store = EventStore(f"sqlite:///{tmp_path / 'events.db'}")
    messages = []
    for workers in (1, 2):
        # Other tests in this (xdist) process may leave children running (joblib's loky workers).
        others = _children(os.getpid())
        with pytest.raises(RecordError) as info:
            store.import_file(log, EdxImporter(), workers=workers)
        messages.append(str(info.value))
        assert store.count() == 0 and store.imports() == []
        assert _children(os.getpid()) <= others  # its workers ended with the import, not with the traceback
    assert messages[0] == messages[1]
    assert messages[1].startswith(f"{log}:437: invalid JSON")


def test_skipped_bad_records_are_the_same_and_in_line_order(small_chunks, tmp_path: Path) -> None:
    log = _course_log(tmp_path / "tracking.log")
    for number in (120, 121, 640):
        _replace_line(log, number, "[1, 2]" if number == 640 else "not json")
    reports = {}
    for workers in (1, 2):
        store = EventStore(f"sqlite:///{tmp_path / f'w{workers}.db'}")
        reports[workers] = store.import_file(log, EdxImporter(), workers=workers, skip_bad=True)
        store.close()
    assert [str(e) for e in reports[2].errors] == [str(e) for e in reports[1].errors]
    assert [e.line for e in reports[2].errors] == [120, 121, 640]
    assert reports[2].inserted == reports[1].inserted


def test_bad_bytes_are_bad_records_at_their_lines_in_workers_too(small_chunks, tmp_path: Path) -> None:
    """A non-UTF-8 byte in lines 150 and 641: two bad records, the same in one process and in workers."""
    log = _course_log(tmp_path / "tracking.log")
    lines = log.read_bytes().splitlines(keepends=True)
    for number in (150, 641):
        lines[number - 1] = lines[number - 1].replace(b'"', b'"\xff', 1)
    log.write_bytes(b"".join(lines))
    reports = {}
    for workers in (1, 2):
        store = EventStore(f"sqlite:///{tmp_path / f'w{workers}.db'}")
        with pytest.raises(RecordError, match=r"tracking\.log:150: not UTF-8 text: byte 0xff at column 3"):
            store.import_file(log, EdxImporter(), workers=workers)
        reports[workers] = store.import_file(log, EdxImporter(), workers=workers, skip_bad=True)
        store.close()
    assert [str(e) for e in reports[2].errors] == [str(e) for e in reports[1].errors]
    assert [e.line for e in reports[2].errors] == [150, 641]
    assert reports[2].inserted == reports[1].inserted > 0


def test_a_file_of_another_format_fails_as_it_does_in_one_process(small_chunks, tmp_path: Path) -> None:
    path = tmp_path / "tracking.log"
    path.write_text("# a comment line\n" + "[1, 2, 3]\n" * 400, encoding="utf-8")
    store = EventStore(f"sqlite:///{tmp_path / 'events.db'}")
    messages = []
    for workers in (1, 2):
        with pytest.raises(RecordError) as info:
            store.import_file(path, EdxImporter(), workers=workers, skip_bad=True)
        messages.append(str(info.value))
    expected = "not an edX tracking log: the first JSON record is not an object with 'event_type' or 'name'"
    assert messages[0] == messages[1] == f"{path}:2: {expected}"
    assert store.count() == 0


def test_several_files_stay_one_transaction(small_chunks, tmp_path: Path) -> None:
    good = _course_log(tmp_path / "a.log", seed=4)
    bad = _course_log(tmp_path / "b.log", seed=5)
    _replace_line(bad, 300, "{broken")
    store = EventStore(f"sqlite:///{tmp_path / 'events.db'}")
    with pytest.raises(RecordError, match=r"b\.log:300: invalid JSON"):
        store.import_files([(good, EdxImporter(), None), (bad, EdxImporter(), None)], workers=2)
    assert store.count() == 0 and store.imports() == []


class _DyingImporter(EdxImporter):
    """Parses as edX does in this process; a forked worker instead ends (``exit_code``) or raises."""

    def __init__(self, exit_code: int | None) -> None:
        super().__init__()
        self.home, self.exit_code = os.getpid(), exit_code

    def parse_block_rows(
        self, path: Path, block: bytes, first_line: int, *, opened: bool, owner: RowOwner
    ) -> ChunkRows:
        if os.getpid() != self.home:
            if self.exit_code is not None:
                os._exit(self.exit_code)
            raise ValueError(f"worker refused the block at line {first_line}")
        return super().parse_block_rows(path, block, first_line, opened=opened, owner=owner)


@pytest.mark.parametrize("exit_code", [None, 3])
def test_a_failing_or_dead_worker_fails_the_import_and_leaves_no_workers(
    small_chunks, tmp_path: Path, exit_code: int | None
) -> None:
    """A worker's exception is raised here, as it would be parsing serially; a worker that dies
    ends the import at once (it is not waited for), and either way no worker is left running."""
    log = _course_log(tmp_path / "tracking.log")
    store = EventStore(f"sqlite:///{tmp_path / 'events.db'}")
    if exit_code is None:
        expected = r"worker refused the block at line \d+"
        kind: type[Exception] = ValueError
    else:
        expected = r"parse worker \d+ ended unexpectedly \(exit code 3\)"
        kind = RuntimeError
    others = _children(os.getpid())
    with pytest.raises(kind, match=expected):
        store.import_file(log, _DyingImporter(exit_code), workers=2)
    assert store.count() == 0 and store.imports() == []
    assert _children(os.getpid()) <= others
    assert store.import_file(log, EdxImporter(), workers=2).inserted > 500  # the store works on


def _stored_both_ways(log: Path, tmp_path: Path, kind: type[EdxImporter]) -> list[tuple]:
    """The rows a ``kind`` import of ``log`` stores, the same in one process as with two workers."""
    reports = {}
    for workers in (1, 2):
        store = EventStore(f"sqlite:///{tmp_path / f'w{workers}.db'}")
        reports[workers] = store.import_file(log, kind(), workers=workers)
        store.close()
    assert reports[2].inserted == reports[1].inserted > 500
    stored = _rows(tmp_path / "w2.db")
    assert stored == _rows(tmp_path / "w1.db")
    return stored


def test_a_block_too_large_for_a_slot_is_parsed_in_the_importing_process(
    small_chunks, tmp_path: Path
) -> None:
    """Lines of 20 KB make blocks larger than a shared slot (two 4 KiB reads here): the same rows."""
    log = _course_log(tmp_path / "tracking.log")
    lines = log.read_text(encoding="utf-8").split("\n")
    for number in (300, 301, 700):
        obj = json.loads(lines[number - 1])
        lines[number - 1] = json.dumps({**obj, "agent": "x" * 20_000})
    log.write_text("\n".join(lines), encoding="utf-8")
    assert max(len(block) for _, block in iter_line_blocks(log, 4096)) > 2 * 4096
    _stored_both_ways(log, tmp_path, EdxImporter)


class _BulkyRowsImporter(EdxImporter):
    """edX rows each carrying 10 KB more in ``fields`` (here and in workers alike): a block's rows
    then outgrow the shared slot its lines came in."""

    def parse_block_rows(
        self, path: Path, block: bytes, first_line: int, *, opened: bool, owner: RowOwner
    ) -> ChunkRows:
        chunk = super().parse_block_rows(path, block, first_line, opened=opened, owner=owner)
        pad = ',"pad":"' + "x" * 10_000 + '"}'
        chunk.rows = [(*row[:5], row[5][:-1] + pad, row[6]) for row in chunk.rows]
        return chunk


def test_rows_larger_than_their_slot_come_back_whole(small_chunks, tmp_path: Path) -> None:
    stored = _stored_both_ways(_course_log(tmp_path / "tracking.log"), tmp_path, _BulkyRowsImporter)
    assert all(len(row[5]) > 10_000 for row in stored)


_KILLED_IMPORT = """
import sys
from pathlib import Path
from anonml import parallel_import
from anonml.store import EventStore
from importers.edx import EdxImporter
parallel_import.PARALLEL_MIN_BYTES = 0
parallel_import._BLOCK_BYTES = 8192
store = EventStore("sqlite:///" + sys.argv[2])
print("ready", flush=True)
store.import_file(Path(sys.argv[1]), EdxImporter(), workers=2)
print("finished", flush=True)
"""


def _children(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        children = task / "children"
        if children.exists():
            found |= {int(c) for c in children.read_text().split()}
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; PR_SET_PDEATHSIG is Linux's")
def test_a_killed_import_leaves_no_workers_and_no_events(tmp_path: Path) -> None:
    log = _course_log(tmp_path / "tracking.log", students=60)
    db = tmp_path / "events.db"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_IMPORT, str(log), str(db)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        workers: set[int] = set()

        def seen_or_done() -> bool:
            nonlocal workers
            workers = _children(proc.pid)
            return len(workers) >= 2 or proc.poll() is not None

        wait_until(seen_or_done, 60, "the import's workers to start", every=0.01)
        if proc.poll() is not None:
            pytest.skip("the import finished before its workers could be seen (an unusually fast machine)")
        assert len(workers) >= 2, "the workers never started"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        wait_until(lambda: not any(_alive(w) for w in workers), 60, "the workers to end with the import")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with sqlite3.connect(db) as con:  # the uncommitted transaction is gone; the store opens clean
        assert con.execute("select count(*) from events").fetchone() == (0,)
        assert con.execute("pragma integrity_check").fetchone() == ("ok",)
    assert EventStore(f"sqlite:///{db}").count() == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_whose_importer_died_before_the_worker_started_exits_at_once(tmp_path: Path) -> None:
    # The race behind a worker that outlived a killed import: its parent gone before its
    # initializer asked for the death signal, so the request never fires; it must notice and exit.
    read_end, write_end = os.pipe()
    importer = os.fork()
    if importer == 0:  # the importing process: forks its worker and dies at once
        parent = os.getpid()
        if os.fork() == 0:  # the worker, started only once its parent is gone
            deadline = time.monotonic() + 60
            while os.getppid() == parent and time.monotonic() < deadline:
                time.sleep(0.01)
            try:
                parallel_import._init_worker(parent)
                os.write(write_end, b"lived on")
            finally:
                os._exit(0)
        os._exit(0)
    os.close(write_end)
    os.waitpid(importer, 0)
    said = b""
    while chunk := os.read(read_end, 64):  # EOF once the worker has ended, however it ended
        said += chunk
    os.close(read_end)
    assert said == b""


@pytest.mark.parametrize("gzipped", [False, True])
@pytest.mark.parametrize("size", [1, 5, 64, 1 << 20])
def test_line_blocks_split_and_number_lines_as_text_mode_does(
    tmp_path: Path, gzipped: bool, size: int
) -> None:
    """\\n, \\r\\n and a lone \\r all end lines; a last line without an end still counts."""
    raw = "a\nbé\r\nc\rd\n\n\r\ne ü\r\n\r\rf".encode()
    path = tmp_path / ("x.gz" if gzipped else "x.txt")
    path.write_bytes(gzip.compress(raw) if gzipped else raw)
    with open_text(path) as fh:
        expected = list(enumerate(fh, 1))
    got = []
    for first, block in iter_line_blocks(path, size, first_size=3):
        got.extend(enumerate(block_lines(path, block, first), first))
    assert got == expected


def test_a_non_utf8_byte_costs_only_the_line_that_holds_it(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    path.write_bytes(b'{"a": 1}\n{"b": 2}\r\n{"c": "\xff"}\r{"d": 4}\n')
    ((first, block),) = iter_line_blocks(path)
    *good, bad, last = block_lines(path, block, first)
    assert good == ['{"a": 1}\n', '{"b": 2}\r\n'] and last == '{"d": 4}\n'
    assert str(bad) == f"{path}:3: not UTF-8 text: byte 0xff at column 8 (invalid start byte)"


def test_a_nonsense_worker_count_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path / 'events.db'}")
    for bad in (0, -2, True, 1.5):
        with pytest.raises(ValueError, match="workers must be a whole number of processes, at least 1"):
            store.import_file(tmp_path / "absent.log", EdxImporter(), workers=bad)
    assert store.imports() == []


def test_fewer_collections_raises_the_gc_threshold_and_restores_it_after_the_last_user():
    import gc

    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with parallel_import.fewer_collections():
            assert gc.get_threshold() == (parallel_import.IMPORT_GC_THRESHOLD, 10, 10)
            with pytest.raises(ValueError), parallel_import.fewer_collections():
                raise ValueError("an import failing inside another")
            assert gc.get_threshold()[0] == parallel_import.IMPORT_GC_THRESHOLD  # the outer one still runs
        assert gc.get_threshold() == (700, 10, 10)
        gc.set_threshold(50_000, 5, 5)  # a higher threshold set by the application is kept
        with parallel_import.fewer_collections():
            assert gc.get_threshold() == (50_000, 5, 5)
        assert gc.get_threshold() == (50_000, 5, 5)
    finally:
        gc.set_threshold(*before)


@pytest.mark.parametrize("user", [None, "override"])
def test_edx_rows_made_without_events_are_the_rows_of_its_events(tmp_path: Path, user: str | None) -> None:
    """EdxImporter.parse_chunk_rows (no Event objects) against the default: parse_chunk, then rows_of."""
    from anonml.plugins import ChunkedImporter

    log = _course_log(tmp_path / "tracking.log", students=4)
    lines = log.read_text(encoding="utf-8").split("\n")
    first = json.loads(lines[5])
    variants = {
        "username": "léa",  # not ASCII: Event.make's full validation, which keeps it
        "event_source": "$browser",  # a category starting with '$': escaped in the stored JSON
        "time": "2024-01-09T19:02:11.402919+02:00",  # another offset: converted
    }
    for offset, (key, value) in enumerate(variants.items()):
        lines[6 + offset] = json.dumps({**first, key: value})
    lines[10] = json.dumps({**first, "username": "bad\ud800"})  # refused by validation: invalid event
    lines[11] = json.dumps({**first, "time": "yesterday"})  # refused by the reader
    lines[12] = "{not json"
    log.write_text("\n".join(lines), encoding="utf-8")
    chunk = block_lines(log, log.read_bytes(), 1)
    owner = RowOwner(user, "me", 7)
    made = EdxImporter().parse_chunk_rows(log, chunk, 1, opened=False, owner=owner)
    expected = ChunkedImporter.parse_chunk_rows(EdxImporter(), log, chunk, 1, opened=False, owner=owner)
    assert made.rows == expected.rows and len(made.rows) > 20
    assert [(e.line, str(e)) for e in made.errors] == [(e.line, str(e)) for e in expected.errors]
    assert [e.line for e in made.errors] == [11, 12, 13]
    assert "invalid event" in str(made.errors[0])
    assert made.users == expected.users and ("léa" in made.users) == (user is None)
    assert (made.fatal, made.opened, made.state) == (expected.fatal, expected.opened, expected.state)
