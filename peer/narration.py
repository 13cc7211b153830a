"""What a peer host tells its person about each participation (``anonml peer start`` prints it)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from anonml.protocol import Problem
from peer.phases import ParticipationPhase

if TYPE_CHECKING:
    from peer.participant import Participant, PeerNode

__all__ = ["STATUS_TEXT", "news"]

P = ParticipationPhase

#: What each participation status means to the person running the peer.
STATUS_TEXT: dict[ParticipationPhase, str] = {
    P.REGISTERED: "registered for",
    P.ROSTER_CHECKED: "checked the roster of",
    P.CONFIRMED: "confirmed with other members the roster of",
    P.ANSWERED: "answered a median query (randomised response) in",
    P.REPORTING: "is sending its randomised reports (or cover packets) in",
    P.CALIBRATED: "answered the calibration question (one randomised score bin and label) in",
    P.DONE: "downloaded the signed model of",
    P.DEGRADED: "downloaded the signed model (the aggregator lost too many reports) of",
    P.PARTIAL: "downloaded the signed model, but could not do all of its part in",
    P.ABORTED: "stopped taking part in",
    P.FAILED: "saw the aggregator fail",
}


def news(
    problem: Problem, participants: Sequence[Participant], told: dict[tuple[str, str], str]
) -> Iterator[tuple[PeerNode, str]]:
    """Each identity whose status in ``problem`` changed since ``told`` (updated) says, and the sentence.

    Statuses without a meaning for the person (``accepted``, ``relaying``) are not told; a done
    identity's sentence carries its prediction, a reporting one's its stand-ins, an ended one's reason.
    """
    for p in participants:
        key = (problem.id, p.node.fingerprint)
        if told.get(key) == p.status or p.status not in STATUS_TEXT:
            continue
        told[key] = p.status
        text = f"{STATUS_TEXT[p.status]} “{problem.draft.title}”"
        if p.status == P.DONE and p.prediction is not None:
            text += f"; your predicted probability: {p.prediction:.3f}"
        if p.status == P.REPORTING and p.standins:
            text += f" (stand-ins, uniform through the same mechanism, for: {'; '.join(p.standins)})"
        if p.status in (P.ABORTED, P.FAILED) and p.reason:
            text += f": {p.reason}"
        yield p.node, text
