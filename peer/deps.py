"""What the peer's routes ask for: the host, a hosted node, a client on this machine, the local token."""

from __future__ import annotations

import ipaddress
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request

from anonml.serving import require_bearer
from peer.host import PeerHost

__all__ = [
    "get_host",
    "hosted_node",
    "loopback_only",
    "require_local_token",
    "HostDep",
    "NodeDep",
    "LocalDep",
]


def get_host(request: Request) -> PeerHost:
    return request.app.state.host


def hosted_node(node: str, host: Annotated[PeerHost, Depends(get_host)]) -> bytes:
    """The node id named by the path (hex) if this process hosts it, else 404 (one answer for both)."""
    try:
        node_id = bytes.fromhex(node)
    except ValueError:
        raise HTTPException(status_code=404, detail="no such node") from None
    if node_id not in host.nodes:
        raise HTTPException(status_code=404, detail="no such node")
    return node_id


def loopback_only(request: Request) -> None:
    """Answer only clients on this machine: the relay may listen elsewhere, the person's own pages may not."""
    client = request.client.host if request.client is not None else ""
    try:
        local = ipaddress.ip_address(client).is_loopback
    except ValueError:
        local = False
    if not local:
        raise HTTPException(status_code=403, detail="this page answers only on this machine (127.0.0.1)")


def require_local_token(
    request: Request,
    _: Annotated[None, Depends(loopback_only)],
    authorization: Annotated[str | None, Header()] = None,
) -> None:
    """The local API: this machine only, ``Authorization: Bearer <local token>`` (:func:`require_bearer`)."""
    require_bearer(authorization, request.app.state.local_token, "local token required")


HostDep = Annotated[PeerHost, Depends(get_host)]
NodeDep = Annotated[bytes, Depends(hosted_node)]
LocalDep = Annotated[None, Depends(require_local_token)]
