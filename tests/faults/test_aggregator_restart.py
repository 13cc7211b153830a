"""The aggregator SIGKILLed in each phase and restarted on the same database.

Each test runs a real aggregator process (:func:`aggregator.app.start_server_process`),
plays peers over HTTP (:class:`tests.aggregator.helpers.WirePeer`), kills the
process with SIGKILL at a point of the phase, starts a new process on the same
SQLite file and identity, and asserts what survived, that the phase resumed
within its schedule, and what the status reports.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests

from anonml.crypto import PublicIdentity
from anonml.protocol import MedianQuery, ModelDocument, ProblemStatus, ReportAccount, verify_message
from tests.aggregator.helpers import (
    ADMIN,
    WirePeer,
    aggregator_settings,
    bins_of,
    close_registration,
    draft,
    median_queries,
    median_round,
    post,
    propose,
    register_and_close,
    roster_of,
    send_reports,
    status,
    wait_median_query,
    wait_phase,
)
from tests.faults.helpers import Killable


@pytest.fixture
def agg(tmp_path: Path) -> Iterator[Killable]:
    db_path = tmp_path / "aggregator.db"
    settings = aggregator_settings(tmp_path, port=0)
    a = Killable(settings, db_path).start()
    try:
        yield a
    finally:
        if a.current is not None:
            a.current.stop()


def _open_round(agg: Killable, n: int = 6, kh: int = 2):
    problem = propose(agg.url, draft(kh=kh, kp=1, min_peers=4, n_numeric=2, send_window=120.0))
    return problem, register_and_close(agg.url, problem, n, ("reporting",))


def test_killed_in_registration_it_keeps_every_registration_and_continues(agg: Killable) -> None:
    problem = propose(agg.url, draft(min_peers=4))
    first = [WirePeer() for _ in range(3)]
    for p in first:
        assert p.register(agg.url, problem).status_code == 201
    agg.restart()
    assert status(agg.url, problem.id).phase == "registration"
    assert status(agg.url, problem.id).registered == 3
    again = first[0].register(agg.url, problem)
    assert again.status_code == 409  # the registration survived: a second one is a duplicate
    later = [WirePeer() for _ in range(3)]
    for p in later:
        assert p.register(agg.url, problem).status_code == 201
    close_registration(agg.url, problem.id)
    wait_phase(agg.url, problem.id, ("medians", "reporting"))
    roster = roster_of(agg.url, problem.id)
    assert [bytes(e.identity) for e in roster.entries] == [p.public for p in first + later]  # in order


def test_killed_in_medians_it_resumes_the_search_at_its_step_and_asks_nobody_twice(agg: Killable) -> None:
    # 20 peers, half in the median pool: one numeric feature, two steps of 5 peers each.
    problem, by_index = median_round(agg.url, median_step=120.0)
    answers = f"/problems/{problem.id}/medians/answers"
    q0 = wait_median_query(agg.url, problem.id, 0)
    verify_message(q0, bytes(problem.aggregator))
    assert len(q0.members) == 5
    for i in q0.members[:3]:  # 3 of the group answer, then the aggregator dies
        assert post(agg.url + answers, by_index[i].answer(problem, 0, 0, True)).status_code == 201
    agg.restart()
    st = status(agg.url, problem.id)
    assert st.phase == "medians" and st.median_answers == 3, st
    # The same signed question is still open to the same group: nobody is asked anew.
    assert median_queries(agg.url, problem.id) == [q0]
    repeat = post(agg.url + answers, by_index[q0.members[0]].answer(problem, 0, 0, False))
    assert repeat.status_code == 409  # answered before the kill: its one answer stands
    for i in q0.members[3:]:
        assert post(agg.url + answers, by_index[i].answer(problem, 0, 0, True)).status_code == 201
    q1 = wait_median_query(agg.url, problem.id, 1)  # the group answered: the search went on to step 1
    assert not set(q1.members) & set(q0.members) and q1.threshold > q0.threshold  # 5 of 5 said "greater"
    for i in q1.members:
        assert post(agg.url + answers, by_index[i].answer(problem, 0, 1, False)).status_code == 201
    st = wait_phase(agg.url, problem.id, ("reporting", "failed"))
    assert st.phase == "reporting", st.message
    assert st.median_answers == 10
    edge = bins_of(agg.url, problem.id).edges[0]
    assert len(edge) == 1 and q0.threshold < edge[0] <= q1.threshold
    asked = agg.rows(
        "SELECT step, query_json FROM median_queries WHERE problem_id = ? ORDER BY step", problem.id
    )
    assert [s for s, _ in asked] == [0, 1] and MedianQuery.model_validate_json(asked[0][1]) == q0


def test_killed_in_reporting_it_keeps_staged_reports_and_the_round_continues(agg: Killable) -> None:
    problem, peers = _open_round(agg)
    rng = np.random.default_rng(1)
    assert send_reports(agg.url, problem, peers[:3], rng) == 6
    agg.restart()
    st = status(agg.url, problem.id)
    # a 120 s sending window: the 6 missing are pending (not lost) while it is open
    assert st.phase == "reporting"
    assert st.reports == ReportAccount(expected=12, received=6, lost=0, pending=6, routes_asked=2)
    assert send_reports(agg.url, problem, peers[3:], rng) == 6
    assert post(f"{agg.url}/problems/{problem.id}/train", b"", ADMIN).status_code == 200
    st = wait_phase(agg.url, problem.id, ("done", "degraded", "failed"))
    assert st.phase == "done"
    assert st.reports == ReportAccount(expected=12, received=12, lost=0, routes_asked=2)


def _as_left_in_training(agg: Killable, pid: str) -> None:
    """Put the killed aggregator's database where the training transaction leaves it.

    Entering ``training`` is one transaction (phase, then every staged report
    settled); training itself is milliseconds for a problem this size, too short
    to aim a SIGKILL at. So the test kills in ``reporting`` and commits that
    transaction itself, with the aggregator's own :func:`settle_reports`.
    """
    from sqlalchemy import create_engine, update
    from sqlalchemy.orm import Session

    from aggregator.db import ProblemRow, settle_reports

    engine = create_engine(agg.settings.db_url)
    with Session(engine) as s, s.begin():
        s.execute(
            update(ProblemRow).where(ProblemRow.id == pid).values(phase="training", phase_started=time.time())
        )
        settle_reports(s, pid)
    engine.dispose()


def test_killed_in_training_it_trains_from_the_stored_reports_on_restart(agg: Killable) -> None:
    problem, peers = _open_round(agg)
    assert send_reports(agg.url, problem, peers, np.random.default_rng(2)) == 12
    agg.kill()
    _as_left_in_training(agg, problem.id)
    assert agg.rows("SELECT COUNT(*) FROM reports") == [(12,)]
    agg.start()
    st = wait_phase(agg.url, problem.id, ("done", "degraded", "failed"))
    assert st.phase == "done", st.message
    doc = ModelDocument.model_validate_json(requests.get(f"{agg.url}/problems/{problem.id}/model").content)
    verify_message(doc, bytes(problem.aggregator))
    assert doc.reports == ReportAccount(expected=12, received=12, lost=0, routes_asked=2)
    assert doc.metrics["reports"] == 12


def test_a_problem_failed_in_training_retrains_on_admin_train_after_a_restart(agg: Killable) -> None:
    problem, peers = _open_round(agg)
    assert send_reports(agg.url, problem, peers, np.random.default_rng(3)) == 12
    assert post(f"{agg.url}/problems/{problem.id}/train", b"", ADMIN).status_code == 200
    wait_phase(agg.url, problem.id, ("done",))
    agg.kill()
    # As an older aggregator left it: failed in training, no model.
    with sqlite3.connect(agg.db_path) as con:
        seconds = json.dumps({"reporting": 1.0, "training": 0.1})
        con.execute(
            "UPDATE problems SET phase='failed', message='training failed: killed', "
            "phase_seconds_json=? WHERE id=?",
            (seconds, problem.id),
        )
        con.execute("DELETE FROM problem_documents WHERE problem_id=? AND kind='model'", (problem.id,))
    agg.start()
    assert status(agg.url, problem.id).phase == "failed"
    assert post(f"{agg.url}/problems/{problem.id}/train", b"", ADMIN).status_code == 200
    st = wait_phase(agg.url, problem.id, ("done", "degraded"))
    assert st.phase == "done" and st.model_available and st.reports.received == 12
    # A problem that failed before training still cannot be trained.
    other = propose(agg.url, draft(min_peers=50, registration_seconds=0.5))
    wait_phase(agg.url, other.id, ("failed",))
    refused = post(f"{agg.url}/problems/{other.id}/train", b"", ADMIN)
    assert refused.status_code == 409 and "training needs the report round" in refused.json()["detail"]


def test_killed_after_publication_it_serves_the_same_signed_model(agg: Killable) -> None:
    problem, peers = _open_round(agg)
    assert send_reports(agg.url, problem, peers, np.random.default_rng(4)) == 12
    assert post(f"{agg.url}/problems/{problem.id}/train", b"", ADMIN).status_code == 200
    wait_phase(agg.url, problem.id, ("done",))
    before = requests.get(f"{agg.url}/problems/{problem.id}/model").content
    identity = requests.get(f"{agg.url}/healthz").json()["identity"]
    agg.restart()
    health = requests.get(f"{agg.url}/healthz").json()
    assert (health["status"], health["identity"]) == ("ok", identity)  # beside it, the admission counts
    assert requests.get(f"{agg.url}/problems/{problem.id}/model").content == before
    st = ProblemStatus.model_validate_json(requests.get(f"{agg.url}/problems/{problem.id}/status").content)
    assert st.phase == "done" and PublicIdentity.from_bytes(bytes(problem.aggregator))
