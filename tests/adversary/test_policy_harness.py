"""The malicious aggregator's hooks do what the other adversary tests rely on."""

from __future__ import annotations

import requests
from pydantic import TypeAdapter

from anonml.protocol import Problem, verify_message
from tests.adversary.malicious import MaliciousAggregator, hostile, mooc_draft


def _problems(url: str) -> list[Problem]:
    response = requests.get(f"{url}/problems", timeout=30)
    assert response.status_code == 200, response.text
    return TypeAdapter(list[Problem]).validate_json(response.content)


def test_one_peer_is_shown_another_validly_signed_problem(adversary: MaliciousAggregator):
    problem = adversary.propose(mooc_draft(min_peers=20))
    adversary.equivocate(
        "victim",
        "problems",
        lambda shown: [p.model_copy(update={"draft": hostile(p.draft, epsilon=0.99)}) for p in shown],
    )
    honest, victim = _problems(adversary.url), _problems(adversary.url_for("victim"))
    assert [p.draft.epsilon for p in honest] == [2.0] and [p.draft.epsilon for p in victim] == [0.99]
    for p in honest + victim:  # both verify against the key the proposal pins
        verify_message(p, bytes(problem.aggregator))
    assert _problems(adversary.url_for("bystander"))[0].draft.epsilon == 2.0  # only the victim
    assert ("GET", "/problems") in adversary.seen("victim")
    adversary.honest("victim", "problems")
    assert _problems(adversary.url_for("victim"))[0].draft.epsilon == 2.0


def test_unsigned_rewrites_and_sybils(adversary: MaliciousAggregator):
    problem = adversary.propose(mooc_draft(min_peers=3, kp=1))
    adversary.equivocate(
        None, "problem", lambda p: p.model_copy(update={"signature": bytes(64)}), resign=False
    )
    response = requests.get(f"{adversary.url}/problems/{problem.id}", timeout=30)
    shown = Problem.model_validate_json(response.content)
    assert bytes(shown.signature) == bytes(64)
    sybils = [adversary.register_sybil(problem) for _ in range(3)]
    adversary.close(problem)
    roster = adversary.roster(problem)
    assert [bytes(e.identity) for e in roster.entries] == [s.public for s in sybils]
    two = adversary.isolated_roster(problem, roster, [sybils[0].public, sybils[2].public])
    verify_message(two, bytes(problem.aggregator))
    assignment = adversary.assignment_for(problem, two, sybils[2].public)
    assert assignment.role == "report" and bytes(assignment.identity) == sybils[2].public
