"""The phase loop outlives any error, and ``/healthz`` answers for the database, not just the process."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

from aggregator.app import ServerHandle, create_app, start_server
from aggregator.rounds import RoundDriver
from tests.aggregator.helpers import (
    WirePeer,
    aggregator_settings,
    close_registration,
    draft,
    propose,
    wait_phase,
)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServerHandle]:
    settings = aggregator_settings(tmp_path)
    handle = start_server(create_app(settings))
    try:
        yield handle
    finally:
        handle.stop()


def test_one_failing_advance_and_a_failing_listing_do_not_stop_the_loop(served, monkeypatch) -> None:
    driver: RoundDriver = served.app.state.driver
    broken = propose(served.url, draft(min_peers=4))
    healthy = propose(served.url, draft(min_peers=4))
    for problem in (broken, healthy):
        for _ in range(4):
            assert WirePeer().register(served.url, problem).status_code == 201
    injected = threading.Event()
    listing_failed = threading.Event()
    # The fault is armed once registration closed: a tick that met it while the problem was still
    # in registration (a loaded machine) failed the problem before the close, which then got 409.
    armed = threading.Event()
    real_advance, real_active = driver.advance, driver._active

    def advance(pid: str) -> None:
        if pid == broken.id and armed.is_set() and not injected.is_set():
            injected.set()
            raise RuntimeError("injected fault")
        real_advance(pid)

    def active() -> list[str]:
        if not listing_failed.is_set():
            listing_failed.set()
            raise RuntimeError("QueuePool limit reached (injected)")  # as outside any problem's try
        return real_active()

    monkeypatch.setattr(driver, "advance", advance)
    monkeypatch.setattr(driver, "_active", active)
    for problem in (broken, healthy):
        close_registration(served.url, problem.id)
    armed.set()
    st = wait_phase(served.url, healthy.id, ("reporting", "failed"))
    assert listing_failed.is_set() and injected.is_set()
    assert st.phase == "reporting", st.message  # the loop kept going past both faults
    failed = wait_phase(served.url, broken.id, ("failed",))
    assert failed.message == "internal error: injected fault"
    assert driver._thread is not None and driver._thread.is_alive()


def test_healthz_answers_503_when_the_database_cannot_answer(served, tmp_path: Path) -> None:
    state = served.app.state.aggregator
    ok = requests.get(f"{served.url}/healthz", timeout=30)
    assert ok.status_code == 200 and ok.json()["identity"] == state.public_identity.hex()
    real = state.sessions
    dead = create_engine(f"sqlite:///{tmp_path / 'no-such-dir' / 'x.db'}")
    state.sessions = sessionmaker(dead)
    try:
        down = requests.get(f"{served.url}/healthz", timeout=30)
        assert down.status_code == 503
        assert down.json()["status"] == "unavailable" and "OperationalError" in down.json()["detail"]
    finally:
        state.sessions = real
        dead.dispose()
    assert requests.get(f"{served.url}/healthz", timeout=30).status_code == 200
