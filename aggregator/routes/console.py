"""``/console``: the aggregator operator's pages (the admin token to log in).

Problems with their phase timeline, registrations, refusals by reason,
reports expected / received / lost, the witnesses' cosignatures and the
trained model's metrics; a propose form that validates the draft against
:class:`~anonml.protocol.ProblemDraft` before publishing it; close and train
buttons. Every figure is the JSON API's (:func:`~aggregator.routes.problems.problem_status`)
and every action calls the admin route itself (``propose``,
``close_registration``, ``train``), so the console and the API never disagree.
Login, CSRF and rendering come from :mod:`anonml.web`.

While a round runs, a report not received yet is *pending*, not lost: the
status's account (:class:`~anonml.protocol.ReportAccount`) counts it lost only
once the delivery window closed (``t_r`` + the intake's grace, or the round
left ``reporting``), and the console shows that account as it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from markupsafe import Markup, escape
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from aggregator.console_form import ProposeCheck, check_form, form_of_draft, installed
from aggregator.db import ProblemRow, read_document
from aggregator.deps import SessionDep, StateDep
from aggregator.routes import model as model_routes
from aggregator.routes import problems as problem_routes
from aggregator.routes import registration as registration_routes
from aggregator.state import AggregatorState
from aggregator.timeline import Counts, Sample, samples
from anonml.model import FeatureSpec
from anonml.phases import FINISHED_PHASES, RETRAINABLE_PHASES, ProblemPhase
from anonml.plugins import PluginRef
from anonml.protocol import (
    Bins,
    CosignatureBundle,
    ModelDocument,
    ModelEvaluation,
    Problem,
    ProblemDraft,
    ProblemStatus,
    Schedule,
)
from anonml.web import (
    SECURITY_HEADERS,
    Pages,
    Series,
    WebAuth,
    WebSession,
    epsilon_sentence,
    svg_step_chart,
    svg_timeline,
)

__all__ = [
    "router", "AUTH", "PAGES", "sample_draft", "deadlines", "charts", "captions", "witness_rows", "list_row",
]

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
    # The templates name phases through the enum and the retrain rule through its table, never by word.
    template_globals={"Phase": ProblemPhase, "retrainable": RETRAINABLE_PHASES},
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


@dataclass(frozen=True)
class Deadline:
    """One moment of the round's schedule: what happens, when (POSIX seconds), and whether it is signed."""

    what: str
    at: float
    signed: bool = False

    @property
    def when(self) -> str:
        return datetime.fromtimestamp(self.at, UTC).strftime("%Y-%m-%d %H:%M:%S")


@dataclass(frozen=True)
class WitnessRow:
    """One declared witness at one stage: its cosignature, or None while it has not cosigned."""

    stage: str
    witness: str
    url: str
    signature: str | None


@dataclass(frozen=True)
class Chart:
    """One chart of the page: a heading, the SVG, and the same figures as a sentence (its text form)."""

    title: str
    svg: Markup
    summary: str
    slug: str = ""

    def standalone(self) -> str:
        """The chart as an SVG document of its own (what the page's ``<img>`` loads): the page's chart
        styles inside it, or the "nothing yet" sentence drawn as text."""
        if not self.svg.startswith("<svg"):
            return (
                f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 640 60" width="640" height="60">'
                f'<text x="8" y="34" font-family="system-ui, sans-serif" font-size="15" fill="#667085">'
                f"{escape(Markup(self.svg).striptags())}</text></svg>"
            )
        return str(self.svg).replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1).replace(
            ">", f">{_CHART_STYLE}", 1
        )


#: The page's chart styles (``static/app.css``) for a chart drawn as an image of its own.
_CHART_STYLE = (
    "<style>.tick, .legend, .axis { font: 11px system-ui, sans-serif; fill: #445; }</style>"
)
#: What a chart image may do: draw, with its own inline styles; nothing else.
_CHART_POLICY = "default-src 'none'; style-src 'unsafe-inline'"


@dataclass(frozen=True)
class ProblemPage:
    """Everything the problem page shows, read in one session."""

    problem: Problem
    status: ProblemStatus
    timeline: list[tuple[str, float]]
    cosignatures: list[CosignatureBundle]
    model: ModelDocument | None
    deadlines: list[Deadline] = field(default_factory=list)
    witnesses: list[WitnessRow] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)
    evaluation: ModelEvaluation | None = None


