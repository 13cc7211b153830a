"""A malicious aggregator's calibration questions, against a calibration-pool identity's own checks.

The aggregator here holds its signing key (every question and model it serves is validly signed)
and serves them over real HTTP from a small server that records every answer posted to it; the
peer side is the real :class:`~peer.participant.Participant` with its own SQLite ledger and state
DB. What is asserted is what the peer released: its ledger, and the answers that reached the server.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from aggregator.calibration import calibration_question
from anonml.crypto import Identity
from anonml.learn import AnonMLClassifier, roster_plan
from anonml.privacy import PrivacyLedger
from anonml.protocol import (
    CalibrationAnswer,
    CalibrationRequest,
    ModelDocument,
    sign_message,
    verify_message,
)
from anonml.store import EventStore
from peer.client import AggregatorClient
from peer.db import PeerDB
from peer.features import LocalExample
from peer.participant import Participant, PeerNode
from peer.phases import Aborted, ParticipationPhase, RosterFacts
from peer.roster import RosterView
from tests.aggregator.calibration_helpers import EPSILON, MEMBERS, calibration_draft
from tests.aggregator.helpers import member_registration, roster_document, roster_entry, signed_problem
from tests.scripted_http import ScriptedHandler, served

AGGREGATOR = Identity.generate(np.random.default_rng(41))


@dataclass
class _Round:
    """A signed problem with a calibration pool, its verified roster, members and plan, and a model."""

    problem: object
    view: RosterView
    members: list[Identity]
    plan: object
    model: AnonMLClassifier
    document: ModelDocument


@pytest.fixture(scope="module")
def round_() -> _Round:
    rng = np.random.default_rng(7)
    problem = signed_problem(calibration_draft(), AGGREGATOR, pid="p-calibration")
    members = [Identity.generate(rng) for _ in range(MEMBERS)]
    entries = tuple(roster_entry(member_registration(m, problem, relays=False)) for m in members)
    view = RosterView.verify(roster_document(problem.id, entries, signer=AGGREGATOR), problem)
    plan = roster_plan(problem.draft, view.roster)
    assert plan.calibration_pool_size == 504
    x = rng.integers(0, 2, size=(2000, 1)).astype(float)
    y = (rng.random(2000) < np.where(x[:, 0] > 0, 0.7, 0.3)).astype(int)
    learner = AnonMLClassifier(
        features=list(problem.draft.features), epsilon=EPSILON, calibration_fraction=0.0, random_state=0
    )
    model = learner.fit(x, y)
    document = sign_message(
        ModelDocument(problem_id=problem.id, created_at=problem.created_at, model=model.to_document(),
                      signature=bytes(64)),
        AGGREGATOR,
    )  # fmt: skip
    return _Round(problem, view, members, plan, model, document)


@dataclass
class _Aggregator:
    """The malicious aggregator's HTTP face: serves ``request``, records (and stores once) each answer."""

    request: CalibrationRequest | None = None
    posted: list[bytes] = field(default_factory=list)
    url: str = ""


