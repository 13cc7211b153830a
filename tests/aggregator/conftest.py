"""A real aggregator under uvicorn on a free loopback port, with its own database (``database_url``);
one shared by a module's tests (``module_aggregator``), and one app in process (``aggregator_app``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from aggregator.app import create_app, start_server
from aggregator.rounds import RoundDriver
from aggregator.settings import AggregatorSettings
from aggregator.state import AggregatorState
from anonml.database import sqlite_path
from tests.aggregator.helpers import LONG_GRACE_SECONDS, aggregator_settings


@dataclass
class RunningAggregator:
    url: str
    settings: AggregatorSettings
    state: AggregatorState
    db_path: Path | None  # the SQLite file; None on PostgreSQL
    driver: RoundDriver | None = None  # its phase machine (the one-trainer race drives it directly)


@dataclass
class InProcessAggregator:
    """An aggregator app driven in process (FastAPI's TestClient: the app's own lifespan, no socket)."""

    client: TestClient
    settings: AggregatorSettings
    state: AggregatorState


@pytest.fixture
def aggregator(tmp_path: Path, database_url: str) -> Iterator[RunningAggregator]:
    yield from _serve(tmp_path, database_url)


@pytest.fixture
def long_grace_aggregator(tmp_path: Path, database_url: str) -> Iterator[RunningAggregator]:
    """An aggregator whose intake waits a minute past ``t_r`` for late deliveries."""
    yield from _serve(tmp_path, database_url, intake_grace_seconds=LONG_GRACE_SECONDS)


@pytest.fixture(scope="module")
def module_aggregator(
    tmp_path_factory: pytest.TempPathFactory, module_database_url: str
) -> Iterator[RunningAggregator]:
    """One real aggregator for a module whose tests each propose their own problems and read only
    those (building an app, its database and its migrations is most of a fresh server's cost)."""
    yield from _serve(tmp_path_factory.mktemp("aggregator"), module_database_url)


@pytest.fixture(scope="module")
def aggregator_app(
    tmp_path_factory: pytest.TempPathFactory, module_database_url: str
) -> Iterator[InProcessAggregator]:
    """One aggregator app per module, in process: for route contracts (status codes, validation,
    authentication, body caps), which a real socket does not change."""
    settings = aggregator_settings(tmp_path_factory.mktemp("aggregator"), db_url=module_database_url)
    app = create_app(settings)
    with TestClient(app) as client:  # runs the lifespan: the phase machine starts and stops with it
        yield InProcessAggregator(client, settings, app.state.aggregator)


def _serve(root: Path, database_url: str, **overrides: object) -> Iterator[RunningAggregator]:
    """A real aggregator on ``database_url`` (files under ``root``; ``overrides`` change settings)."""
    settings = aggregator_settings(root, db_url=database_url, **overrides)
    handle = start_server(create_app(settings))
    try:
        app = handle.app
        yield RunningAggregator(
            handle.url, settings, app.state.aggregator, sqlite_path(database_url), app.state.driver
        )
    finally:
        handle.stop()
