"""The anonymous intake: final-hop deliveries of token-bearing reports (``POST /intake[/batch]``).

Each delivery is opened with the intake key and checked in order — its shape and version, the
report's parse, problem and round, the plan and the mechanism's support, the token's slot, then
the token spent and the report stored in one transaction — each refusal counted under its reason;
a cover payload and a copy of a stored report are answered exactly as a stored report is. A batch
answers each item as its own request would. The checks in full: docs/protocol.md, "Intake".
uvicorn runs with ``access_log=False`` so relay addresses are not logged either.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Sequence

from fastapi import APIRouter, HTTPException
from pydantic import ValidationError
from sqlalchemy import delete, select, tuple_
from sqlalchemy.orm import Session

from aggregator.db import ProblemRow, StagedReportRow, new_report_id
from aggregator.deps import SessionDep, StateDep
from aggregator.state import DROPPED_COVER, DUPLICATE_COPY, AggregatorState, ProblemContext
from aggregator.state import Refusal as _Refusal
from anonml.crypto import (
    InvalidPacket,
    InvalidToken,
    Redemption,
    TokenSpent,
    UnsupportedVersion,
    open_payload,
)
from anonml.crypto.spent import SpentTokenRow, insert_many_once
from anonml.phases import AFTER_ROUND_PHASES, ProblemPhase
from anonml.protocol import (
    BatchResults,
    IntakeBatch,
    IntakeDelivery,
    IntakeReceipt,
    ItemResult,
    PrivateReport,
    ReportReceipts,
    report_slot,
)

__all__ = ["router", "check_report", "receipts", "intake_batch"]

router = APIRouter(tags=["intake"])


def _stage_many(session: Session, items: list[tuple[bytes, Redemption, PrivateReport]]) -> list[bytes | None]:
    """Insert the staged (token, report) rows of ``(key id, redemption, report)`` items; per item its
    row id, or None if its token was used already — before, or earlier among ``items``.

    Staged tokens are refused by the staging table's unique (key, slot, nonce)
    constraint (one multi-row ``INSERT … ON CONFLICT DO NOTHING``); settled ones
    (after the round, which the phase check refuses anyway) by one read of
    ``spent_tokens``; repeats within ``items`` here, the first one kept.
    """
    tokens = [(key_id, r.slot, r.nonce) for key_id, r, _ in items]
    columns = (SpentTokenRow.key_id, SpentTokenRow.slot, SpentTokenRow.nonce)
    settled = {
        tuple(row) for row in session.execute(select(*columns).where(tuple_(*columns).in_(set(tokens))))
    }
    fresh: dict[tuple[bytes, bytes, bytes], int] = {}
    for i, token in enumerate(tokens):
        if token not in settled and token not in fresh:
            fresh[token] = i
    rows = [
        {
            "id": new_report_id(),
            "problem_id": items[i][2].problem_id,
            "key_id": key_id,
            "slot": slot,
            "nonce": nonce,
            "partition": items[i][2].partition,
            "subset": items[i][2].subset,
            "mechanism_json": items[i][2].mechanism.model_dump_json(),
            "bits": bytes(items[i][2].bits),
        }
        for (key_id, slot, nonce), i in fresh.items()
    ]
    ids: list[bytes | None] = [None] * len(items)
    for row, stored in zip(rows, insert_many_once(session, StagedReportRow, rows), strict=True):
        if stored:
            ids[fresh[(row["key_id"], row["slot"], row["nonce"])]] = row["id"]
    return ids


def check_report(ctx: ProblemContext, report: PrivateReport) -> None:
    """Raise ValueError naming the first way ``report`` does not fit the problem's plan."""
    # NumPy's modules: loaded by the first report checked, not by the service's start (issue 31).
    from anonml.learn.histograms import domain_size
    from anonml.privacy.support import check_support

    draft = ctx.problem.draft
    plan = ctx.require_plan()
    if not report.partition < draft.kp:
        raise ValueError(f"partition {report.partition} out of range 0..{draft.kp - 1}")
    if not report.subset < draft.kh:
        raise ValueError(f"subset {report.subset} out of range 0..{draft.kh - 1}")
    binning = ctx.binning
    features = plan.subsets[report.partition][report.subset]
    m = domain_size([binning.n_bins[f] for f in features], draft.label.k)
    if report.mechanism.m != m:
        raise ValueError(f"mechanism domain {report.mechanism.m} differs from the subset's {m} cells")
    if not math.isclose(report.mechanism.epsilon, draft.report_epsilon, rel_tol=1e-9):
        raise ValueError(
            f"mechanism ε={report.mechanism.epsilon} differs from the per-report ε={draft.report_epsilon}"
        )
    bits = report.bit_vector()  # length and padding
    try:
        check_support(report.mechanism, bits)
    except ValueError as exc:
        raise _OutOfSupport(str(exc)) from None


