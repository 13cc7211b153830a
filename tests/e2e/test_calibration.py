"""The peer's own calibration step against the real aggregator (uvicorn, SQLite, HTTP both ways).

Of a 560-member round, ten identities are real :class:`~peer.participant.Participant` s with their
own ledgers and state DBs, their roster checked and their assignment re-derived from the served
roster; the other members are played over the wire (:mod:`tests.aggregator.calibration_helpers`).
The pool members among the ten answer the aggregator's question with the peer code, then take the
calibrated model: one release each in their ledger, their answer among those the model counts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from anonml.crypto import Identity
from anonml.learn import roster_plan, verify_assignment
from anonml.privacy import PrivacyLedger
from anonml.protocol import CalibrationAnswer, Problem
from anonml.store import EventStore
from peer.client import AggregatorClient
from peer.db import PeerDB
from peer.features import LocalExample
from peer.participant import Participant, PeerNode
from peer.phases import ParticipationPhase, RosterFacts
from peer.roster import RosterView
from tests.aggregator.calibration_helpers import CalibratingRound, calibration_draft
from tests.aggregator.helpers import WirePeer, assignment_of, roster_of, wait_phase
from tests.databases import table_rows

P = ParticipationPhase


@pytest.fixture
def url(calibration_aggregator_url: str) -> str:
    return calibration_aggregator_url


def real_participants(
    url: str,
    problem: Problem,
    peers: Sequence[WirePeer],
    mine: Sequence[Identity],
    tmp_path: Path,
    label: Callable[[int], int],
) -> list[Participant]:
    """A real :class:`~peer.participant.Participant` for each of ``mine`` (registered among ``peers``),
    its roster checked and its assignment re-derived from the served roster, with its own ledger and
    state DB, through its report round; identity ``k``'s example is the flag ``k % 2`` with the label
    ``label(k)``."""
    roster = roster_of(url, problem.id)
    view = RosterView.verify(roster, problem)
    plan = roster_plan(problem.draft, roster)
    participants = []
    for k, identity in enumerate(mine):
        index = view.index_of[bytes(identity.public)]
        notice = assignment_of(url, problem.id, peers[index])
        claimed = plan.assignment(index)
        assert (notice.role, notice.index) == (claimed.role, claimed.index)
        me, commitment = bytes(identity.public), bytes(problem.seed_commitment)
        verify_assignment(claimed, plan, commitment=commitment, peer_keys=view.keys, my_key=me)
        ledger = PrivacyLedger(f"sqlite:///{tmp_path / f'l{k}.db'}")
        node = PeerNode(identity, EventStore("sqlite://"), ledger)
        p = Participant(
            node=node,
            problem=problem,
            client=AggregatorClient(url),
            relay=SimpleNamespace(count=lambda *_: None),  # type: ignore[arg-type]
            relay_base="http://127.0.0.1:9",
            db=PeerDB(f"sqlite:///{tmp_path / f's{k}.db'}"),
            example=LocalExample(np.array([float(k % 2)]), label(k)),
        )
        p.roster = RosterFacts(view, claimed, b"", None)  # type: ignore[arg-type]
        p.phase = P.REPORTING  # its report round is over (its reports or cover were sent)
        participants.append(p)
    return participants


def test_real_pool_members_answer_through_the_peer_code_and_take_the_calibrated_model(
    url: str, database_url: str, tmp_path: Path
) -> None:
    mine = [Identity.generate() for _ in range(10)]
    round_ = CalibratingRound.open(url, calibration_draft(), given=mine)
    pid = round_.problem.id
    participants = real_participants(url, round_.problem, round_.peers, mine, tmp_path, lambda k: k % 2)
    pool = [p for p in participants if p.in_calibration_pool]
    assert len(pool) >= 3, "fewer than 3 of 10 identities in a pool of 90 %"
    request = participants[0].client.calibration(pid)
    for p in participants:  # asked: only the pool members answer, with the peer code
        assert p.answer_calibration(request) == (p in pool)
    assert {p.phase for p in pool} == {P.CALIBRATED}
    ours = {bytes(p.node.identity.public) for p in pool}
    rng = np.random.default_rng(13)
    for i in round_.pool:
        if round_.peers[i].public not in ours:
            assert round_.answer(i, rng).status_code == 201
    final = wait_phase(url, pid, ("done", "degraded", "failed"), timeout=120)
    assert final.phase == "done", final.message
    sql = f"SELECT identity, bits FROM calibration_answers WHERE problem_id = '{pid}'"
    stored = {bytes(r[0]): bytes(r[1]) for r in table_rows(database_url, sql)}
    assert len(stored) == 504
    document = participants[0].client.model(pid)
    assert document.calibration is not None and document.calibration.calibrated
    for p in pool:
        sent = CalibrationAnswer.model_validate_json(p.stored_calibration_answer or "")
        assert stored[bytes(p.node.identity.public)] == bytes(sent.bits)  # what it drew is what counted
        releases = p.node.ledger.releases(peer=p.node.fingerprint)
        assert [(r.pool, round(r.epsilon, 9)) for r in releases] == [("calibration", 8.0)]
        p.receive_model(document, receipts=frozenset())
        assert p.phase == P.DONE and p.prediction is not None
    for p in participants:
        if p not in pool:
            assert p.node.ledger.releases() == []  # nothing released for calibration by the others
