"""A full disk under the aggregator (issue 26, item 4): 503 with Retry-After, one log line, not ready,
nothing accepted lost.

Two ways to fill it. Everywhere: SQLite's own ``PRAGMA max_page_count`` set to
the database's current size on every connection, so each write that needs a
new page fails with SQLite's real ``SQLITE_FULL`` ("database or disk is full")
— the error a full disk gives, raised by the real engine under the real app.
As root (CI): a real 4 MiB tmpfs holding the aggregator's database, filled by
a file until ``ENOSPC``, under a real aggregator process; freed by deleting
the file. Either way, while full: every registration is answered 503 with
``Retry-After`` (never 500), ``/healthz`` says not ready, the log says so
once and holds no traceback; once freed: ``/healthz`` is ready, the refused
registrations are taken, and every registration answered 201 is counted.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import requests
from sqlalchemy import event

from aggregator import storage
from aggregator.app import create_app, start_server, start_server_process
from anonml.protocol import Problem
from tests.aggregator.helpers import WirePeer, aggregator_settings, draft, propose, status
from tests.faults.helpers import fill, tmpfs
from tests.waiting import wait_until

FULL_LINE = "storage cannot write"
BACK_LINE = "storage writes again"


def test_a_write_that_commits_while_others_still_fail_does_not_end_the_streak(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A half-full disk: the lease row's in-place update commits between registrations that need a
    # new page and are refused (a loaded run saw /healthz say ok between two refusals).
    caplog.set_level(logging.INFO, logger="anonml.aggregator")
    clock = [1000.0]
    monkeypatch.setattr(storage.time, "monotonic", lambda: clock[0])
    health = storage.StorageHealth("sqlite:///:memory:")
    health.failed("database or disk is full", "POST /registrations")
    clock[0] += 1.0
    health.recovered()  # the lease renewal committed
    assert health.not_ready() == "storage: database or disk is full"
    health.failed("database or disk is full", "POST /registrations")
    clock[0] += storage.RETRY_AFTER_SECONDS - 0.1
    health.recovered()
    assert health.not_ready() is not None and health.refused == 2
    clock[0] += 0.2  # no write refused for RETRY_AFTER_SECONDS: the next commit ends the streak
    health.recovered()
    assert health.not_ready() is None and health.refused == 0
    lines = [r.getMessage() for r in caplog.records]
    assert sum(FULL_LINE in m for m in lines) == 1 and sum(BACK_LINE in m for m in lines) == 1, lines


def _register_until_full(
    url: str, problem: Problem, limit: int = 400
) -> tuple[list[WirePeer], WirePeer, requests.Response]:
    """Register fresh peers until one is refused; the ones taken, the refused one and its answer."""
    taken = []
    for _ in range(limit):
        peer = WirePeer()
        answer = peer.register(url, problem)
        if answer.status_code != 201:
            return taken, peer, answer
        taken.append(peer)
    raise AssertionError(f"{limit} registrations were all taken: the disk never filled")


def _check_full(url: str, problem: Problem, refused: requests.Response) -> None:
    assert refused.status_code == 503, refused.text
    assert refused.headers["Retry-After"].isdigit() and int(refused.headers["Retry-After"]) > 0
    assert "nothing was accepted" in refused.json()["detail"]
    again = WirePeer().register(url, problem)
    assert again.status_code == 503 and "Retry-After" in again.headers
    health = requests.get(f"{url}/healthz", timeout=30)
    assert health.status_code == 503 and health.json()["status"] == "unavailable", health.text
    assert "Retry-After" in health.headers


def _check_freed(url: str, problem: Problem, taken: list[WirePeer], refused: WirePeer) -> None:
    wait_until(lambda: requests.get(f"{url}/healthz", timeout=30).status_code == 200, 60,
               "/healthz to be ready")
    assert refused.register(url, problem).status_code == 201  # the one refused comes back and is taken
    assert status(url, problem.id).registered == len(taken) + 1  # nothing taken before was lost


def test_sqlite_full_gives_503_with_retry_after_and_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="anonml.aggregator")
    app = create_app(aggregator_settings(tmp_path))
    handle = start_server(app)
    engine = app.state.aggregator.engine
    limit: dict[str, int | None] = {"pages": None}

    @event.listens_for(engine, "connect")
    def _cap(connection, _record) -> None:  # every new connection, while a cap is set
        if limit["pages"] is not None:
            connection.execute(f"PRAGMA max_page_count = {limit['pages']}")

    try:
        problem = propose(handle.url, draft(min_peers=4))
        with engine.connect() as c:
            limit["pages"] = int(c.exec_driver_sql("PRAGMA page_count").scalar_one())
        engine.dispose()  # the pooled connections go: each new one is capped
        taken, refused_peer, refused = _register_until_full(handle.url, problem)
        _check_full(handle.url, problem, refused)
        limit["pages"] = None
        engine.dispose()
        _check_freed(handle.url, problem, taken, refused_peer)
    finally:
        handle.stop()
    said = [r for r in caplog.records if FULL_LINE in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in said]
    assert "database or disk is full" in said[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert any("storage writes again" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (CI runs as root)")
def test_a_real_full_tmpfs_under_the_aggregator_process(tmp_path: Path) -> None:
    log = tmp_path / "aggregator.log"
    with tmpfs(tmp_path / "disk", "4m") as disk:
        settings = aggregator_settings(tmp_path, db_url=f"sqlite:///{disk / 'aggregator.db'}")
        server = start_server_process(settings, stderr=log)
        try:
            problem = propose(server.url, draft(min_peers=4))
            before = [WirePeer() for _ in range(3)]
            for p in before:
                assert p.register(server.url, problem).status_code == 201
            filler = fill(disk)
            taken, refused_peer, refused = _register_until_full(server.url, problem)
            _check_full(server.url, problem, refused)
            filler.unlink()
            _check_freed(server.url, problem, before + taken, refused_peer)
        finally:
            server.stop()
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]
    assert " 500 " not in text
    lines = [line for line in text.splitlines() if FULL_LINE in line]
    assert len(lines) == 1, lines
