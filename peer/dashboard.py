"""What the peer's dashboard shows, computed from the same state the CLI reads.

Each function here turns the host's records (its :class:`~peer.db.PeerDB`,
the identity's event store and privacy ledger) into a small view for one page
of :mod:`peer.routes.dashboard`; the decisions and figures come from the
functions ``anonml peer …`` uses (:func:`~peer.policy.evaluate_problem`,
:func:`~peer.records.committed_epsilon`, :func:`~peer.records.release_marks`,
:func:`~peer.features.predict_locally`, :func:`anonml.importing.import_paths`),
so the page and the CLI never disagree.

Imports started from the page run in a thread of the daemon
(:class:`peer.import_jobs.ImportJobs`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import datetime

from markupsafe import Markup
from sqlalchemy import func, select

from anonml.errors import AnonMLError
from anonml.plugins import create
from anonml.privacy import PrivacyLedger
from anonml.privacy.amplification import ASSUMPTIONS, ShuffleBound
from anonml.privacy.budget import Release
from anonml.protocol import LabelSpec, ModelDocument, Problem, ReportAccount
from anonml.store import EventRow, EventStore, ImportRecord, ImportRow, SourceSummary
from anonml.web import Series, epsilon_sentence, svg_step_chart
from peer.db import PeerDB
from peer.features import LocalPrediction, predict_locally
from peer.host import PeerHost
from peer.narration import STATUS_TEXT
from peer.participant import PeerNode
from peer.phases import ParticipationPhase
from peer.records import ProposalVerdict, proposal_verdicts, release_marks, shuffle_bounds

__all__ = [
    "SourceRow",
    "SourcesView",
    "sources_view",
    "ProposalCard",
    "proposal_cards",
    "label_domain",
    "label_words",
    "instancer_params",
    "PredictionText",
    "prediction_text",
    "ParticipationView",
    "participations",
    "LedgerView",
    "ledger_view",
    "ModelView",
    "model_views",
]


# -- my data ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceRow:
    """One source of events: how many, of which types, over which dates, and when it was last imported."""

    source: str
    events: int
    types: tuple[str, ...]
    first: datetime | None
    last: datetime | None
    last_import: datetime | None


@dataclass(frozen=True)
class SourcesView:
    """This peer's user's sources and the latest imports."""

    user: str | None
    sources: list[SourceRow]
    imports: list[ImportRecord]
    total: int


def _last_imports(store: EventStore, user: str | None) -> dict[str, datetime]:
    """Per source, when the latest import that brought some of its events started."""
    stmt = (
        select(EventRow.source, func.max(ImportRow.started_at))
        .join(ImportRow, ImportRow.id == EventRow.import_id)
        .group_by(EventRow.source)
    )
    if user is not None:
        stmt = stmt.where(EventRow.user_id == user)
    with store.session() as s:
        return {source: when for source, when in s.execute(stmt)}


def sources_view(node: PeerNode, last: int = 8) -> SourcesView:
    """Per source: events, types, date range (:meth:`EventStore.summary`) and the last import."""
    by_source: dict[str, list[SourceSummary]] = {}
    for summary in node.store.summary(user=node.user):
        by_source.setdefault(summary.source, []).append(summary)
    latest = _last_imports(node.store, node.user)
    rows = [
        SourceRow(
            source,
            sum(p.count for p in parts),
            tuple(p.type for p in parts),
            min((p.first for p in parts if p.first is not None), default=None),
            max((p.last for p in parts if p.last is not None), default=None),
            latest.get(source),
        )
        for source, parts in by_source.items()
    ]
    imports = [r for r in node.store.imports() if node.user is None or r.user == node.user]
    return SourcesView(node.user, rows, imports[-last:][::-1], sum(r.events for r in rows))


# -- proposals ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProposalCard(ProposalVerdict):
    """A proposal (:class:`~peer.records.ProposalVerdict`: the verdict and why, whether accepting by
    hand would be recorded) with what exactly would leave the machine, as its card shows it.

    ``label`` is the label's kind and public domain as the draft declares it
    (:class:`~anonml.protocol.LabelSpec`).
    """

    features: list[tuple[str, str, str]]  # name, kind, public range or categories
    label: tuple[str, str]  # kind, public domain
    median_epsilon: float | None
    anonymity_set: int
    epsilon_text: str
    witnesses: list[str]


def proposal_cards(host: PeerHost, node: PeerNode) -> list[ProposalCard]:
    """Every proposal seen, newest first, as ``anonml peer proposals`` evaluates it
    (:func:`peer.records.proposal_verdicts`), with what the card shows of it."""
    cards = []
    for seen in proposal_verdicts(host.db, node.ledger, node.fingerprint, host.policy):
        d = seen.problem.draft
        features = []
        for spec in d.features:
            if spec.kind.value == "numeric":
                shown = f"[{spec.low:g}, {spec.high:g}], {d.bins} bins"
            elif spec.kind.value == "categorical":
                shown = ", ".join(spec.categories)
            else:
                shown = "0 / 1"
            features.append((spec.name, spec.kind.value, shown))
        median = d.median_epsilon if d.median.pool_fraction > 0 and d.numeric_features else None
        pool = d.median_pool_size(d.min_peers)
        cards.append(
            ProposalCard(
                **{f.name: getattr(seen, f.name) for f in fields(seen)},
                features=features,
                label=label_domain(d.label),
                median_epsilon=median,
                anonymity_set=d.report_pool_size(d.min_peers, pool) // d.kp,
                epsilon_text=epsilon_sentence(d.epsilon),
                witnesses=[bytes(w.identity).hex()[:16] + "…" for w in d.witnesses],
            )
        )
    return cards


def label_domain(label: LabelSpec) -> tuple[str, str]:
    """A label's kind and what it may be, as a proposal card's label row shows them."""
    if label.kind == "classes":
        return "classes", ", ".join(label.classes)
    if label.kind == "numeric":
        return "numeric", f"[{label.low:g}, {label.high:g}], {label.bins} bins"
    return "bool", "0 / 1"


@dataclass(frozen=True)
class ParticipationView:
    """One participation's status for the live table."""

    problem_id: str
    title: str
    status: str
    meaning: str
    reason: str


