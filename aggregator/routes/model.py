"""Training on demand (admin), the published, signed model document, and its held-out quality (admin)."""

from __future__ import annotations

import json

from fastapi import APIRouter, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session

from aggregator.db import EvaluationRow, read_document
from aggregator.deps import AdminDep, SessionDep, StateDep
from aggregator.routes.problems import get_row, problem_status
from aggregator.state import AggregatorState
from anonml.errors import AnonMLError
from anonml.phases import MODEL_PHASES, ProblemPhase
from anonml.protocol import Bins, ModelDocument, ModelEvaluation, ProblemStatus

__all__ = ["router", "evaluate_model", "latest_evaluation"]

router = APIRouter(prefix="/problems", tags=["model"])


@router.get("/{problem_id}/bins", response_model=Bins)
def get_bins(problem_id: str, state: StateDep, session: SessionDep) -> Bins:
    """The signed bin edges and the report round's absolute schedule (parsed once per process)."""
    ctx = state.context(problem_id, session)
    if ctx is None:
        raise HTTPException(status_code=404, detail=f"no problem {problem_id!r}")
    if ctx.bins is None:
        raise HTTPException(status_code=409, detail=f"problem {problem_id}: bins are not published yet")
    return ctx.bins


@router.post("/{problem_id}/train", response_model=ProblemStatus)
def train(problem_id: str, state: StateDep, session: SessionDep, _: AdminDep) -> ProblemStatus:
    """Close the report round now and train (admin); on a finished problem, or one that failed
    in training, train again on the stored reports."""
    with session.begin():
        row = get_row(session, problem_id)
        # A problem that failed in training (or after it) retrains on its stored reports.
        trained = ProblemPhase.TRAINING in json.loads(row.phase_seconds_json)
        failed_in_training = row.phase == ProblemPhase.FAILED and trained
        if row.phase not in (ProblemPhase.REPORTING, *MODEL_PHASES) and not failed_in_training:
            raise HTTPException(
                status_code=409,
                detail=f"problem {problem_id} is in phase {row.phase}; training needs the report round",
            )
        row.train_requested = True
    return problem_status(state, session, row)


@router.get("/{problem_id}/model", response_model=ModelDocument)
def get_model(problem_id: str, session: SessionDep) -> ModelDocument:
    """The trained model as versioned JSON, signed by the aggregator (404 until trained)."""
    row = get_row(session, problem_id)
    model_json = read_document(session, problem_id, "model")
    if model_json is None:
        raise HTTPException(
            status_code=404, detail=f"problem {problem_id} has no model yet (phase {row.phase})"
        )
    return ModelDocument.model_validate_json(model_json)


def evaluate_model(
    state: AggregatorState,
    session: Session,
    problem_id: str,
    text: str,
    *,
    label: str = "label",
    name: str = "",
) -> ModelEvaluation:
    """Score the problem's published model on the operator's labelled CSV ``text`` and keep the figures
    (:mod:`aggregator.evaluation`); the API route and the console's form both call this.

    Raises HTTPException 404 (no such problem), 409 (no model yet), 422 (rows that do not parse, naming
    the line and column).
    """
    from aggregator.evaluation import read_evaluation_csv, score_model

    ctx = state.context(problem_id, session)
    if ctx is None:
        raise HTTPException(status_code=404, detail=f"no problem {problem_id!r}")
    row = get_row(session, problem_id)
    model_json = read_document(session, problem_id, "model")
    if model_json is None:
        raise HTTPException(
            status_code=409, detail=f"problem {problem_id} has no model yet (phase {row.phase})"
        )
    document = ModelDocument.model_validate_json(model_json)
    try:
        evaluation = score_model(
            document, ctx.problem, read_evaluation_csv(text, ctx.problem, label=label), name=name
        )
    except AnonMLError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from None
    session.merge(EvaluationRow(problem_id=problem_id, evaluation_json=evaluation.model_dump_json()))
    session.commit()
    return evaluation


def latest_evaluation(session: Session, problem_id: str) -> ModelEvaluation | None:
    """The problem's last stored evaluation, or None."""
    row = session.get(EvaluationRow, problem_id)
    return None if row is None else ModelEvaluation.model_validate_json(row.evaluation_json)


@router.post("/{problem_id}/evaluation", response_model=ModelEvaluation)
async def post_evaluation(
    problem_id: str, request: Request, state: StateDep, _: AdminDep, label: str = "label", name: str = ""
) -> ModelEvaluation:
    """Score the published model on labelled rows (admin; body ``text/csv`` as ``anonml featurize`` writes
    it, at most the service's body cap). The figures are kept and shown on the console; the rows are not."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind not in ("text/csv", "text/plain"):
        raise HTTPException(status_code=415, detail=f"evaluation data is text/csv, not {kind[:60]!r}")
    try:
        text = (await request.body()).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HTTPException(status_code=400, detail=f"evaluation data is not UTF-8: {exc.reason}") from None

    def run() -> ModelEvaluation:
        with state.sessions() as session:
            return evaluate_model(state, session, problem_id, text, label=label, name=name)

    return await run_in_threadpool(run)


@router.get("/{problem_id}/evaluation", response_model=ModelEvaluation)
def get_evaluation(problem_id: str, session: SessionDep, _: AdminDep) -> ModelEvaluation:
    """The last held-out evaluation of the problem's model (admin; 404 until one was posted)."""
    get_row(session, problem_id)
    evaluation = latest_evaluation(session, problem_id)
    if evaluation is None:
        raise HTTPException(status_code=404, detail=f"problem {problem_id} has no evaluation yet")
    return evaluation
