"""Non-finite numbers and malformed bodies on every POST route of the aggregator, a peer and a witness (10).

An outsider posts ``NaN``, ``±Infinity``, ``1e400`` and a 400-digit integer — at the top level,
in lists, in nested objects — to every POST route the real services serve (enumerated from each
app's own route table, so a route added later is covered without touching this file), then bodies
that are not JSON at all. Every non-finite number must be a 422 naming where it is, no request may
be a 5xx, and neither server may log a traceback.
"""

from __future__ import annotations

import json
import logging
import math
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from hypothesis import given
from hypothesis import strategies as st

from anonml.serving import non_finite_number
from peer.policy import PeerPolicy
from tests.adversary.malicious import MaliciousAggregator, start_peers
from tests.aggregator.helpers import ADMIN
from witness import WitnessSettings, start_witness_server

#: (body, where the first non-finite number is, how it was written).
NON_FINITE: list[tuple[str, list[str | int], str]] = [
    ('{"step": NaN}', ["step"], "NaN"),
    ('{"step": 1e400}', ["step"], "1e400"),
    ('{"problem_id": NaN}', ["problem_id"], "NaN"),
    ("[NaN]", [0], "NaN"),
    ('{"a": 1.5, "b": [1, 2, {"c": -Infinity}]}', ["b", 2, "c"], "-Infinity"),
    ('{"deliveries": [{"x": 0.5}, {"x": Infinity}]}', ["deliveries", 1, "x"], "Infinity"),
    ('{"e": 1E+308, "f": 12e999}', ["f"], "12e999"),
    ('{"n": ' + "9" * 400 + "}", ["n"], "9" * 200),
    ('{"m": ' + "1" * 250 + "e60}", ["m"], "1" * 200),
    ('{"ok": "NaN Infinity e999", "bad": [[NaN]]}', ["bad", 0, 0], "NaN"),
]

#: Bodies that are not JSON numbers at all: each route answers as it does (a 4xx, logout its
#: redirect), never a 500.
MALFORMED: list[tuple[bytes, str]] = [
    (b"\xff\xfe\x00garbage", "application/octet-stream"),
    (b"\xff\xfe\x00garbage", "application/json"),
    (b"[" * 50_000 + b"]" * 50_000, "application/json"),
    (b"[" * 50_000 + b"NaN" + b"]" * 50_000, "application/json"),
    (b"not json", "text/plain"),
    (b'{"step": "NaN", "x": 1e308}', "application/json"),
    (b"", "application/json"),
]


