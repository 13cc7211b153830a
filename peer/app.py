"""The peer's FastAPI app: :func:`create_app` assembles the host, its routers and its worker.

Routers: :mod:`peer.routes.relay` (onion packets and roster witnesses, for
other peers), :mod:`peer.routes.local` (status for this peer's user,
bearer local token; ``/healthz``) and :mod:`peer.routes.dashboard` (the
person's pages under ``/ui``, the local token to log in); what the API routes
ask for is in :mod:`peer.deps`.

Served by uvicorn with ``access_log=False`` (a relay must not keep a log of
who sent it what, and when). A JSON body holding a non-finite number is a 422
and no body makes a 500 (:func:`anonml.serving.install_input_guards`). Under
overload a relay post that could not be served before its sender's packet
deadline is answered ``503`` with ``Retry-After`` (:func:`relay_admission`;
counted ``"posts shed: overloaded"`` in the relay counters), which the sender
and the previous hop retry.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI

from anonml import outbound, serving
from anonml.crypto import Identity
from anonml.crypto import load_or_create_identity as crypto_load_or_create
from anonml.privacy import PrivacyLedger
from anonml.serving import ServerTls, ThreadedServer, base_url, install_input_guards
from anonml.store import EventStore
from anonml.web import local_api_docs
from peer.db import PeerDB
from peer.host import PeerHost
from peer.participant import PeerNode
from peer.routes import dashboard, local, relay
from peer.settings import PeerSettings
from peer.transcript import load_credentials

__all__ = [
    "create_app",
    "relay_admission",
    "create_daemon",
    "start_peer_server",
    "PeerServer",
    "load_or_create_identity",
]


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The host's worker runs while the app serves; the host is closed after."""
    host: PeerHost = app.state.host
    host.start()
    try:
        yield
    finally:
        host.close()


#: Posts of onion packets to this host's relays (one packet or a batch): their senders and previous
#: hops post with a packet's deadline.
RELAY_POSTS = serving.RouteClass("relay posts", outbound.PACKET_DEADLINE)


def _relay_class(method: str, path: str) -> serving.RouteClass | None:
    """Only relay posts are admitted by the gate; the user's own pages and status never wait on it."""
    return RELAY_POSTS if method == "POST" and path.startswith("/relay/") else None


def relay_admission(host: PeerHost) -> serving.Admission:
    """The admission gate of a host's relay posts; each shed post counted in the relay's counters."""
    return serving.Admission(_relay_class, on_shed=lambda _: host.relay.count("posts shed: overloaded"))


def create_app(source: PeerSettings | PeerHost | None = None, local_token: str | None = None) -> FastAPI:
    """The relay and local API of a host: ``source`` is the host, or settings to build one from.

    ``local_token`` defaults to the settings' token (when built from
    settings); an empty one is replaced by a random one nobody knows (the
    status API is then closed), never accepted as "no token needed".
    """
    if isinstance(source, PeerHost):
        host = source
    else:
        settings = source or PeerSettings.from_env()
        host = create_daemon(settings)
        if local_token is None:
            local_token = settings.resolved_local_token()
    app = FastAPI(
        title="AnonML peer", version="1", summary="Onion relay and local status.", lifespan=_lifespan,
        docs_url=None, redoc_url=None,  # /docs from local files (local_api_docs), never a CDN
    )
    local_api_docs(app, "AnonML peer")
    app.state.host = host
    app.state.local_token = local_token or secrets.token_urlsafe(32)
    app.include_router(relay.router)
    app.include_router(local.router)
    app.include_router(dashboard.router)
    install_input_guards(app)
    app.state.admission = relay_admission(host)
    app.add_middleware(serving.AdmissionGate, admission=app.state.admission)  # runs first
    return app


def load_or_create_identity(settings: PeerSettings) -> Identity:
    """This peer's identity, created (mode 0600) on first start."""
    return crypto_load_or_create(settings.identity_file, settings.identity_passphrase)


def create_daemon(settings: PeerSettings) -> PeerHost:
    """A host with this user's one identity, event store, ledger and state (and its CA bundle trusted)."""
    if settings.ca_bundle is not None:
        outbound.trust_ca_bundle(settings.ca_bundle)
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
class PeerServer(ThreadedServer):
    """A peer host served by uvicorn from a thread of this process."""

    host: PeerHost


def start_peer_server(
    host: PeerHost,
    local_token: str = "",
    bind: str = "127.0.0.1",
    port: int = 0,
    timeout: float = 30.0,
    tls: ServerTls | None = None,
) -> PeerServer:
    """Bind ``bind:port`` (0 = free), set the host's relay URL, serve (https: ``tls``), start its worker."""
    sock = serving.bind(bind, port)
    if host.relay_base is None:  # the relay's URL is in the app's answers, so known before it is made
        host.relay_base = base_url(bind, sock.getsockname()[1], tls)
    served = serving.serve_in_thread(
        create_app(host, local_token or ""), bind, name="peer server", sock=sock, tls=tls, timeout=timeout
    )
    return PeerServer(served.url, served.server, served.thread, host)