@router.post("/intake", status_code=201, response_model=IntakeReceipt)
def intake(body: IntakeDelivery, state: StateDep, session: SessionDep) -> IntakeReceipt:
    """Open the sealed payload; drop cover (counted); redeem the token and store the report, atomically."""
    try:
        with session.begin():  # reads only: refusals here hold no write lock
            redemption, report, raw, ctx = _checked(body, state, session, _problems_of(session, [body]))
    except _Cover as cover:
        with session.begin():
            state.count_refusal(session, cover.problem_id, DROPPED_COVER)
        return IntakeReceipt(accepted=True)
    except _Refusal as refusal:
        raise refusal.counted(state) from None
    pid = report.problem_id
    try:
        # MAC first (403 if it fails), then the spend: the staged row's insert against
        # the unique (key, slot, nonce) constraint, which holds the report too.
        ctx.verifier.check(redemption, raw)
        with session.begin():
            # Spend first: on SQLite that takes the write lock, so the phase read next
            # is current and the end of the round (which flips the phase and settles the
            # staged rows in its own write) cannot miss a row committed here;
            # elsewhere FOR SHARE orders us against it.
            if _stage_many(session, [(ctx.token_key.key_id, redemption, report)]) == [None]:
                raise TokenSpent("token already redeemed")
            closed = _closed(session, pid)
            if closed is not None:
                raise closed
    except TokenSpent:  # a verified copy: counted, answered as stored (docs/protocol.md, "Intake")
        _duplicate(pid).counted(state)
        return IntakeReceipt(accepted=True)
    except InvalidToken as exc:
        raise _bad_token(pid, exc).counted(state) from None
    except _Refusal as refusal:
        raise refusal.counted(state) from None
    return IntakeReceipt(accepted=True)


