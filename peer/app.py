"""The peer's FastAPI app: the relay for other peers, and a small local status API.

Routes
------
``POST /relay/{node}``
    One onion packet for the hosted identity ``node`` (hex node id), raw bytes
    of exactly ``PACKET_SIZE``: a declared or streamed body over that size is
    refused with 413 before it is read in full, a shorter one with 400 — both
    before any cryptography (:mod:`peer.relay`). Every accepted packet gets
    the same empty 202, whatever it was (held, delivered, cover).
``GET /relay/{node}/roster/{problem}``
    The identity's signed :class:`~anonml.protocol.RosterWitness` (404 until
    it has checked that roster): how other members compare fingerprints.
``GET /local/status``
    This daemon's own counters, for its user only: bearer token required.

Served by uvicorn with ``access_log=False`` (a relay must not keep a log of
who sent it what, and when).
"""

from __future__ import annotations

import hmac
import secrets
import socket
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated

import uvicorn
from fastapi import FastAPI, Header, HTTPException, Request, Response

from anonml.crypto import PACKET_SIZE, Identity
from anonml.crypto import load_or_create_identity as crypto_load_or_create
from anonml.privacy import PrivacyLedger
from anonml.protocol import PeerStatus, RosterWitness
from anonml.store import EventStore
from peer.db import PeerDB
from peer.host import PeerHost
from peer.participant import PeerNode
from peer.settings import PeerSettings
from peer.transcript import load_credentials

__all__ = ["create_app", "create_daemon", "start_peer_server", "PeerServer", "load_or_create_identity"]


def create_app(host: PeerHost, local_token: str) -> FastAPI:
    """The relay and local API of ``host``; the host's worker runs with the app's lifespan.

    An empty ``local_token`` is replaced by a random one nobody knows (the
    status API is then closed), never accepted as "no token needed".
    """
    local_token = local_token or secrets.token_urlsafe(32)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        host.start()
        try:
            yield
        finally:
            host.close()

    app = FastAPI(
        title="AnonML peer", version="1", summary="Onion relay and local status.", lifespan=lifespan
    )
    app.state.host = host

    def _node(node: str) -> bytes:
        try:
            node_id = bytes.fromhex(node)
        except ValueError:
            raise HTTPException(status_code=404, detail="no such node") from None
        if node_id not in host.nodes:
            raise HTTPException(status_code=404, detail="no such node")
        return node_id

    @app.post("/relay/{node}", status_code=202, tags=["relay"])
    async def relay(node: str, request: Request) -> Response:
        """Take one onion packet for ``node`` (raw bytes, exactly PACKET_SIZE)."""
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > PACKET_SIZE):
            host.relay.count("rejected: wrong size")
            raise HTTPException(status_code=413, detail=f"a packet is exactly {PACKET_SIZE} bytes")
        node_id = _node(node)
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > PACKET_SIZE:
                host.relay.count("rejected: wrong size")
                raise HTTPException(status_code=413, detail=f"a packet is exactly {PACKET_SIZE} bytes")
        outcome = host.relay.handle(node_id, bytes(body))
        if outcome.status >= 300:
            raise HTTPException(status_code=outcome.status, detail=outcome.detail)
        return Response(status_code=202)  # the same empty answer for every accepted packet

    @app.get("/relay/{node}/roster/{problem_id}", response_model=RosterWitness, tags=["relay"])
    def roster_witness(node: str, problem_id: str) -> RosterWitness:
        """The signed fingerprint of the roster this identity holds for ``problem_id``."""
        witness = host.witness(_node(node), problem_id)
        if witness is None:
            raise HTTPException(status_code=404, detail="this node holds no checked roster for that problem")
        return witness

    @app.get("/local/status", response_model=PeerStatus, tags=["local"])
    def status(authorization: Annotated[str | None, Header()] = None) -> PeerStatus:
        """Identities, participations by status, relay counters (bearer token required)."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.encode(), local_token.encode()):
            raise HTTPException(
                status_code=401, detail="local token required", headers={"WWW-Authenticate": "Bearer"}
            )
        return host.status()

    @app.get("/healthz", tags=["service"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


def load_or_create_identity(settings: PeerSettings) -> Identity:
    """This peer's identity, created (mode 0600) on first start."""
    return crypto_load_or_create(settings.identity_file, settings.identity_passphrase)


def create_daemon(settings: PeerSettings) -> PeerHost:
    """A host with this user's one identity, event store, ledger and state."""
    node = PeerNode(
        identity=load_or_create_identity(settings),
        store=EventStore(settings.store_url),
        ledger=PrivacyLedger(settings.ledger_url),
        user=settings.user,
    )
    return PeerHost(
        [node],
        PeerDB(settings.state_url),
        settings.policy,
        settings.aggregators,
        relay_base=settings.relay_base(),
        roster_comparisons=settings.roster_comparisons,
        credentials=load_credentials(settings.credentials_dir),
        poll_seconds=settings.poll_seconds,
    )


@dataclass
class PeerServer:
    """A peer host served by uvicorn from a thread of this process."""

    url: str
    host: PeerHost
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def start_peer_server(
    host: PeerHost, local_token: str = "", bind: str = "127.0.0.1", port: int = 0, timeout: float = 30.0
) -> PeerServer:
    """Bind ``bind:port`` (0 = free), set the host's relay URL, serve, and start its worker."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((bind, port))
    url = f"http://{bind}:{sock.getsockname()[1]}"
    if host.relay_base is None:
        host.relay_base = url
    app = create_app(host, local_token or "")
    server = uvicorn.Server(
        uvicorn.Config(
            app, access_log=False, log_level="warning", lifespan="on", backlog=2048, limit_concurrency=None
        )
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="peer-uvicorn")
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"peer server on {url} did not start")
        time.sleep(0.01)
    return PeerServer(url, host, server, thread)