#: What the live table says of a problem accepted here whose round has not started yet.
ACCEPTED_TEXT = "this peer accepted this problem and registers for it at its next poll"


def participations(host: PeerHost, node: PeerNode) -> list[ParticipationView]:
    """The live table: every problem this peer accepted, one row each, from the moment it is accepted.

    A problem accepted on the page has no participation yet until the daemon's next poll
    joins it; it is listed as ``accepted`` (the first phase of :mod:`peer.phases`) all the
    same, so the table's rows change only when the person decides, never while a round
    runs, and the page's poller updates each row in place instead of reloading the page
    for a row that appeared between two polls.
    """
    out = []
    for view in host.db.proposals(node.fingerprint):
        if view.status is None and view.verdict != "accept":
            continue
        status = view.status or ParticipationPhase.ACCEPTED.value
        part = host.db.participation(view.problem_id, node.fingerprint) if view.status else None
        if status in STATUS_TEXT:
            meaning = f"this peer {STATUS_TEXT[status]} this problem"
        else:
            meaning = ACCEPTED_TEXT if status == ParticipationPhase.ACCEPTED else status
        out.append(
            ParticipationView(
                view.problem_id,
                Problem.model_validate_json(view.problem_json).draft.title,
                status,
                meaning,
                part.reason if part is not None else "",
            )
        )
    return out


# -- what I shared ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProblemSpend:
    """ε this peer spent in one problem, locally, and (when its roster is known) amplified by shuffling."""

    problem: str
    title: str
    local: float
    releases: int
    mark: str
    shuffle: ShuffleBound | None
    shuffle_note: str


@dataclass(frozen=True)
class LedgerView:
    releases: list[tuple[Release, str]]  # each release with its problem's mark
    problems: list[ProblemSpend]
    lifetime_total: float
    lifetime_cap: float | None
    chart: Markup
    assumptions: str = ASSUMPTIONS


def _titles(db: PeerDB) -> Callable[[str], str]:
    def title(problem_id: str) -> str:
        row = db.proposal(problem_id)
        return Problem.model_validate_json(row.problem_json).draft.title if row is not None else ""

    return title


def ledger_view(host: PeerHost, node: PeerNode, ledger: PrivacyLedger | None = None) -> LedgerView:
    """Releases, per-problem spend and the cumulative-ε chart against the lifetime cap."""
    ledger = ledger or node.ledger
    releases = sorted(ledger.releases(peer=node.fingerprint), key=lambda r: (r.recorded_at, r.id))
    marks = release_marks(host.db, node.fingerprint)
    title = _titles(host.db)
    by_problem: dict[str, list[Release]] = {}
    for r in releases:
        by_problem.setdefault(r.problem, []).append(r)
    spends = []
    bounds = shuffle_bounds(host.db, node.fingerprint, releases)
    for pid, rs in by_problem.items():
        bound, note = bounds[pid]
        spends.append(
            ProblemSpend(pid, title(pid), ledger.budget(node.fingerprint, pid).total, len(rs),
                         marks.get(pid, ""), bound, note)
        )
    cap = ledger.lifetime_cap(node.fingerprint)
    chart = svg_step_chart(
        _cumulative(releases), cap=cap, cap_label=f"lifetime cap {cap:g}" if cap is not None else "",
        x_label="minutes since the first release", y_label="cumulative ε (local)",
    )
    return LedgerView(
        [(r, marks.get(r.problem, "")) for r in releases],
        spends,
        sum(s.local for s in spends),
        cap,
        chart,
    )


