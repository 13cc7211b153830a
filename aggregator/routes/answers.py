"""Storing one signed answer (a median bit, a calibration pair): the steps both answer routes share.

Each answer is checked and inserted in its own transaction. The table's unique key makes a
concurrent second copy of a member's answer fail its insert (409, counted as a duplicate), and an
answer whose question closed between the route's check and its insert is rolled back (409, counted
under the route's own reason): nothing is half-stored, and the waiting step is woken only after a
commit.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from aggregator.state import AggregatorState
from anonml.protocol import Ack

__all__ = ["AnswerClosed", "store_answer"]


class AnswerClosed(Exception):
    """The question closed between the route's first check and its insert (rolled back)."""


def store_answer(
    state: AggregatorState,
    session: Session,
    problem_id: str,
    check_and_store: Callable[[], None],
    *,
    duplicate: str,
    closed: str,
    median: bool = False,
    calibration: bool = False,
) -> Ack:
    """Run ``check_and_store`` in one transaction and wake the step awaiting answers.

    ``duplicate`` is the detail of a 409 for a member's second answer, ``closed`` the counted reason
    of a 409 for an answer its question closed on (:class:`AnswerClosed`); ``median`` and
    ``calibration`` say which account counts the refusal (:meth:`AggregatorState.refuse`).
    """
    pool = {"median": median, "calibration": calibration}
    try:
        with session.begin():
            check_and_store()
    except IntegrityError:  # a concurrent copy of the same member's answer won the insert
        raise state.refuse(problem_id, "duplicate answer", 409, duplicate, **pool) from None
    except AnswerClosed as exc:
        raise state.refuse(problem_id, closed, 409, str(exc), **pool) from None
    with state.answers:
        state.answers.notify_all()
    return Ack(ok=True)