@router.post("/intake/batch", response_model=BatchResults)
def intake_batch(body: IntakeBatch, state: StateDep, session: SessionDep) -> BatchResults:
    """Check and store many deliveries, each on its own; one transaction for all (docs/protocol.md)."""
    results: list[ItemResult] = [_STORED] * len(body.deliveries)
    refused: list[_Refusal] = []
    passed: list[tuple[int, Redemption, PrivateReport, ProblemContext]] = []

    def refuse(index: int, refusal: _Refusal) -> None:
        results[index] = ItemResult(status=refusal.status, detail=refusal.detail)
        refused.append(refusal)

    covers: list[str] = []
    with session.begin():  # reads and the MAC checks: no write lock held meanwhile
        problems = _problems_of(session, body.deliveries)
        for i, delivery in enumerate(body.deliveries):
            try:
                redemption, report, raw, ctx = _checked(delivery, state, session, problems)
                ctx.verifier.check(redemption, raw)
            except _Cover as cover:  # answered as stored (_STORED), counted below
                covers.append(cover.problem_id)
                continue
            except _Refusal as refusal:
                refuse(i, refusal)
                continue
            except InvalidToken as exc:
                refuse(i, _bad_token(report.problem_id, exc))
                continue
            passed.append((i, redemption, report, ctx))
    with session.begin():
        staged: defaultdict[str, list[tuple[int, bytes]]] = defaultdict(list)
        row_ids = _stage_many(
            session, [(ctx.token_key.key_id, red, report) for _, red, report, ctx in passed]
        )
        for (i, _, report, _), row_id in zip(passed, row_ids, strict=True):
            if row_id is None:  # spent before, or earlier in this batch: a copy, answered as stored
                refused.append(_duplicate(report.problem_id))
            else:
                staged[report.problem_id].append((i, row_id))
        for pid, rows in staged.items():  # after the spends: see the single route for the order
            closed = _closed(session, pid)
            if closed is None:
                continue
            ids = [row_id for _, row_id in rows]
            session.execute(delete(StagedReportRow).where(StagedReportRow.id.in_(ids)))
            for i, _ in rows:
                refuse(i, closed)
        for refusal in refused:
            state.count_refusal(session, refusal.problem_id, refusal.reason, intake=refusal.intake)
        for pid in covers:
            state.count_refusal(session, pid, DROPPED_COVER)
    return BatchResults(results=tuple(results))


@router.get("/problems/{problem_id}/receipts", response_model=ReportReceipts)
def receipts(problem_id: str, state: StateDep, session: SessionDep) -> ReportReceipts:
    """Digests of every redeemed token's nonce, sorted, once the report round is over (409 before).

    Peers check their own tokens against it: a report a relay dropped is
    counted by its sender (:class:`~anonml.protocol.ReportReceipts`).
    """
    ctx = state.context(problem_id, session)
    if ctx is None:
        raise HTTPException(status_code=404, detail=f"no problem {problem_id!r}")
    phase = session.scalar(select(ProblemRow.phase).where(ProblemRow.id == problem_id))
    if phase not in AFTER_ROUND_PHASES:
        raise HTTPException(
            status_code=409, detail=f"problem {problem_id} is in phase {phase}; no receipts yet"
        )
    key_id = ctx.token_key.key_id
    nonces = session.scalars(select(SpentTokenRow.nonce).where(SpentTokenRow.key_id == key_id))
    digests = sorted(ReportReceipts.digest(n) for n in nonces)
    return ReportReceipts(problem_id=problem_id, digests=tuple(digests))


def _problems_of(session: Session, deliveries: Sequence[IntakeDelivery]) -> dict[int, str]:
    """Problem id by round id, for the rounds of ``deliveries`` (one read)."""
    rounds = {d.round_id for d in deliveries}
    rows = session.execute(select(ProblemRow.round_id, ProblemRow.id).where(ProblemRow.round_id.in_(rounds)))
    return {int(round_id): pid for round_id, pid in rows}


