"""What every service's app installs so that no request body can produce a 500 (:func:`install_input_guards`).

A JSON body holding a non-finite number is a 422 naming its place (:class:`FiniteJson`), and
validation errors always encode (:func:`validation_error_response`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from anonml.serving.body import BodyTooLarge, HttpMiddleware, declared_over, read_body, too_large_response

__all__ = [
    "MAX_JSON_BODY_BYTES",
    "FiniteJson",
    "non_finite_number",
    "validation_error_response",
    "install_input_guards",
]


#: Largest JSON body :class:`FiniteJson` reads when the service sets no limit of its own (a larger
#: one is refused with 413 before it is held in memory).
MAX_JSON_BODY_BYTES = 1 << 20

#: Digits of the largest integer within a double's range (``10**308`` has 309).
_DOUBLE_DIGITS = 309

#: Every digit as ``0`` and ``E`` as ``e`` (:meth:`bytes.translate`), so that the shapes of a number
#: past a double's range are plain substrings, found at C speed (:func:`_suspect`).
_SHAPES = bytes.maketrans(b"123456789E", b"000000000e")

#: In the translated text: an exponent of three digits or more (after a digit), or a run of 100
#: digits. (A literal reaches 1e308 only if its integer digits plus its exponent exceed 308, so with
#: an exponent of two digits at most it has over 200 digits.) In the text itself: the constants.
_TRANSLATED_SHAPES = (b"0e000", b"0e+000", b"0" * 100)
_CONSTANTS = (b"NaN", b"Infinity")

#: What may precede a token in JSON: the start, whitespace, ``[``, ``:`` or ``,``.
_BEFORE_TOKEN = frozenset(b" \t\r\n[:,")

#: What a number token may hold before its exponent (sign, digits, point).
_NUMBER_PART = frozenset(b"0123456789.-")

#: How much of an offending literal or an echoed input an error shows.
_SHOWN = 200


@dataclass(frozen=True)
class _NonFinite:
    """A number :func:`non_finite_number` refuses, as it was written in the body."""

    text: str


def _suspect(body: bytes) -> bool:
    """Whether ``body`` may hold a non-finite number: one of the shapes above at the start of a token.

    Only such a body is parsed (:func:`non_finite_number`). Base64 text turns up ``NaN`` or ``5e123``
    by chance (a few dozen times per MiB of reports), but always after a letter, digit, ``+`` or
    ``/``, where JSON puts no number: those places are skipped, so a body of ordinary reports costs
    a translation and a few substring searches, not a parse. A body that is not a suspect holds only
    finite numbers.
    """
    shapes = body.translate(_SHAPES)
    for text, needles in ((shapes, _TRANSLATED_SHAPES), (body, _CONSTANTS)):
        for needle in needles:
            at = text.find(needle)
            while at >= 0:
                start = at
                while start > 0 and body[start - 1] in _NUMBER_PART:  # back to the token's first byte
                    start -= 1
                if start == 0 or body[start - 1] in _BEFORE_TOKEN:
                    return True
                at = text.find(needle, at + 1)
    return False


def non_finite_number(body: bytes) -> tuple[tuple[str | int, ...], str] | None:
    """Where the first number of JSON ``body`` that is not a finite double is, and how it was written.

    Refused: ``NaN``, ``Infinity``, ``-Infinity`` (which Python's :func:`json.loads` accepts though
    RFC 8259 §6 has no such values) and literals that overflow a double, integers included
    (``1e400``, 400 digits): RFC 8259 §6 gives numbers within IEEE 754 binary64 as the range
    implementations agree on, and every number of the protocol is within it. Returns
    ``(path, literal)`` — ``path`` the keys and list indices leading to it, in document order — or
    None when every number is finite or the body is not JSON at all (the route's own parser then
    answers for that).
    """
    encoding = json.detect_encoding(body)  # what json.loads (and so FastAPI) decodes it with
    if encoding != "utf-8":  # UTF-16/32, or a byte-order mark: the scan reads UTF-8 without one
        try:
            body = body.decode(encoding).lstrip("\ufeff").encode("utf-8")
        except UnicodeError:
            return None  # json.loads cannot read it either
    if not _suspect(body):
        return None
    marked: list[_NonFinite] = []

    def mark(text: str) -> _NonFinite:
        marked.append(_NonFinite(text))
        return marked[-1]

    def parse_float(text: str) -> float | _NonFinite:
        value = float(text)
        return value if math.isfinite(value) else mark(text)

    def parse_int(text: str) -> int | _NonFinite:
        if len(text.lstrip("-")) > _DOUBLE_DIGITS:  # past the range, and past int()'s digit limit
            return mark(text)
        value = int(text)
        try:
            float(value)
        except OverflowError:
            return mark(text)
        return value

    try:
        value = json.loads(body, parse_constant=mark, parse_float=parse_float, parse_int=parse_int)
    except (ValueError, RecursionError):  # not JSON, not UTF-8/16/32, nested too deep
        return None
    if not marked:
        return None  # the match was inside a string
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, _NonFinite):
            return path, item.text
        if isinstance(item, dict):
            stack.extend(((*path, k), v) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend(((*path, i), v) for i, v in reversed(list(enumerate(item))))
    return None


def _json_content(scope: Scope) -> bool:
    """Whether FastAPI parses this request's body as JSON: ``application/json`` or ``application/*+json``."""
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            media = value.split(b";", 1)[0].strip().lower()
            return media == b"application/json" or (
                media.startswith(b"application/") and media.endswith(b"+json")
            )
    return False  # FastAPI's strict content type: a body without one is not parsed as JSON

