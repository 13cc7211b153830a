"""Finding proposals: poll aggregators for problems open for registration, pinning each one's key.

Used by the host's worker loop and by ``anonml peer proposals``; an
unreachable aggregator is skipped (and backed off), never allowed to keep the
peer from the others.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from anonml.errors import AnonMLError
from anonml.phases import ProblemPhase
from anonml.protocol import Problem, verify_message
from peer.client import AggregatorClient
from peer.db import PeerDB

__all__ = ["AggregatorBackoff", "discover", "poll_backoff"]

log = logging.getLogger("anonml.peer")


def poll_backoff(poll_seconds: float, failures: int) -> float:
    """Seconds to the next poll after ``failures`` failed polls in a row.

    ``poll · 2^failures``, at most 30 s (or ``poll`` when that is longer).
    """
    return min(max(30.0, poll_seconds), poll_seconds * 2.0**failures)


class AggregatorBackoff:
    """Which aggregators failed to answer a discovery poll, and when each is asked again.

    An aggregator that fails is skipped for :func:`poll_backoff`
    ``(poll_seconds, failures)`` seconds (doubling from one poll, at most
    30 s), so a dead one costs neither a connection attempt per poll nor a
    log line per poll: the first failure of a streak is logged (a warning,
    one line), the retries are not, and the answer that ends the streak is
    logged once more (info). ``now`` is a monotonic clock.
    """

    def __init__(self, poll_seconds: float, now: Callable[[], float] = time.monotonic) -> None:
        self.poll_seconds = poll_seconds
        self._now = now
        self._failures: dict[str, int] = {}
        self._retry_at: dict[str, float] = {}

    def due(self, url: str) -> bool:
        """Whether ``url`` is asked in this poll."""
        return self._now() >= self._retry_at.get(url, float("-inf"))

    def failed(self, url: str, exc: BaseException) -> None:
        failures = self._failures.get(url, 0) + 1
        self._failures[url] = failures
        wait = poll_backoff(self.poll_seconds, failures)
        self._retry_at[url] = self._now() + wait
        if failures == 1:
            log.warning("aggregator %s unreachable, asked again with backoff (at most 30 s): %s", url, exc)

    def answered(self, url: str) -> None:
        failures = self._failures.pop(url, 0)
        self._retry_at.pop(url, None)
        if failures:
            log.info("aggregator %s answers again after %d failed polls", url, failures)


def discover(
    db: PeerDB,
    aggregators: list[str],
    backoff: AggregatorBackoff | None = None,
    count: Callable[[str], None] | None = None,
    pinned: Mapping[str, str] | None = None,
) -> list[Problem]:
    """Record in ``db`` the proposals open for registration at ``aggregators``; return the new ones.

    A proposal not signed by the aggregator key it names is ignored, and so is
    one whose key is not the one pinned for its URL — ``pinned`` (the policy's
    ``aggregator_keys``) or else the key of the first proposal seen from that URL
    (:meth:`~peer.db.PeerDB.pin_aggregator`): an aggregator cannot re-key
    between problems, nor between peers, without every peer that saw it before
    noticing (``count`` is told ``"aggregator key changed"``). An
    aggregator that cannot be reached (or answers nonsense) is skipped, so one
    dead aggregator never keeps the peer from the others. With ``backoff`` it
    is also left alone for a while, and said once (:class:`AggregatorBackoff`);
    without, each failure is one warning. ``count`` is told
    ``"aggregator unreachable"`` per failed attempt.
    """
    new = []
    for url in aggregators:
        if backoff is not None and not backoff.due(url):
            continue
        try:
            open_problems = AggregatorClient(url).problems(phase=ProblemPhase.REGISTRATION)
        except AnonMLError as exc:
            if count is not None:
                count("aggregator unreachable")
            if backoff is not None:
                backoff.failed(url, exc)
            else:
                log.warning("aggregator %s skipped this poll: %s", url, exc)
            continue
        if backoff is not None:
            backoff.answered(url)
        for problem in open_problems:
            try:
                verify_message(problem, bytes(problem.aggregator))
            except AnonMLError:
                continue
            key = bytes(problem.aggregator)[:32]
            configured = (pinned or {}).get(url.rstrip("/"))
            expected = bytes.fromhex(configured) if configured else db.pin_aggregator(url.rstrip("/"), key)
            if key != expected:
                if count is not None:
                    count("aggregator key changed")
                log.warning(
                    "proposal %s from %s refused: signed by key %s…, this peer pinned %s… for that URL",
                    problem.id[:64], url, key.hex()[:16], expected.hex()[:16],
                )
                continue
            if db.record_proposal(problem.id, url, problem.model_dump_json()):
                new.append(problem)
    return new
