"""The calibration questions and their answers (docs/protocol.md, "Calibration").

``GET /problems/{id}/calibration`` serves the :class:`~anonml.protocol.CalibrationRequest` — the
signed question and the signed uncalibrated model it names, and for a K ≥ 3 model the signed
second-stage question once asked — from the first ask on (404 before; still served once the step
ended, so a pool member can tell "my question closed before I answered" from "I was never asked").
``POST /problems/{id}/calibration/answers`` takes a signed :class:`~anonml.protocol.CalibrationAnswer`
to the first (or only) question, ``POST /problems/{id}/calibration/choices`` a signed
:class:`~anonml.protocol.ChoiceAnswer` to the second. Each is refused unless its question is open and
the problem in ``calibrating`` (409, late), the signer is on the roster (403) and named by the
question (403), the answer names the question's model (409), it is an output of the question's
mechanism at the question's ε (422: a least-error mechanism over the question's domain whose bits
an honest draw can give; or a Hybrid-mechanism vector in
:func:`~anonml.learn.calibration.check_choice_report`'s support), and the signature holds (403). A
member answers once (409 ``already answered``): the answer is stored, unique per (problem, member),
before it is acknowledged.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, HTTPException
from sqlalchemy import select
from sqlalchemy.orm import Session

from aggregator.db import CalibrationAnswerRow, CalibrationChoiceRow, CalibrationQuestionRow
from aggregator.deps import SessionDep, StateDep
from aggregator.routes.answers import AnswerClosed, store_answer
from aggregator.routes.problems import check_named_problem, get_row
from anonml.crypto import CryptoError
from anonml.phases import ProblemPhase
from anonml.protocol import (
    Ack,
    CalibrationAnswer,
    CalibrationRequest,
    ChoiceAnswer,
    ChoiceQuestion,
    ModelDocument,
    parse_question,
    unpack_bits,
    verify_message,
)

__all__ = ["router"]

router = APIRouter(prefix="/problems", tags=["calibration"])

#: The detail of a refused second answer: the peer reads it as "delivered" (a retry's first copy arrived).
ALREADY_ANSWERED = "already answered this calibration question"


@router.get("/{problem_id}/calibration", response_model=CalibrationRequest)
def calibration_request(problem_id: str, session: SessionDep) -> CalibrationRequest:
    """The calibration question(s) and the uncalibrated model they are about (404 until asked)."""
    get_row(session, problem_id)
    row = session.get(CalibrationQuestionRow, problem_id)
    if row is None:
        raise HTTPException(status_code=404, detail=f"problem {problem_id} has asked no calibration question")
    return CalibrationRequest(
        question=parse_question(row.question_json),
        model=ModelDocument.model_validate_json(row.model_json),
        choice=None if row.choice_json is None else ChoiceQuestion.model_validate_json(row.choice_json),
    )


@router.post("/{problem_id}/calibration/answers", status_code=201, response_model=Ack)
def answer(problem_id: str, body: CalibrationAnswer, state: StateDep, session: SessionDep) -> Ack:
    """Store one pool member's perturbed (score bin, label) — K ≥ 3: (predicted class, label)."""
    return _store(state, session, problem_id, lambda: _check_and_store(problem_id, body, state, session))


@router.post("/{problem_id}/calibration/choices", status_code=201, response_model=Ack)
def choice(problem_id: str, body: ChoiceAnswer, state: StateDep, session: SessionDep) -> Ack:
    """Store one choice-half member's perturbed log-loss steps (K ≥ 3, second stage)."""
    return _store(
        state, session, problem_id, lambda: _check_and_store_choice(problem_id, body, state, session)
    )


def _store(state: Any, session: Session, problem_id: str, check_and_store: Callable[[], None]) -> Ack:
    """:func:`~aggregator.routes.answers.store_answer` with the calibration account's refusals."""
    return store_answer(
        state,
        session,
        problem_id,
        check_and_store,
        duplicate=ALREADY_ANSWERED,
        closed="question closed",
        calibration=True,
    )


@dataclass(frozen=True)
class _Stage:
    """What differs between the two answer routes: the question's column and parser, the answers'
    table and the question's ``open`` flag."""

    name: str
    question_json: Callable[[CalibrationQuestionRow], str | None]
    parse: Callable[[str], Any]
    table: type[CalibrationAnswerRow] | type[CalibrationChoiceRow]
    open_column: str


