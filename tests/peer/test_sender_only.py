"""Sender-only members: routes never use them, floors on relays, quotas with r of n relaying."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from anonml.crypto import Identity
from anonml.errors import AnonMLError, ProtocolError
from anonml.protocol import RosterEntry
from peer.policy import PeerPolicy, check_roster_floors, hostile_route_probability
from peer.relayauth import chernoff_cap, member_quota
from peer.reports import choose_path
from peer.roster import RosterView
from peer.roster_checks import guarded_by
from tests.aggregator.helpers import draft, member_registration, roster_document, roster_entry, signed_problem

AGGREGATOR = Identity.generate(np.random.default_rng(5))
ROUND = 1


def _entry(member: Identity, problem, *, relays: bool) -> RosterEntry:
    """``member``'s own signed registration, as a roster entry (relaying or sender-only)."""
    return roster_entry(member_registration(member, problem, relays=relays, round_id=ROUND))


def _view(relaying: int, sender_only: int, **draft_changes) -> tuple[RosterView, list[Identity]]:
    rng = np.random.default_rng(11)
    problem = signed_problem(draft(min_peers=2, **draft_changes), AGGREGATOR, pid="p-sender-only")
    members = [Identity.generate(rng) for _ in range(relaying + sender_only)]
    relays = rng.permutation([True] * relaying + [False] * sender_only)  # mixed through the roster
    entries = tuple(_entry(m, problem, relays=bool(r)) for m, r in zip(members, relays, strict=True))
    roster = roster_document(problem.id, entries, signer=AGGREGATOR)
    return RosterView.verify(roster, problem), members


def test_the_relay_fields_go_together():
    member = Identity.generate()
    cert = bytes(member.new_round_relay_key(ROUND)[1])
    url = f"https://relay.example.org/relay/{member.public.node_id.hex()}"
    with pytest.raises(ValidationError, match="relay_url and relay_certificate go together"):
        RosterEntry(identity=bytes(member.public), relay_url=url, registration_signature=bytes(64))
    with pytest.raises(ValidationError, match="relay_url and relay_certificate go together"):
        RosterEntry(identity=bytes(member.public), relay_certificate=cert, registration_signature=bytes(64))
    assert not RosterEntry(identity=bytes(member.public), registration_signature=bytes(64)).relays


def test_the_view_lists_only_relaying_members_as_relays():
    view, members = _view(relaying=6, sender_only=4)
    assert len(view.keys) == 10 and len(view.relay_capable) == 6
    for i, entry in enumerate(view.roster.entries):
        assert (i in view.relay_capable) == entry.relays
        # a sender-only member's node id is its identity's, and it has no route, only a poster key
        assert view.node_ids[i] == members[i].public.node_id
        assert (view.node_ids[i] in view.routes) == entry.relays
        assert (view.node_ids[i] in view.relay_keys()) == entry.relays
        assert view.node_ids[i] in view.poster_keys()
        if not entry.relays:
            assert view.poster_keys()[view.node_ids[i]] == members[i].public.relay_key


@pytest.mark.parametrize("relaying_sender", [True, False])
def test_choose_path_never_picks_a_sender_only_member(relaying_sender: bool):
    view, _ = _view(relaying=6, sender_only=4)
    me = next(i for i in range(len(view.keys)) if (i in view.relay_capable) == relaying_sender)
    relays = {view.node_ids[i] for i in view.relay_capable} - {view.node_ids[me]}
    rng = np.random.default_rng(3)
    seen: set[bytes] = set()
    for _ in range(400):
        path = choose_path(view, me, 3, ROUND, rng)
        nodes = [hop.node_id for hop in path]
        assert len(set(nodes)) == 3 and set(nodes) <= relays
        seen.update(nodes)
    assert seen == relays  # every relay is drawn (400 routes of 3 among ≤ 6: missing one has p < 1e-40)


def test_choose_path_needs_enough_relaying_members():
    view, _ = _view(relaying=3, sender_only=5)
    relaying_me = view.relay_capable[0]
    with pytest.raises(ProtocolError, match="needs 3 other relaying roster members; there are 2"):
        choose_path(view, relaying_me, 3, ROUND)
    sender_only_me = next(i for i in range(len(view.keys)) if i not in view.relay_capable)
    assert len(choose_path(view, sender_only_me, 3, ROUND)) == 3  # a sender-only one has all three


