"""``/ui``: the peer's local dashboard, for the person running it (the local token to log in).

Pages: my data (sources, import a file or folder), proposals (what would leave
the machine, the policy's verdict, accept / decline, live participation
status), what I shared (the privacy ledger and its chart), models (metrics and
a local prediction). Views come from :mod:`peer.dashboard`; login, CSRF and
rendering from :mod:`anonml.web`. Served by the same app as the relay, which
``anonml peer start`` binds to 127.0.0.1 unless told otherwise; whatever the
relay listens on, the pages answer only clients on this machine (a loopback
address), so the relay may face the network while the dashboard never does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from anonml.errors import AnonMLError
from anonml.importing import ImportOptions
from anonml.plugins import iter_classes
from anonml.text import strip_controls
from anonml.web import Pages, WebAuth, WebSession
from peer.dashboard import (
    ledger_view,
    model_views,
    participations,
    proposal_cards,
    sources_view,
)
from peer.deps import loopback_only
from peer.host import PeerHost
from peer.import_jobs import ImportJobs
from peer.participant import PeerNode
from peer.records import decide_by_hand

__all__ = ["router", "AUTH", "PAGES"]

AUTH = WebAuth(
    prefix="/ui",
    cookie="anonml_peer",
    token_of=lambda request: request.app.state.local_token,
    what="local token",
)
PAGES = Pages(
    Path(__file__).resolve().parents[1] / "templates",
    AUTH,
    "AnonML peer",
    [("/", "My data"), ("/proposals", "Proposals"), ("/shared", "What I shared"), ("/models", "Models")],
)




router = APIRouter(prefix="/ui", include_in_schema=False, dependencies=[Depends(loopback_only)])
router.include_router(PAGES.router())


def _host(request: Request) -> PeerHost:
    return request.app.state.host


def _node(request: Request) -> PeerNode:
    """The person's one identity (a simulation host of many has no dashboard: 409)."""
    try:
        return _host(request).sole_node()
    except AnonMLError as exc:
        raise HTTPException(status_code=409, detail=f"no dashboard here: {exc}") from None


def _jobs(request: Request) -> ImportJobs:
    jobs = getattr(request.app.state, "import_jobs", None)
    if jobs is None:
        jobs = request.app.state.import_jobs = ImportJobs()
    return jobs


PageSession = Annotated[WebSession, Depends(AUTH.require)]
Host = Annotated[PeerHost, Depends(_host)]
Node = Annotated[PeerNode, Depends(_node)]


def _importers() -> list[str]:
    return sorted(cls.name for cls in iter_classes("importer"))


def _data_page(
    request: Request, session: WebSession, node: PeerNode, status_code: int = 200, **extra: Any
) -> HTMLResponse:
    jobs = _jobs(request)
    wanted = request.query_params.get("job")
    job = jobs.get(wanted) if wanted else jobs.latest()  # a copy, read before the store below
    context: dict[str, Any] = {"error": "", "form_paths": "", "form_importer": "", "form_skip_bad": False}
    context.update(extra)
    return PAGES.render(
        request, "data.html", session, status_code,
        view=sources_view(node), job=job, importers=_importers(), **context,
    )


@router.get("/")
def data(request: Request, session: PageSession, node: Node) -> HTMLResponse:
    """My data: events per source and type, date ranges, the latest imports, the import form."""
    return _data_page(request, session, node)


@router.post("/import")
async def start_import(request: Request) -> Any:
    """Import the named files or folders (one per line) as ``anonml import`` does, in a thread."""
    session, form = await AUTH.posted(request)
    node = _node(request)
    paths = [Path(line.strip()).expanduser() for line in form.get("paths", "").splitlines() if line.strip()]
    importer = form.get("importer", "").strip() or None
    try:
        options = ImportOptions(importer=importer, user=node.user, skip_bad=form.get("skip_bad") == "on")
        job = _jobs(request).start(node.store, paths, options)
    except AnonMLError as exc:
        return _data_page(
            request, session, node, 400, error=str(exc), form_paths=form.get("paths", ""),
            form_importer=importer or "", form_skip_bad=form.get("skip_bad") == "on",
        )
    return RedirectResponse(f"/ui/?job={job.id}", status_code=303)


@router.get("/api/imports/{job_id}")
def import_progress(job_id: str, request: Request, session: PageSession) -> dict[str, Any]:
    """An import's progress for the page's poller (reload when it ended)."""
    job = _jobs(request).get(job_id)
    if job is None:
        raise HTTPException(status_code=404, detail=f"no import {job_id[:20]!r}")
    return {
        "items": {job.id: {"state": job.state, "progress": job.progress_text()}},
        "reload": job.state != "running",
    }


@router.get("/proposals")
def proposals(request: Request, session: PageSession, host: Host, node: Node) -> HTMLResponse:
    """Proposals with what would leave the machine, the verdict and why; live participation status."""
    return PAGES.render(
        request, "proposals.html", session,
        cards=proposal_cards(host, node), live=participations(host, node), policy=host.policy,
        notice=_notice(request),
    )


def _notice(request: Request) -> str:
    """What the page says after a decision (named in the redirect's query; a refusal is flashed)."""
    done, pid = request.query_params.get("done", ""), request.query_params.get("problem", "")
    texts = {
        "accepted": f"Accepted {pid}: this peer joins at its next poll.",
        "declined": f"Declined {pid}: nothing will be sent for it.",
    }
    return texts.get(done, "")


@router.post("/proposals/{problem_id}/{action}")
async def decide(problem_id: str, action: str, request: Request) -> Any:
    """Accept or decline a proposal (same rules as ``anonml peer accept``); CSRF checked first.

    Whatever the outcome, the answer is a redirect to the proposals page (POST/redirect/GET), the
    outcome flashed there, so reloading that page never decides again.
    """
    session, _ = await AUTH.posted(request)
    if action not in ("accept", "decline"):
        raise HTTPException(status_code=404, detail=f"no action {action[:20]!r} (accept or decline)")
    host, node = _host(request), _node(request)
    try:
        decide_by_hand(host.db, node.ledger, host.policy, node.fingerprint, problem_id,
                       accept=action == "accept")
    except AnonMLError as exc:
        AUTH.flash(request, session, "error", str(exc))
        return RedirectResponse("/ui/proposals", status_code=303)
    done = "accepted" if action == "accept" else "declined"
    return RedirectResponse(f"/ui/proposals?done={done}&problem={quote(problem_id)}", status_code=303)


@router.get("/api/participations")
def live_status(session: PageSession, host: Host, node: Node) -> dict[str, Any]:
    """Each participation's status, for the proposals page's poller (the aggregator's reason made inert,
    as on the page: the poller writes it as text)."""
    return {
        "items": {
            p.problem_id: {"status": p.status, "meaning": p.meaning, "reason": strip_controls(p.reason)}
            for p in participations(host, node)
        },
        "reload": False,
    }


@router.get("/shared")
def shared(request: Request, session: PageSession, host: Host, node: Node) -> HTMLResponse:
    """What I shared: the ledger's releases, per-problem spend (local and shuffled), the ε chart."""
    return PAGES.render(request, "shared.html", session, ledger=ledger_view(host, node))


@router.get("/models")
def models(request: Request, session: PageSession, host: Host, node: Node) -> HTMLResponse:
    """Downloaded models, their metrics, and a prediction on my own data (computed here)."""
    views = model_views(host, node, host.policy.offered_sources)
    return PAGES.render(request, "models.html", session, models=views)
