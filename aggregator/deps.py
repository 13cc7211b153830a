"""What routes ask for: the process state, a database session, the admin check."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlalchemy.orm import Session

from aggregator.state import AggregatorState
from anonml.serving import require_bearer

__all__ = ["get_state", "get_session", "require_admin", "StateDep", "SessionDep", "AdminDep"]


def get_state(request: Request) -> AggregatorState:
    return request.app.state.aggregator


#: Requests holding a database session at once. Waiting for a slot takes no worker thread,
#: and a request may open one more short session (a refusal's counter), so twice this stays
#: inside the default connection pool (5 + 10 overflow): no request waits on the pool.
SESSION_CONCURRENCY = 6


async def get_session(state: Annotated[AggregatorState, Depends(get_state)]) -> AsyncIterator[Session]:
    """A session per request; the route opens the transaction (``with session.begin():``).

    Closed when the route function returns, before the response is sent
    (``scope="function"``), on the event loop: closing never waits for a
    worker thread, so a connection is never held while the threads are busy.
    """
    session = state.sessions()
    try:
        yield session
    finally:
        session.close()


def require_admin(
    state: Annotated[AggregatorState, Depends(get_state)],
    authorization: Annotated[str | None, Header()] = None,
) -> None:
    """Admin actions need ``Authorization: Bearer <admin token>`` (:func:`anonml.serving.require_bearer`)."""
    require_bearer(
        authorization, state.admin_token, "admin token required: send 'Authorization: Bearer <token>'"
    )


StateDep = Annotated[AggregatorState, Depends(get_state)]
SessionDep = Annotated[
    Session, Depends(get_session, scope="function", max_concurrency=SESSION_CONCURRENCY)
]
AdminDep = Annotated[None, Depends(require_admin)]
