"""Median queries and answers (thesis algorithm 1 over the network).

``GET /problems/{id}/medians`` lists the open, signed
:class:`~anonml.protocol.MedianQuery` messages; each names the roster indices
(``members``) that may answer it. ``GET /problems/{id}/medians/asked`` lists every
query asked so far, closed ones too, so a member can tell "my question closed
before I answered" from "I was never asked". ``POST /problems/{id}/medians/answers`` takes
a signed :class:`~anonml.protocol.MedianAnswer`: refused unless the problem is
in its median phase (409), the query is open (409), the signer is on the
roster (403) and named by the query (403), and the signature holds (403); a
peer answers once per problem (409), which with disjoint groups is the
parallel composition DESIGN §6 relies on. ``POST /problems/{id}/medians/answers/batch``
takes many identities' answers (a host's, :class:`~anonml.protocol.MedianAnswerBatch`) and
answers each with what its own request would have got.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from sqlalchemy import select
from sqlalchemy.orm import Session

from aggregator.db import MedianAnswerRow, MedianQueryRow
from aggregator.deps import SessionDep, StateDep
from aggregator.routes.answers import AnswerClosed, store_answer
from aggregator.routes.problems import check_named_problem, get_row
from anonml.crypto import CryptoError
from anonml.phases import ProblemPhase
from anonml.protocol import (
    Ack,
    BatchResults,
    ItemResult,
    MedianAnswer,
    MedianAnswerBatch,
    MedianQuery,
    verify_message,
)

__all__ = ["router"]

router = APIRouter(prefix="/problems", tags=["medians"])


@router.get("/{problem_id}/medians", response_model=list[MedianQuery])
def open_queries(problem_id: str, session: SessionDep) -> list[MedianQuery]:
    """The open IsGreater queries of the problem's median search."""
    return _queries(session, problem_id, open_only=True)


@router.get("/{problem_id}/medians/asked", response_model=list[MedianQuery])
def asked_queries(problem_id: str, session: SessionDep) -> list[MedianQuery]:
    """Every query the search has asked, open or closed, in (feature, step) order.

    A pool member named by one that it never answered knows its answer is missing, even if it
    never saw that query open (its host was not ready in time). A member named by none was not
    asked: a search stops once its answers are decisive (thesis algorithm 1), and its later
    questions are never asked.
    """
    return _queries(session, problem_id, open_only=False)


def _queries(session: Session, problem_id: str, *, open_only: bool) -> list[MedianQuery]:
    get_row(session, problem_id)
    stmt = (
        select(MedianQueryRow.query_json)
        .where(MedianQueryRow.problem_id == problem_id)
        .order_by(MedianQueryRow.feature, MedianQueryRow.step)
    )
    if open_only:
        stmt = stmt.where(MedianQueryRow.open.is_(True))
    return [MedianQuery.model_validate_json(text) for text in session.scalars(stmt)]


@router.post("/{problem_id}/medians/answers", status_code=201, response_model=Ack)
def answer(problem_id: str, body: MedianAnswer, state: StateDep, session: SessionDep) -> Ack:
    """Record one peer's randomised IsGreater bit."""
    return store_answer(
        state,
        session,
        problem_id,
        lambda: _check_and_store(problem_id, body, state, session),
        duplicate="this peer already answered a median query of this problem",
        closed="query closed",
        median=True,
    )


@router.post("/{problem_id}/medians/answers/batch", response_model=BatchResults)
def answer_batch(
    problem_id: str, body: MedianAnswerBatch, state: StateDep, session: SessionDep
) -> BatchResults:
    """Many identities' median bits in one request (a host of many pool members); a result per item.

    Each answer goes through the single route on its own, in its own transaction, and gets the
    status and detail its own request would have got (201 stored; 403, 404, 409 refused and counted
    under the same reason): one bad answer never sinks the others, and a step that closes between
    two items refuses the later ones as it would their own requests.
    """
    results: list[ItemResult] = []
    for item in body.answers:
        try:
            answer(problem_id, item, state, session)
        except HTTPException as exc:
            results.append(ItemResult(status=exc.status_code, detail=str(exc.detail)))
        else:
            results.append(ItemResult(status=201))
    return BatchResults(results=tuple(results))


def _check_and_store(problem_id: str, body: MedianAnswer, state, session) -> None:
    row = get_row(session, problem_id)
    check_named_problem(state, problem_id, body.problem_id, "answer")
    if row.phase != ProblemPhase.MEDIANS:
        raise state.refuse(
            problem_id, "wrong phase", 409, f"problem {problem_id} is in phase {row.phase}", median=True
        )
    ctx = state.require_context(problem_id, session)
    ctx.require_roster()  # the medians phase comes after the co-signed roster
    index = ctx.index.get(bytes(body.identity))
    if index is None:
        raise state.refuse(
            problem_id, "not a member", 403, "the answering identity is not on the roster", median=True
        )
    # A resend of a counted answer (a retry whose first copy arrived) is a duplicate even once its
    # query closed: the peer's answer was delivered, and the median account must not call it late.
    counted = session.scalar(
        select(MedianAnswerRow.id).where(
            MedianAnswerRow.problem_id == problem_id, MedianAnswerRow.identity == bytes(body.identity)
        )
    )
    if counted is not None:
        raise state.refuse(
            problem_id, "duplicate answer", 409, "this peer already answered a median query of this problem",
            median=True,
        )
    query = session.get(MedianQueryRow, (problem_id, body.feature, body.step))
    if query is None or not query.open:
        raise state.refuse(
            problem_id, "query closed", 409, f"no open query for feature {body.feature}, step {body.step}",
            median=True,
        )
    if index not in MedianQuery.model_validate_json(query.query_json).members:
        raise state.refuse(
            problem_id,
            "not named",
            403,
            f"roster member {index} is not asked feature {body.feature}, step {body.step}",
            median=True,
        )
    try:
        verify_message(body, bytes(body.identity))
    except CryptoError as exc:
        raise state.refuse(
            problem_id, "bad signature", 403, f"answer signature rejected: {exc}", median=True
        ) from None
    session.add(
        MedianAnswerRow(
            problem_id=problem_id,
            feature=body.feature,
            step=body.step,
            identity=bytes(body.identity),
            bit=body.bit,
        )
    )
    session.flush()
    # Re-read under the write lock the insert took: if the search closed the query
    # meanwhile, this answer would not be counted, so refuse it (nothing stored).
    still_open = session.scalar(
        select(MedianQueryRow.open)
        .where(
            MedianQueryRow.problem_id == problem_id,
            MedianQueryRow.feature == body.feature,
            MedianQueryRow.step == body.step,
        )
        .with_for_update(read=True)
    )
    if not still_open:
        raise AnswerClosed(
            f"the query for feature {body.feature}, step {body.step} closed before this answer"
        )
