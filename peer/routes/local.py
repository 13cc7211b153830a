"""``/local``: this daemon's own state, for its user only (bearer local token); ``/healthz``."""

from __future__ import annotations

from fastapi import APIRouter

from anonml.protocol import PeerStatus
from peer.deps import HostDep, LocalDep

router = APIRouter()


@router.get("/local/status", response_model=PeerStatus, tags=["local"])
def status(host: HostDep, _: LocalDep) -> PeerStatus:
    """Identities, participations by phase, relay counters (bearer token required)."""
    return host.status()


@router.get("/healthz", tags=["service"])
def healthz() -> dict[str, str]:
    return {"status": "ok"}
