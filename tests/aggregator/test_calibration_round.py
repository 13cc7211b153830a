"""The aggregator's calibration step over real HTTP (uvicorn, SQLite): the question it asks its
calibration pool, the answers it takes once, and the calibrated model it publishes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import requests
from typer.testing import CliRunner

from aggregator.calibration import score_cuts
from anonml.commands.aggregator import app as aggregator_cli
from anonml.learn import AnonMLClassifier
from anonml.protocol import ModelDocument, model_digest, pack_bits, sign_message, verify_message
from tests.aggregator.calibration_helpers import (
    EPSILON,
    CalibratingRound,
    calibration_draft,
    calibration_request,
    pool_answer,
)
from tests.aggregator.helpers import ADMIN, post, status, wait_phase
from tests.databases import table_rows
from tests.waiting import wait_until


@pytest.fixture
def url(calibration_aggregator_url: str) -> str:
    return calibration_aggregator_url


def _model(url: str, pid: str) -> ModelDocument:
    response = requests.get(f"{url}/problems/{pid}/model", timeout=30)
    assert response.status_code == 200, response.text
    return ModelDocument.model_validate_json(response.content)


def test_the_pool_answers_once_each_and_calibrates_the_published_model(url: str, database_url: str) -> None:
    round_ = CalibratingRound.open(url, calibration_draft())
    pid, problem = round_.problem.id, round_.problem
    st = status(url, pid)
    assert st.calibration_pool == len(round_.pool) == problem.draft.calibration_pool_size(560) == 504
    assert st.report_peers == 56 and not st.model_available
    request = calibration_request(url, pid)
    question = verify_message(request.question, bytes(problem.aggregator))
    trained = verify_message(request.model, bytes(problem.aggregator))
    # The question names the uncalibrated model, asks the plan's pool, at ε, with the model's own cuts.
    assert bytes(question.model_digest) == model_digest(trained.model)
    assert list(question.members) == round_.pool and question.epsilon == EPSILON
    uncalibrated = AnonMLClassifier.from_json(json.dumps(trained.model))
    assert uncalibrated.ensemble_.calibration is None and question.cuts == score_cuts(uncalibrated)
    rng = np.random.default_rng(11)
    outsider = next(i for i in range(560) if i not in round_.pool)
    assert round_.answer(outsider, rng).status_code == 403  # not in the pool: refused, not stored
    # A member's answer whose bits no honest draw gives (every bit set), validly signed: refused as the
    # intake refuses such a report, nothing stored, so the member's honest answer is still taken.
    honest = pool_answer(round_.peers[round_.pool[0]], request, 0, 0, rng)
    forged = sign_message(
        honest.model_copy(update={"bits": pack_bits(np.ones(honest.mechanism.m, dtype=bool))}),
        round_.peers[round_.pool[0]].identity,
    )
    refused = post(f"{url}/problems/{pid}/calibration/answers", forged)
    assert refused.status_code == 422 and "not a mechanism output" in refused.text
    for i in round_.pool[:-1]:
        assert round_.answer(i, rng).status_code == 201
    again = round_.answer(round_.pool[0], rng)  # a second answer: refused, the first one stands
    assert again.status_code == 409 and "already answered" in again.text
    assert round_.answer(round_.pool[-1], rng).status_code == 201  # the last one closes the step early
    final = wait_phase(url, pid, ("done", "degraded", "failed"), timeout=120)
    assert final.phase == "done", final.message
    document = verify_message(_model(url, pid), bytes(problem.aggregator))
    model = AnonMLClassifier.from_json(json.dumps(document.model))
    a, b = model.ensemble_.calibration
    assert abs(a - 1.0) > 1e-3 or abs(b) > 1e-3  # a fitted map, not the identity
    tables = [c.to_dict() for c in model.ensemble_.components]
    assert tables == [c.to_dict() for c in uncalibrated.ensemble_.components]  # the model's own tables
    account = document.calibration
    assert account is not None and account.calibrated
    assert (account.expected, account.received, account.missing) == (504, 504, 0)
    assert final.calibration is not None and final.calibration.calibrated
    assert final.calibration.received == 504
    shown = CliRunner().invoke(aggregator_cli, ["status", pid, "--url", url], terminal_width=250)
    assert shown.exit_code == 0, shown.output
    assert "calibration pool" in shown.output and "calibrated by 504 of 504 answers" in shown.output
    stored = table_rows(database_url, f"SELECT identity FROM calibration_answers WHERE problem_id = '{pid}'")
    pool_keys = {round_.peers[i].public for i in round_.pool}
    assert len(stored) == 504 and {bytes(r[0]) for r in stored} == pool_keys  # each member once
    # Truthful privacy: the pool's signed answers are outside the shuffle bound, each at ε.
    privacy = model.privacy_
    assert privacy.calibration_peers == 504 and privacy.shuffle is not None
    assert privacy.shuffle.pools == ("report",) and privacy.shuffle.peers_outside == 504
    assert "calibration answers are signed" in privacy.shuffle.assumptions
    assert privacy.epsilon_total == EPSILON
    # An admin's "train again": the pool is not asked again (each member answers once); the same
    # model from the same reports is calibrated again on the stored answers.
    assert post(f"{url}/problems/{pid}/train", b"", ADMIN).status_code == 200
    def newer() -> ModelDocument | None:
        latest = _model(url, pid)
        return latest if latest.created_at > document.created_at else None

    retrained = wait_until(newer, 120, lambda: "the retrained model")
    again = status(url, pid)
    assert again.phase == "done", again.message
    assert calibration_request(url, pid).question == question  # the one question
    sql = f"SELECT id FROM calibration_answers WHERE problem_id = '{pid}'"
    assert len(table_rows(database_url, sql)) == 504
    same = model_digest(calibration_request(url, pid).model.model) == bytes(question.model_digest)
    assert (retrained.calibration is not None and retrained.calibration.calibrated) == same
    assert ("not calibrated" in again.message) == (not same)


def published_as_trained(url: str, pid: str, received: int, expected: int) -> AnonMLClassifier:
    """Once ``pid`` ends: it is ``done``, its message, status and model say ``received`` of the
    ``expected`` answers were too few and none is missing but for not arriving; the model published."""
    final = wait_phase(url, pid, ("done", "degraded", "failed"), timeout=120)
    assert final.phase == "done"
    assert f"not calibrated: {received} of {expected} calibration answers, too few" in final.message
    document = _model(url, pid)
    assert document.calibration is not None and not document.calibration.calibrated
    assert document.calibration.not_arrived == expected - received
    model = AnonMLClassifier.from_json(json.dumps(document.model))
    assert model.privacy_.calibration_peers == received
    return model


def test_too_few_answers_by_the_deadline_publish_the_model_uncalibrated_and_say_so(url: str) -> None:
    # The question's deadline is a median step away: 10 s, so that 20 answers are stored before it
    # even on a loaded machine (1 s lost answers to it in a PostgreSQL run beside the whole suite).
    round_ = CalibratingRound.open(url, calibration_draft(median_step=10.0))
    pid = round_.problem.id
    rng = np.random.default_rng(5)
    for i in round_.pool[:20]:
        assert round_.answer(i, rng).status_code == 201
    model = published_as_trained(url, pid, 20, 504)
    assert model.ensemble_.calibration is None
    late = round_.answer(round_.pool[30], rng)  # after the deadline: refused as late
    assert late.status_code == 409 and "closed" in late.text
