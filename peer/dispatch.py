"""Timed, blocking work off the request path.

Relays hold packets until their release time and peers send inside their
window; both hand a callable and a time to one :class:`Dispatcher`. One timer
thread keeps a heap of due times; due work runs on a small thread pool so a
slow next hop never delays the others.

Outbound HTTP requests are :mod:`anonml.outbound`'s.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait

__all__ = ["Dispatcher", "Lanes"]

log = logging.getLogger("anonml.peer")


class Dispatcher:
    """Runs ``fn`` at (or just after) POSIX time ``when``; see the module docstring."""

    def __init__(self, workers: int = 16, name: str = "dispatch") -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._closed = False
        self.pending = 0
        self._thread = threading.Thread(target=self._run, name=f"{name}-timer", daemon=True)
        self._thread.start()

    def at(self, when: float, fn: Callable[[], None]) -> None:
        """Schedule ``fn`` for POSIX time ``when`` (now if it is in the past)."""
        with self._cond:
            if self._closed:
                raise RuntimeError("dispatcher is closed")
            heapq.heappush(self._heap, (when, next(self._seq), fn))
            self.pending += 1
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._heap or self._heap[0][0] > time.time()):
                    timeout = None if not self._heap else max(0.0, self._heap[0][0] - time.time())
                    self._cond.wait(timeout=timeout if timeout is None else min(timeout, 1.0))
                if self._closed:
                    return
                _, _, fn = heapq.heappop(self._heap)
            self._pool.submit(self._guarded, fn)

    def _guarded(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:  # a failed send is counted by the caller's callable; never kill the pool
            log.exception("scheduled work failed")
        finally:
            with self._cond:
                self.pending -= 1

    def idle(self) -> bool:
        """True when nothing is scheduled or running."""
        with self._cond:
            return self.pending == 0

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify_all()
        self._thread.join(timeout=5)
        self._pool.shutdown(wait=True, cancel_futures=True)


class Lanes:
    """Work per key, one piece at a time per key, each on a thread of its own.

    A host's polls give each aggregator (discovery) and each problem (its
    steps) a lane: an aggregator that accepts connections and never answers
    holds its own lane until its request's deadline, while the others go on.
    :meth:`start` skips a key whose previous work is still running.
    """

    def __init__(self, workers: int = 16, name: str = "lane") -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._busy: dict[str, Future[None]] = {}
        self._lock = threading.Lock()

    def start(self, key: str, fn: Callable[[], None]) -> Future[None] | None:
        """Run ``fn`` in ``key``'s lane, or None when that lane is still busy."""
        with self._lock:
            running = self._busy.get(key)
            if running is not None and not running.done():
                return None
            future = self._busy[key] = self._pool.submit(self._guarded, key, fn)
            return future

    @staticmethod
    def _guarded(key: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:  # a bug in one lane: its traceback; the lane is free again
            log.exception("work of %s failed", key)

    def wait(self, futures: list[Future[None] | None], timeout: float | None) -> None:
        """Wait for ``futures`` (None entries ignored) to finish, at most ``timeout`` seconds."""
        wait([f for f in futures if f is not None], timeout=timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Start nothing more; wait up to ``timeout`` seconds for work under way (a lane waiting
        on a silent aggregator ends by its own request deadline, not awaited past that)."""
        with self._lock:
            busy = list(self._busy.values())
        self._pool.shutdown(wait=False, cancel_futures=True)
        wait(busy, timeout=timeout)