class _Tracebacks(logging.Handler):
    """Every record logged with an exception or a traceback in its text."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info is not None or "Traceback" in text or "Exception in ASGI" in text:
            self.seen.append(f"{record.name}: {text} {record.exc_info!r}")


@pytest.fixture
def services(
    adversary: MaliciousAggregator, cohort, tmp_path: Path
) -> Iterator[dict[str, tuple[str, FastAPI]]]:
    """The aggregator, one peer host and a witness, served on loopback: name → (base URL, the app)."""
    peers = start_peers(tmp_path, adversary.url, cohort(1), PeerPolicy.for_simulation())
    witness = start_witness_server(WitnessSettings(home=tmp_path / "witness", port=0))
    try:
        assert adversary.handle is not None
        yield {
            "aggregator": (adversary.url, adversary.handle.app),
            "peer": (peers.server.url, peers.server.server.config.app),
            "witness": (witness.url, witness.server.config.app),
        }
    finally:
        witness.stop()
        peers.stop()


@pytest.fixture
def tracebacks() -> Iterator[_Tracebacks]:
    """A handler on the root logger and on uvicorn's (which does not propagate), attached after start."""
    handler = _Tracebacks()
    loggers = [logging.getLogger(), logging.getLogger("uvicorn"), logging.getLogger("uvicorn.error")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


def _post_paths(app: FastAPI) -> list[str]:
    """Every POST route of ``app``, its path parameters filled in (``node``: a 32-digit hex id)."""
    paths = []
    for route in iter_route_contexts(app.routes):  # included routers too
        if "POST" in (route.methods or ()):
            paths.append(re.sub(r"\{node\}", "ab" * 16, re.sub(r"\{(?!node\})[^}]+\}", "p1", route.path)))
    return paths


def test_every_post_route_refuses_non_finite_numbers_with_422_and_no_traceback(services, tracebacks):
    routes = {name: _post_paths(app) for name, (_, app) in services.items()}
    # The route tables are the real ones: the routes the issue names are among them.
    named = {"/problems/p1/medians/answers", "/problems/p1/registrations", "/intake"}
    assert named <= set(routes["aggregator"])
    assert "/relay/" + "ab" * 16 in routes["peer"] and len(routes["peer"]) >= 4
    assert "/cosign" in routes["witness"]
    for name, (url, _) in services.items():
        for path in routes[name]:
            for body, where, literal in NON_FINITE:
                answer = requests.post(url + path, data=body, headers=ADMIN, timeout=30)
                said = f"{name} POST {path} {body[:60]!r}: {answer.status_code} {answer.text[:300]}"
                assert answer.status_code == 422, said
                error = answer.json()["detail"][0]
                assert error["type"] == "finite_number" and error["loc"] == ["body", *where], said
                assert error["input"].startswith(literal) and "finite" in error["msg"], said
            for data, content_type in MALFORMED:
                headers = {**ADMIN, "content-type": content_type}
                answer = requests.post(
                    url + path, data=data, headers=headers, timeout=30, allow_redirects=False
                )
                said = f"{name} POST {path} {data[:30]!r} as {content_type}: {answer.status_code}"
                assert answer.status_code < 500, f"{said} {answer.text[:300]}"  # a refusal, or logout's 303
    assert tracebacks.seen == [], tracebacks.seen[:3]


def test_finite_numbers_and_strings_that_look_like_constants_pass_the_guard():
    assert non_finite_number(b'{"step": 3, "x": 1.7976931348623157e308, "y": -1e-400, "s": "NaN"}') is None
    assert non_finite_number(b'{"v": "' + b"1" * 500 + b'", "w": "Infinity"}') is None
    assert non_finite_number(b'{"n": ' + b"9" * 308 + b"}") is None
    assert non_finite_number(b"not json NaN") is None  # not JSON: the route's own parser answers
    assert non_finite_number(b'{"a": [1, {"b": NaN}], "c": Infinity}') == (("a", 1, "b"), "NaN")


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-le", "utf-32-be"])
def test_other_encodings_json_reads_are_checked_too(encoding):
    assert non_finite_number('{"step": NaN}'.encode(encoding)) == (("step",), "NaN")
    assert non_finite_number('[1, 2.5]'.encode(encoding)) is None


def test_base64_text_with_constants_and_exponents_inside_is_not_parsed_as_a_number():
    body = b'{"report": "QUJDNaNxyz5e123Infinity+/9e999", "k": [1, 2.5e10, -3]}'
    assert non_finite_number(body) is None


#: JSON values with every kind of number, the non-finite ones and integers past a double's range included.
_NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.sampled_from([1e308, -1.7976931348623157e308, 5e-324]),
)
_VALUES = st.recursive(
    st.one_of(_NUMBERS, st.text(max_size=8), st.booleans(), st.none()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


def _has_non_finite(value) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) > sys.float_info.max
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_non_finite(v) for v in value)
    return False


@given(_VALUES, st.sampled_from([None, 0, 2]))
def test_the_guard_finds_a_non_finite_number_exactly_when_the_body_holds_one(value, indent):
    # json.dumps writes NaN and ±Infinity as Python's json.loads reads them; indent varies the spacing.
    body = json.dumps(value, indent=indent).encode()
    assert (non_finite_number(body) is not None) == _has_non_finite(value), body[:200]
