"""The witness's HTTP API.

``POST /cosign``
    A :class:`~anonml.protocol.CosignRequest` signed by the aggregator its
    statement names (403 otherwise). 200 with the
    :class:`~anonml.protocol.Cosignature` (with the witness's VRF proof); the same
    statement again gets the same cosignature; another transcript for the same
    (aggregator signing key, problem, stage) is refused with 409 and the reason.
``GET /log?start=&limit=``
    The append-only log (:class:`~anonml.protocol.WitnessLogEntry`), oldest first.
``GET /cosignatures/{aggregator hex}/{problem}/{stage}``
    The cosignature for that triple (404 if none); the aggregator is named by its
    64-byte identity or its 32-byte signing key.
``GET /identity``, ``GET /healthz``
    The witness's public identity (hex) for pinning; liveness.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi import Path as PathParam
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from anonml.protocol import STAGES, Cosignature, CosignRequest, WitnessIdentity, WitnessLogEntry
from witness.deps import WitnessDep
from witness.service import MAX_LOG_PAGE, WitnessRefusal

__all__ = ["router"]

router = APIRouter()


@router.post("/cosign", response_model=Cosignature, tags=["witness"])
async def cosign(request: Request, witness: WitnessDep) -> Cosignature:
    """Co-sign the statement of a signed :class:`~anonml.protocol.CosignRequest` (module docstring).

    The body is parsed here rather than by FastAPI so that a malformed one gets
    one line naming where it is malformed (the body cap, :class:`~anonml.serving.BodyLimit`,
    has already applied).
    """
    try:
        parsed = CosignRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise HTTPException(
            status_code=422, detail=f"malformed cosign request at {where}: {first['msg']}"
        ) from None
    try:
        return await run_in_threadpool(witness.cosign, parsed)
    except WitnessRefusal as exc:
        raise HTTPException(status_code=exc.status, detail=exc.detail) from None


@router.get("/log", response_model=list[WitnessLogEntry], tags=["witness"])
def log(
    witness: WitnessDep,
    start: Annotated[int, Query(ge=0, lt=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_LOG_PAGE)] = 100,
) -> list[WitnessLogEntry]:
    """Entries from index ``start`` on, at most ``limit``, oldest first."""
    return witness.log(start, limit)


@router.get("/cosignatures/{aggregator}/{problem_id}/{stage}", response_model=Cosignature, tags=["witness"])
def cosignature(
    witness: WitnessDep,
    aggregator: Annotated[str, PathParam(pattern=r"^([0-9a-fA-F]{64}|[0-9a-fA-F]{128})$")],
    problem_id: Annotated[str, PathParam(pattern=r"^[a-z0-9-]{4,64}$")],
    stage: str,
) -> Cosignature:
    """The cosignature for (aggregator, problem, stage), 404 if the witness signed none."""
    if stage not in STAGES:
        raise HTTPException(status_code=422, detail=f"stage must be one of {', '.join(STAGES)}")
    found = witness.lookup(bytes.fromhex(aggregator), problem_id, stage)
    if found is None:
        raise HTTPException(status_code=404, detail=f"no cosignature for {problem_id} stage {stage}")
    return found


@router.get("/identity", response_model=WitnessIdentity, tags=["service"])
def identity(witness: WitnessDep) -> WitnessIdentity:
    """The witness's public identity (hex): what a peer's policy names to trust it."""
    return WitnessIdentity(
        identity=witness.public_identity.hex(), fingerprint=witness.identity.fingerprint.hex()
    )


@router.get("/healthz", tags=["service"])
def healthz(witness: WitnessDep) -> dict[str, str]:
    return {"status": "ok", "identity": witness.public_identity.hex()}
