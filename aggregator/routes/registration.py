"""Registration, closing it, the signed roster and each peer's signed assignment.

Rules (DESIGN §7; checked here, each with its own refusal):

- a :class:`~anonml.protocol.Registration` is signed by the peer's identity over
  ``signing_bytes`` under ``signing_context`` (403 otherwise);
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

from fastapi import APIRouter, HTTPException
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from aggregator.db import ProblemRow, RegistrationRow
from aggregator.deps import AdminDep, SessionDep, StateDep
from aggregator.routes.problems import check_named_problem, get_row, problem_status
from anonml.crypto import CryptoError, PublicIdentity, RelayKeyCertificate
from anonml.protocol import (
    STAGES,
    Assignment,
    CosignatureBundle,
    ProblemStatus,
    Registration,
    RegistrationReceipt,
    Roster,
    check_credential,
    check_relay_url,
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
        with session.begin():
            _check_and_store(problem_id, registration, state, session)
        state.meter(problem_id).record(start, time.monotonic())  # L of the round's schedule floors
    except IntegrityError:
        raise state.refuse(
            problem_id, "duplicate registration", 409, "this identity is already registered for this problem"
        ) from None
    except _Closed as exc:
        raise state.refuse(problem_id, "registration closed", 409, str(exc)) from None
    status = problem_status(state, session, get_row(session, problem_id))
    return RegistrationReceipt(
        problem_id=problem_id,
        fingerprint=PublicIdentity.from_bytes(registration.identity).fingerprint.hex(),
        registered=status.registered,
    )


def _check_and_store(problem_id: str, registration: Registration, state, session) -> None:
    ctx = state.context(problem_id, session)
    if ctx is None:
        raise state.refuse("", "unknown problem", 404, f"no problem {problem_id!r}")
    check_named_problem(state, problem_id, registration.problem_id, "registration")
    row = get_row(session, problem_id)
    deadline = ctx.problem.draft.schedule.registration_deadline
    if row.phase != "registration" or row.close_requested or datetime.now(UTC) >= deadline:
        raise state.refuse(
            problem_id,
            "registration closed",
            409,
            f"registration for {problem_id} closed at {deadline.isoformat()} (phase {row.phase})",
        )
    try:
        identity = PublicIdentity.from_bytes(registration.identity)
        verify_message(registration, identity)
    except CryptoError as exc:
        raise state.refuse(
            problem_id, "bad signature", 403, f"registration signature rejected: {exc}"
        ) from None
    try:
        RelayKeyCertificate.from_bytes(registration.relay_certificate).verify(
            identity, round_id=ctx.problem.round_id
        )
    except CryptoError as exc:
        raise state.refuse(
            problem_id, "bad relay certificate", 403, f"relay key certificate rejected: {exc}"
        ) from None
    try:
        check_relay_url(registration.relay_url, allow_loopback_http=state.settings.allow_loopback_http)
        if not registration.relay_url.endswith("/relay/" + identity.node_id.hex()):
            raise ValueError("the relay URL must end in /relay/<the registrant's node id>")
    except ValueError as exc:
        raise state.refuse(problem_id, "bad relay URL", 422, str(exc)) from None
    if bytes(identity) == state.public_identity:
        raise state.refuse(problem_id, "malformed", 422, "the aggregator cannot register as a peer")
    admission = ctx.problem.draft.admission
    if admission.mode == "credentials":
        try:
            check_credential(registration.credential, admission, bytes(identity), valid_at=datetime.now(UTC))
        except (ValueError, CryptoError) as exc:
            raise state.refuse(
                problem_id, "no valid credential", 403, f"admission credential rejected: {exc}"
            ) from None
    elif registration.credential is not None:
        raise state.refuse(
            problem_id, "malformed", 422, "this problem's admission is open: send no credential"
        )
    session.add(
        RegistrationRow(
            problem_id=problem_id,
            identity=bytes(registration.identity),
            relay_url=registration.relay_url,
            certificate=bytes(registration.relay_certificate),
            signature=bytes(registration.signature),
            credential_json=(
                None if registration.credential is None else registration.credential.model_dump_json()
            ),
        )
    )
    session.flush()
    # Re-read under the write lock the insert took: a close that committed meanwhile wins.
    phase, closed = session.execute(
        select(ProblemRow.phase, ProblemRow.close_requested)
        .where(ProblemRow.id == problem_id)
        .with_for_update(read=True)
    ).one()
    if phase != "registration" or closed:
        raise _Closed(f"registration for {problem_id} closed while this registration was stored")


class _Closed(Exception):
    """Registration closed between the first check and the insert (rolled back)."""


@router.post("/{problem_id}/close", response_model=ProblemStatus)
def close_registration(problem_id: str, state: StateDep, session: SessionDep, _: AdminDep) -> ProblemStatus:
    """Close registration now (admin); the phase machine publishes the roster on its next tick."""
    with session.begin():
        row = get_row(session, problem_id)
        if row.phase != "registration":
            raise HTTPException(status_code=409, detail=f"problem {problem_id} is in phase {row.phase}")
        row.close_requested = True
    return problem_status(state, session, row)


def _closed(session, problem_id: str) -> ProblemRow:
    row = get_row(session, problem_id)
    if row.roster_json is None:
        raise HTTPException(status_code=409, detail=f"problem {problem_id}: registration is not closed yet")
    return row


@router.get("/{problem_id}/roster", response_model=Roster)
def get_roster(problem_id: str, session: SessionDep) -> Roster:
    """The signed roster: members in registration order, pinned token key, revealed seed."""
    return Roster.model_validate_json(_closed(session, problem_id).roster_json)


@router.get("/{problem_id}/assignments/{fingerprint}", response_model=Assignment)
def get_assignment(problem_id: str, fingerprint: str, state: StateDep, session: SessionDep) -> Assignment:
    """What the plan says the peer with this fingerprint (hex) does, signed.

    Peers re-derive it from the seed (:func:`anonml.learn.partition.verify_assignment`).
    """
    row = _closed(session, problem_id)
    ctx = state.context(problem_id, session)
    assert ctx is not None
    if ctx.plan is None or ctx.roster is None:
        raise HTTPException(
            status_code=409,
            detail=f"problem {problem_id}: the plan is fixed once the witnesses co-signed the roster "
            f"(phase {row.phase})",
        )
    index = ctx.by_fingerprint.get(fingerprint.lower())
    if index is not None:
        entry = ctx.roster.entries[index]
        mine = ctx.plan.assignment(index)
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
    raise HTTPException(status_code=404, detail=f"no roster member with fingerprint {fingerprint}")


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
