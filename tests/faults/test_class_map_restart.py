"""The aggregator SIGKILLed between the two stages of a K ≥ 3 calibration and restarted on the same
database: the first stage's answers are all kept, the second question is asked once (the same map),
no answer of either stage is lost or counted twice, and the step ends as it would have."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import requests

from anonml.learn import AnonMLClassifier
from anonml.protocol import ModelDocument
from tests.aggregator.class_map_helpers import ClassMapRound, class_map_draft
from tests.aggregator.helpers import status, wait_phase
from tests.faults.helpers import Killable
from tests.faults.test_calibration_restart import agg  # noqa: F401 - the killable aggregator, a fixture


def _first_stage_answered(aggregator: Killable, seed: int) -> tuple[ClassMapRound, np.random.Generator]:
    """A three-class round whose map half all answered: its second question is asked."""
    round_ = ClassMapRound.open(aggregator.url, class_map_draft(median_step=120.0))
    rng = np.random.default_rng(seed)
    for i in round_.map_half:
        assert round_.map_answer(i, rng).status_code == 201
    return round_, rng


def test_killed_between_the_stages_it_keeps_every_answer_and_asks_the_choice_half_once(
    agg: Killable,  # noqa: F811
) -> None:
    round_, rng = _first_stage_answered(agg, 21)
    pid = round_.problem.id
    before = round_.request(choice=True)  # the first stage closed and the second was asked
    first = round_.choice_half[:100]
    for i in first:
        assert round_.send_choice(round_.choice_answer(i, rng)).status_code == 201
    agg.restart()  # SIGKILL in the second stage
    round_.url = agg.url
    assert status(agg.url, pid).phase == "calibrating"
    after = round_.request(choice=True)
    assert after == before  # resumed: the same questions and model, the second not asked again
    assert agg.rows("SELECT COUNT(*) FROM calibration_answers")[0][0] == 252  # none lost
    assert agg.rows("SELECT COUNT(*) FROM calibration_choices")[0][0] == 100
    again = round_.map_answer(round_.map_half[0], rng)
    assert again.status_code == 409 and "already answered" in again.text  # none doubled
    twice = round_.send_choice(round_.choice_answer(first[0], rng))
    assert twice.status_code == 409 and "already answered" in twice.text
    for i in round_.choice_half[100:]:
        assert round_.send_choice(round_.choice_answer(i, rng)).status_code == 201
    final = wait_phase(agg.url, pid, ("done", "degraded", "failed"), timeout=120)
    assert final.phase == "done", final.message
    assert round_.request(choice=True) == before  # the second question was asked once, never again
    for table in ("calibration_answers", "calibration_choices"):
        identities = [bytes(r[0]) for r in agg.rows(f"SELECT identity FROM {table}")]
        assert len(identities) == len(set(identities)) == 252
    response = requests.get(f"{agg.url}/problems/{pid}/model", timeout=30)
    document = ModelDocument.model_validate_json(response.content)
    assert document.calibration is not None and document.calibration.calibrated
    assert (document.calibration.received, document.calibration.missing) == (504, 0)
    model = AnonMLClassifier.from_json(json.dumps(document.model))
    assert after.choice is not None
    np.testing.assert_array_equal(model.ensemble_.class_map, np.asarray(after.choice.class_map))


def test_killed_after_the_first_stage_closed_it_asks_the_second_once_with_the_same_map(
    agg: Killable,  # noqa: F811
) -> None:
    round_, rng = _first_stage_answered(agg, 22)
    pid = round_.problem.id
    asked = round_.request(choice=True)
    # Back to "first stage closed, second not yet asked" — as a kill between the close and the ask leaves
    # it — then killed: the restarted process rebuilds the map from the stored answers and asks again.
    agg.kill()
    with sqlite3.connect(agg.db_path) as con:
        con.execute("UPDATE calibration_questions SET choice_json = NULL, choice_open = 0")
    agg.start()
    round_.url = agg.url
    resumed = round_.request(choice=True)
    assert resumed.choice is not None and asked.choice is not None
    assert resumed.choice.class_map == asked.choice.class_map  # the same map from the same answers
    assert resumed.choice.members == asked.choice.members
    for i in round_.choice_half:
        assert round_.send_choice(round_.choice_answer(i, rng)).status_code == 201
    final = wait_phase(agg.url, pid, ("done", "degraded", "failed"), timeout=120)
    assert final.phase == "done", final.message
    assert agg.rows("SELECT COUNT(*) FROM calibration_answers")[0][0] == 252
    assert agg.rows("SELECT COUNT(*) FROM calibration_choices")[0][0] == 252
