"""A real witness under uvicorn on a free loopback port, with its own home (key file, SQLite log);
and the aggregator tests' real aggregator."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.aggregator.conftest import aggregator  # noqa: F401 - a fixture, registered by import
from witness import WitnessServer, WitnessSettings, start_witness_server


@pytest.fixture
def witness(tmp_path: Path) -> Iterator[WitnessServer]:
    handle = start_witness_server(WitnessSettings(home=tmp_path / "witness", port=0))
    try:
        yield handle
    finally:
        handle.stop()
