"""The aggregator SIGKILLed in ``calibrating`` and restarted on the same database: the question is
the same, no stored answer is lost, none is counted twice, and the step ends as it would have."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests

from anonml.learn import AnonMLClassifier
from anonml.protocol import ModelDocument
from tests.aggregator.calibration_helpers import CalibratingRound, calibration_draft, calibration_request
from tests.aggregator.helpers import aggregator_settings, status, wait_phase
from tests.faults.helpers import Killable


@pytest.fixture
def agg(tmp_path: Path) -> Iterator[Killable]:
    # The proposal's waits as they are (the floors for 560 members would hold the test for minutes).
    settings = aggregator_settings(tmp_path, port=0, scale_schedule=False)
    a = Killable(settings, tmp_path / "aggregator.db").start()
    try:
        yield a
    finally:
        if a.current is not None:
            a.current.stop()


def test_killed_while_calibrating_it_keeps_every_answer_and_counts_each_once(agg: Killable) -> None:
    round_ = CalibratingRound.open(agg.url, calibration_draft(median_step=120.0))
    pid = round_.problem.id
    before = calibration_request(agg.url, pid)
    rng = np.random.default_rng(21)
    first, rest = round_.pool[:250], round_.pool[250:]
    for i in first:
        assert round_.answer(i, rng).status_code == 201
    agg.restart()  # SIGKILL in the middle of the step
    round_.url = agg.url
    assert status(agg.url, pid).phase == "calibrating"
    after = calibration_request(agg.url, pid)
    assert after.question == before.question and after.model == before.model  # resumed, not asked again
    assert agg.rows("SELECT COUNT(*) FROM calibration_answers")[0][0] == 250  # none lost
    again = round_.answer(first[0], rng)
    assert again.status_code == 409 and "already answered" in again.text  # none doubled
    for i in rest:
        assert round_.answer(i, rng).status_code == 201
    final = wait_phase(agg.url, pid, ("done", "degraded", "failed"), timeout=120)
    assert final.phase == "done", final.message
    identities = [bytes(r[0]) for r in agg.rows("SELECT identity FROM calibration_answers")]
    assert len(identities) == len(set(identities)) == 504
    response = requests.get(f"{agg.url}/problems/{pid}/model", timeout=30)
    document = ModelDocument.model_validate_json(response.content)
    assert document.calibration is not None and document.calibration.calibrated
    assert (document.calibration.received, document.calibration.missing) == (504, 0)
    assert document.metrics["calibration_answers"] == 504
    assert AnonMLClassifier.from_json(json.dumps(document.model)).ensemble_.calibration is not None
