"""What a host fetches once for all its identities when the model is out: the aggregator's receipt
digests, every median query the search asked, and the calibration question (docs/protocol.md,
"Aggregator: the phase machine" and "Participation: one identity in one problem").

One download each for the whole host instead of one per identity. A fetch that fails for a
transient reason (the aggregator unreachable or overloaded) is named in :attr:`HostFetch.awaited`:
the worker then tries the model step again, with backoff, until
:data:`~peer.worker.RECEIPTS_WAIT_SECONDS` have passed — the counts would be wrong, or a missed
median answer unsaid, without them. A refusal is an answer and is not waited for. Either way the
miss is counted on the host.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from anonml.crypto import CryptoError
from anonml.errors import ProtocolError
from anonml.protocol import CalibrationRequest, MedianQuery, Problem, verify_message
from peer.client import AggregatorClient, HTTPRefusal, transient
from peer.median_answer import may_have_missed
from peer.participant import Participant
from peer.phases import ParticipationPhase

__all__ = ["HostFetch", "fetch_for_host"]

log = logging.getLogger("anonml.peer")


@dataclass
class HostFetch:
    """The model step's downloads for every identity of one host."""

    #: The aggregator's receipt digests; None when unavailable (each identity that sent reports
    #: then asks on its own once the wait is over).
    receipts: frozenset[bytes] | None = None
    #: Every median query asked, open or closed, each signed by the aggregator; empty when no
    #: identity needs them or they could not be had.
    asked: list[MedianQuery] = field(default_factory=list)
    #: The calibration question asked (signed), when one of the identities is in the calibration
    #: pool and never answered; None otherwise or when the problem asked none.
    calibration: CalibrationRequest | None = None
    #: What failed for a transient reason (the step is worth trying again), and the last error.
    awaited: list[str] = field(default_factory=list)
    error: str = ""


def fetch_for_host(
    client: AggregatorClient, problem: Problem, taking: Sequence[Participant], count: Callable[[str], None]
) -> HostFetch:
    """The receipts, and — only when one of ``taking`` (the identities about to take the model) is in
    the median pool with nothing noted against it (:func:`peer.median_answer.note_unanswered`) —
    the median queries asked. ``count`` counts each miss on the host."""
    out = HostFetch()

    def missed(what: str, exc: Exception) -> None:
        out.error = str(exc)
        if isinstance(exc, ProtocolError) and transient(exc):
            out.awaited.append(what)
        count(f"{what} not fetched")

    try:
        out.receipts = frozenset(map(bytes, client.receipts(problem.id).digests))
    except ProtocolError as exc:
        missed("receipts", exc)
    if any(map(may_have_missed, taking)):
        try:
            asked = client.asked_medians(problem.id)
            for query in asked:
                verify_message(query, bytes(problem.aggregator))
            out.asked = asked
        except ProtocolError as exc:
            missed("median questions", exc)
        except CryptoError as exc:
            log.warning("%s: a median question is not signed by the aggregator: %s", problem.id, exc)
            missed("median questions", exc)
    # Only a problem with a calibration pool asks a question; only an identity of the pool that never
    # answered it (still reporting) needs to know whether it was asked.
    calibrating = problem.draft.calibration_fraction > 0
    if calibrating and any(p.in_calibration_pool and p.phase == ParticipationPhase.REPORTING for p in taking):
        try:
            request = client.calibration(problem.id)
            for question in (request.question, request.choice):  # K ≥ 3: the choice half's too
                if question is not None:
                    verify_message(question, bytes(problem.aggregator))
            out.calibration = request
        except HTTPRefusal as exc:
            if exc.status != 404:  # 404: no question was asked (too few to calibrate, or none)
                missed("calibration question", exc)
        except ProtocolError as exc:
            missed("calibration question", exc)
        except CryptoError as exc:
            log.warning("%s: a calibration question is not signed by the aggregator: %s", problem.id, exc)
            missed("calibration question", exc)
    return out
