"""A problem's public counts over time, for the console's charts.

The phase driver (:class:`aggregator.rounds.Driver`) samples, at each tick and
for each active problem, what the problem's status reads — registrations,
median answers, reports received and refusals by reason — and stores a
sample (:class:`~aggregator.db.SampleRow`) when a count changed, at most once
per :data:`SAMPLE_SECONDS`. These are the figures ``GET
/problems/{id}/status`` gives anyone who polls it, at a coarser resolution
than such a poller may read them: no report, token, address or peer is in a
sample, and the settled reports stay shuffled and timeless
(:mod:`aggregator.db`).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from aggregator.db import MedianAnswerRow, RegistrationRow, RejectRow, SampleRow, count_reports
from aggregator.state import reject_counts

__all__ = ["SAMPLE_SECONDS", "Counts", "problem_counts", "Sampler", "samples"]

#: The finest resolution of the stored series (seconds between two samples of one problem).
SAMPLE_SECONDS = 1.0


@dataclass(frozen=True)
class Counts:
    """The counts of one problem a status shows (``rejects``: every refusal by reason, no cover)."""

    registered: int
    median_answers: int
    received: int
    rejects: dict[str, int]


def problem_counts(session: Session, problem_id: str) -> Counts:
    """The problem's counts as stored now (the status's ``registered``, ``median_answers``,
    ``reports_accepted`` and ``rejects``)."""
    registered = session.scalar(
        select(func.count()).select_from(RegistrationRow).where(RegistrationRow.problem_id == problem_id)
    )
    answers = session.scalar(
        select(func.count()).select_from(MedianAnswerRow).where(MedianAnswerRow.problem_id == problem_id)
    )
    stmt = select(RejectRow.reason, RejectRow.count).where(RejectRow.problem_id == problem_id)
    rows = list(session.execute(stmt))
    rejects, _ = reject_counts(rows)
    return Counts(int(registered or 0), int(answers or 0), count_reports(session, problem_id), rejects)


@dataclass(frozen=True)
class Sample:
    """One stored sample: the counts at ``at`` (POSIX seconds)."""

    at: float
    counts: Counts


def samples(session: Session, problem_id: str) -> list[Sample]:
    """The problem's stored samples, oldest first."""
    rows = session.scalars(select(SampleRow).where(SampleRow.problem_id == problem_id).order_by(SampleRow.at))
    return [
        Sample(r.at, Counts(r.registered, r.median_answers, r.received, json.loads(r.rejects_json)))
        for r in rows
    ]


class Sampler:
    """Stores a problem's counts when they changed since it last looked, looking at most every ``seconds``.

    What was stored last is kept per problem in memory; after a restart the
    first tick stores the counts once more (a repeat of the last point draws
    the same chart).
    """

    def __init__(self, seconds: float = SAMPLE_SECONDS) -> None:
        self.seconds = seconds
        self._last: dict[str, tuple[float, Counts]] = {}
        self._lock = threading.Lock()

    def record(self, session: Session, problem_id: str, now: float) -> bool:
        """Store the problem's counts at ``now`` if due and changed; True when a sample was written."""
        with self._lock:
            last = self._last.get(problem_id)
        if last is not None and now - last[0] < self.seconds:
            return False
        counts = problem_counts(session, problem_id)
        if last is not None and last[1] == counts:
            with self._lock:  # looked at now: the next look is a period from here
                self._last[problem_id] = (now, counts)
            return False
        session.merge(
            SampleRow(
                problem_id=problem_id,
                at=now,
                registered=counts.registered,
                median_answers=counts.median_answers,
                received=counts.received,
                rejects_json=json.dumps(counts.rejects, sort_keys=True),
            )
        )
        session.commit()
        with self._lock:
            self._last[problem_id] = (now, counts)
        return True

    def forget(self, problem_id: str) -> None:
        with self._lock:
            self._last.pop(problem_id, None)
