"""The aggregator's K ≥ 3 calibration step over real HTTP (uvicorn, SQLite): the map half's question,
the class map its answers build, the choice half's question carrying it, and the published model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import requests

from anonml.learn import AnonMLClassifier
from anonml.learn.calibration import CLASS_MAP_WEIGHTS, LOSS_CLIP
from anonml.protocol import ClassMapQuestion, model_digest, verify_message
from tests.aggregator.calibration_helpers import EPSILON
from tests.aggregator.class_map_helpers import ClassMapRound, K, class_map_draft
from tests.aggregator.helpers import status, wait_phase
from tests.aggregator.test_calibration_round import _model, published_as_trained
from tests.databases import table_rows


@pytest.fixture
def url(calibration_aggregator_url: str) -> str:
    return calibration_aggregator_url


def test_both_halves_answer_once_each_and_the_published_model_carries_the_class_map(
    url: str, database_url: str
) -> None:
    round_ = ClassMapRound.open(url, class_map_draft())
    pid, problem = round_.problem.id, round_.problem
    aggregator = bytes(problem.aggregator)
    assert status(url, pid).calibration_pool == 504 == problem.draft.calibration_pool_size(560)
    assert len(round_.map_half) == len(round_.choice_half) == 252
    first = round_.request()
    question = verify_message(first.question, aggregator)
    trained = verify_message(first.model, aggregator)
    # Stage 1: the plan's map half, (predicted class, label) over K² values, about the uncalibrated model.
    assert isinstance(question, ClassMapQuestion) and first.choice is None
    assert list(question.members) == round_.map_half and question.domain == K * K
    assert bytes(question.model_digest) == model_digest(trained.model) and question.epsilon == EPSILON
    uncalibrated = ClassMapRound.model(first)
    assert uncalibrated.ensemble_.kind == "softmax" and uncalibrated.ensemble_.class_map is None
    rng = np.random.default_rng(11)
    digest = bytes(question.model_digest)
    early = round_.send_choice(round_.signed_choice(round_.choice_half[0], digest, (0.0, 0.0)))
    assert early.status_code == 409 and "no calibration choice question" in early.text  # not asked yet
    assert round_.map_answer(round_.choice_half[0], rng).status_code == 403  # the other half: not named
    for i in round_.map_half:
        assert round_.map_answer(i, rng).status_code == 201
    again = round_.map_answer(round_.map_half[0], rng)
    assert again.status_code == 409 and "already answered" in again.text
    # Stage 2, asked once the first closed (every member answered): the map the answers build.
    second = round_.request(choice=True)
    assert second.question == first.question and second.model == first.model
    choice = verify_message(second.choice, aggregator)
    assert list(choice.members) == round_.choice_half and bytes(choice.model_digest) == digest
    assert choice.weights == CLASS_MAP_WEIGHTS and choice.clip == LOSS_CLIP and choice.epsilon == EPSILON
    q = np.asarray(choice.class_map)
    assert q.shape == (K, K) and np.allclose(q.sum(axis=1), 1.0)
    for predicted in (0, 1):  # the classes the model predicts: the map moves them to the next class
        assert np.argmax(q[predicted]) == (predicted + 1) % K and q[predicted, (predicted + 1) % K] > 0.7
    # A vector the Hybrid mechanism cannot output (beyond its bound), validly signed: 422, not stored,
    # so the member's honest answer is still taken.
    member = round_.choice_half[0]
    forged = round_.send_choice(round_.choice_answer(member, rng, report=(100.0, 0.0)))
    assert forged.status_code == 422 and "not a mechanism output" in forged.text
    assert round_.send_choice(round_.choice_answer(round_.map_half[0], rng)).status_code == 403
    for i in round_.choice_half:
        assert round_.send_choice(round_.choice_answer(i, rng)).status_code == 201
    twice = round_.send_choice(round_.choice_answer(member, rng))
    assert twice.status_code == 409 and "already answered" in twice.text
    final = wait_phase(url, pid, ("done", "degraded", "failed"), timeout=120)
    assert final.phase == "done", final.message
    document = verify_message(_model(url, pid), aggregator)
    model = AnonMLClassifier.from_json(json.dumps(document.model))
    assert model.ensemble_.class_map is not None and model.ensemble_.map_weight in CLASS_MAP_WEIGHTS
    np.testing.assert_array_equal(model.ensemble_.class_map, q)
    tables = [c.to_dict() for c in model.ensemble_.components]
    assert tables == [c.to_dict() for c in uncalibrated.ensemble_.components]  # the model's own tables
    # The calibrated model predicts the class after the uncalibrated one's, as the pool's labels say.
    x = np.array([[0.0], [1.0]])
    assert [int(c) for c in np.argmax(model.predict_proba(x), axis=1)] == [1, 2]
    account = document.calibration
    assert account is not None and account.calibrated
    assert (account.expected, account.received, account.missing) == (504, 504, 0)
    assert document.metrics["calibration_answers"] == 504 and model.privacy_.calibration_peers == 504
    keys = {round_.peers[i].public: i for i in range(len(round_.peers))}
    answers = table_rows(database_url, f"SELECT identity FROM calibration_answers WHERE problem_id = '{pid}'")
    choices = table_rows(database_url, f"SELECT identity FROM calibration_choices WHERE problem_id = '{pid}'")
    assert sorted(keys[bytes(r[0])] for r in answers) == sorted(round_.map_half)  # each member once
    assert sorted(keys[bytes(r[0])] for r in choices) == sorted(round_.choice_half)


def test_too_few_map_answers_publish_the_model_as_trained_and_never_ask_the_choice_half(url: str) -> None:
    round_ = ClassMapRound.open(url, class_map_draft(median_step=10.0))  # 20 answers before it, loaded
    pid = round_.problem.id
    rng = np.random.default_rng(5)
    for i in round_.map_half[:20]:
        assert round_.map_answer(i, rng).status_code == 201
    model = published_as_trained(url, pid, 20, 252)  # the first question's members: the second not asked
    assert model.ensemble_.class_map is None
    response = requests.get(f"{url}/problems/{pid}/calibration", timeout=30)
    assert response.status_code == 200 and "choice" not in response.json()  # the choice half: never asked