@pytest.fixture
def aggregator() -> Iterator[_Aggregator]:
    state = _Aggregator()

    class Handler(ScriptedHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            assert state.request is not None
            self.reply(200, state.request.model_dump_json().encode())

        def do_POST(self) -> None:  # noqa: N802
            body = self.body()
            first = body not in state.posted
            state.posted.append(body)
            if first:
                self.reply(201, b'{"ok": true, "detail": ""}')
            else:
                self.reply(409, b'{"detail": "already answered this calibration question"}')

    with served(Handler) as state.url:
        yield state


def _participant(
    round_: _Round, index: int, url: str, tmp_path: Path, *, cap: float | None = None
) -> Participant:
    """Roster member ``index`` after its report round (cover sent), with its example and real stores."""
    node = PeerNode(
        round_.members[index],
        EventStore("sqlite://"),
        PrivacyLedger(f"sqlite:///{tmp_path / f'ledger-{index}.db'}", default_cap=cap),
        rng=np.random.default_rng(index),
    )
    p = Participant(
        node=node,
        problem=round_.problem,  # type: ignore[arg-type]
        client=AggregatorClient(url),
        relay=SimpleNamespace(count=lambda *_: None),  # type: ignore[arg-type]
        relay_base="http://127.0.0.1:9",
        db=PeerDB(f"sqlite:///{tmp_path / f'state-{index}.db'}"),
        example=LocalExample(np.array([1.0]), 1),
    )
    p.roster = RosterFacts(round_.view, round_.plan.assignment(index), b"", None)  # type: ignore[arg-type]
    p.phase = ParticipationPhase.REPORTING
    return p


def _request(round_: _Round, *, members=None, cuts=None, epsilon=None, document=None) -> CalibrationRequest:
    question = calibration_question(
        round_.problem,  # type: ignore[arg-type]
        round_.model,
        round_.document.model,
        round_.plan.calibration_pool() if members is None else members,
        time.time() + 30,
        AGGREGATOR,
    )
    changes = {k: v for k, v in (("cuts", cuts), ("epsilon", epsilon)) if v is not None}
    if changes:
        question = sign_message(question.model_copy(update=changes), AGGREGATOR)
    return CalibrationRequest(question=question, model=round_.document if document is None else document)


def _calibration_releases(p: Participant) -> list:
    return [r for r in p.node.ledger.releases(peer=p.node.fingerprint) if r.pool == "calibration"]


def resent_once_charged(
    p: Participant, round_: _Round, aggregator: _Aggregator, member: int, tmp_path: Path
) -> None:
    """``p`` answered once (its answer the only one posted, its release at ε): asked again, and after a
    restart from its state DB, it sends the same bytes — no new draw — and its ledger is charged once."""
    releases = _calibration_releases(p)
    assert len(aggregator.posted) == 1
    assert len(releases) == 1 and releases[0].epsilon == pytest.approx(EPSILON)
    assert p.answer_calibration(p.client.calibration(round_.problem.id))
    resumed = _participant(round_, member, aggregator.url, tmp_path)
    resumed.resume(p.db.participation(round_.problem.id, p.node.fingerprint))  # type: ignore[union-attr]
    assert resumed.phase == ParticipationPhase.CALIBRATED
    assert resumed.answer_calibration(p.client.calibration(round_.problem.id))
    assert len(aggregator.posted) == 3 and len(set(aggregator.posted)) == 1
    assert len(_calibration_releases(p)) == 1  # charged once


def refused(p: Participant, round_: _Round, aggregator: _Aggregator, reason: str) -> None:
    """``p``, asked what ``aggregator`` serves, refuses naming ``reason``; nothing reached the server
    and nothing is in its ledger."""
    with pytest.raises(Aborted, match=reason):
        p.answer_calibration(p.client.calibration(round_.problem.id))
    assert aggregator.posted == [] and p.node.ledger.releases() == []


def test_a_pool_member_answers_once_and_a_second_ask_resends_the_same_answer(round_, aggregator, tmp_path):
    aggregator.request = _request(round_)
    member = int(round_.plan.calibration_pool()[3])
    p = _participant(round_, member, aggregator.url, tmp_path)
    assert p.answer_calibration(p.client.calibration(round_.problem.id))
    assert p.phase == ParticipationPhase.CALIBRATED and len(aggregator.posted) == 1
    sent = CalibrationAnswer.model_validate_json(aggregator.posted[0])
    verify_message(sent, bytes(p.node.identity.public))
    assert sent.mechanism.m == 20 and sent.mechanism.epsilon == pytest.approx(EPSILON)
    resent_once_charged(p, round_, aggregator, member, tmp_path)


def test_a_member_outside_the_pool_named_by_the_question_refuses_and_releases_nothing(
    round_, aggregator, tmp_path
):
    reporter = int(round_.plan.members(0)[0])
    pool = [int(i) for i in round_.plan.calibration_pool()]
    aggregator.request = _request(round_, members=[*pool, reporter])
    p = _participant(round_, reporter, aggregator.url, tmp_path)
    refused(p, round_, aggregator, "plan puts this identity in the report pool")


@pytest.mark.parametrize(
    "hostile, reason",
    [
        ("cuts", "cut points are not the model's own"),
        ("epsilon", "asks ε=9.0, the proposal promised 8.0"),
        ("members", "members outside the plan's calibration pool"),
        ("model", "names another model"),
    ],
)
def test_a_hostile_question_is_refused_before_anything_is_released(
    round_, aggregator, tmp_path, hostile, reason
):
    pool = [int(i) for i in round_.plan.calibration_pool()]
    member = pool[0]
    p = _participant(round_, member, aggregator.url, tmp_path)
    p.compute_example()
    if hostile == "cuts":
        # Cut points that put this one member's score alone in a bin of its own.
        codes = round_.model.binning_.transform(p.example.x[None])
        score = float(round_.model.ensemble_.decision_function(codes)[0])
        cuts = tuple(sorted({score - 1e-9, score + 1e-9, *range(-3, 4)}))[:9]
        aggregator.request = _request(round_, cuts=cuts)
    elif hostile == "epsilon":
        aggregator.request = _request(round_, epsilon=9.0)
    elif hostile == "members":
        aggregator.request = _request(round_, members=[member, int(round_.plan.members(0)[0])])
    else:
        other = round_.document.model_copy(update={"metrics": {"changed": 1.0}})
        forged = json.loads(other.model_dump_json())
        forged["model"]["ensemble"]["intercept"] = 0.5
        aggregator.request = _request(
            round_, document=sign_message(ModelDocument.model_validate(forged), AGGREGATOR)
        )
    refused(p, round_, aggregator, reason)


def test_an_answer_the_ledger_cannot_afford_is_not_sent(round_, aggregator, tmp_path):
    aggregator.request = _request(round_)
    member = int(round_.plan.calibration_pool()[1])
    p = _participant(round_, member, aggregator.url, tmp_path, cap=2.0)  # the peer's cap, below ε = 8
    assert not p.answer_calibration(p.client.calibration(round_.problem.id)) or aggregator.posted == []
    assert aggregator.posted == [] and p.node.ledger.releases() == []
    assert "calibration answer not sent: the release could not be recorded" in p.reason
