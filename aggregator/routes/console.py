"""``/console``: the aggregator operator's pages (the admin token to log in).

Problems with their phase timeline, registrations, refusals by reason,
reports expected / received / lost, the witnesses' cosignatures and the
trained model's metrics; a propose form that validates the draft against
:class:`~anonml.protocol.ProblemDraft` before publishing it; close and train
buttons. Every figure is the JSON API's (:func:`~aggregator.routes.problems.problem_status`)
and every action calls the admin route itself (``propose``,
``close_registration``, ``train``), so the console and the API never disagree.
Login, CSRF and rendering come from :mod:`anonml.web`.

While a round runs, a report not received yet is *in flight*, not lost: the
status's account (``lost = expected − received``) is final only once the
delivery window closed (``t_r`` + the intake's grace, when the round leaves
``reporting``); until then the console counts as lost only what the intake
already refused (:func:`delivery`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from aggregator.db import ProblemRow
from aggregator.deps import SessionDep, StateDep
from aggregator.routes import model as model_routes
from aggregator.routes import problems as problem_routes
from aggregator.routes import registration as registration_routes
from aggregator.state import AggregatorState
from anonml.model import FeatureSpec
from anonml.plugins import PluginRef
from anonml.protocol import CosignatureBundle, ModelDocument, Problem, ProblemDraft, ProblemStatus, Schedule
from anonml.web import Pages, WebAuth, WebSession, svg_timeline

__all__ = ["router", "AUTH", "PAGES", "sample_draft", "Delivery", "delivery"]

AUTH = WebAuth(
    prefix="/console",
    cookie="anonml_console",
    token_of=lambda request: request.app.state.aggregator.admin_token,
    what="admin token",
)
PAGES = Pages(
    Path(__file__).resolve().parents[1] / "templates",
    AUTH,
    "AnonML aggregator",
    [("/", "Problems"), ("/propose", "Propose")],
)

router = APIRouter(prefix="/console", include_in_schema=False)
router.include_router(PAGES.router())
PageSession = Annotated[WebSession, Depends(AUTH.require)]


def sample_draft(now: datetime | None = None) -> ProblemDraft:
    """The propose form's starting point: a small MOOC dropout problem, registration open 10 minutes."""
    now = now or datetime.now(UTC)
    return ProblemDraft(
        title="Who drops out of the course?",
        description="Activity in the first two weeks, and whether the student is still active by week four.",
        instancer=PluginRef(
            name="user_window", params={"history_periods": 2, "label_start": 2, "label_end": 4}
        ),
        featurizer=PluginRef(name="mooc_engagement", params={"weeks": 2}),
        features=(
            FeatureSpec(name="sessions", low=0, high=20),
            FeatureSpec(name="active_days", low=0, high=14),
        ),
        epsilon=1.0,
        kp=2,
        schedule=Schedule(registration_deadline=now + timedelta(minutes=10)),
        min_peers=20,
    )


#: Phases in which reports may still arrive (the round's delivery window closes at ``t_r`` + grace).
ROUND_PHASES = ("witnessing", "medians", "reporting")


@dataclass(frozen=True)
class Delivery:
    """The report account as the console shows it: a report is lost only once it can no longer arrive.

    ``expected = received + lost + in_flight``; ``in_flight`` is what is not received yet while
    the delivery window is ``open``, ``lost`` what the intake refused (and, once the window
    closed, everything not received: :class:`~anonml.protocol.ReportAccount`'s ``lost``).
    """

    expected: int
    received: int
    lost: int
    in_flight: int
    open: bool

    @property
    def lost_fraction(self) -> float:
        return self.lost / self.expected if self.expected else 0.0


def delivery(
    status: ProblemStatus, t_r: float | None, grace: float, now: float | None = None
) -> Delivery | None:
    """``status``'s report account split into lost and in flight at ``now`` (None before the roster).

    The window is open while the round is in :data:`ROUND_PHASES` and, once the bins fixed
    ``t_r``, until ``t_r + grace``; then the account stands as the status reports it.
    """
    account = status.reports
    if account is None:
        return None
    now = time.time() if now is None else now
    if status.phase in ROUND_PHASES and (t_r is None or now <= t_r + grace):
        refused = account.late + sum(account.refused.values())
        return Delivery(account.expected, account.received, refused, account.not_arrived, True)
    return Delivery(account.expected, account.received, account.lost, 0, False)


@dataclass(frozen=True)
class ProblemPage:
    """Everything the problem page shows, read in one session."""

    problem: Problem
    status: ProblemStatus
    delivery: Delivery | None
    timeline: list[tuple[str, float]]
    cosignatures: list[CosignatureBundle]
    model: ModelDocument | None


def _problem_page(state: AggregatorState, session: Session, problem_id: str) -> ProblemPage:
    row = problem_routes.get_row(session, problem_id)
    status = problem_routes.problem_status(state, session, row)
    timeline = list(status.phase_seconds.items())
    if row.phase not in ("done", "degraded", "failed"):
        timeline.append((f"{row.phase} (now)", max(0.0, time.time() - row.phase_started)))
    bundles = [
        CosignatureBundle.model_validate_json(text)
        for text in (row.roster_cosignatures_json, row.bins_cosignatures_json)
        if text is not None
    ]
    document = ModelDocument.model_validate_json(row.model_json) if row.model_json is not None else None
    return ProblemPage(
        Problem.model_validate_json(row.problem_json),
        status,
        delivery(status, row.t_r, state.settings.intake_grace_seconds),
        timeline,
        bundles,
        document,
    )


