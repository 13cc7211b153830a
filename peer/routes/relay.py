"""``/relay``: onion packets from other peers, and this node's roster witness.

``POST /relay/{node}``
    One onion packet for the hosted identity ``node`` (hex node id), raw bytes
    of exactly ``PACKET_SIZE``: a declared or streamed body over that size is
    refused with 413 before it is read in full, a shorter one with 400 — both
    before any cryptography (:mod:`peer.relay`). Every accepted packet gets
    the same empty 202, whatever it was (held, delivered, cover).
``GET /relay/{node}/roster/{problem_id}``
    The identity's signed :class:`~anonml.protocol.RosterWitness` (404 until
    it has checked that roster): how other members compare fingerprints.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request, Response
from starlette.concurrency import run_in_threadpool

from anonml.crypto import PACKET_SIZE
from anonml.protocol import RosterWitness
from peer.deps import HostDep, NodeDep, hosted_node

router = APIRouter(prefix="/relay", tags=["relay"])

_TOO_LARGE = f"a packet is exactly {PACKET_SIZE} bytes"


@router.post("/{node}", status_code=202)
async def relay(node: str, request: Request, host: HostDep) -> Response:
    """Take one onion packet for ``node`` (raw bytes, exactly PACKET_SIZE)."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > PACKET_SIZE):
        host.relay.count("rejected: wrong size")
        raise HTTPException(status_code=413, detail=_TOO_LARGE)
    node_id = hosted_node(node, host)  # after the size check: an oversized body is refused unread
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > PACKET_SIZE:
            host.relay.count("rejected: wrong size")
            raise HTTPException(status_code=413, detail=_TOO_LARGE)
    # Peeling and the state DB writes (held packet, replay tag) run off the event loop.
    outcome = await run_in_threadpool(host.relay.handle, node_id, bytes(body))
    if outcome.status >= 300:
        raise HTTPException(status_code=outcome.status, detail=outcome.detail)
    return Response(status_code=202)  # the same empty answer for every accepted packet


@router.get("/{node}/roster/{problem_id}", response_model=RosterWitness)
def roster_witness(node_id: NodeDep, problem_id: str, host: HostDep) -> RosterWitness:
    """The signed fingerprint of the roster this identity holds for ``problem_id``."""
    witness = host.witness(node_id, problem_id)
    if witness is None:
        raise HTTPException(status_code=404, detail="this node holds no checked roster for that problem")
    return witness
