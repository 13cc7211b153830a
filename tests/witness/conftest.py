"""A real witness under uvicorn on a free loopback port, with its own home (key file, SQLite log);
one witness app in process per module (``witness_app``); and the aggregator tests' real aggregator."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.aggregator.conftest import aggregator  # noqa: F401 - a fixture, registered by import
from witness import WitnessServer, WitnessSettings, start_witness_server
from witness.app import create_app
from witness.service import Witness


@pytest.fixture
def witness(tmp_path: Path) -> Iterator[WitnessServer]:
    handle = start_witness_server(WitnessSettings(home=tmp_path / "witness", port=0))
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture(scope="module")
def witness_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """One witness app per module, driven in process: for refusals that store nothing (a real socket
    changes none of their answers; the real stack is served in the other tests)."""
    settings = WitnessSettings(home=tmp_path_factory.mktemp("witness") / "home", port=0)
    witness = Witness.from_settings(settings)
    try:
        with TestClient(create_app(witness, settings.max_body_bytes)) as client:
            yield client
    finally:
        witness.close()
