"""``/relay``: onion packets from other peers, and this node's roster witness.

``POST /relay/{node}``
    One onion packet for the hosted identity ``node`` (hex node id). As
    ``application/octet-stream``: raw bytes of exactly ``PACKET_SIZE``, taken
    only by a round without a roster (401 for a round with one). As
    ``application/vnd.anonml.relay-post`` (:mod:`peer.relayauth`): a member's
    authenticator envelope, then the packet; 403 when the envelope is not a
    roster member's for this node and round, 429 once that member's quota at
    this node is spent — each before the packet is looked at. A declared or
    streamed body over the size is refused with 413 before it is read in
    full, a shorter one with 400 — before any cryptography (:mod:`peer.relay`).
    Every accepted packet gets the same empty 202, whatever it was (held,
    delivered, cover), whatever the node's load.
``POST /relay/{node}/batch``
    Up to ``MAX_BATCH_ITEMS`` packets back to back (what a relay releases to
    this node at once), bare or after one envelope as above: a
    :class:`~anonml.protocol.BatchResults` with, per packet, what its own
    request would have got; 413 over the cap, 422 if the body is not a whole
    number of packets, 403 for a bad envelope. One thread hop per batch.
``GET /relay/{node}/roster/{problem_id}``
    The identity's signed :class:`~anonml.protocol.RosterWitness` (404 until
    it has checked that roster): how other members compare fingerprints.
``GET /relay/{node}/reachability/{challenge}``
    The answer to a challenge this host is waiting for (the aggregator's probe
    of its relay URL, :mod:`peer.reachability`), once; 404 for any other.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from anonml.crypto import PACKET_SIZE
from anonml.protocol import MAX_BATCH_ITEMS, BatchResults, ItemResult, ReachabilityAnswer, RosterWitness
from anonml.serving import BodyTooLarge, declared_over, read_body
from peer.deps import HostDep, NodeDep, hosted_node
from peer.host import PeerHost
from peer.relay import RelayOutcome, RelayRefused
from peer.relayauth import AUTH_SIZE, RELAY_POST_TYPE, PostAuth, open_post

router = APIRouter(prefix="/relay", tags=["relay"])

_TOO_LARGE = f"a packet is exactly {PACKET_SIZE} bytes"
_BATCH_CAP = MAX_BATCH_ITEMS * PACKET_SIZE
_BATCH_TOO_LARGE = f"a batch is at most {MAX_BATCH_ITEMS} packets of {PACKET_SIZE} bytes ({_BATCH_CAP} bytes)"


async def _body(node: str, request: Request, host: PeerHost, cap: int, too_large: str) -> tuple[bytes, bytes]:
    """The hosted node's id and the request body, refused with 413 once over ``cap`` (declared or read)."""
    if declared_over(request.scope.get("headers", ()), cap):
        host.relay.count("rejected: wrong size")
        raise HTTPException(status_code=413, detail=too_large)
    node_id = hosted_node(node, host)  # after the size check: an oversized body is refused unread
    try:
        body = await read_body(request.receive, cap)
    except BodyTooLarge:
        host.relay.count("rejected: wrong size")
        raise HTTPException(status_code=413, detail=too_large) from None
    if body is None:
        raise ClientDisconnect  # as Request.stream does: no one is left to answer
    return node_id, body


def _authenticated(request: Request) -> bool:
    """Whether the body is an authenticated post (:mod:`peer.relayauth`), by its content type."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower() == RELAY_POST_TYPE


def _open(host: PeerHost, body: bytes, most: int) -> tuple[PostAuth, list[bytes]]:
    """An authenticated post's envelope and its 1 … ``most`` packets; 413/422 naming what is wrong."""
    try:
        auth, packets = open_post(body)
    except ValueError as exc:
        host.relay.count("rejected: wrong size")
        raise HTTPException(status_code=422 if most > 1 else 400, detail=str(exc)) from None
    if len(packets) > most:
        host.relay.count("rejected: wrong size")
        raise HTTPException(status_code=413, detail=f"a post carries at most {most} packet(s)")
    return auth, packets


