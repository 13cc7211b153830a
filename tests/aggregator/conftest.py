"""A real aggregator under uvicorn on a free loopback port, with its own database (``database_url``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from aggregator.app import create_app, start_server
from aggregator.rounds import RoundDriver
from aggregator.settings import AggregatorSettings
from aggregator.state import AggregatorState
from anonml.database import sqlite_path
from tests.aggregator.helpers import aggregator_settings


@dataclass
class RunningAggregator:
    url: str
    settings: AggregatorSettings
    state: AggregatorState
    db_path: Path | None  # the SQLite file; None on PostgreSQL
    driver: RoundDriver | None = None  # its phase machine (the one-trainer race drives it directly)


@pytest.fixture
def aggregator(tmp_path: Path, database_url: str) -> Iterator[RunningAggregator]:
    settings = aggregator_settings(tmp_path, db_url=database_url)
    handle = start_server(create_app(settings))
    try:
        app = handle.app
        yield RunningAggregator(
            handle.url, settings, app.state.aggregator, sqlite_path(database_url), app.state.driver
        )
    finally:
        handle.stop()
