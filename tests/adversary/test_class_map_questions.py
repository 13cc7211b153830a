"""A malicious aggregator's K ≥ 3 calibration questions, against a pool identity's own checks.

As :mod:`tests.adversary.test_calibration_questions`: the aggregator signs everything it serves
(over real HTTP, from a small server that records each answer posted), and the peer side is the
real :class:`~peer.participant.Participant` with its own SQLite ledger and state DB. What is
asserted is what the peer released: its ledger, and the answers that reached the server.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from aggregator.calibration import calibration_question, choice_question
from anonml.crypto import Identity
from anonml.learn import AnonMLClassifier, roster_plan
from anonml.learn.calibration import CLASS_MAP_WEIGHTS, check_choice_report
from anonml.protocol import (
    CalibrationAnswer,
    CalibrationRequest,
    ChoiceAnswer,
    ModelDocument,
    model_digest,
    sign_message,
    verify_message,
)
from peer.phases import ParticipationPhase
from peer.roster import RosterView
from tests.adversary.test_calibration_questions import (
    AGGREGATOR,
    _calibration_releases,
    _participant,
    _Round,
    aggregator,  # noqa: F401 - the malicious aggregator's HTTP face, a fixture
    refused,
    resent_once_charged,
)
from tests.aggregator.calibration_helpers import EPSILON, MEMBERS
from tests.aggregator.class_map_helpers import K, class_map_draft
from tests.aggregator.helpers import member_registration, roster_document, roster_entry, signed_problem

#: A map the first stage could have built: the class after the model's, mostly.
Q = np.array([[0.1, 0.8, 0.1], [0.1, 0.1, 0.8], [0.8, 0.1, 0.1]])


@pytest.fixture(scope="module")
def round_() -> _Round:
    rng = np.random.default_rng(7)
    problem = signed_problem(class_map_draft(), AGGREGATOR, pid="p-class-map")
    members = [Identity.generate(rng) for _ in range(MEMBERS)]
    entries = tuple(roster_entry(member_registration(m, problem, relays=False)) for m in members)
    view = RosterView.verify(roster_document(problem.id, entries, signer=AGGREGATOR), problem)
    plan = roster_plan(problem.draft, view.roster)
    assert plan.calibration_pool_size == 504 and plan.class_map_half().size == 252
    x = rng.integers(0, 2, size=(3000, 1)).astype(float)
    y = np.where(rng.random(3000) < 0.8, x[:, 0].astype(int), rng.integers(0, K, size=3000))
    learner = AnonMLClassifier(
        features=list(problem.draft.features), epsilon=EPSILON, calibration_fraction=0.0, random_state=0
    )
    model = learner.fit(x, y)
    assert model.ensemble_.kind == "softmax" and model.ensemble_.n_classes == K
    document = sign_message(
        ModelDocument(problem_id=problem.id, created_at=problem.created_at, model=model.to_document(),
                      signature=bytes(64)),
        AGGREGATOR,
    )  # fmt: skip
    return _Round(problem, view, members, plan, model, document)


def _request(
    round_: _Round, *, choice: bool = True, members=None, class_map=None, **changes
) -> CalibrationRequest:
    """The first question to the map half and (``choice``) the second to ``members`` (default: the
    choice half) with ``class_map`` (default :data:`Q`); ``changes`` re-signed into the second."""
    deadline = time.time() + 30
    first = calibration_question(
        round_.problem,  # type: ignore[arg-type]
        round_.model,
        round_.document.model,
        round_.plan.class_map_half(),
        deadline,
        AGGREGATOR,
    )
    second = None
    if choice:
        second = choice_question(
            round_.problem,  # type: ignore[arg-type]
            model_digest(round_.document.model),
            Q if class_map is None else class_map,
            round_.plan.choice_half() if members is None else members,
            deadline,
            AGGREGATOR,
        )
        if changes:
            second = sign_message(second.model_copy(update=changes), AGGREGATOR)
    return CalibrationRequest(question=first, model=round_.document, choice=second)


def _member(round_: _Round, half: str, rank: int = 0) -> int:
    return int((round_.plan.class_map_half() if half == "map" else round_.plan.choice_half())[rank])


def test_a_choice_member_answers_once_in_the_support_and_a_second_ask_resends_the_same_bytes(
    round_, aggregator, tmp_path  # noqa: F811
):
    aggregator.request = _request(round_)
    member = _member(round_, "choice", 3)
    p = _participant(round_, member, aggregator.url, tmp_path)
    assert p.answer_calibration(p.client.calibration(round_.problem.id))
    assert p.phase == ParticipationPhase.CALIBRATED and len(aggregator.posted) == 1
    sent = ChoiceAnswer.model_validate_json(aggregator.posted[0])
    verify_message(sent, bytes(p.node.identity.public))
    assert len(sent.report) == len(CLASS_MAP_WEIGHTS)
    assert sent.model_digest == model_digest(round_.document.model)
    check_choice_report(np.asarray(sent.report), EPSILON)  # an output the aggregator will accept
    assert not p.awaits_calibration_choice(p.client.calibration(round_.problem.id))
    resent_once_charged(p, round_, aggregator, member, tmp_path)


def test_a_map_member_answers_the_first_question_over_k_squared_values(
    round_, aggregator, tmp_path  # noqa: F811
):
    aggregator.request = _request(round_, choice=False)
    p = _participant(round_, _member(round_, "map", 1), aggregator.url, tmp_path)
    assert p.answer_calibration(p.client.calibration(round_.problem.id))
    sent = CalibrationAnswer.model_validate_json(aggregator.posted[0])
    assert sent.mechanism.m == K * K and sent.mechanism.epsilon == pytest.approx(EPSILON)
    assert len(_calibration_releases(p)) == 1


def test_a_choice_member_waits_for_its_question_and_releases_nothing_meanwhile(
    round_, aggregator, tmp_path  # noqa: F811
):
    aggregator.request = _request(round_, choice=False)
    p = _participant(round_, _member(round_, "choice"), aggregator.url, tmp_path)
    request = p.client.calibration(round_.problem.id)
    assert not p.answer_calibration(request) and p.awaits_calibration_choice(request)
    assert aggregator.posted == [] and p.node.ledger.releases() == []
    assert p.phase == ParticipationPhase.REPORTING


def test_a_second_question_to_a_map_member_is_refused_and_nothing_released(
    round_, aggregator, tmp_path  # noqa: F811
):
    member = _member(round_, "map", 2)
    aggregator.request = _request(round_, members=[member, *round_.plan.choice_half()[:5]])
    first = aggregator.request.question.model_copy(update={"members": (_member(round_, "map", 0),)})
    aggregator.request = aggregator.request.model_copy(update={"question": sign_message(first, AGGREGATOR)})
    p = _participant(round_, member, aggregator.url, tmp_path)
    refused(p, round_, aggregator, "members outside the plan's choice half")


def test_a_first_question_to_a_choice_member_is_refused_and_nothing_released(
    round_, aggregator, tmp_path  # noqa: F811
):
    member = _member(round_, "choice", 2)
    request = _request(round_, choice=False)
    first = request.question.model_copy(update={"members": (*request.question.members, member)})
    aggregator.request = request.model_copy(update={"question": sign_message(first, AGGREGATOR)})
    p = _participant(round_, member, aggregator.url, tmp_path)
    refused(p, round_, aggregator, "members outside the plan's map half")


@pytest.mark.parametrize(
    "hostile, reason",
    [
        ("negative", "not a finite positive number"),
        ("rows", "does not sum to 1"),
        ("narrow", "not a 3 x 3 matrix"),
        ("tall", "names 4"),
        ("weights", "not the protocol's"),
        ("clip", "not the protocol's"),
        ("epsilon", "asks ε=9.0, the proposal promised 8.0"),
    ],
)
def test_a_hostile_second_question_is_refused_before_anything_is_released(
    round_, aggregator, tmp_path, hostile, reason  # noqa: F811
):
    member = _member(round_, "choice", 1)
    if hostile == "negative":
        request = _request(round_, class_map=Q + np.array([[0.2, -0.1, -0.1], [0, 0, 0], [0, 0, 0]]) * 2)
    elif hostile == "rows":
        request = _request(round_, class_map=Q * 1.001)
    elif hostile == "narrow":
        request = _request(round_, class_map=Q[:, :2] / Q[:, :2].sum(axis=1, keepdims=True))
    elif hostile == "tall":
        request = _request(round_, class_map=np.vstack([Q, Q[:1]]))
    elif hostile == "weights":
        request = _request(round_, weights=(0.25, 1.0))
    elif hostile == "clip":
        request = _request(round_, clip=0.01)
    else:
        request = _request(round_, epsilon=9.0)
    aggregator.request = request
    p = _participant(round_, member, aggregator.url, tmp_path)
    refused(p, round_, aggregator, reason)


def test_the_first_question_from_another_key_is_refused(round_, aggregator, tmp_path):  # noqa: F811
    request = _request(round_, choice=False)
    forged = sign_message(request.question, Identity.generate(np.random.default_rng(99)))
    aggregator.request = request.model_copy(update={"question": forged})
    p = _participant(round_, _member(round_, "map"), aggregator.url, tmp_path)
    refused(p, round_, aggregator, "not signed by the aggregator")

