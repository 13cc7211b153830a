"""Sending one signed, already recorded answer (a median bit, a calibration pair) to the aggregator.

Both answers go the same way: the same signed bytes are sent again while the aggregator does not
answer, until the question's own deadline; a 409 "already answered" is a retry whose first copy
arrived (delivered, counted); any other 409 means the question moved on (not counted: the release
stays recorded, which is conservative); a transient failure to the end is "not delivered". The
identity notes each shortfall (:meth:`~peer.participation.Participation._short`).
"""

from __future__ import annotations

from collections.abc import Callable

from anonml.errors import ProtocolError
from peer.client import HTTPRefusal, transient, with_retries
from peer.participation import Participation

__all__ = ["deliver_answer"]


def deliver_answer(
    p: Participation, send: Callable[[], object], *, until: float, what: str, counter: str, deadline: str
) -> None:
    """Send with :func:`~peer.client.with_retries` until ``until``; note what was not counted.

    ``what`` names the answer in a shortfall ("median answer (feature 2, step 1)"), ``counter`` the
    relay counters ("median answers" → "… retried", "… delivered (replayed)"), ``deadline`` whose
    deadline ``until`` is ("the step's"). Other refusals and errors are raised.
    """
    try:
        with_retries(send, until=until, on_retry=lambda exc: p.relay.count(f"{counter} retried"))
    except HTTPRefusal as exc:
        if exc.status == 409 and "already answered" in exc.detail:
            p.relay.count(f"{counter} delivered (replayed)")
        elif transient(exc):
            p._short(f"{what} not delivered before {deadline} deadline: {exc}")
        elif exc.status == 409:
            p._short(f"{what} not counted: {exc.detail}")
        else:
            raise
    except ProtocolError as exc:
        if not transient(exc):
            raise
        p._short(f"{what} not delivered before {deadline} deadline: {exc}")
