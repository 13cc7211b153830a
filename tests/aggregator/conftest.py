"""A real aggregator under uvicorn on a free loopback port, with its own SQLite file."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from aggregator.app import create_app, start_server
from aggregator.settings import AggregatorSettings
from aggregator.state import AggregatorState
from tests.aggregator.helpers import aggregator_settings


@dataclass
class RunningAggregator:
    url: str
    settings: AggregatorSettings
    state: AggregatorState
    db_path: Path


@pytest.fixture
def aggregator(tmp_path: Path) -> Iterator[RunningAggregator]:
    settings = aggregator_settings(tmp_path)
    db_path = tmp_path / "aggregator.db"
    handle = start_server(create_app(settings))
    try:
        yield RunningAggregator(handle.url, settings, handle.app.state.aggregator, db_path)
    finally:
        handle.stop()
