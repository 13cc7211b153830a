"""Relay capability is the member's own signed statement: the aggregator can neither add nor strip it.

A malicious aggregator would like to make a sender-only member a relay (so that
routes run through an address it chose, or through a member that never
accepts a connection, losing reports), or strip the relay of a member it
wants off the routes (concentrating relaying in its own Sybils). Both change
a roster entry its member signed, and every peer checks each entry against
its member's signature before anything else (:func:`peer.transcript.check_roster_entries`).
"""

from __future__ import annotations

import pytest

from anonml.crypto import Identity
from anonml.errors import ProtocolError
from anonml.protocol import Roster, RosterEntry, sign_message
from peer.transcript import check_roster_entries
from tests.aggregator.conftest import aggregator  # noqa: F401 - a fixture, registered by import
from tests.aggregator.helpers import (
    WirePeer,
    close_registration,
    draft,
    member_registration,
    post,
    propose,
    roster_entry,
    roster_of,
    signed_problem,
    wait_phase,
)

AGGREGATOR = Identity.generate()


def _roster(problem, entries: list[RosterEntry]) -> Roster:
    return sign_message(
        Roster(
            problem_id=problem.id,
            aggregator=problem.aggregator,
            round_id=problem.round_id,
            entries=tuple(entries),
            token_key=bytes(32),
            seed=bytes(32),
            median_pool_size=0,
            signature=bytes(64),
        ),
        AGGREGATOR,
    )


def test_a_sender_only_member_made_a_relay_without_its_consent_is_refused():
    problem = signed_problem(draft(), AGGREGATOR, pid="p-consent")
    members = [Identity.generate() for _ in range(5)]
    regs = [member_registration(m, problem, relays=i < 4) for i, m in enumerate(members)]
    check_roster_entries(_roster(problem, [roster_entry(r) for r in regs]), problem)  # as signed: accepted
    victim = members[4]
    # Even with a genuine round certificate of the victim's (the strongest case: the aggregator got one
    # somehow) and a URL naming the victim's node, the entry is not what the victim signed.
    genuine = bytes(victim.new_round_relay_key(problem.round_id)[1])
    url = f"http://127.0.0.1:7/relay/{victim.public.node_id.hex()}"
    forged = roster_entry(regs[4], relay_url=url, relay_certificate=genuine)
    with pytest.raises(ProtocolError, match="roster entry 4: not the member's own signed registration"):
        check_roster_entries(_roster(problem, [*(roster_entry(r) for r in regs[:4]), forged]), problem)


def test_a_relay_stripped_from_a_member_is_refused():
    problem = signed_problem(draft(), AGGREGATOR, pid="p-strip")
    members = [Identity.generate() for _ in range(5)]
    regs = [member_registration(m, problem, relays=True) for m in members]
    stripped = roster_entry(regs[2], relay_url=None, relay_certificate=None)
    entries = [roster_entry(r) for r in regs]
    entries[2] = stripped
    with pytest.raises(ProtocolError, match="roster entry 2: not the member's own signed registration"):
        check_roster_entries(_roster(problem, entries), problem)


def test_the_aggregator_stores_a_sender_only_registration_as_signed(aggregator):  # noqa: F811
    problem = propose(aggregator.url, draft(min_peers=5))
    url = f"{aggregator.url}/problems/{problem.id}/registrations"
    relays = [WirePeer() for _ in range(4)]
    for peer in relays:
        assert peer.register(aggregator.url, problem).status_code == 201
    sender = Identity.generate()
    assert post(url, member_registration(sender, problem, relays=False)).status_code == 201
    close_registration(aggregator.url, problem.id)
    published = wait_phase(aggregator.url, problem.id, ("witnessing", "medians", "reporting", "failed"))
    assert published.phase != "failed", published.message
    roster = roster_of(aggregator.url, problem.id)
    check_roster_entries(roster, problem)  # every entry verifies, the sender-only one included
    entry = next(e for e in roster.entries if bytes(e.identity) == bytes(sender.public))
    assert entry.relay_url is None and entry.relay_certificate is None
    assert sum(e.relays for e in roster.entries) == 4


def test_the_aggregator_refuses_a_roster_with_too_few_relays(aggregator):  # noqa: F811
    problem = propose(aggregator.url, draft(min_peers=4))
    url = f"{aggregator.url}/problems/{problem.id}/registrations"
    for peer in [WirePeer() for _ in range(3)]:
        assert peer.register(aggregator.url, problem).status_code == 201
    for _ in range(3):
        assert post(url, member_registration(Identity.generate(), problem, relays=False)).status_code == 201
    close_registration(aggregator.url, problem.id)
    final = wait_phase(aggregator.url, problem.id, ("failed",))
    assert "only 3 of the 6 registered peers relay" in final.message