_FIRST = _Stage(
    "calibration question", lambda row: row.question_json, parse_question, CalibrationAnswerRow, "open"
)
_CHOICE = _Stage(
    "calibration choice question",
    lambda row: row.choice_json,
    ChoiceQuestion.model_validate_json,
    CalibrationChoiceRow,
    "choice_open",
)


def _refusal(state: Any, problem_id: str) -> Callable[[str, int, str], HTTPException]:
    def refuse(reason: str, status: int, detail: str) -> HTTPException:
        return state.refuse(problem_id, reason, status, detail, calibration=True)

    return refuse


def _check_member(
    problem_id: str,
    body: CalibrationAnswer | ChoiceAnswer,
    state: Any,
    session: Session,
    stage: _Stage,
) -> Any:
    """The checks every calibration answer passes (module docstring) but its mechanism's: the question
    it answers (parsed), or the counted refusal raised."""
    refuse = _refusal(state, problem_id)
    row = get_row(session, problem_id)
    check_named_problem(state, problem_id, body.problem_id, "calibration answer")
    asked = session.get(CalibrationQuestionRow, problem_id)
    question_json = None if asked is None else stage.question_json(asked)
    if asked is None or question_json is None:
        raise refuse("not asked", 409, f"problem {problem_id} has asked no {stage.name}")
    ctx = state.require_context(problem_id, session)
    index = ctx.index.get(bytes(body.identity))
    if index is None:
        raise refuse("not a member", 403, "the answering identity is not on the roster")
    # A resend of a stored answer (a retry whose first copy arrived) is a duplicate even once the
    # step closed: the account must not call it late.
    stored = session.scalar(
        select(stage.table.id).where(
            stage.table.problem_id == problem_id, stage.table.identity == bytes(body.identity)
        )
    )
    if stored is not None:
        raise refuse("duplicate answer", 409, ALREADY_ANSWERED)
    if row.phase != ProblemPhase.CALIBRATING or not getattr(asked, stage.open_column):
        raise refuse("question closed", 409, f"the {stage.name} of {problem_id} is closed")
    question = stage.parse(question_json)
    if index not in question.members:
        raise refuse("not named", 403, f"roster member {index} is not asked the {stage.name}")
    if bytes(body.model_digest) != bytes(question.model_digest):
        raise refuse("other model", 409, "the answer is about another model than the question's")
    return question


def _verify_and_store(
    problem_id: str,
    body: CalibrationAnswer | ChoiceAnswer,
    state: Any,
    session: Session,
    stage: _Stage,
    row: object,
) -> None:
    """Check the signature, insert ``row`` and re-read the stage's ``open`` under the insert's lock."""
    try:
        verify_message(body, bytes(body.identity))
    except CryptoError as exc:
        raise _refusal(state, problem_id)("bad signature", 403, f"answer signature rejected: {exc}") from None
    session.add(row)
    session.flush()
    # Re-read under the write lock the insert took: an answer after the step closed is not counted,
    # so it is refused (nothing stored).
    still_open = session.scalar(
        select(getattr(CalibrationQuestionRow, stage.open_column))
        .where(CalibrationQuestionRow.problem_id == problem_id)
        .with_for_update(read=True)
    )
    if not still_open:
        raise AnswerClosed(f"the {stage.name} of {problem_id} closed before this answer")


def _check_and_store(problem_id: str, body: CalibrationAnswer, state, session) -> None:
    refuse = _refusal(state, problem_id)
    question = _check_member(problem_id, body, state, session, _FIRST)
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
    stored = CalibrationAnswerRow(
        problem_id=problem_id,
        identity=bytes(body.identity),
        mechanism_json=mechanism.model_dump_json(),
        bits=bytes(body.bits),
    )
    _verify_and_store(problem_id, body, state, session, _FIRST, stored)


def _check_and_store_choice(problem_id: str, body: ChoiceAnswer, state, session) -> None:
    question = _check_member(problem_id, body, state, session, _CHOICE)
    from anonml.learn.calibration import check_choice_report  # NumPy: not at the service's start

    try:  # a vector the Hybrid mechanism cannot output (length, non-finite, magnitude) is refused
        check_choice_report(body.report, question.epsilon)
    except ValueError as exc:
        raise _refusal(state, problem_id)(
            "out of support", 422, f"the answer is not a mechanism output: {exc}"
        ) from None
    stored = CalibrationChoiceRow(
        problem_id=problem_id, identity=bytes(body.identity), report_json=json.dumps(list(body.report))
    )
    _verify_and_store(problem_id, body, state, session, _CHOICE, stored)
