"""The one client of the aggregator's API (:class:`peer.client.AggregatorClient`): its admin actions.

Against one real aggregator on loopback for the module (each test proposes its own problem and reads
only that); what the peer reads with it is tested where the peer uses it.
"""

from __future__ import annotations

import pytest

from anonml.errors import ProtocolError
from anonml.phases import ProblemPhase
from peer.client import AggregatorClient, HTTPRefusal
from tests.aggregator.helpers import TOKEN, WirePeer, draft


def test_an_admin_action_without_a_token_is_refused_before_any_request(module_aggregator) -> None:
    listed = AggregatorClient(module_aggregator.url).problems()
    with pytest.raises(ProtocolError, match="needs the aggregator's admin token"):
        AggregatorClient(module_aggregator.url).propose(draft())
    assert AggregatorClient(module_aggregator.url).problems() == listed  # nothing was proposed


def test_a_wrong_token_is_the_aggregator_s_401(module_aggregator) -> None:
    with pytest.raises(HTTPRefusal) as refused:
        AggregatorClient(module_aggregator.url, "not-the-token").propose(draft())
    assert refused.value.status == 401 and "admin token required" in refused.value.detail


def test_propose_and_close_as_the_operator_with_typed_answers(module_aggregator) -> None:
    admin = AggregatorClient(module_aggregator.url, TOKEN)
    registering = {p.id for p in admin.problems(ProblemPhase.REGISTRATION)}
    problem = admin.propose(draft(min_peers=2))
    assert admin.problem(problem.id) == problem  # what it answered is what it serves, signed alike
    assert {p.id for p in admin.problems(ProblemPhase.REGISTRATION)} == registering | {problem.id}
    for _ in range(2):
        assert WirePeer().register(module_aggregator.url, problem).status_code == 201
    closed = admin.close(problem.id)
    assert closed.id == problem.id and closed.registered == 2
