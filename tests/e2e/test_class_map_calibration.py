"""The peer's own K ≥ 3 calibration step against the real aggregator (uvicorn, SQLite, HTTP both ways).

Of a 560-member three-class round, sixteen identities are real :class:`~peer.participant.Participant` s
(:func:`tests.e2e.test_calibration.real_participants`); the other members are played over the wire
(:mod:`tests.aggregator.class_map_helpers`). The real map-half members answer the first question
with the peer code; the real choice-half members wait for the second, then answer it; all take the
calibrated model: one release each in their ledger, their answer among those the model counts.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from anonml.crypto import Identity
from anonml.learn import roster_plan
from anonml.learn.calibration import check_choice_report
from anonml.protocol import CalibrationAnswer, ChoiceAnswer
from peer.phases import ParticipationPhase
from tests.aggregator.class_map_helpers import ClassMapRound, K, class_map_draft
from tests.aggregator.helpers import roster_of, wait_phase
from tests.databases import table_rows
from tests.e2e.test_calibration import real_participants

P = ParticipationPhase


@pytest.fixture
def url(calibration_aggregator_url: str) -> str:
    return calibration_aggregator_url


def test_real_members_of_both_halves_answer_through_the_peer_code_and_take_the_calibrated_model(
    url: str, database_url: str, tmp_path: Path
) -> None:
    mine = [Identity.generate(np.random.default_rng(100 + k)) for k in range(16)]
    round_ = ClassMapRound.open(url, class_map_draft(), given=mine)
    pid = round_.problem.id
    # The model predicts the flag's class; the labels are the next class (the map's signal).
    participants = real_participants(
        url, round_.problem, round_.peers, mine, tmp_path, lambda k: (k % 2 + 1) % K
    )
    plan = roster_plan(round_.problem.draft, roster_of(url, pid))
    index = {p.public: i for i, p in enumerate(round_.peers)}
    half = {int(i): "map" for i in plan.class_map_half()} | {int(i): "choice" for i in plan.choice_half()}
    role = {id(p): half.get(index[bytes(p.node.identity.public)]) for p in participants}
    mapped = [p for p in participants if role[id(p)] == "map"]
    choosing = [p for p in participants if role[id(p)] == "choice"]
    assert mapped and choosing, "a half without one of the 16 identities (odds about 1 in 15,000)"
    first = participants[0].client.calibration(pid)
    for p in participants:  # the first question: only the map half answers; the choice half waits
        assert p.answer_calibration(first) == (p in mapped)
        assert p.awaits_calibration_choice(first) == (p in choosing)
    assert {p.phase for p in mapped} == {P.CALIBRATED} and {p.phase for p in choosing} == {P.REPORTING}
    ours = {bytes(p.node.identity.public) for p in participants}
    rng = np.random.default_rng(13)
    for i in round_.map_half:
        if round_.peers[i].public not in ours:
            assert round_.map_answer(i, rng).status_code == 201
    second = round_.request(choice=True)
    for p in participants:  # the second question: the choice half answers it
        answered = p.answer_calibration(second)
        assert answered == (p in mapped or p in choosing)  # a map member resends its stored answer
    assert {p.phase for p in choosing} == {P.CALIBRATED}
    for i in round_.choice_half:
        if round_.peers[i].public not in ours:
            assert round_.send_choice(round_.choice_answer(i, rng)).status_code == 201
    final = wait_phase(url, pid, ("done", "degraded", "failed"), timeout=120)
    assert final.phase == "done", final.message
    where = f"WHERE problem_id = '{pid}'"
    rows = table_rows(database_url, f"SELECT identity, bits FROM calibration_answers {where}")
    bits = {bytes(r[0]): bytes(r[1]) for r in rows}
    rows = table_rows(database_url, f"SELECT identity, report_json FROM calibration_choices {where}")
    reports = {bytes(r[0]): json.loads(r[1]) for r in rows}
    assert len(bits) == len(reports) == 252
    document = participants[0].client.model(pid)
    assert document.calibration is not None and document.calibration.calibrated
    for p in mapped:
        sent = CalibrationAnswer.model_validate_json(p.stored_calibration_answer or "")
        assert sent.mechanism.m == K * K and bits[bytes(p.node.identity.public)] == bytes(sent.bits)
    for p in choosing:
        sent = ChoiceAnswer.model_validate_json(p.stored_calibration_answer or "")
        check_choice_report(np.asarray(sent.report), 8.0)
        assert reports[bytes(p.node.identity.public)] == list(sent.report)  # what it drew is what counted
    for p in participants:
        releases = p.node.ledger.releases(peer=p.node.fingerprint)
        expected = [("calibration", 8.0)] if p in mapped or p in choosing else []
        assert [(r.pool, round(r.epsilon, 9)) for r in releases] == expected  # ε once, one stage only
        if p in mapped or p in choosing:
            p.receive_model(document, receipts=frozenset())
            assert p.phase == P.DONE and p.prediction is not None