def deadlines(problem: Problem, bins: Bins | None, grace: float, roster_at: float | None,
              schedule: Schedule | None) -> list[Deadline]:
    """Every deadline of the problem's schedule known so far, in time order.

    Registration closes at the draft's deadline; the roster's witnesses cosign
    within ``roster_seconds + witness_seconds`` of the roster (when witnesses are
    declared); the bins fix the report round (signed): tokens and sending from
    ``t_s``, sending until ``t_s + δ``, the relays' releases until ``t_r``, and the
    intake's grace after it, when a report still missing counts as lost.
    """
    d = problem.draft
    if roster_at is None:
        out = [Deadline("registration closes", d.schedule.registration_deadline.timestamp(), True)]
    else:  # closed: at its deadline, or earlier when the operator closed it
        out = [Deadline("registration closed", roster_at)]
    if roster_at is not None and schedule is not None:
        first = roster_at + schedule.roster_seconds
        if d.witnesses:
            out.append(Deadline("the witnesses cosign the roster by", first + schedule.witness_seconds))
        else:
            out.append(Deadline("the first median step closes by", first + schedule.median_step_seconds))
    if bins is not None:
        out += [
            Deadline("tokens and sending open (t_s)", bins.t_s, True),
            Deadline("sending ends (t_s + δ)", bins.t_s + bins.delta, True),
            Deadline("the relays' releases end (t_r)", bins.t_r, True),
            Deadline("the intake closes: what is missing is lost", bins.t_r + grace),
        ]
    return sorted(out, key=lambda x: x.at)


def witness_rows(problem: Problem, bundles: list[CosignatureBundle], stages: list[str]) -> list[WitnessRow]:
    """Each declared witness at each stage reached so far, with its cosignature when complete."""
    signed = {(b.stage, bytes(c.witness)): bytes(c.signature).hex() for b in bundles for c in b.cosignatures}
    return [
        WitnessRow(stage, bytes(w.identity).hex(), w.url, signed.get((stage, bytes(w.identity))))
        for stage in stages
        for w in problem.draft.witnesses
    ]


