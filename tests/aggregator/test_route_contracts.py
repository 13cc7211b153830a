"""The aggregator's route contracts in process: admin authentication, body caps, JSON-only bodies,
unknown problems and the OpenAPI listing — every route the app serves, driven through FastAPI's
TestClient over one app per module (a real socket changes none of these answers; the real stack is
tested over uvicorn in the other files of this folder). Each test proposes its own problem and reads
only what concerns it, so the tests share the app whatever their order.
"""

from __future__ import annotations

from typing import Any

from anonml.protocol import Problem
from tests.aggregator.conftest import InProcessAggregator
from tests.aggregator.helpers import ADMIN, JSON, WirePeer, draft
from tests.databases import table_rows
from tests.route_contracts import openapi_operations, takes_authorization

#: A body that is not JSON: parsed as JSON only, never unpickled.
PICKLE = b"\x80\x04pickle"
UNKNOWN = "p-nope"
ADMIN_REFUSAL = "admin token required"


def _url(path: str, problem_id: str) -> str:
    """``path`` with its parameters filled: the problem's id, a well-formed fingerprint, a stage."""
    return path.format(problem_id=problem_id, fingerprint="00" * 32, stage="roster")


def _propose(app: InProcessAggregator, **changes: Any) -> Problem:
    response = app.client.post("/problems", content=draft(**changes).model_dump_json(), headers=ADMIN)
    assert response.status_code == 201, response.text
    return Problem.model_validate_json(response.content)


def _phase(app: InProcessAggregator, problem_id: str) -> str:
    return app.client.get(f"/problems/{problem_id}/status").json()["phase"]


def _registered(app: InProcessAggregator, problem_id: str) -> list[bytes]:
    sql = f"SELECT identity FROM registrations WHERE problem_id = '{problem_id}' ORDER BY id"
    return [bytes(row[0]) for row in table_rows(app.settings.db_url, sql)]


def test_propose_needs_the_admin_token(aggregator_app: InProcessAggregator) -> None:
    client = aggregator_app.client
    listed = client.get("/problems").json()
    body = draft().model_dump_json()
    assert client.post("/problems", content=body, headers=JSON).status_code == 401
    wrong = {**JSON, "Authorization": "Bearer not-the-token"}
    assert client.post("/problems", content=body, headers=wrong).status_code == 401
    assert client.get("/problems").json() == listed  # nothing was published


def test_every_admin_route_refuses_a_missing_or_wrong_token_and_changes_nothing(
    aggregator_app: InProcessAggregator,
) -> None:
    problem = _propose(aggregator_app, min_peers=2)
    operations = openapi_operations(aggregator_app.client)
    admin_routes = [(m, p) for m, p, op in operations if takes_authorization(op)]
    assert {(m, p) for m, p in admin_routes} >= {
        ("POST", "/problems"),
        ("POST", "/problems/{problem_id}/close"),
        ("POST", "/problems/{problem_id}/train"),
        ("POST", "/problems/{problem_id}/evaluation"),
        ("GET", "/problems/{problem_id}/evaluation"),
    }
    refused = (JSON, {**JSON, "Authorization": "Bearer not-the-token"}, {**JSON, "Authorization": ""})
    for method, path in admin_routes:
        for headers in refused:
            url = _url(path, problem.id)
            response = aggregator_app.client.request(method, url, content=b"{}", headers=headers)
            assert response.status_code == 401, (method, path, headers, response.text)
            assert ADMIN_REFUSAL in response.json()["detail"], (method, path)
    assert _phase(aggregator_app, problem.id) == "registration"  # no close, no train went through


def test_every_post_route_refuses_a_body_over_the_cap_and_a_body_that_is_not_json(
    aggregator_app: InProcessAggregator,
) -> None:
    problem = _propose(aggregator_app)
    huge = b"{" + b" " * (aggregator_app.settings.max_body_bytes + 10) + b"}"
    operations = openapi_operations(aggregator_app.client)
    posts = [p for m, p, op in operations if m == "POST" and "requestBody" in op]
    assert "/problems/{problem_id}/registrations" in posts and "/intake" in posts
    for path in posts:
        url = _url(path, problem.id)
        over = aggregator_app.client.post(url, content=huge, headers=ADMIN)
        assert over.status_code == 413, (path, over.text)
        pickled = aggregator_app.client.post(url, content=PICKLE, headers=ADMIN)
        assert pickled.status_code in (400, 422), (path, pickled.text)
    assert _registered(aggregator_app, problem.id) == []  # nothing of either was stored
    assert _phase(aggregator_app, problem.id) == "registration"


def test_a_registration_for_an_unknown_problem_is_404_and_the_problem_routes_say_so(
    aggregator_app: InProcessAggregator,
) -> None:
    client = aggregator_app.client
    problem = _propose(aggregator_app)
    peer = WirePeer()
    registration = peer.registration(problem).model_dump_json()
    unknown = client.post(f"/problems/{UNKNOWN}/registrations", content=registration, headers=JSON)
    assert unknown.status_code == 404
    for path in ("/problems/{problem_id}", "/problems/{problem_id}/status", "/problems/{problem_id}/model"):
        assert client.get(_url(path, UNKNOWN)).status_code == 404, path
    assert _registered(aggregator_app, problem.id) == []


def test_openapi_lists_every_route(aggregator_app: InProcessAggregator) -> None:
    paths = aggregator_app.client.get("/openapi.json").json()["paths"]
    for path in (
        "/problems",
        "/problems/{problem_id}/registrations",
        "/problems/{problem_id}/roster",
        "/problems/{problem_id}/medians/answers",
        "/problems/{problem_id}/medians/answers/batch",
        "/problems/{problem_id}/calibration",
        "/problems/{problem_id}/calibration/answers",
        "/problems/{problem_id}/tokens",
        "/intake",
        "/problems/{problem_id}/model",
        "/problems/{problem_id}/status",
    ):
        assert path in paths
