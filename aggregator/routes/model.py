"""Training on demand (admin) and the published, signed model document."""

from __future__ import annotations

import json

from fastapi import APIRouter, HTTPException

from aggregator.deps import AdminDep, SessionDep, StateDep
from aggregator.routes.problems import get_row, problem_status
from anonml.protocol import Bins, ModelDocument, ProblemStatus

__all__ = ["router"]

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
        failed_in_training = row.phase == "failed" and "training" in json.loads(row.phase_seconds_json)
        if row.phase not in ("reporting", "done", "degraded") and not failed_in_training:
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
    if row.model_json is None:
        raise HTTPException(
            status_code=404, detail=f"problem {problem_id} has no model yet (phase {row.phase})"
        )
    return ModelDocument.model_validate_json(row.model_json)