def _shown(text: str) -> str:
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}… ({len(text)} characters)"


class FiniteJson(HttpMiddleware):
    """ASGI middleware: a JSON body holding a non-finite number is answered 422, before any route sees it.

    The body of a JSON request (:func:`_json_content`) is read in full — at most ``max_body_bytes``
    (413 past it, declared or streamed) — checked with :func:`non_finite_number`, and handed to the
    app unchanged when it passes. The 422 has FastAPI's shape: ``{"detail": [{"type":
    "finite_number", "loc": ["body", …path], "msg": …, "input": literal}]}``. Other bodies (onion
    packets, forms) pass untouched.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int = MAX_JSON_BODY_BYTES) -> None:
        super().__init__(app)
        self.max_body_bytes = max_body_bytes

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _json_content(scope):
            await self.app(scope, receive, send)
            return
        too_large = too_large_response(self.max_body_bytes)
        if declared_over(scope.get("headers", ()), self.max_body_bytes):
            await too_large(scope, receive, send)
            return
        try:
            body = await read_body(receive, self.max_body_bytes)
        except BodyTooLarge:
            await too_large(scope, receive, send)
            return
        if body is None:
            return  # the client left before its body was complete: no one to answer
        found = non_finite_number(body)
        if found is not None:
            path, literal = found
            error = {
                "type": "finite_number",
                "loc": ["body", *path],
                "msg": f"{_shown(literal)} is not a finite number: JSON numbers must be finite "
                "(no NaN, no Infinity, nothing beyond ±1.8e308)",
                "input": _shown(literal),
            }
            await JSONResponse({"detail": [error]}, status_code=422)(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect, when it comes

        await self.app(scope, replay, send)


def _encodable(value: Any, depth: int = 0) -> Any:
    """``value`` in a form JSON can carry: non-finite floats by name, bytes as text, long text cut."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, str):
        return _shown(value)
    if isinstance(value, bytes | bytearray):
        return _shown(bytes(value[: _SHOWN * 4]).decode("utf-8", "backslashreplace"))
    if depth >= 32:
        return "…"
    if isinstance(value, dict):
        return {str(k): _encodable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_encodable(v, depth + 1) for v in value]
    return _shown(str(value))


async def validation_error_response(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422 for a request that does not validate, with every value made encodable.

    FastAPI's own handler echoes each error's input as it came: a NaN (JSON cannot encode it) or a
    body of invalid UTF-8 (``jsonable_encoder`` decodes bytes strictly) then made the answer itself
    fail, a 500 with a traceback. Here a non-finite float is given by name, bytes as text with bad
    bytes escaped, and long inputs cut (:func:`_encodable`).
    """
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    return JSONResponse({"detail": [_encodable(e) for e in errors]}, status_code=422)


def install_input_guards(app: FastAPI, *, max_body_bytes: int = MAX_JSON_BODY_BYTES) -> None:
    """Make ``app`` answer every request body it cannot take with a 4xx and a reason, never a 500.

    Installs :class:`FiniteJson` (422 for a non-finite number anywhere in a JSON body, 413 for a
    JSON body over ``max_body_bytes``) and :func:`validation_error_response` for request validation
    errors. Call it in the function that builds the app, before middleware that must run first
    (a body limit) is added: what is added last runs first. Every service calls it — the
    aggregator, the peer host, the witness.
    """
    app.add_exception_handler(RequestValidationError, validation_error_response)
    app.add_middleware(FiniteJson, max_body_bytes=max_body_bytes)
