"""Problems: propose (admin), list, read, and the status of each phase.

``POST /problems`` takes a :class:`~anonml.protocol.ProblemDraft` (plugins by
name, version and params — never code) and publishes a signed
:class:`~anonml.protocol.Problem` carrying the seed commitment ``H(seed)``; the
seed itself stays in the database until the roster reveals it.
"""

from __future__ import annotations

import json
import secrets
import time
from datetime import UTC, datetime

from fastapi import APIRouter, HTTPException
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from aggregator.calibration_round import calibration_account
from aggregator.db import (
    MedianAnswerRow,
    MedianQueryRow,
    ProblemRow,
    RejectRow,
    count_reports,
    read_document,
)
from aggregator.deps import AdminDep, SessionDep, StateDep
from aggregator.state import (
    AggregatorState,
    ProblemContext,
    Refusal,
    cover_count,
    median_refusals,
    reject_counts,
)
from aggregator.timeline import problem_counts
from aggregator.training import account_reports, delivery_window_open, report_peers, shuffle_statement
from anonml.crypto import TokenKey
from anonml.crypto.spent import IssuanceRow
from anonml.phases import ProblemPhase
from anonml.protocol import (
    MedianAccount,
    MedianQuery,
    Problem,
    ProblemDraft,
    ProblemStatus,
    ReportAccount,
    ShuffleStatement,
    route_count,
    sign_message,
)

__all__ = ["router", "problem_status", "problem_account", "get_row"]

router = APIRouter(prefix="/problems", tags=["problems"])


def get_row(session: Session, problem_id: str) -> ProblemRow:
    row = session.get(ProblemRow, problem_id)
    if row is None:
        raise HTTPException(status_code=404, detail=f"no problem {problem_id!r}")
    return row


def named_problem_refusal(problem_id: str, named: str, what: str) -> Refusal | None:
    """The refusal (422, ``malformed``) of a signed ``what`` that names another problem than its URL."""
    if named == problem_id:
        return None
    return Refusal(problem_id, "malformed", 422, f"{what} names problem {named!r}, posted to {problem_id!r}")


def check_named_problem(state: AggregatorState, problem_id: str, named: str, what: str) -> None:
    """Refuse, counted at once, a signed ``what`` that names another problem than its URL."""
    refusal = named_problem_refusal(problem_id, named, what)
    if refusal is not None:
        raise refusal.counted(state)


def _count(session: Session, stmt) -> int:
    return int(session.scalar(stmt) or 0)


def problem_account(
    session: Session, problem_id: str, ctx: ProblemContext, grace: float, now: float | None = None
) -> ReportAccount | None:
    """The problem's reports expected / received / pending / lost and why (None before the roster).

    Reports not received are pending while the delivery window is open at ``now``
    (:func:`~aggregator.training.delivery_window_open`, ``grace`` the intake's), lost after.
    """
    if ctx.roster is None:
        return None
    row = get_row(session, problem_id)
    window_open = delivery_window_open(row.phase, row.t_r, grace, time.time() if now is None else now)
    rows = list(
        session.execute(select(RejectRow.reason, RejectRow.count).where(RejectRow.problem_id == problem_id))
    )
    _, intake = reject_counts(rows)
    late = intake.pop("late", 0)
    draft = ctx.problem.draft
    return account_reports(
        report_peers(draft, ctx.roster),
        draft.kh,
        count_reports(session, problem_id),
        late,
        intake,
        cover=cover_count(rows),
        window_open=window_open,
        routes=route_count(draft.routes, draft.hops, len(ctx.roster.entries)),
        routes_asked=draft.routes,
    )


#: Refusals of a median answer that mean it came after its query closed (the search moved on).
_LATE_ANSWER = ("query closed", "wrong phase")


def median_account(session: Session, problem_id: str, ctx: ProblemContext) -> MedianAccount | None:
    """The problem's median answers expected / received / missing and why (None before the roster).

    ``expected``: the distinct members the stored queries named; a refused duplicate is no
    shortfall (its first answer was counted), so it is left out.
    """
    if ctx.roster is None:
        return None
    named: set[int] = set()
    stored = select(MedianQueryRow.query_json).where(MedianQueryRow.problem_id == problem_id)
    for text in session.scalars(stored):
        named.update(MedianQuery.model_validate_json(text).members)
    received = _count(
        session,
        select(func.count()).select_from(MedianAnswerRow).where(MedianAnswerRow.problem_id == problem_id),
    )
    rows = list(
        session.execute(select(RejectRow.reason, RejectRow.count).where(RejectRow.problem_id == problem_id))
    )
    refusals = median_refusals(rows)
    refusals.pop("duplicate answer", None)
    missing = max(0, len(named) - received)
    late = min(missing, sum(refusals.pop(reason, 0) for reason in _LATE_ANSWER))
    refused: dict[str, int] = {}
    room = missing - late
    for reason, n in sorted(refusals.items()):
        take = min(room, n)
        if take:
            refused[reason] = take
            room -= take
    return MedianAccount(
        expected=len(named), received=received, missing=missing, late=late, refused=refused, not_arrived=room
    )


