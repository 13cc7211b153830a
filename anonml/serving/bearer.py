"""The one bearer-token check of every service's protected API (the aggregator's admin, the peer's local)."""

from __future__ import annotations

import hmac

from fastapi import HTTPException

__all__ = ["bearer_matches", "require_bearer"]


def bearer_matches(authorization: str | None, expected: str) -> bool:
    """Whether an ``Authorization`` header is ``Bearer <expected>`` (scheme case-insensitive, RFC 6750 §2.1).

    The token is compared in constant time (:func:`hmac.compare_digest`), so its answer time tells
    nothing of how much of a guess was right. An empty ``expected`` matches nothing.
    """
    scheme, _, token = (authorization or "").partition(" ")
    if not expected or scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(token.encode(), expected.encode())


def require_bearer(authorization: str | None, expected: str, detail: str) -> None:
    """Pass when :func:`bearer_matches`, else raise 401 with ``detail`` and ``WWW-Authenticate: Bearer``."""
    if not bearer_matches(authorization, expected):
        raise HTTPException(status_code=401, detail=detail, headers={"WWW-Authenticate": "Bearer"})