def test_guards_take_the_first_hop_and_only_that():
    view, _ = _view(relaying=8, sender_only=2)
    guard = view.node_ids[view.relay_capable[-1]]
    sender_only = next(i for i in range(len(view.keys)) if i not in view.relay_capable)
    rng = np.random.default_rng(8)
    later: set[bytes] = set()
    for _ in range(200):
        path = choose_path(view, sender_only, 3, ROUND, rng, guards=frozenset({guard}))
        assert path[0].node_id == guard
        assert guard not in {hop.node_id for hop in path[1:]}
        later.update(hop.node_id for hop in path[1:])
    assert len(later) == 7  # the other hops are drawn among all the other relays
    not_on_roster = Identity.generate().public.node_id
    path = choose_path(view, sender_only, 3, ROUND, rng, guards=frozenset({not_on_roster}))
    assert len(path) == 3  # a guard not on the roster changes nothing


def test_a_guard_counts_only_if_it_relays_in_this_roster():
    view, members = _view(relaying=5, sender_only=3)
    relaying = view.node_ids[view.relay_capable[2]]
    sender_only = next(view.node_ids[i] for i in range(len(view.keys)) if i not in view.relay_capable)
    stranger = Identity.generate().public.node_id
    assert guarded_by(view, frozenset({relaying})) and guarded_by(view, frozenset({stranger, relaying}))
    assert not guarded_by(view, frozenset({sender_only}))  # on the roster, but never a hop
    assert not guarded_by(view, frozenset({stranger})) and not guarded_by(view, frozenset())


def test_hostile_route_probability_is_f_to_the_hops():
    assert hostile_route_probability(100, 100, 3, 0.2) == pytest.approx(0.2**3)
    assert hostile_route_probability(100, 50, 3, 0.2) == pytest.approx(0.4**3)
    assert hostile_route_probability(100, 10, 3, 0.2) == 1.0  # 20 hostile members fill 10 relays
    assert hostile_route_probability(100, 10, 3, 0.2, guarded=True) == 0.0
    with pytest.raises(ValueError):
        hostile_route_probability(10, 11, 3, 0.2)


def test_hostile_route_probability_bounds_the_exact_draw():
    # hops distinct relays uniformly among r of which h are hostile: C(h, k)/C(r, k) ≤ (h/r)^k
    from math import comb

    for r, h, k in [(10, 2, 3), (50, 10, 3), (20, 19, 4)]:
        assert comb(h, k) / comb(r, k) <= hostile_route_probability(r, r, k, h / r) + 1e-12


def _floors(relays: int, members: int = 40, *, me_relays: bool = True, guarded: bool = False, **policy):
    problem = signed_problem(draft(min_peers=2, kp=2), AGGREGATOR, pid="p-floors")
    check_roster_floors(
        problem, members, 0, PeerPolicy(**policy), relays=relays, me_relays=me_relays, guarded=guarded
    )


def test_a_roster_with_fewer_relays_than_the_floor_is_refused():
    _floors(40)  # every member relays: 0.2³ = 0.008 ≤ 0.01
    with pytest.raises(AnonMLError, match="8 of the roster's 40 members relay, fewer than this peer's floor"):
        _floors(8, guarded=True)
    _floors(8, min_relays=8, guarded=True)


def test_a_roster_too_few_relays_for_a_route_is_refused():
    with pytest.raises(AnonMLError, match="too few for routes of 3 distinct relays other than this peer"):
        _floors(3, min_relays=1, guarded=True)
    _floors(3, min_relays=1, guarded=True, me_relays=False)  # a sender-only peer needs only 3


def test_concentrated_relaying_is_refused_with_its_figure():
    # 40 members, 8 hostile (0.2); with 20 relays 40 % may be hostile: 0.4³ = 0.064 > 0.01
    with pytest.raises(AnonMLError, match=r"40% of the relays are.*0\.4\^3 = 0\.064.*maximum of 0\.01"):
        _floors(20)
    _floors(20, max_hostile_route=0.07)  # a policy that accepts the figure
    _floors(20, guarded=True)  # a trusted first hop on the roster
    _floors(38)  # 0.2·40/38 = 0.21: 0.0093 ≤ 0.01
    with pytest.raises(AnonMLError, match="above this peer's maximum"):
        _floors(36)  # 0.222³ = 0.011


def test_member_quota_counts_routes_among_the_relays():
    assert member_quota(1, 3, 10) == member_quota(1, 3, 10, 10) == 21
    # μ = s/(r−1) + (n−2)·s·(h−1)/((r−1)(r−2)) with n = 30, r = 5, s = 1, h = 3: 0.25 + 56/12
    assert member_quota(1, 3, 30, 5) == chernoff_cap(0.25 + 28 * 2 / 12)
    with pytest.raises(ValueError, match="relaying member"):
        member_quota(1, 3, 30, 1)