@router.get("/")
def problems(request: Request, session: PageSession, state: StateDep, db: SessionDep) -> HTMLResponse:
    """Every problem, newest first, with its phase and counts."""
    rows = db.scalars(select(ProblemRow).order_by(ProblemRow.created_at.desc())).all()
    statuses = [problem_routes.problem_status(state, db, row) for row in rows]
    return PAGES.render(request, "problems.html", session, statuses=statuses)


@router.get("/problems/{problem_id}")
def problem(
    problem_id: str, request: Request, session: PageSession, state: StateDep, db: SessionDep
) -> HTMLResponse:
    """One problem: timeline, registrations, refusals, report account, witnesses, model."""
    page = _problem_page(state, db, problem_id)
    return PAGES.render(
        request, "problem.html", session, page=page, chart=svg_timeline(page.timeline),
        notice=_DONE.get(request.query_params.get("done", ""), ""),
    )


#: What the problem page says after each action succeeded (named in the redirect's query, so the
#: page's own reloads on a phase change keep it; a refusal is flashed instead: its text is not fixed).
_DONE = {
    "proposed": "Published: peers see it at their next poll.",
    "close": "Registration closes: the roster is published at the next tick.",
    "train": "Training requested: the report round closes now and the model is trained.",
}


@router.get("/api/problems/{problem_id}")
def live(problem_id: str, session: PageSession, state: StateDep, db: SessionDep, phase: str = "") -> dict:
    """The problem's counts for the page's poller; reload when the phase is not the one shown."""
    row = problem_routes.get_row(db, problem_id)
    status = problem_routes.problem_status(state, db, row)
    account = delivery(status, row.t_r, state.settings.intake_grace_seconds)
    return {
        "items": {
            "counts": {
                "phase": status.phase,
                "registered": status.registered,
                "tokens": status.tokens_issued,
                "received": status.reports_accepted,
                "expected": account.expected if account is not None else "—",
                "in_flight": account.in_flight if account is not None else "—",
                "lost": account.lost if account is not None else "—",
                # The median account (issue 26): expected / received / missing, and why.
                "median_expected": status.medians.expected if status.medians is not None else "—",
                "median_received": status.median_answers,
                "median_missing": status.medians.missing if status.medians is not None else "—",
                "median_shortfall": status.medians.describe()
                if status.medians is not None and status.medians.missing
                else "",
            }
        },
        "reload": status.phase != phase,
    }


def _propose_page(
    request: Request, session: WebSession, text: str, errors: list[str], status_code: int = 200
) -> HTMLResponse:
    return PAGES.render(request, "propose.html", session, status_code, text=text, errors=errors)


@router.get("/propose")
def propose_form(request: Request, session: PageSession) -> HTMLResponse:
    """The draft as JSON, starting from :func:`sample_draft`."""
    return _propose_page(request, session, sample_draft().model_dump_json(indent=2), [])


def _validation_errors(exc: ValidationError) -> list[str]:
    return [
        f"{'.'.join(map(str, e['loc'])) or '(draft)'}: {e['msg']}" for e in exc.errors(include_url=False)
    ][:20]


@router.post("/propose")
async def propose(request: Request) -> Any:
    """Validate the draft against the schema; publish it with the API's own ``POST /problems``."""
    session, form = await AUTH.posted(request)
    text = form.get("draft", "")
    try:
        draft = ProblemDraft.model_validate_json(text)
    except ValidationError as exc:
        return _propose_page(request, session, text, _validation_errors(exc), 422)
    state: AggregatorState = request.app.state.aggregator

    def publish() -> Problem:
        with state.sessions() as db:
            return problem_routes.propose(draft, state, db, None)

    try:
        published = await run_in_threadpool(publish)
    except HTTPException as exc:
        return _propose_page(request, session, text, [str(exc.detail)], exc.status_code)
    return RedirectResponse(f"/console/problems/{published.id}?done=proposed", status_code=303)


@router.post("/problems/{problem_id}/{action}")
async def act(problem_id: str, action: str, request: Request) -> Any:
    """Close registration or train now (the admin routes themselves; CSRF checked first).

    The answer is a redirect to the problem's page (POST/redirect/GET) with the outcome, or the
    refusal, flashed there: reloading it never acts again.
    """
    session, _ = await AUTH.posted(request)
    actions = {"close": registration_routes.close_registration, "train": model_routes.train}
    if action not in actions:
        raise HTTPException(status_code=404, detail=f"no action {action[:20]!r} (close or train)")
    state: AggregatorState = request.app.state.aggregator

    def run() -> str:
        """The refusal's reason, or "" when the action was taken."""
        with state.sessions() as db:
            try:
                actions[action](problem_id, state, db, None)
            except HTTPException as exc:
                if exc.status_code == 404:
                    raise
                db.rollback()
                return str(exc.detail)
        return ""

    refused = await run_in_threadpool(run)
    if refused:
        AUTH.flash(request, session, "error", refused)
        return RedirectResponse(f"/console/problems/{quote(problem_id)}", status_code=303)
    return RedirectResponse(f"/console/problems/{quote(problem_id)}?done={action}", status_code=303)