def problem_shuffle(ctx: ProblemContext, model_json: str | None) -> ShuffleStatement | None:
    """The conditional shuffle bound beside the local ε: the published model's, else the plan's.

    Before the model it rests on the roster's smallest report partition
    (``planned``); once published, on the reports received
    (:func:`aggregator.training.train_problem`). None before the roster.
    """
    from anonml.privacy.amplification import ShuffleBound, report_pool_bound  # NumPy: not at start

    draft = ctx.problem.draft
    if model_json is not None:
        privacy = json.loads(model_json)["model"].get("privacy") or {}
        shuffle = privacy.get("shuffle")
        if shuffle is None:
            return None
        return shuffle_statement(draft, ShuffleBound.from_dict(shuffle), planned=False)
    if ctx.plan is None:
        return None
    smallest = ctx.plan.smallest_partition()
    return shuffle_statement(
        draft, report_pool_bound(float(draft.report_epsilon), int(draft.kh), int(smallest)), planned=True
    )


def problem_status(state: AggregatorState, session: Session, row: ProblemRow) -> ProblemStatus:
    """Counts per phase, refusals by reason and the report account, from the database."""
    ctx = state.require_context(row.id, session)
    roster_size = len(ctx.roster.entries) if ctx.roster is not None else 0
    pool = ctx.roster.median_pool_size if ctx.roster is not None else 0
    counts = problem_counts(session, row.id)
    model_json = read_document(session, row.id, "model")  # the response states its shuffle and calibration
    published_model = None if model_json is None else json.loads(model_json)
    calibrated = bool(((published_model or {}).get("calibration") or {}).get("calibrated"))
    return ProblemStatus(
        id=row.id,
        title=ctx.problem.draft.title,
        phase=row.phase,  # type: ignore[arg-type]
        registered=counts.registered,
        roster_size=roster_size,
        median_answers=counts.median_answers,
        tokens_issued=_count(
            session,
            select(func.count()).select_from(IssuanceRow).where(IssuanceRow.key_id == ctx.token_key.key_id),
        ),
        reports_accepted=counts.received,
        rejects=counts.rejects,
        model_available=model_json is not None,
        message=row.message,
        phase_seconds=json.loads(row.phase_seconds_json),
        median_pool=pool,
        report_peers=ctx.problem.draft.report_pool_size(roster_size, pool),
        slots_per_peer=ctx.problem.draft.kh,
        reports=problem_account(session, row.id, ctx, state.settings.intake_grace_seconds),
        medians=median_account(session, row.id, ctx),
        schedule=None if ctx.roster is None else state.round_schedule(ctx, roster_size),
        shuffle=problem_shuffle(ctx, model_json),
        calibration_pool=ctx.problem.draft.calibration_pool_size(roster_size),
        calibration=calibration_account(session, row.id, calibrated=calibrated),
    )


@router.post("", status_code=201, response_model=Problem)
def propose(draft: ProblemDraft, state: StateDep, session: SessionDep, _: AdminDep) -> Problem:
    """Publish a problem (admin). The deadline must be in the future."""
    now = datetime.now(UTC)
    if draft.schedule.registration_deadline <= now:
        raise HTTPException(
            status_code=422,
            detail=f"schedule.registration_deadline {draft.schedule.registration_deadline.isoformat()} "
            "is not in the future",
        )
    from anonml.learn.partition import SEED_BYTES, commit_seed  # NumPy's module: not at the service's start

    seed = secrets.token_bytes(SEED_BYTES)
    token_key = TokenKey.generate()
    unsigned = Problem(
        id=f"p-{secrets.token_hex(8)}",
        draft=draft,
        created_at=now,
        seed_commitment=commit_seed(seed),
        aggregator=state.public_identity,
        round_id=secrets.randbits(63),
        signature=bytes(64),
    )
    problem = sign_message(unsigned, state.identity)
    with session.begin():
        session.add(
            ProblemRow(
                id=problem.id,
                problem_json=problem.model_dump_json(),
                seed=seed,
                token_secret=bytes(token_key),
                round_id=problem.round_id,
                phase=ProblemPhase.REGISTRATION,
                message="",
                created_at=now,
                phase_started=time.time(),
                phase_seconds_json="{}",
                close_requested=False,
                train_requested=False,
            )
        )
    # The members' preparation (examples, keys) starts now: the first batch's gap counts from here.
    state.meter(problem.id).mark(time.monotonic())
    return problem


@router.get("", response_model=list[Problem])
def list_problems(session: SessionDep, phase: str | None = None) -> list[Problem]:
    """Every published problem (optionally only those in ``phase``), newest first."""
    stmt = select(ProblemRow.problem_json).order_by(ProblemRow.created_at.desc())
    if phase is not None:
        stmt = stmt.where(ProblemRow.phase == phase)
    return [Problem.model_validate_json(text) for text in session.scalars(stmt)]


@router.get("/{problem_id}", response_model=Problem)
def get_problem(problem_id: str, session: SessionDep) -> Problem:
    return Problem.model_validate_json(get_row(session, problem_id).problem_json)


@router.get("/{problem_id}/status", response_model=ProblemStatus)
def get_status(problem_id: str, state: StateDep, session: SessionDep) -> ProblemStatus:
    """Phase, counts per phase, refusals by reason, and each finished phase's wall time."""
    return problem_status(state, session, get_row(session, problem_id))
