"""Imports started from the dashboard: one at a time, in a thread of the daemon, with progress.

The same code path and errors as ``anonml import``
(:func:`anonml.importing.import_paths`): paths and the importer are checked
before the thread starts, each file or archive is one transaction, and a
failure says what was committed before it and what was not tried.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from anonml.archive import ArchivePlan
from anonml.errors import AnonMLError, RecordError
from anonml.importing import ImportOptions, check_paths, import_paths, resolve_candidates
from anonml.store import EventStore

__all__ = ["ImportJob", "ImportJobs"]

log = logging.getLogger("anonml.peer")


@dataclass
class ImportJob:
    """One import started from the page: what it said, how far it got, how it ended."""

    id: str
    paths: tuple[str, ...]
    state: str = "running"  # running | done | failed
    current: str = ""
    events: int = 0
    messages: list[str] = field(default_factory=list)
    #: Per committed import: path, importer, new, duplicate and rejected events.
    imported: list[tuple[str, str, int, int, int]] = field(default_factory=list)
    error: str = ""

    def progress_text(self) -> str:
        where = f" — {self.current}" if self.current else ""
        return f"{self.events:,} events read{where}"


class _JobListener:
    """An :class:`~anonml.importing.ImportListener` writing into an :class:`ImportJob`."""

    def __init__(self, job: ImportJob, lock: threading.Lock) -> None:
        self.job = job
        self.lock = lock

    def message(self, text: str) -> None:
        with self.lock:
            self.job.messages.append(text)

    def planned(self, plan: ArchivePlan) -> None:
        with self.lock:
            self.job.messages.append(
                f"{plan.source}: {len(plan.files)} file(s) to import, {len(plan.skipped)} skipped"
            )
            self.job.messages.extend(f"skipped {s.member}: {s.detail}" for s in plan.skipped)

    @contextmanager
    def progress(self, path: Path) -> Iterator[Callable[[int], None]]:
        base = self.job.events
        with self.lock:
            self.job.current = str(path)

        def seen(count: int) -> None:
            with self.lock:
                self.job.events = base + count

        yield seen
        with self.lock:  # set only while a file is read: a failure outside one is not pinned on it
            self.job.current = ""


class ImportJobs:
    """Imports into one store, one at a time, each in its own thread; their state for the page."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, ImportJob] = {}
        self._running: threading.Thread | None = None

    def start(self, store: EventStore, paths: list[Path], options: ImportOptions) -> ImportJob:
        """Check the paths and the importer now (errors as ``anonml import``'s), then import in a thread.

        Raises
        ------
        AnonMLError
            Another import is still running; a path does not exist; the named importer is not installed.
        """
        with self._lock:
            if self._running is not None and self._running.is_alive():
                raise AnonMLError("an import is already running: wait for it to finish")
        if not paths:
            raise AnonMLError("name a file or folder to import")
        candidates = resolve_candidates(options.importer, {})
        check_paths(paths)
        job = ImportJob(secrets.token_hex(8), tuple(str(p) for p in paths))
        listener = _JobListener(job, self._lock)

        def run() -> None:
            try:
                result = import_paths(paths, store, candidates, options, listener)
            except AnonMLError as exc:
                with self._lock:
                    job.state, job.error, job.current = "failed", str(exc), ""
                return
            except Exception as exc:  # not an import error: a bug below, but the job must still end,
                # or the page would poll a "running" import forever
                log.exception("import %s failed", job.id)
                with self._lock:
                    where = job.current or ", ".join(job.paths)
                    job.state, job.current = "failed", ""
                    job.error = f"{where}: {type(exc).__name__}: {exc}"
                return
            with self._lock:
                job.imported = [
                    (r.path, r.importer, r.inserted, r.duplicate, r.rejected) for r in result.reports
                ]
                if result.error is not None:
                    not_tried = ", ".join(map(str, result.not_tried))
                    job.state = "failed"
                    error, failed = result.error, str(result.failed)
                    names_it = isinstance(error, RecordError) and error.path == failed  # file:line: …
                    job.error = (str(error) if names_it else f"{failed}: {error}") + (
                        f" (not tried: {not_tried})" if not_tried else ""
                    )
                else:
                    job.state = "done"
                job.current = ""

        thread = threading.Thread(target=run, daemon=True, name=f"import-{job.id}")
        with self._lock:
            self._jobs[job.id] = job
            self._running = thread
        thread.start()
        return job

    def get(self, job_id: str) -> ImportJob | None:
        """A copy of the job as it stands now (see :meth:`_snapshot`), or None."""
        with self._lock:
            job = self._jobs.get(job_id)
            return None if job is None else self._snapshot(job)

    def latest(self) -> ImportJob | None:
        """A copy of the most recent job as it stands now, or None."""
        with self._lock:
            job = next(reversed(self._jobs.values()), None)
            return None if job is None else self._snapshot(job)

    @staticmethod
    def _snapshot(job: ImportJob) -> ImportJob:
        """A copy the import thread no longer writes into (call with the lock held).

        A page reads the job, then the store: a copy taken first that says ``done``
        means the import was committed before the store is read, so the page never
        shows an ended import beside the sources as they were before it (the live
        object could end while the page renders, leaving it with no poller to catch up).
        """
        return replace(job, messages=list(job.messages), imported=list(job.imported))
