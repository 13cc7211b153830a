"""A real aggregator under uvicorn on a free loopback port, with its own SQLite file."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from aggregator.app import create_app, start_server
from aggregator.settings import AggregatorSettings
from aggregator.state import AggregatorState
from tests.aggregator.helpers import TOKEN


@dataclass
class RunningAggregator:
    url: str
    settings: AggregatorSettings
    state: AggregatorState
    db_path: Path


@pytest.fixture
def aggregator(tmp_path: Path) -> Iterator[RunningAggregator]:
    db_path = tmp_path / "aggregator.db"
    settings = AggregatorSettings(
        db_url=f"sqlite:///{db_path}",
        identity_file=tmp_path / "aggregator-identity.json",
        admin_token=TOKEN,
        tick_seconds=0.05,
        intake_grace_seconds=0.5,
        allow_loopback_http=True,
    )
    handle = start_server(create_app(settings))
    try:
        yield RunningAggregator(handle.url, settings, handle.app.state.aggregator, db_path)
    finally:
        handle.stop()
