"""The calibration question and its answers (docs/protocol.md, "Calibration").

``GET /problems/{id}/calibration`` serves the :class:`~anonml.protocol.CalibrationRequest` — the
signed question and the signed uncalibrated model it names — once the question is asked (404
before; still served once the step ended, so a pool member can tell "my question closed before I
answered" from "I was never asked"). ``POST /problems/{id}/calibration/answers`` takes a signed
:class:`~anonml.protocol.CalibrationAnswer`: refused unless the question is open and the problem in
``calibrating`` (409, late), the signer is on the roster (403) and named by the question (403), the
answer names the question's model (409), its mechanism is over the question's domain at the
question's ε (422), and the signature holds (403). A member answers once (409 ``already
answered``): the answer is stored, unique per (problem, member), before it is acknowledged.
"""

from __future__ import annotations

import math

from fastapi import APIRouter, HTTPException
from sqlalchemy import select

from aggregator.db import CalibrationAnswerRow, CalibrationQuestionRow
from aggregator.deps import SessionDep, StateDep
from aggregator.routes.answers import AnswerClosed, store_answer
from aggregator.routes.problems import check_named_problem, get_row
from anonml.crypto import CryptoError
from anonml.phases import ProblemPhase
from anonml.protocol import (
    Ack,
    CalibrationAnswer,
    CalibrationQuestion,
    CalibrationRequest,
    ModelDocument,
    unpack_bits,
    verify_message,
)

__all__ = ["router"]

router = APIRouter(prefix="/problems", tags=["calibration"])

#: The detail of a refused second answer: the peer reads it as "delivered" (a retry's first copy arrived).
ALREADY_ANSWERED = "already answered this calibration question"


@router.get("/{problem_id}/calibration", response_model=CalibrationRequest)
def calibration_request(problem_id: str, session: SessionDep) -> CalibrationRequest:
    """The calibration question and the uncalibrated model it is about (404 until asked)."""
    get_row(session, problem_id)
    row = session.get(CalibrationQuestionRow, problem_id)
    if row is None:
        raise HTTPException(status_code=404, detail=f"problem {problem_id} has asked no calibration question")
    return CalibrationRequest(
        question=CalibrationQuestion.model_validate_json(row.question_json),
        model=ModelDocument.model_validate_json(row.model_json),
    )


@router.post("/{problem_id}/calibration/answers", status_code=201, response_model=Ack)
def answer(problem_id: str, body: CalibrationAnswer, state: StateDep, session: SessionDep) -> Ack:
    """Store one pool member's perturbed (score bin, label)."""
    return store_answer(
        state,
        session,
        problem_id,
        lambda: _check_and_store(problem_id, body, state, session),
        duplicate=ALREADY_ANSWERED,
        closed="question closed",
        calibration=True,
    )


def _check_and_store(problem_id: str, body: CalibrationAnswer, state, session) -> None:
    def refuse(reason: str, status: int, detail: str) -> HTTPException:
        return state.refuse(problem_id, reason, status, detail, calibration=True)

    row = get_row(session, problem_id)
    check_named_problem(state, problem_id, body.problem_id, "calibration answer")
    asked = session.get(CalibrationQuestionRow, problem_id)
    if asked is None:
        raise refuse("not asked", 409, f"problem {problem_id} has asked no calibration question")
    ctx = state.require_context(problem_id, session)
    index = ctx.index.get(bytes(body.identity))
    if index is None:
        raise refuse("not a member", 403, "the answering identity is not on the roster")
    # A resend of a stored answer (a retry whose first copy arrived) is a duplicate even once the
    # step closed: the account must not call it late.
    stored = session.scalar(
        select(CalibrationAnswerRow.id).where(
            CalibrationAnswerRow.problem_id == problem_id,
            CalibrationAnswerRow.identity == bytes(body.identity),
        )
    )
    if stored is not None:
        raise refuse("duplicate answer", 409, ALREADY_ANSWERED)
    if row.phase != ProblemPhase.CALIBRATING or not asked.open:
        raise refuse("question closed", 409, f"the calibration question of {problem_id} is closed")
    question = CalibrationQuestion.model_validate_json(asked.question_json)
    if index not in question.members:
        raise refuse("not named", 403, f"roster member {index} is not in the calibration pool")
    if bytes(body.model_digest) != bytes(question.model_digest):
        raise refuse("other model", 409, "the answer is about another model than the question's")
    mechanism = body.mechanism
    if mechanism.m != question.domain or not math.isclose(mechanism.epsilon, question.epsilon, rel_tol=1e-9):
        raise refuse(
            "bad mechanism",
            422,
            f"an answer is over {question.domain} values at ε={question.epsilon}, "
            f"not {mechanism.m} at ε={mechanism.epsilon}",
        )
    if len(body.bits) != (mechanism.m + 7) // 8:
        raise refuse("bad mechanism", 422, f"{len(body.bits)} bytes of bits for {mechanism.m} values")
    from anonml.privacy.support import check_support  # NumPy: not at the service's start

    try:  # as the intake checks a report: bits no honest draw gives (e.g. every k-RR bit set) are refused
        check_support(mechanism, unpack_bits(body.bits, mechanism.m))
    except ValueError as exc:
        raise refuse("out of support", 422, f"the answer is not a mechanism output: {exc}") from None
    try:
        verify_message(body, bytes(body.identity))
    except CryptoError as exc:
        raise refuse("bad signature", 403, f"answer signature rejected: {exc}") from None
    session.add(
        CalibrationAnswerRow(
            problem_id=problem_id,
            identity=bytes(body.identity),
            mechanism_json=mechanism.model_dump_json(),
            bits=bytes(body.bits),
        )
    )
    session.flush()
    # Re-read under the write lock the insert took: an answer after the step closed is not counted,
    # so it is refused (nothing stored).
    still_open = session.scalar(
        select(CalibrationQuestionRow.open)
        .where(CalibrationQuestionRow.problem_id == problem_id)
        .with_for_update(read=True)
    )
    if not still_open:
        raise AnswerClosed(f"the calibration question of {problem_id} closed before this answer")