def _steps(points: list[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """``(0, 0)``, then the points without repeats of the value before them (a step chart holds
    each value), and the last point always (so every chart of a page spans the same seconds)."""
    out: list[tuple[float, float]] = [(0.0, 0.0)]
    for x, y in points[:-1]:
        if out[-1][1] != y:
            out.append((x, y))
    if points:
        out.append(points[-1])
    return tuple(out)


def captions(problem: Problem, status: ProblemStatus) -> dict[str, str]:
    """Each chart's figures as one sentence, by chart slug: the page's captions, which its poller
    keeps current (:func:`live`) between the chart images' reloads."""
    account = status.reports
    summary = ", ".join(f"{r}: {n}" for r, n in sorted(status.rejects.items())) or "none"
    return {
        "registrations": f"{status.registered} registered; at least {problem.draft.min_peers} needed.",
        "median-answers": f"{status.median_answers} answers from a median pool of {status.median_pool}.",
        "reports": f"{status.reports_accepted} received"
        + (
            f" of {account.expected} expected; {account.pending} pending, {account.lost} lost."
            if account
            else "; the roster fixes how many are expected."
        ),
        "refusals": f"Refused by reason: {summary}"
        + (f"; never arrived: {account.not_arrived}." if account and account.not_arrived else "."),
    }


def charts(problem: Problem, status: ProblemStatus, history: list[Sample], now: float) -> list[Chart]:
    """Registrations, median answers, reports received against expected, and refusals by reason, over
    the seconds since the proposal: the stored samples (:mod:`aggregator.timeline`) and the status at
    ``now`` (for a finished problem: when it finished, so its charts stop there)."""
    start = problem.created_at.timestamp()
    history = [h for h in history if h.at <= now]
    current = Sample(now, Counts(status.registered, status.median_answers, status.reports_accepted,
                                 dict(status.rejects)))
    points = [*history, current]

    def series(label: str, value) -> Series:
        return Series(label, _steps([(max(0.0, p.at - start), float(value(p.counts))) for p in points]))

    x_label = "seconds since the proposal"
    account = status.reports
    said = captions(problem, status)
    out = [
        Chart(
            "Registrations",
            svg_step_chart([series("registered", lambda c: c.registered)], cap=problem.draft.min_peers,
                           cap_label="min peers", x_label=x_label, y_label="peers registered"),
            said["registrations"],
            "registrations",
        ),
        Chart(
            "Median answers",
            svg_step_chart([series("answers", lambda c: c.median_answers)],
                           cap=status.median_pool or None, cap_label="median pool",
                           x_label=x_label, y_label="answers"),
            said["median-answers"],
            "median-answers",
        ),
        Chart(
            "Reports received",
            svg_step_chart([series("received", lambda c: c.received)],
                           cap=account.expected if account else None, cap_label="expected",
                           x_label=x_label, y_label="reports"),
            said["reports"],
            "reports",
        ),
    ]
    reasons = sorted({r for p in points for r in p.counts.rejects})
    refusals = [series(r, lambda c, r=r: c.rejects.get(r, 0)) for r in reasons]
    if account is not None and account.not_arrived:
        refusals.append(Series("never arrived", ((max(0.0, now - start), float(account.not_arrived)),)))
    out.append(
        Chart(
            "Refusals and losses by reason",
            svg_step_chart(refusals, x_label=x_label, y_label="count"),
            said["refusals"],
            "refusals",
        )
    )
    return out


def charts_version(status: ProblemStatus) -> str:
    """Changes whenever a charted count does: the page's poller reloads the chart images then."""
    return (
        f"{status.phase}.{status.registered}.{status.median_answers}.{status.reports_accepted}."
        f"{sum(status.rejects.values())}"
    )


def _problem_page(state: AggregatorState, session: Session, problem_id: str) -> ProblemPage:
    row = problem_routes.get_row(session, problem_id)
    status = problem_routes.problem_status(state, session, row)
    now = time.time()
    timeline = list(status.phase_seconds.items())
    finished = row.phase in FINISHED_PHASES
    if not finished:
        timeline.append((f"{row.phase} (now)", max(0.0, now - row.phase_started)))
    bundles = [
        CosignatureBundle.model_validate_json(text)
        for text in (row.roster_cosignatures_json, row.bins_cosignatures_json)
        if text is not None
    ]
    model_json = read_document(session, row.id, "model")
    document = ModelDocument.model_validate_json(model_json) if model_json is not None else None
    problem = Problem.model_validate_json(row.problem_json)
    ctx = state.require_context(row.id, session)
    # The roster came out when registration ended: the proposal's time plus registration's length.
    registration = status.phase_seconds.get(ProblemPhase.REGISTRATION)
    roster_at = (
        None if ctx.roster is None or registration is None else problem.created_at.timestamp() + registration
    )
    stages = [stage for stage, out in (("roster", ctx.roster), ("bins", ctx.bins)) if out is not None]
    return ProblemPage(
        problem,
        status,
        timeline,
        bundles,
        document,
        deadlines(problem, ctx.bins, state.settings.intake_grace_seconds, roster_at, status.schedule),
        witness_rows(problem, bundles, stages),
        charts(problem, status, samples(session, row.id), row.phase_started if finished else now),
        model_routes.latest_evaluation(session, row.id),
    )


def _statuses(state: AggregatorState, db: Session) -> list[ProblemStatus]:
    rows = db.scalars(select(ProblemRow).order_by(ProblemRow.created_at.desc())).all()
    return [problem_routes.problem_status(state, db, row) for row in rows]


def list_row(status: ProblemStatus) -> dict[str, str | int]:
    """One problem's row of the problems list, as the page prints it and its poller rewrites it."""
    account = status.reports
    return {
        "phase": status.phase,
        "registered": status.registered,
        "roster": status.roster_size,
        "reports": f"{account.received} / {account.expected}" if account is not None else "—",
        "pending": account.pending if account is not None else "—",
        "lost": account.lost if account is not None else "—",
        "model": "yes" if status.model_available else "—",
    }


@router.get("/")
def problems(request: Request, session: PageSession, state: StateDep, db: SessionDep) -> HTMLResponse:
    """Every problem, newest first, with its phase and counts (kept current by the page's poller)."""
    statuses = _statuses(state, db)
    return PAGES.render(request, "problems.html", session, statuses=statuses,
                        rows={s.id: list_row(s) for s in statuses})


@router.get("/api/problems")
def live_list(session: PageSession, state: StateDep, db: SessionDep, count: int = -1) -> dict:
    """The problems list's rows for its poller; a new problem (``count`` differs) reloads the page."""
    statuses = _statuses(state, db)
    return {"items": {s.id: list_row(s) for s in statuses}, "reload": count >= 0 and count != len(statuses)}


@router.get("/problems/{problem_id}")
def problem(
    problem_id: str, request: Request, session: PageSession, state: StateDep, db: SessionDep
) -> HTMLResponse:
    """One problem: timeline, registrations, refusals, report account, witnesses, model."""
    page = _problem_page(state, db, problem_id)
    return PAGES.render(
        request, "problem.html", session, page=page, chart=svg_timeline(page.timeline),
        notice=_DONE.get(request.query_params.get("done", ""), ""), now=time.time(),
        charts_version=charts_version(page.status),
        sentence=epsilon_sentence(page.problem.draft.epsilon),
    )


@router.get("/problems/{problem_id}/charts/{name}.svg")
def chart_image(
    problem_id: str, name: str, session: PageSession, state: StateDep, db: SessionDep
) -> Response:
    """One chart of the problem page as an SVG image (the page's ``<img>``, reloaded as counts change)."""
    page = _problem_page(state, db, problem_id)
    found = next((c for c in page.charts if c.slug == name), None)
    if found is None:
        raise HTTPException(status_code=404, detail=f"no chart {name[:40]!r}")
    headers = {**SECURITY_HEADERS, "Content-Security-Policy": _CHART_POLICY}
    return Response(found.standalone(), media_type="image/svg+xml", headers=headers)


#: What the problem page says after each action succeeded (named in the redirect's query, so the
#: page's own reloads on a phase change keep it; a refusal is flashed instead: its text is not fixed).
_DONE = {
    "proposed": "Published: peers see it at their next poll.",
    "close": "Registration closes: the roster is published at the next tick.",
    "train": "Training requested: the report round closes now and the model is trained.",
    "evaluate": "Scored: the model's held-out quality on your rows is below (the rows were not kept).",
}


@router.get("/api/problems/{problem_id}")
def live(problem_id: str, session: PageSession, state: StateDep, db: SessionDep, phase: str = "") -> dict:
    """The problem's counts for the page's poller; reload when the phase is not the one shown."""
    row = problem_routes.get_row(db, problem_id)
    status = problem_routes.problem_status(state, db, row)
    ctx = state.context(problem_id, db)  # the parsed problem, cached: this answers every second
    account = status.reports
    return {
        "items": {
            "counts": {
                "phase": status.phase,
                "registered": status.registered,
                "tokens": status.tokens_issued,
                "received": status.reports_accepted,
                "expected": account.expected if account is not None else "—",
                "pending": account.pending if account is not None else "—",
                "lost": account.lost if account is not None else "—",
                # The median account (issue 26): expected / received / missing, and why.
                "median_expected": status.medians.expected if status.medians is not None else "—",
                "median_received": status.median_answers,
                "median_missing": status.medians.missing if status.medians is not None else "—",
                "median_shortfall": status.medians.describe()
                if status.medians is not None and status.medians.missing
                else "",
            },
            "captions": {} if ctx is None else captions(ctx.problem, status),
        },
        "reload": status.phase != phase,
        "charts": charts_version(status),
    }


def _propose_page(
    request: Request, session: WebSession, check: ProposeCheck, text: str, errors: list[str],
    status_code: int = 200, raw_open: bool = False,
) -> HTMLResponse:
    return PAGES.render(
        request, "propose.html", session, status_code, check=check, text=text, errors=errors,
        raw_open=raw_open, instancers=installed("instancer"), featurizers=installed("featurizer"),
    )


@router.get("/propose")
def propose_form(request: Request, session: PageSession) -> HTMLResponse:
    """The form filled from :func:`sample_draft`, its ε sentence, and the same draft as JSON."""
    draft = sample_draft()
    check = check_form(form_of_draft(draft))
    return _propose_page(request, session, check, draft.model_dump_json(indent=2), [])


def _validation_errors(exc: ValidationError) -> list[str]:
    return [
        f"{'.'.join(map(str, e['loc'])) or '(draft)'}: {e['msg']}" for e in exc.errors(include_url=False)
    ][:20]


@router.post("/api/propose/check")
async def check_proposal(request: Request) -> dict:
    """The form's fields checked as the operator types (nothing is published): errors by field,
    the ε sentence and the draft's JSON (:func:`aggregator.console_form.check_form`)."""
    _, form = await AUTH.posted(request)
    return check_form(form).to_json()


@router.post("/propose")
async def propose(request: Request) -> Any:
    """Validate the draft — the form's fields, or the raw JSON — and publish it with ``POST /problems``.

    The form's *Check* button only validates (the page comes back with the
    errors beside their fields, the ε sentence and the JSON); *Publish* publishes
    a valid draft.
    """
    session, form = await AUTH.posted(request)
    if "draft" in form:  # the raw JSON box
        text = form.get("draft", "")
        check = check_form(form_of_draft(sample_draft()))
        try:
            draft = ProblemDraft.model_validate_json(text)
        except ValidationError as exc:
            return _propose_page(request, session, check, text, _validation_errors(exc), 422, raw_open=True)
    else:
        check = check_form(form)
        text = check.text or sample_draft().model_dump_json(indent=2)
        if check.draft is None:
            return _propose_page(request, session, check, text, [], 422)
        if form.get("action") == "check":
            return _propose_page(request, session, check, text, [])
        draft = check.draft
    state: AggregatorState = request.app.state.aggregator

    def publish() -> Problem:
        with state.sessions() as db:
            return problem_routes.propose(draft, state, db, None)

    try:
        published = await run_in_threadpool(publish)
    except HTTPException as exc:
        return _propose_page(request, session, check, text, [str(exc.detail)], exc.status_code,
                             raw_open="draft" in form)
    return RedirectResponse(f"/console/problems/{published.id}?done=proposed", status_code=303)


async def _act(
    request: Request,
    session: WebSession,
    problem_id: str,
    action: str,
    call: Callable[[Session], object],
    anchor: str = "",
) -> RedirectResponse:
    """Run an admin route's ``call`` in a session of its own and redirect to the problem's page
    (POST/redirect/GET) with ``done=action``, or with the refusal flashed: reloading never acts again."""
    state: AggregatorState = request.app.state.aggregator

    def run() -> str:
        """The refusal's reason, or "" when the action was taken."""
        with state.sessions() as db:
            try:
                call(db)
            except HTTPException as exc:
                if exc.status_code == 404:
                    raise
                db.rollback()
                return str(exc.detail)
        return ""

    refused = await run_in_threadpool(run)
    page = f"/console/problems/{quote(problem_id)}"
    if refused:
        AUTH.flash(request, session, "error", refused)
        return RedirectResponse(f"{page}{anchor}", status_code=303)
    return RedirectResponse(f"{page}?done={action}{anchor}", status_code=303)


@router.post("/problems/{problem_id}/evaluate")
async def evaluate(problem_id: str, request: Request) -> Any:
    """Score the model on the labelled rows pasted in the form (as ``POST /problems/{id}/evaluation``,
    :func:`~aggregator.routes.model.evaluate_model`)."""
    state: AggregatorState = request.app.state.aggregator
    session, form = await AUTH.posted(request, limit=state.settings.max_body_bytes)
    rows, label, name = form.get("rows", ""), form.get("label", "").strip() or "label", form.get("name", "")

    def score(db: Session) -> object:
        return model_routes.evaluate_model(state, db, problem_id, rows, label=label, name=name.strip())

    return await _act(request, session, problem_id, "evaluate", score, "#evaluation")


@router.post("/problems/{problem_id}/{action}")
async def act(problem_id: str, action: str, request: Request) -> Any:
    """Close registration or train now (the admin routes themselves; CSRF checked first)."""
    session, _ = await AUTH.posted(request)
    actions = {"close": registration_routes.close_registration, "train": model_routes.train}
    if action not in actions:
        raise HTTPException(status_code=404, detail=f"no action {action[:20]!r} (close or train)")
    state: AggregatorState = request.app.state.aggregator
    return await _act(
        request, session, problem_id, action, lambda db: actions[action](problem_id, state, db, None)
    )
