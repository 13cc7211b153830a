"""Imports started from the dashboard (:class:`peer.import_jobs.ImportJobs`), without the page: a job's
lifecycle (running, then done or failed), one import at a time, input checked before any thread, and a
bad file's error naming it with nothing of that file stored.

Real edX tracking logs (the MOOC simulator's) into a real SQLite event store; what a job stores is
compared with what ``anonml import``'s path stores from the same files into a fresh store.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import peer.import_jobs as import_jobs
from anonml.datasets.mooc import simulate_students, write_edx_logs
from anonml.errors import AnonMLError
from anonml.importing import ImportOptions, import_paths, resolve_candidates
from anonml.store import EventStore
from peer.import_jobs import ImportJob, ImportJobs
from tests.waiting import wait_until

ME = ImportOptions(user="me")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EventStore]:
    with EventStore(f"sqlite:///{tmp_path / 'events.db'}") as opened:
        yield opened


@pytest.fixture
def logs(tmp_path: Path) -> list[Path]:
    """Three learners' edX tracking logs, one file each."""
    return [log.path for log in write_edx_logs(simulate_students(3, weeks=4, seed=5), tmp_path / "logs")]


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Holds every job's import (the real one) until set, so a test sees a job while it runs."""
    opened = threading.Event()

    def held(*args: object, **kwargs: object) -> object:
        assert opened.wait(60), "the test never let the import go on"
        return import_paths(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(import_jobs, "import_paths", held)
    return opened


def _expected(paths: list[Path]) -> int:
    """Events ``anonml import --user me`` stores from ``paths`` into an empty store."""
    with EventStore("sqlite://") as reference:
        done = import_paths(paths, reference, resolve_candidates(None, {}), ME)
        assert done.error is None, done.error
        return reference.count()


def _ended(jobs: ImportJobs, job_id: str) -> ImportJob:
    def ended() -> ImportJob | None:
        job = jobs.get(job_id)
        return job if job is not None and job.state != "running" else None

    return wait_until(ended, 60, lambda: f"import {job_id} to end: {jobs.get(job_id)}")


def test_a_job_runs_then_ends_done_with_what_it_committed(
    store: EventStore, logs: list[Path], gate: threading.Event
) -> None:
    jobs = ImportJobs()
    assert jobs.latest() is None
    job = jobs.start(store, logs, ME)
    running = jobs.get(job.id)
    assert running is not None and running.state == "running" and running.paths == tuple(map(str, logs))
    assert jobs.latest() == running and running.progress_text() == "0 events read"
    assert store.count() == 0  # nothing is committed before the import runs
    gate.set()
    done = _ended(jobs, job.id)
    expected = _expected(logs)
    assert done.state == "done" and done.error == "" and done.current == ""
    assert [(path, importer) for path, importer, *_ in done.imported] == [(str(p), "edx") for p in logs]
    assert sum(new for _, _, new, _, _ in done.imported) == store.count() == expected > 0
    assert all((dup, rejected) == (0, 0) for *_, dup, rejected in done.imported)
    assert done.events == expected and done.progress_text() == f"{expected:,} events read"
    assert [m.split(": ")[0] for m in done.messages] == [str(p) for p in logs]  # why each importer
    assert store.users() == ["me"]


def test_a_job_read_is_a_copy_the_import_thread_no_longer_writes(
    store: EventStore, logs: list[Path], gate: threading.Event
) -> None:
    """The page reads the job, then the store: a copy read while it ran must stay as read."""
    jobs = ImportJobs()
    job = jobs.start(store, logs[:1], ME)
    before = jobs.get(job.id)
    assert before is not None
    gate.set()
    _ended(jobs, job.id)
    assert (before.state, before.imported, before.messages, before.events) == ("running", [], [], 0)
    before.messages.append("changed by a reader")
    assert "changed by a reader" not in jobs.get(job.id).messages  # type: ignore[union-attr]


def test_one_import_runs_at_a_time(store: EventStore, logs: list[Path], gate: threading.Event) -> None:
    jobs = ImportJobs()
    first = jobs.start(store, logs[:1], ME)
    with pytest.raises(AnonMLError, match="an import is already running"):
        jobs.start(store, logs[1:], ME)
    latest = jobs.latest()
    assert latest is not None and latest.id == first.id  # the refused one was never recorded
    gate.set()
    assert _ended(jobs, first.id).state == "done"
    second = jobs.start(store, logs[1:], ME)  # once it ended, the next one may start
    assert _ended(jobs, second.id).state == "done"
    assert store.count() == _expected(logs)


def test_paths_and_the_importer_are_checked_before_any_thread_starts(
    store: EventStore, logs: list[Path], tmp_path: Path
) -> None:
    jobs = ImportJobs()
    missing = tmp_path / "nope.log"
    with pytest.raises(AnonMLError, match="no such file or folder") as refused:
        jobs.start(store, [logs[0], missing], ME)
    assert str(missing) in str(refused.value)
    with pytest.raises(AnonMLError, match="nosuch"):
        jobs.start(store, logs, ImportOptions(importer="nosuch", user="me"))
    with pytest.raises(AnonMLError, match="name a file or folder"):
        jobs.start(store, [], ME)
    assert jobs.latest() is None and store.count() == 0  # no job, nothing read
    assert not any(t.name.startswith("import-") for t in threading.enumerate())


def test_a_bad_file_fails_the_job_naming_it_and_nothing_of_it_is_stored(
    store: EventStore, logs: list[Path], tmp_path: Path
) -> None:
    """Files before it stay committed (one transaction each), it is rolled back whole, those after it
    are not tried — and the job says so."""
    lines = logs[1].read_bytes().splitlines(keepends=True)
    bad = tmp_path / "tracking.log-bad"
    bad.write_bytes(b"".join([*lines[:5], b'{"event_type": not json\n', *lines[5:]]))
    jobs = ImportJobs()
    job = jobs.start(store, [logs[0], bad, logs[2]], ME)
    failed = _ended(jobs, job.id)
    assert failed.state == "failed" and failed.current == ""
    assert failed.error.startswith(f"{bad}:6: invalid JSON"), failed.error  # the file (once), the line
    assert failed.error.endswith(f"(not tried: {logs[2]})")
    assert [path for path, *_ in failed.imported] == [str(logs[0])]
    assert store.count() == _expected(logs[:1])  # the first file whole, none of the bad one's 5 good lines


def test_an_error_outside_the_import_rules_still_ends_the_job_naming_the_file(
    store: EventStore, logs: list[Path], tmp_path: Path
) -> None:
    """A gzip stream corrupt in its middle (``zlib.error`` in the standard library, a record error
    naming the file and line in :mod:`anonml.readers`): the job ends ``failed`` naming the file once,
    instead of staying ``running`` (the page would poll it for ever), and the file's transaction is
    rolled back."""
    packed = gzip.compress(logs[0].read_bytes())
    corrupt = tmp_path / "tracking.log-corrupt.gz"
    corrupt.write_bytes(packed[:20] + bytes(50) + packed[70:])
    jobs = ImportJobs()
    job = jobs.start(store, [corrupt], ImportOptions(importer="edx", user="me"))
    failed = _ended(jobs, job.id)
    said = f"{corrupt}:1: cannot read on from this line: Error -3 while decompressing data"
    assert failed.state == "failed" and failed.error.startswith(said), failed.error
    assert store.count() == 0
    after = jobs.start(store, logs[:1], ME)  # and the next import may start
    assert _ended(jobs, after.id).state == "done" and store.count() == _expected(logs[:1])
