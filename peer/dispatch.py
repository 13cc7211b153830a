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
from concurrent.futures import ThreadPoolExecutor

__all__ = ["Dispatcher"]

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
