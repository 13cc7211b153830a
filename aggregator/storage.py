"""A full or read-only disk under the aggregator: a "not now", never a bare 500 or a lost problem.

When the database cannot write (SQLite: ``database or disk is full``,
``attempt to write a readonly database``, ``disk I/O error``; PostgreSQL:
SQLSTATE 53100 ``could not extend file`` / ``No space left on device``,
25006 read-only transaction; an ``OSError`` ENOSPC, EROFS or EDQUOT), the
transaction is rolled back, so nothing half-written stays and nothing is
accepted: every request that met it is answered ``503`` with
``Retry-After`` (:data:`RETRY_AFTER_SECONDS`) so clients — the peers'
retries, the relays' held packets — come back, and the phase machine tries
the same step again at its next tick instead of failing the problem.
:class:`StorageHealth` says it once: one log line when writes start
failing, one when they succeed again — a write that commits while others
still fail (an in-place update of the lease row fits in pages a new row
does not) ends the streak only once no write has failed for
:data:`RETRY_AFTER_SECONDS`, so a half-full disk is one streak, not a line
per tick, and not ready throughout; ``/healthz`` answers not ready
(``503``) meanwhile, and also while the SQLite database's filesystem is
read-only or has less than :data:`MIN_FREE_BYTES` left (``statvfs``), which
a request that only reads would not notice.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from anonml.database import storage_failure

__all__ = ["StorageHealth", "storage_failure", "RETRY_AFTER_SECONDS", "MIN_FREE_BYTES"]

log = logging.getLogger("anonml.aggregator")

#: Seconds a client is asked to wait before trying a write the disk refused.
RETRY_AFTER_SECONDS = 5
#: Free bytes below which the SQLite database's filesystem counts as full for ``/healthz``
#: (a WAL checkpoint or one intake batch needs a few pages; 1 MiB leaves room for them).
MIN_FREE_BYTES = 1 << 20

class StorageHealth:
    """Whether the aggregator's writes fail for want of a writable disk (module docstring)."""

    def __init__(self, db_url: str) -> None:
        url = make_url(db_url)
        database = url.database if url.get_backend_name() == "sqlite" else None
        self._directory = (
            Path(database).resolve().parent if database and database != ":memory:" else None
        )
        self._lock = threading.Lock()
        self.failing: str | None = None
        self.since = 0.0
        self.last_refusal = 0.0  # monotonic time of the last write refused
        self.refused = 0  # writes refused in the current streak

    def watch(self, sessions: sessionmaker[Session]) -> None:
        """Clear the failure when a transaction that wrote commits (``sessions``' after_commit)."""

        @event.listens_for(sessions, "after_flush")
        def _wrote(session: Session, _context: object) -> None:
            session.info["wrote"] = True

        @event.listens_for(sessions, "after_commit")
        def _committed(session: Session) -> None:
            if session.info.pop("wrote", False):
                self.recovered()

    def failed(self, reason: str, where: str) -> None:
        """A write failed for ``reason`` at ``where``: said once per streak (one line, no traceback)."""
        with self._lock:
            self.refused += 1
            self.last_refusal = time.monotonic()
            if self.failing is not None:
                return
            self.failing, self.since = reason, time.monotonic()
        log.error(
            "storage cannot write (%s) at %s: answering 503 with Retry-After %d s and retrying the phase "
            "steps until it can; said once until writes succeed again",
            reason, where, RETRY_AFTER_SECONDS,
        )

    def recovered(self) -> None:
        """A write committed: the disk takes writes again (said once) — unless another write was
        refused less than :data:`RETRY_AFTER_SECONDS` ago (module docstring)."""
        with self._lock:
            if self.failing is None or time.monotonic() - self.last_refusal < RETRY_AFTER_SECONDS:
                return
            reason, since, refused = self.failing, self.since, self.refused
            self.failing, self.refused = None, 0
        log.warning(
            "storage writes again after %.1f s (%s; %d write(s) refused meanwhile)",
            time.monotonic() - since, reason, refused,
        )

    def not_ready(self) -> str | None:
        """Why ``/healthz`` must say not ready, or None: a failing streak, or the SQLite database's
        filesystem read-only or nearly full."""
        if self._directory is not None:
            try:
                fs = os.statvfs(self._directory)
            except OSError as exc:
                return f"storage: {exc.strerror}"
            if fs.f_flag & os.ST_RDONLY:
                return "storage: read-only file system"
            free = fs.f_bavail * fs.f_frsize
            if free < MIN_FREE_BYTES:
                return f"storage: {free} bytes free, fewer than {MIN_FREE_BYTES}"
        failing = self.failing
        return None if failing is None else f"storage: {failing}"
