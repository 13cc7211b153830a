"""What routes ask for: the process state, a database session, the admin check."""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request
from sqlalchemy.orm import Session

from aggregator.state import AggregatorState

__all__ = ["get_state", "get_session", "require_admin", "StateDep", "SessionDep", "AdminDep"]


def get_state(request: Request) -> AggregatorState:
    return request.app.state.aggregator


def get_session(state: Annotated[AggregatorState, Depends(get_state)]) -> Iterator[Session]:
    """A session per request; the route opens the transaction (``with session.begin():``)."""
    with state.sessions() as session:
        yield session


def require_admin(
    state: Annotated[AggregatorState, Depends(get_state)],
    authorization: Annotated[str | None, Header()] = None,
) -> None:
    """Admin actions need ``Authorization: Bearer <admin token>`` (constant-time compare)."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.encode(), state.admin_token.encode()):
        raise HTTPException(
            status_code=401,
            detail="admin token required: send 'Authorization: Bearer <token>'",
            headers={"WWW-Authenticate": "Bearer"},
        )


StateDep = Annotated[AggregatorState, Depends(get_state)]
SessionDep = Annotated[Session, Depends(get_session)]
AdminDep = Annotated[None, Depends(require_admin)]
