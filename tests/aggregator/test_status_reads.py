"""What a status read costs in SQL (issue 31): the published documents stay out of it.

A roster is megabytes at 10,000 members. While it sat in the ``problems`` row, every read of that
row (each status poll) walked it on SQLite, and ``published()`` loaded it to test ``IS NOT NULL``.
Here the SQL of one status request is captured and no statement may read a document the response
does not need: the roster and bins never (the process parsed them once), the model only once
published (the status states its shuffle bound and calibration).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event

from aggregator.db import publish_document, published, read_document, read_documents
from anonml.protocol import Problem
from tests.aggregator.conftest import InProcessAggregator
from tests.aggregator.helpers import ADMIN, draft

#: A roster-sized document (~1 MB): large enough to span SQLite's overflow pages.
ROSTER_TEXT = json.dumps({"entries": ["x" * 100] * 10_000})
MODEL_TEXT = json.dumps({"model": {"privacy": None}, "calibration": None})
#: The columns of ``problems`` that held the documents before aggregator_0008: naming one reads it.
OLD_COLUMNS = re.compile(r"roster_json|bins_json|problems\.model_json")


@contextmanager
def statements(app: InProcessAggregator) -> Iterator[list[tuple[str, Any]]]:
    """Every (SQL, parameters) the app's engine executes inside the block."""
    seen: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, sql: str, params: Any, _context: Any, _many: bool) -> None:
        seen.append((sql, params))

    engine = app.state.engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def _problem_with_roster(app: InProcessAggregator) -> Problem:
    """A proposal in registration (its deadline an hour away) whose roster document is stored."""
    body = draft(registration_seconds=3600.0, min_peers=50).model_dump_json()
    response = app.client.post("/problems", content=body, headers=ADMIN)
    assert response.status_code == 201, response.text
    problem = Problem.model_validate_json(response.content)
    with app.state.sessions() as s, s.begin():
        publish_document(s, problem.id, "roster", ROSTER_TEXT)
    return problem


def _documents_read(seen: list[tuple[str, Any]], stored: set[str]) -> list[str]:
    """Which stored documents the statements read a body of (a lookup of an absent one reads none)."""
    read: list[str] = []
    for sql, params in seen:
        if OLD_COLUMNS.search(sql):
            read.append(sql)
        elif "problem_documents.body" in sql:
            read.extend(kind for kind in sorted(stored) if repr(kind) in repr(params))
    return read


def test_a_status_read_reads_no_document_it_does_not_serve(aggregator_app: InProcessAggregator) -> None:
    problem = _problem_with_roster(aggregator_app)
    url = f"/problems/{problem.id}/status"
    assert aggregator_app.client.get(url).status_code == 200  # the process reads the roster once here
    with statements(aggregator_app) as seen:
        first = aggregator_app.client.get(url)
    assert first.status_code == 200 and not first.json()["model_available"]
    assert any("problems" in sql for sql, _ in seen)  # the capture sees the request's SQL
    assert _documents_read(seen, {"roster"}) == []

    with aggregator_app.state.sessions() as s, s.begin():
        publish_document(s, problem.id, "model", MODEL_TEXT)
    with statements(aggregator_app) as seen:
        second = aggregator_app.client.get(url)
    assert second.status_code == 200 and second.json()["model_available"]
    # the model, which the response describes (its shuffle bound, its calibration); the roster still not
    assert _documents_read(seen, {"roster", "model"}) == ["model"]


def test_documents_read_back_as_stored_and_a_second_publication_replaces_the_first(
    aggregator_app: InProcessAggregator,
) -> None:
    problem = _problem_with_roster(aggregator_app)
    with aggregator_app.state.sessions() as s, s.begin():
        assert published(s, problem.id) == {"roster": True, "bins": False, "model": False}
        assert read_document(s, problem.id, "roster") == ROSTER_TEXT
        assert read_document(s, problem.id, "bins") is None
        publish_document(s, problem.id, "model", MODEL_TEXT)
    with aggregator_app.state.sessions() as s, s.begin():
        publish_document(s, problem.id, "model", MODEL_TEXT + " ")  # trained again
    with aggregator_app.state.sessions() as s:
        assert read_document(s, problem.id, "model") == MODEL_TEXT + " "
        both = {"roster": ROSTER_TEXT, "model": MODEL_TEXT + " "}
        assert read_documents(s, problem.id, ("roster", "bins", "model")) == both  # bins not published
        assert published(s, problem.id) == {"roster": True, "bins": False, "model": True}
        assert published(s, "no-such-problem") == {"roster": False, "bins": False, "model": False}