async def _handle(
    host: PeerHost, node_id: bytes, packets: list[bytes], auth: PostAuth | None
) -> list[RelayOutcome]:
    """The relay's outcomes, off the event loop (peeling, state DB writes); a bad envelope refuses all."""
    try:
        return await run_in_threadpool(host.relay.handle_many, node_id, packets, auth)
    except RelayRefused as exc:
        raise HTTPException(status_code=exc.status, detail=exc.detail) from None


@router.post("/{node}", status_code=202)
async def relay(node: str, request: Request, host: HostDep) -> Response:
    """Take one onion packet for ``node``: exactly PACKET_SIZE raw bytes, or after a member's envelope."""
    if _authenticated(request):
        node_id, body = await _body(node, request, host, AUTH_SIZE + PACKET_SIZE, _TOO_LARGE)
        auth, packets = _open(host, body, 1)
        (outcome,) = await _handle(host, node_id, packets, auth)
    else:
        node_id, body = await _body(node, request, host, PACKET_SIZE, _TOO_LARGE)
        (outcome,) = await _handle(host, node_id, [body], None)
    if outcome.status >= 300:
        raise HTTPException(status_code=outcome.status, detail=outcome.detail)
    return Response(status_code=202)  # the same empty answer for every accepted packet


@router.post("/{node}/batch", response_model=BatchResults)
async def relay_batch(node: str, request: Request, host: HostDep) -> BatchResults:
    """Take 1 … MAX_BATCH_ITEMS onion packets for ``node``, back to back; a result per packet.

    Each packet gets the status and detail its own ``POST /relay/{node}``
    would have got (202 and no detail for every accepted one). Refused as a
    whole: a body over the cap (413), not a whole, non-zero number of
    packets (422), or an envelope that does not hold (403; 404/410 for a
    round this node does not or no longer relay).
    """
    auth: PostAuth | None = None
    if _authenticated(request):
        node_id, body = await _body(node, request, host, AUTH_SIZE + _BATCH_CAP, _BATCH_TOO_LARGE)
        auth, packets = _open(host, body, MAX_BATCH_ITEMS)
    else:
        node_id, body = await _body(node, request, host, _BATCH_CAP, _BATCH_TOO_LARGE)
        if not body or len(body) % PACKET_SIZE:
            host.relay.count("rejected: wrong size")
            raise HTTPException(
                status_code=422,
                detail=f"a batch is 1 to {MAX_BATCH_ITEMS} whole packets of {PACKET_SIZE} bytes, "
                f"got {len(body)} bytes",
            )
        packets = [body[i : i + PACKET_SIZE] for i in range(0, len(body), PACKET_SIZE)]
    outcomes = await _handle(host, node_id, packets, auth)  # one thread hop
    return BatchResults(results=tuple(ItemResult(status=o.status, detail=o.detail) for o in outcomes))


@router.get("/{node}/roster/{problem_id}", response_model=RosterWitness)
def roster_witness(node_id: NodeDep, problem_id: str, host: HostDep) -> RosterWitness:
    """The signed fingerprint of the roster this identity holds for ``problem_id``."""
    witness = host.witness(node_id, problem_id)
    if witness is None:
        raise HTTPException(status_code=404, detail="this node holds no checked roster for that problem")
    return witness


@router.get("/{node}/reachability/{challenge}", response_model=ReachabilityAnswer)
def reachability_answer(node_id: NodeDep, challenge: str, host: HostDep) -> ReachabilityAnswer:
    """The secret answer to a challenge this host expects for ``node`` (taken once); 404 otherwise."""
    try:
        raw = bytes.fromhex(challenge)
    except ValueError:
        raw = b""
    answer = host.challenges.answer(node_id, raw) if len(raw) == 32 else None
    if answer is None:
        raise HTTPException(status_code=404, detail="this relay expects no such reachability challenge")
    return ReachabilityAnswer(answer=answer)