def _cumulative(releases: list[Release]) -> list[Series]:
    """The lifetime total and each problem's running total, over minutes since the first release."""
    if not releases:
        return []
    start: datetime = releases[0].recorded_at
    total, per = 0.0, {}
    lines: dict[str, list[tuple[float, float]]] = {"all problems": []}
    for r in releases:
        minutes = (r.recorded_at - start).total_seconds() / 60
        total += r.epsilon
        per[r.problem] = per.get(r.problem, 0.0) + r.epsilon
        lines["all problems"].append((minutes, total))
        lines.setdefault(r.problem, []).append((minutes, per[r.problem]))
    if len(lines) == 2:  # one problem: its line is the total's
        lines.popitem()
    return [Series(name, tuple(points)) for name, points in lines.items()]


# -- models ------------------------------------------------------------------------------


def label_words(label: LabelSpec, instancer_params: dict | None = None) -> tuple[str, ...]:
    """What each class index of ``label`` means, in the label's own words (index order).

    Classes: their names. Numeric: the public bin of equal width over ``[low, high]``
    (:class:`~anonml.protocol.LabelSpec`), ``"[low_k, high_k)"`` with the last bin closed.
    Binary: "no (0)" / "yes (1)", after the instancer's own name of the label when its
    parameters give one (``user_window``'s ``label="inactive"``: "inactive: yes (1)").
    """
    if label.kind == "classes":
        return label.classes
    if label.kind == "numeric":
        low, high, bins = label.numeric_range()
        width = (high - low) / bins
        edges = [low + k * width for k in range(bins)] + [high]
        return tuple(
            f"[{edges[k]:.4g}, {edges[k + 1]:.4g}{']' if k == bins - 1 else ')'}" for k in range(bins)
        )
    name = (instancer_params or {}).get("label")
    prefix = f"{name}: " if isinstance(name, str) and name else ""
    return (f"{prefix}no (0)", f"{prefix}yes (1)")


def instancer_params(problem: Problem) -> dict:
    """The problem's instancer parameters with the installed plugin's defaults filled in (so a
    binary label is named even when the draft keeps the default), else as the draft gives them."""
    ref = problem.draft.instancer
    try:
        params = create("instancer", ref).params
    except Exception:  # not installed here, or refused: the draft's own words
        return dict(ref.params)
    return params.model_dump() if hasattr(params, "model_dump") else dict(ref.params)


@dataclass(frozen=True)
class PredictionText:
    """A local prediction said in the label's words: the answer and every class with its P̂(k | x)."""

    headline: str
    answer: str
    rows: tuple[tuple[str, float], ...]
    chosen: int


def prediction_text(problem: Problem, prediction: LocalPrediction) -> PredictionText:
    """The most likely class in :func:`label_words` (a numeric label: also the predicted value,
    ``Σ_k P̂(bin k | x)·c_k`` over the bin midpoints), and the table of every class's probability."""
    spec = problem.draft.label
    words = label_words(spec, instancer_params(problem))
    rows = tuple(zip(words, prediction.probabilities, strict=False))
    chosen = prediction.label
    if spec.kind == "numeric":
        headline = (
            f"predicted value {float(prediction.answer):.4g}, most likely in {words[chosen]} "
            f"(P = {prediction.probability:.3f})"
        )
    else:
        p = prediction.probabilities[chosen] if prediction.probabilities else prediction.probability
        headline = f"most likely {words[chosen]} (P = {p:.3f})"
    return PredictionText(headline, words[chosen], rows, chosen)


@dataclass(frozen=True)
class ModelView:
    """A downloaded model: its metrics and report account, and my prediction (or why there is none)."""

    problem: Problem
    status: str
    created_at: datetime
    metrics: dict[str, float]
    reports: ReportAccount | None
    prediction: LocalPrediction | None
    why_not: str
    said: PredictionText | None = None


def model_views(host: PeerHost, node: PeerNode, sources: list[str] | None) -> list[ModelView]:
    """Every model this identity downloaded (signature checked), with a fresh local prediction."""
    out = []
    for view in host.db.proposals(node.fingerprint):
        part = host.db.participation(view.problem_id, node.fingerprint)
        if part is None or part.model_json is None:
            continue
        problem = Problem.model_validate_json(view.problem_json)
        document = ModelDocument.model_validate_json(part.model_json)
        prediction, why = None, ""
        try:
            prediction = predict_locally(problem, document, node.store, node.user, sources=sources)
        except AnonMLError as exc:
            why = str(exc)
        said = None if prediction is None else prediction_text(problem, prediction)
        out.append(
            ModelView(problem, part.phase, document.created_at, dict(document.metrics), document.reports,
                      prediction, why, said)
        )
    return out
