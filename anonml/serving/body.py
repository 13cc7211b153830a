"""The one request-body cap of every service: declared or streamed, a body over the cap is a 413.

:class:`BodyLimit` caps a whole app (the aggregator's, the witness's); :func:`read_body` reads one
body in full under a cap, for a middleware or route that must hold it (:class:`FiniteJson
<anonml.serving.input_guards.FiniteJson>`, the relay's packet posts). Both refuse a declared
``content-length`` over the cap before reading a byte (:func:`declared_over`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "HttpMiddleware",
    "BodyLimit",
    "BodyTooLarge",
    "declared_over",
    "read_body",
    "too_large_response",
    "empty_receive",
]


class BodyTooLarge(Exception):
    """A request body went past its cap while it was read (:func:`read_body`, :class:`BodyLimit`)."""


def declared_over(headers: Iterable[tuple[bytes, bytes]], max_bytes: int) -> bool:
    """Whether ``headers`` (an ASGI scope's) declare a ``content-length`` over ``max_bytes``.

    One that is not a number counts as over: h11 refuses such a request before an app sees it, so
    only a hand-made scope can have one, and nothing of its body is read.
    """
    for name, value in headers:
        if name == b"content-length":
            return not value.isdigit() or int(value) > max_bytes
    return False


async def read_body(receive: Receive, max_bytes: int) -> bytes | None:
    """The whole request body from ASGI ``receive``; None when the client left before it was complete.

    Raises
    ------
    BodyTooLarge
        As soon as more than ``max_bytes`` arrived (the rest is never held in memory).
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def too_large_response(max_bytes: int) -> JSONResponse:
    """The 413 of a body over ``max_bytes``."""
    return JSONResponse({"detail": f"request body larger than {max_bytes} bytes"}, status_code=413)


async def empty_receive() -> Message:
    """An ASGI ``receive`` for an answer sent without reading the request (a refusal)."""
    return {"type": "http.disconnect"}


class HttpMiddleware(ABC):
    """An ASGI middleware around ``app`` that acts on HTTP requests (:meth:`http`) only.

    Every other scope (``lifespan``, ``websocket``) goes to ``app`` untouched.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    @abstractmethod
    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one HTTP request (calling ``self.app`` to pass it on)."""


class BodyLimit(HttpMiddleware):
    """ASGI middleware: 413 for a body over ``max_bytes`` (declared or streamed), before a route parses it."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        super().__init__(app)
        self.max_bytes = max_bytes

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if declared_over(scope.get("headers", ()), self.max_bytes):
            await self._too_large(send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except BodyTooLarge:
            await self._too_large(send)

    async def _too_large(self, send: Send) -> None:
        await too_large_response(self.max_bytes)({"type": "http"}, empty_receive, send)
