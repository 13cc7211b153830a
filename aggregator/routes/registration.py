"""Registration, closing it, the signed roster and each peer's signed assignment.

Rules (DESIGN §7; checked here, each with its own refusal):

- a :class:`~anonml.protocol.Registration` names this aggregator's identity (422
  otherwise) and is signed by the peer's identity over ``signing_bytes`` under
  ``signing_context`` (403 otherwise);
- its relay certificate must verify for that identity and the problem's round id (403);
- its relay URL must have the one relay form, naming the registrant's own node
  id (:func:`~anonml.protocol.check_relay_url`; plain http on loopback only
  with the ``allow_loopback_http`` setting) (422, counted as "bad relay URL");
- when the proposal admits by credentials, it carries an
  :class:`~anonml.protocol.AdmissionCredential` from the named issuer for the
  problem's scope, naming this identity, unexpired, issuer-signed (403);
- registration is refused after the deadline or once closed (409), and a
  second time for one identity (409);
- the roster is published when registration closes (deadline or admin
  ``close``) with at least ``min_peers`` members, in registration order, with
  the token key pinned and the seed revealed (:mod:`aggregator.rounds`); each
  entry carries its member's registration signature and credential, so peers
  check every entry came from its identity;
- every stored registration is timed (:meth:`~aggregator.state.AggregatorState.meter`):
  the busy time per registration is the measured cost ``L`` from which the
  round's waits are sized when registration closes;
- ``GET /problems/{id}/cosignatures/{stage}`` serves the witnesses'
  :class:`~anonml.protocol.CosignatureBundle` for ``roster`` or ``bins`` once
  every declared witness has co-signed (404 until then).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from fastapi import APIRouter, HTTPException, Response
from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from aggregator.db import ProblemRow, RegistrationRow
from aggregator.deps import AdminDep, SessionDep, StateDep
from aggregator.routes.problems import get_row, named_problem_refusal, problem_status
from aggregator.state import ProblemContext, Refusal
from anonml.crypto import CryptoError, PublicIdentity, RelayKeyCertificate
from anonml.phases import ProblemPhase
from anonml.protocol import (
    STAGES,
    Assignment,
    AssignmentBatch,
    AssignmentBatchRequest,
    BatchResults,
    CosignatureBundle,
    ItemResult,
    ProblemStatus,
    Registration,
    RegistrationBatch,
    RegistrationReceipt,
    Roster,
    check_credential,
    check_own_relay_url,
    sign_message,
    verify_message,
)

__all__ = ["router"]

router = APIRouter(prefix="/problems", tags=["registration"])


@router.post("/{problem_id}/registrations", status_code=201, response_model=RegistrationReceipt)
def register(
    problem_id: str, registration: Registration, state: StateDep, session: SessionDep
) -> RegistrationReceipt:
    """Join a problem before its deadline with a signed registration and relay certificate."""
    start = time.monotonic()
    try:
        with session.begin():  # the checks read only: a refusal holds no write lock
            row = _checked(problem_id, registration, state, session)
            session.add(row)
            session.flush()
            closed = _closed_meanwhile(session, problem_id)
            if closed is not None:
                raise closed
        state.meter(problem_id).record(start, time.monotonic())  # L of the round's schedule floors
    except IntegrityError:
        raise _duplicate(problem_id).counted(state) from None
    except Refusal as refusal:
        raise refusal.counted(state) from None
    return RegistrationReceipt(
        problem_id=problem_id,
        fingerprint=PublicIdentity.from_bytes(registration.identity).fingerprint.hex(),
        registered=int(
            session.scalar(
                select(func.count())
                .select_from(RegistrationRow)
                .where(RegistrationRow.problem_id == problem_id)
            )
            or 0
        ),
    )


@router.post("/{problem_id}/registrations/batch", response_model=BatchResults)
def register_batch(
    problem_id: str, body: RegistrationBatch, state: StateDep, session: SessionDep
) -> BatchResults:
    """Many identities' registrations in one request (a host of many peers); a result per item.

    Each registration goes through the single route's checks on its own and
    gets the status and detail its own request would have got (201 stored;
    403, 404, 409, 422 refused, counted under the same reason), so one bad
    registration never sinks the others and a batch says nothing a single
    request would not (the identities of one host already share its relay base
    URL). The stored rows and the refusal counters are written in one
    transaction; registration closing meanwhile refuses every item with 409
    and stores none. The registrations are timed together, each counting as
    one registration of the busy time (``L`` of the round's schedule floors).
    """
    start = time.monotonic()
    for attempt in range(3):  # a concurrent insert of the same identity: the next pass sees it
        try:
            results = _register_once(problem_id, body, state, session)
        except IntegrityError:
            session.rollback()
            if attempt == 2:
                raise
            continue
        stored = sum(result.status == 201 for result in results)
        if stored:
            state.meter(problem_id).record(start, time.monotonic(), count=stored)
        return BatchResults(results=tuple(results))
    raise AssertionError("unreachable")


def _register_once(
    problem_id: str, body: RegistrationBatch, state, session: Session
) -> list[ItemResult]:
    """One pass of :func:`register_batch`: the checks, then one write transaction (IntegrityError
    when an identity was stored concurrently after the duplicate check)."""
    results: list[ItemResult] = [_STORED] * len(body.registrations)
    refused: list[Refusal] = []

    def refuse(index: int, refusal: Refusal) -> None:
        results[index] = ItemResult(status=refusal.status, detail=refusal.detail)
        refused.append(refusal)

    passed: list[tuple[int, RegistrationRow]] = []
    with session.begin():  # reads and signature checks: no write lock held meanwhile
        ctx = state.context(problem_id, session)  # once for the batch, not once per item
        for i, registration in enumerate(body.registrations):
            try:
                passed.append((i, _checked(problem_id, registration, state, session, ctx)))
            except Refusal as refusal:
                refuse(i, refusal)
    with session.begin():
        keys = [row.identity for _, row in passed]
        known = (
            set(
                session.scalars(
                    select(RegistrationRow.identity).where(
                        RegistrationRow.problem_id == problem_id, RegistrationRow.identity.in_(keys)
                    )
                )
            )
            if keys
            else set()
        )
        fresh: list[tuple[int, RegistrationRow]] = []
        for i, row in passed:
            if row.identity in known:
                refuse(i, _duplicate(problem_id))
            else:
                known.add(row.identity)
                fresh.append((i, row))
        if fresh:
            session.add_all([row for _, row in fresh])
            session.flush()
            closed = _closed_meanwhile(session, problem_id)
            if closed is not None:
                ids = [row.id for _, row in fresh]
                session.execute(delete(RegistrationRow).where(RegistrationRow.id.in_(ids)))
                for i, _ in fresh:
                    refuse(i, closed)
        for refusal in refused:
            state.count_refusal(session, refusal.problem_id, refusal.reason)
    return results


#: What a stored registration of a batch gets: the status of the single route.
_STORED = ItemResult(status=201, detail="")


def _duplicate(problem_id: str) -> Refusal:
    return Refusal(
        problem_id, "duplicate registration", 409, "this identity is already registered for this problem"
    )


def _closed_meanwhile(session: Session, problem_id: str) -> Refusal | None:
    """Re-read the phase under the write lock the insert took: a close that committed meanwhile wins."""
    phase, closed = session.execute(
        select(ProblemRow.phase, ProblemRow.close_requested)
        .where(ProblemRow.id == problem_id)
        .with_for_update(read=True)
    ).one()
    if phase != ProblemPhase.REGISTRATION or closed:
        return Refusal(
            problem_id,
            "registration closed",
            409,
            f"registration for {problem_id} closed while this registration was stored",
        )
    return None


def _checked(
    problem_id: str,
    registration: Registration,
    state,
    session: Session,
    ctx: ProblemContext | None = None,
) -> RegistrationRow:
    """Every check of one registration (reads only); the row to store, or :class:`Refusal`.

    ``ctx``: the problem's context when a batch read it once for all its items.
    """
    ctx = ctx if ctx is not None else state.context(problem_id, session)
    if ctx is None:
        raise Refusal("", "unknown problem", 404, f"no problem {problem_id!r}")
    refusal = named_problem_refusal(problem_id, registration.problem_id, ProblemPhase.REGISTRATION)
    if refusal is not None:
        raise refusal
    row = get_row(session, problem_id)
    deadline = ctx.problem.draft.schedule.registration_deadline
    if row.phase != ProblemPhase.REGISTRATION or row.close_requested or datetime.now(UTC) >= deadline:
        raise Refusal(
            problem_id,
            "registration closed",
            409,
            f"registration for {problem_id} closed at {deadline.isoformat()} (phase {row.phase})",
        )
    if bytes(registration.aggregator) != state.public_identity:
        raise Refusal(
            problem_id,
            "wrong aggregator",
            422,
            "the registration names another aggregator identity than this one's "
            f"({bytes(registration.aggregator).hex()[:16]}…): sign it for the proposal's aggregator",
        )
    try:
        identity = PublicIdentity.from_bytes(registration.identity)
        verify_message(registration, identity)
    except CryptoError as exc:
        raise Refusal(problem_id, "bad signature", 403, f"registration signature rejected: {exc}") from None
    # A sender-only registrant (no relay URL, no certificate: the wire model admits both or neither)
    # relays for nobody; routes are drawn among the others.
    if registration.relay_certificate is not None and registration.relay_url is not None:
        try:
            RelayKeyCertificate.from_bytes(registration.relay_certificate).verify(
                identity, round_id=ctx.problem.round_id
            )
        except CryptoError as exc:
            raise Refusal(
                problem_id, "bad relay certificate", 403, f"relay key certificate rejected: {exc}"
            ) from None
        try:
            loopback = state.settings.allow_loopback_http
            check_own_relay_url(registration.relay_url, identity.node_id, allow_loopback_http=loopback)
        except ValueError as exc:
            raise Refusal(problem_id, "bad relay URL", 422, str(exc)) from None
    if bytes(identity) == state.public_identity:
        raise Refusal(problem_id, "malformed", 422, "the aggregator cannot register as a peer")
    admission = ctx.problem.draft.admission
    if admission.mode == "credentials":
        try:
            check_credential(registration.credential, admission, bytes(identity), valid_at=datetime.now(UTC))
        except (ValueError, CryptoError) as exc:
            raise Refusal(
                problem_id, "no valid credential", 403, f"admission credential rejected: {exc}"
            ) from None
    elif registration.credential is not None:
        raise Refusal(problem_id, "malformed", 422, "this problem's admission is open: send no credential")
    return RegistrationRow(
        problem_id=problem_id,
        identity=bytes(registration.identity),
        relay_url=registration.relay_url,
        certificate=None if registration.relay_certificate is None else bytes(registration.relay_certificate),
        signature=bytes(registration.signature),
        credential_json=(
            None if registration.credential is None else registration.credential.model_dump_json()
        ),
    )


@router.post("/{problem_id}/close", response_model=ProblemStatus)
def close_registration(problem_id: str, state: StateDep, session: SessionDep, _: AdminDep) -> ProblemStatus:
    """Close registration now (admin); the phase machine publishes the roster on its next tick."""
    with session.begin():
        row = get_row(session, problem_id)
        if row.phase != ProblemPhase.REGISTRATION:
            raise HTTPException(status_code=409, detail=f"problem {problem_id} is in phase {row.phase}")
        row.close_requested = True
    return problem_status(state, session, row)


def _published_roster(state, session, problem_id: str) -> ProblemContext:
    """The problem's context once its roster is out (404 unknown problem, 409 before registration closed)."""
    ctx = state.context(problem_id, session)
    if ctx is None:
        raise HTTPException(status_code=404, detail=f"no problem {problem_id!r}")
    if ctx.roster_text is None:
        raise HTTPException(status_code=409, detail=f"problem {problem_id}: registration is not closed yet")
    return ctx


@router.get("/{problem_id}/roster", response_model=Roster)
def get_roster(problem_id: str, state: StateDep, session: SessionDep) -> Response:
    """The signed roster: members in registration order, pinned token key, revealed seed.

    Served as stored (it is immutable once published): at 10,000 members it
    is ~7 MB of JSON, which this neither reads from the database nor parses
    again per request.
    """
    return Response(_published_roster(state, session, problem_id).roster_text, media_type="application/json")


def _assignment(state, problem_id: str, ctx: ProblemContext, fingerprint: str) -> Assignment:
    """The signed assignment of the member with ``fingerprint`` (hex); 409 before the plan, 404 if none."""
    if ctx.plan is None or ctx.roster is None:
        raise HTTPException(
            status_code=409,
            detail=f"problem {problem_id}: the plan is fixed once the witnesses co-signed the roster",
        )
    index = ctx.by_fingerprint.get(fingerprint.lower())
    if index is None:
        raise HTTPException(status_code=404, detail=f"no roster member with fingerprint {fingerprint[:64]}")
    entry = ctx.roster.entries[index]
    mine = ctx.plan.assignment(index)
    state.assignment_served(problem_id)
    return sign_message(
        Assignment(
            problem_id=problem_id,
            identity=entry.identity,
            role=mine.role,
            index=mine.index,
            subsets=mine.subsets,
            signature=bytes(64),
        ),
        state.identity,
    )


@router.get("/{problem_id}/assignments/{fingerprint}", response_model=Assignment)
def get_assignment(problem_id: str, fingerprint: str, state: StateDep, session: SessionDep) -> Assignment:
    """What the plan says the peer with this fingerprint (hex) does, signed.

    Peers re-derive it from the seed (:func:`anonml.learn.partition.verify_assignment`).
    """
    return _assignment(state, problem_id, _published_roster(state, session, problem_id), fingerprint)


@router.post("/{problem_id}/assignments", response_model=AssignmentBatch)
def get_assignments(
    problem_id: str, body: AssignmentBatchRequest, state: StateDep, session: SessionDep
) -> AssignmentBatch:
    """The signed assignments of many members in one request, in the order asked.

    What a host of many identities asks instead of one ``GET`` per identity.
    Each answer is exactly the single route's (the same signed document), and
    the batch fails as the single route would for its first failing
    fingerprint (404 not a member, 409 before the plan): assignments are
    public — anyone holding the roster and seed derives them — and the
    members a host names together already share its relay base URL on the
    roster, so a batch tells the aggregator nothing it did not know.
    """
    if body.problem_id != problem_id:
        raise HTTPException(
            status_code=422, detail=f"request names problem {body.problem_id!r}, posted to {problem_id!r}"
        )
    ctx = _published_roster(state, session, problem_id)
    return AssignmentBatch(
        assignments=tuple(_assignment(state, problem_id, ctx, fp) for fp in body.fingerprints)
    )


@router.get("/{problem_id}/cosignatures/{stage}", response_model=CosignatureBundle)
def get_cosignatures(problem_id: str, stage: str, session: SessionDep) -> CosignatureBundle:
    """Every declared witness's cosignature on the ``roster`` or ``bins`` transcript (404 until complete)."""
    if stage not in STAGES:
        raise HTTPException(
            status_code=422, detail=f"stage must be one of {', '.join(STAGES)}, got {stage[:20]!r}"
        )
    row = get_row(session, problem_id)
    text = row.roster_cosignatures_json if stage == "roster" else row.bins_cosignatures_json
    if text is None:
        raise HTTPException(
            status_code=404,
            detail=f"problem {problem_id}: the {stage} cosignatures are not complete (phase {row.phase})",
        )
    return CosignatureBundle.model_validate_json(text)
