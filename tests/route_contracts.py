"""What the route-contract tests of the three services (aggregator, peer, witness) read off an app.

Each service's contract test checks that its OpenAPI document lists what it serves and that every
protected operation asks for its token; the reading of routes and operations is the same for all.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient

__all__ = ["DOC_ROUTES", "served_routes", "openapi_operations", "takes_authorization"]

#: Served outside the OpenAPI document by every service: the API's own docs.
DOC_ROUTES = {
    ("GET", "/openapi.json"),
    ("HEAD", "/openapi.json"),
    ("GET", "/docs"),
    ("GET", "/docs/static/{name}"),
}


def served_routes(app: FastAPI) -> set[tuple[str, str]]:
    """(method, path) of every route the app serves, included routers and schema-less pages too."""
    return {(m, route.path) for route in iter_route_contexts(app.routes) for m in route.methods or ()}


def openapi_operations(client: TestClient) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path template, operation) of every operation in the app's OpenAPI document."""
    paths = client.get("/openapi.json").json()["paths"]
    return [(method.upper(), path, op) for path, ops in paths.items() for method, op in ops.items()]


def takes_authorization(operation: dict[str, Any]) -> bool:
    """Whether the operation declares an ``Authorization`` header (a bearer token)."""
    return any(p["in"] == "header" and p["name"] == "authorization" for p in operation.get("parameters", []))