def _checked(
    body: IntakeDelivery, state: AggregatorState, session: Session, problems: dict[int, str]
) -> tuple[Redemption, PrivateReport, bytes, ProblemContext]:
    """The opened, checked delivery: redemption, report, the report's bytes (what the token's MAC
    covers) and the problem; :class:`_Cover` for a cover payload, :class:`_Refusal` otherwise."""
    # Refusals before the report names its problem are counted under the round's problem, if any.
    round_pid = problems.get(body.round_id, "")
    try:
        payload = open_payload(state.identity, bytes(body.sealed), round_id=body.round_id)
    except UnsupportedVersion as exc:
        raise _Refusal(round_pid, "unsupported version", 400, str(exc), intake=bool(round_pid)) from None
    except InvalidPacket as exc:
        raise _Refusal(
            round_pid, "unsealable", 400, f"sealed payload refused: {exc}", intake=bool(round_pid)
        ) from None
    if payload.is_cover:
        if not round_pid:
            raise _Refusal("", "unknown problem", 404, f"no problem has round {body.round_id}")
        raise _Cover(round_pid)
    if payload.redemption is None or payload.report is None:  # open_payload gives both unless cover
        raise _Refusal(round_pid, "malformed", 422, "a report payload without its redemption or report")
    redemption = payload.redemption
    try:
        report = PrivateReport.from_bytes(payload.report)
    except ValidationError as exc:
        raise _Refusal(
            round_pid,
            "malformed",
            422,
            f"report is not a PrivateReport: {exc.errors()[0]['msg']}",
            intake=bool(round_pid),
        ) from None
    ctx = state.context(report.problem_id, session)
    if ctx is None:
        raise _Refusal("", "unknown problem", 404, f"no problem {report.problem_id!r}")
    pid = report.problem_id
    if ctx.problem.round_id != body.round_id:
        raise _Refusal(
            pid, "wrong round", 400, f"the report of {pid} came in a packet of another round", intake=True
        )
    if ctx.bins is None or ctx.plan is None:
        raise _Refusal(pid, "wrong phase", 409, f"problem {pid} has no open report round", intake=True)
    if time.time() > ctx.bins.t_r + state.settings.intake_grace_seconds:
        raise _Refusal(
            pid, "late", 409, f"the report round of {pid} ended at t_r={ctx.bins.t_r:.3f}", intake=True
        )
    try:
        check_report(ctx, report)
    except _OutOfSupport as exc:
        raise _Refusal(
            pid, "out of support", 422, f"report is not a mechanism output: {exc}", intake=True
        ) from None
    except ValueError as exc:
        raise _Refusal(pid, "malformed", 422, f"report does not fit the plan: {exc}", intake=True) from None
    _check_slot(state, ctx, redemption, report)
    return redemption, report, payload.report, ctx


def _check_slot(
    state: AggregatorState, ctx: ProblemContext, redemption: Redemption, report: PrivateReport
) -> None:
    """The token's slot must be the report's (partition, subset) slot; refusals by reason."""
    pid, draft = report.problem_id, ctx.problem.draft
    slot = redemption.slot
    if slot == report_slot(pid, report.partition, report.subset):
        return
    if any(slot == report_slot(pid, p, report.subset) for p in range(draft.kp)):
        raise _Refusal(
            pid,
            "wrong partition",
            403,
            f"the token was issued for another partition than {report.partition}",
            intake=True,
        )
    if any(slot == report_slot(pid, report.partition, k) for k in range(draft.kh)):
        raise _Refusal(
            pid,
            "wrong slot",
            403,
            f"the token was issued for another subset than {report.subset}",
            intake=True,
        )
    raise _Refusal(
        pid, "foreign token", 403, "the token is for a slot of another problem or round", intake=True
    )


def _closed(session: Session, pid: str) -> _Refusal | None:
    """The refusal for a problem whose report round closed, read FOR SHARE (None while open)."""
    phase = session.scalar(select(ProblemRow.phase).where(ProblemRow.id == pid).with_for_update(read=True))
    if phase == ProblemPhase.REPORTING:
        return None
    return _Refusal(
        pid, "wrong phase", 409, f"problem {pid} is in phase {phase}; the report round is closed", intake=True
    )


def _duplicate(pid: str) -> _Refusal:
    return _Refusal(pid, DUPLICATE_COPY, 409, "token already redeemed", intake=True)


def _bad_token(pid: str, exc: InvalidToken) -> _Refusal:
    return _Refusal(pid, "bad token", 403, str(exc), intake=True)


class _Cover(Exception):
    """The opened payload is cover: dropped, counted under ``problem_id``, answered as stored."""

    def __init__(self, problem_id: str) -> None:
        super().__init__(problem_id)
        self.problem_id = problem_id


class _OutOfSupport(ValueError):
    """The bits are not an output of the declared mechanism."""


#: What a stored delivery of a batch gets: the status of ``POST /intake``'s receipt.
_STORED = ItemResult(status=201, detail="")
