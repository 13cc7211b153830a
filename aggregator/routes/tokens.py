"""Token issuance: one blind POPRF evaluation per (peer, slot), authenticated, batched.

A :class:`~anonml.protocol.TokenBatchRequest` is signed by a roster member
between the roster's publication and the end of the send window (so peers
take their tokens while the median rounds run). Refusals: outside that time
(409), not on the roster (403), bad signature
(403), a median-pool member (403: it sends cover packets only, which carry no
token), a slot that is not ``report_slot(problem, partition, k)`` of the
requester's own partition (from the plan) for ``k < k_h`` (422, counted as
"wrong partition" when it names another partition of the problem, else
"unknown slot") or repeated in the batch (422), a bad blinded element (422),
and a second evaluation for any slot (409, :class:`~anonml.crypto.AlreadyIssued`).
The batch is one transaction: every slot is recorded and evaluated, or none;
the answer carries one DLEQ proof covering every slot's evaluation, which
the peer checks against the pinned key before unblinding.

Binding the slot to the partition means a member holds tokens only for
reports of the partition the plan put it in: it cannot pour its reports
into a partition of its choosing, and the intake refuses a token of one
partition on a report that claims another (:mod:`aggregator.routes.intake`).
"""

from __future__ import annotations

import time

from fastapi import APIRouter
from sqlalchemy import select
from sqlalchemy.orm import Session

from aggregator.deps import SessionDep, StateDep
from aggregator.routes.problems import check_named_problem, get_row
from anonml.crypto import AlreadyIssued, CryptoError, IssuanceLedger, TokenIssuer, record_issuance
from anonml.crypto.spent import IssuanceRow
from anonml.phases import ProblemPhase
from anonml.protocol import TokenBatchRequest, TokenBatchResponse, report_slot, verify_message

__all__ = ["router", "SessionIssuanceLedger"]

router = APIRouter(prefix="/problems", tags=["tokens"])


class SessionIssuanceLedger(IssuanceLedger):
    """Records evaluations inside the request's transaction (so a batch is all or nothing)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def record(self, key_id: bytes, peer_id: bytes, slot: bytes) -> None:
        record_issuance(self.session, key_id, peer_id, slot)

    def has_issued(self, key_id: bytes, peer_id: bytes, slot: bytes) -> bool:
        stmt = select(IssuanceRow.id).where(
            IssuanceRow.key_id == key_id, IssuanceRow.peer_id == peer_id, IssuanceRow.slot == slot
        )
        return self.session.scalars(stmt).first() is not None


@router.post("/{problem_id}/tokens", response_model=TokenBatchResponse)
def issue_tokens(
    problem_id: str, body: TokenBatchRequest, state: StateDep, session: SessionDep
) -> TokenBatchResponse:
    """Evaluate the peer's blinded elements, one per report slot, with one DLEQ proof for all."""
    try:
        with session.begin():
            return _issue(problem_id, body, state, session)
    except AlreadyIssued:
        raise state.refuse(
            problem_id,
            "already issued",
            409,
            "a token was already issued to this peer for one of these slots",
        ) from None
    except CryptoError as exc:
        raise state.refuse(
            problem_id, "bad blinded element", 422, f"blinded element rejected: {exc}"
        ) from None


def _issue(problem_id: str, body: TokenBatchRequest, state, session: Session) -> TokenBatchResponse:
    row = get_row(session, problem_id)
    check_named_problem(state, problem_id, body.problem_id, "request")
    if row.phase not in (ProblemPhase.MEDIANS, ProblemPhase.REPORTING):
        raise state.refuse(
            problem_id,
            "wrong phase",
            409,
            f"tokens are issued from the roster's publication to the end of the send window; "
            f"problem {problem_id} is in phase {row.phase}",
        )
    ctx = state.require_context(problem_id, session)
    plan = ctx.require_plan()  # tokens are issued after the co-signed roster fixed the plan
    if ctx.bins is not None and time.time() >= ctx.bins.t_s + ctx.bins.delta:
        raise state.refuse(problem_id, "wrong phase", 409, "the send window is over; no more tokens")
    index = ctx.index.get(bytes(body.identity))
    if index is None:
        raise state.refuse(problem_id, "not a member", 403, "the requesting identity is not on the roster")
    try:
        verify_message(body, bytes(body.identity))
    except CryptoError as exc:
        raise state.refuse(
            problem_id, "bad signature", 403, f"token request signature rejected: {exc}"
        ) from None
    assignment = plan.assignment(index)
    if assignment.role != "report":
        raise state.refuse(
            problem_id,
            f"{assignment.role} pool",
            403,
            f"{assignment.role}-pool peers send cover packets only and get no tokens",
        )
    kp, kh = ctx.problem.draft.kp, ctx.problem.draft.kh
    own = {report_slot(problem_id, assignment.index, k) for k in range(kh)}
    slots = [bytes(r.slot) for r in body.requests]
    for slot in slots:
        if slot in own:
            continue
        if any(slot == report_slot(problem_id, p, k) for p in range(kp) for k in range(kh)):
            raise state.refuse(
                problem_id,
                "wrong partition",
                422,
                f"slot {slot!r} belongs to another partition; this member reports in partition "
                f"{assignment.index}",
            )
        raise state.refuse(
            problem_id,
            "unknown slot",
            422,
            f"slot {slot!r} is not a report slot of partition {assignment.index} of {problem_id} (k < {kh})",
        )
    if len(set(slots)) != len(slots):
        raise state.refuse(problem_id, "malformed", 422, "a slot appears twice in one batch")
    issuer = TokenIssuer(ctx.token_key, SessionIssuanceLedger(session))
    response = issuer.issue_batch(
        bytes(body.identity), [(bytes(r.slot), bytes(r.blinded)) for r in body.requests]
    )
    return TokenBatchResponse(
        evaluated=tuple(bytes(z) for z in response.evaluated), proof=bytes(response.proof)
    )
