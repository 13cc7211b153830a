"""Redundant delivery (issue 26, item 2): r pairwise disjoint routes per slot, and what the account says."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import cast

import numpy as np
import pytest

from aggregator.training import account_reports
from anonml.crypto import Identity
from anonml.errors import ProtocolError
from anonml.protocol import DEFAULT_ROUTES, ReportAccount, route_count
from peer.reports import choose_routes
from peer.roster import RosterView
from peer.round_packets import report_slot

ROUND = 41


def _view(n: int) -> RosterView:
    """The parts of a verified roster route drawing reads: n members with real relay certificates."""
    ids, entries = [], []
    for _ in range(n):
        identity = Identity.generate()
        _, cert = identity.new_round_relay_key(ROUND)
        ids.append(identity.public.node_id)
        entries.append(SimpleNamespace(relay_certificate=bytes(cert)))
    view = SimpleNamespace(
        keys=[b"k"] * n, node_ids=ids, roster=SimpleNamespace(entries=entries), relay_capable=list(range(n))
    )
    return cast(RosterView, view)


def test_the_route_count_is_the_setting_or_as_many_disjoint_routes_as_the_roster_fits():
    assert DEFAULT_ROUTES == 2
    assert route_count(2, 3, 16) == 2  # 15 others: two disjoint routes of 3 need 6
    assert route_count(4, 3, 13) == 4 and route_count(4, 3, 12) == 3  # 12 others fit 4, 11 fit 3
    assert route_count(2, 3, 6) == 1  # 5 others: one route, never fewer
    assert route_count(2, 3, 2) == 1  # too few even for one: the roster floors refuse it, not this
    assert route_count(1, 3, 1000) == 1
    with pytest.raises(ValueError, match="at least 1"):
        route_count(0, 3, 10)


def test_the_routes_of_a_slot_are_pairwise_disjoint_and_avoid_the_sender_and_the_avoided():
    view, rng = _view(12), np.random.default_rng(7)
    avoid = frozenset(view.node_ids[5:7])
    for me in (0, 11):
        for _ in range(50):
            routes = choose_routes(view, me, 3, 3, ROUND, rng, avoid)
            assert len(routes) == 3 and all(len(r) == 3 for r in routes)
            relays = [h.node_id for r in routes for h in r]
            assert len(set(relays)) == 9  # no relay carries two copies, none twice on a route
            assert view.node_ids[me] not in relays and not avoid & set(relays)


def test_each_copy_is_drawn_uniformly_among_the_other_members():
    """Each member other than the sender is on copy ``i``'s route with probability hops/(n − 1).

    1,000 draws: 200 expected per member and copy, 5 SE = 63, so a member drawn a third more or
    less often than the rest fails (one skipped or doubled member fails by 16 SE or more).
    """
    n, hops, draws = 16, 3, 1000
    view, rng = _view(n), np.random.default_rng(11)
    counts = np.zeros((2, n))
    for _ in range(draws):
        for i, route in enumerate(choose_routes(view, 0, hops, 2, ROUND, rng)):
            for h in route:
                counts[i, view.node_ids.index(h.node_id)] += 1
    assert counts[:, 0].sum() == 0
    p = hops / (n - 1)
    se = np.sqrt(draws * p * (1 - p))
    assert np.all(np.abs(counts[:, 1:] - draws * p) < 5 * se), counts


def test_a_roster_without_room_for_disjoint_routes_is_refused_not_overlapped():
    view = _view(6)  # 5 others: one route of 3, not two disjoint ones
    with pytest.raises(ProtocolError, match="needs 3 other relaying roster members; there are 2"):
        choose_routes(view, 0, 3, 2, ROUND, np.random.default_rng(1))


def test_the_account_counts_redundant_copies_as_duplicates_never_as_loss():
    # 10 report peers × 2 slots, 2 routes each: 18 stored, 25 repeats of a stored token refused.
    account = account_reports(10, 2, 18, 0, {"duplicate token": 25, "bad token": 1}, routes=2, routes_asked=2)
    assert (account.expected, account.received, account.lost) == (20, 18, 2)
    assert account.duplicates == 25 and account.refused == {"bad token": 1} and account.not_arrived == 1
    assert account.describe() == (
        "2 of 20 reports lost (10.0%): 1 refused at intake (bad token: 1), 1 not arrived; "
        "each report over 2 routes, 25 duplicate copies dropped"
    )
    degraded = account_reports(4, 1, 4, 0, {}, routes=1, routes_asked=2)
    assert degraded.describe().endswith("each report over 1 route (2 asked; the roster fits 1)")
    pending = account_reports(4, 1, 3, 0, {"duplicate token": 2}, window_open=True, routes=2, routes_asked=2)
    assert pending.pending == 1 and pending.duplicates == 2 and pending.lost == 0


def test_an_account_without_redundancy_keeps_the_bytes_it_had():
    """Signed model documents of single-route problems carry the account: its wire form is unchanged."""
    plain = account_reports(4, 1, 3, 0, {})
    assert (plain.routes, plain.routes_asked, plain.duplicates) == (1, 1, 0)
    assert "routes" not in plain.model_dump_json() and "duplicates" not in plain.model_dump_json()
    assert ReportAccount.model_validate_json(plain.model_dump_json()) == plain


def _participant(tmp_hosts: int = 3, per_host: int = 4):
    """A report peer (member 0, on host 0) of a roster of ``tmp_hosts × per_host`` members whose relays
    are on ``tmp_hosts`` hosts, with its routes drawn and its k_h = 2 slots' packets built as cover."""
    import time

    from anonml.crypto import Identity as Id
    from anonml.privacy import PrivacyLedger
    from anonml.protocol import Problem
    from anonml.store import EventStore
    from peer.participant import Participant, PeerNode
    from peer.phases import Preparation, RosterFacts
    from tests.peer.helpers import mooc_dropout_draft

    n = tmp_hosts * per_host
    identities = [Id.generate() for _ in range(n)]
    ids = [i.public.node_id for i in identities]
    urls = [f"http://h{k // per_host}.example/relay/{ids[k].hex()}" for k in range(n)]
    entries = []
    for identity, url in zip(identities, urls, strict=True):
        _, cert = identity.new_round_relay_key(ROUND)
        entries.append(SimpleNamespace(relay_certificate=bytes(cert), relay_url=url))
    view = RosterView(  # its memo too: the host's own members are found once per view
        keys=tuple(bytes(i.public) for i in identities),
        node_ids=tuple(ids),
        roster=SimpleNamespace(entries=entries),  # type: ignore[arg-type]
        index_of={bytes(i.public): k for k, i in enumerate(identities)},
        fingerprint="",
        routes=dict(zip(ids, urls, strict=True)),
        relay_capable=tuple(range(n)),
    )
    aggregator = Id.generate()
    draft = mooc_dropout_draft().model_copy(update={"kh": 2})
    problem = Problem.model_construct(
        id="p-routes", draft=draft, aggregator=bytes(aggregator.public), round_id=ROUND
    )
    rng = np.random.default_rng(3)
    node = PeerNode(identities[0], EventStore("sqlite://"), PrivacyLedger("sqlite://"), rng=rng)
    p = Participant(node=node, problem=problem, client=None, relay=None, relay_base="http://h0.example")  # type: ignore[arg-type]
    p.roster = RosterFacts(cast(RosterView, view), None, b"", None)  # type: ignore[arg-type]
    copies = route_count(draft.routes, draft.hops, n)
    own = {ids[k] for k in range(per_host)}
    paths = tuple(
        tuple(path)
        for _ in range(draft.kh)
        for path in choose_routes(cast(RosterView, view), 0, draft.hops, copies, ROUND, rng, frozenset(own))
    )
    p.preparation = Preparation(paths, None)
    p._payloads = [None] * len(paths)
    p.window_end = time.time() + 60
    return p, ids, per_host, copies


def test_a_dead_relay_host_gets_one_copy_of_each_packet_sent_through_it_and_the_unsent_re_routed():
    p, ids, per_host, copies = _participant()
    assert copies == 2 and len(p.paths) == 4  # k_h = 2 slots × 2 routes, none over its own host
    own = set(ids[:per_host])
    assert not any(h.node_id in own for path in p.paths for h in path)
    dead = frozenset(ids[per_host : 2 * per_host])  # host 1
    crossing = [j for j, path in enumerate(p.paths) if any(h.node_id in dead for h in path)]
    assert crossing  # a slot's two routes take 6 of the 8 members off its host: 2+ on host 1
    p._sent_slots = {0, 1}  # slot 0's two copies went; slot 1's have not
    copies_out = p.route_around(dead)
    sent_crossing = [j for j in crossing if j in (0, 1)]
    assert len(copies_out) == len(sent_crossing)
    for j, (new, when, url, packet) in zip(sent_crossing, copies_out, strict=True):
        assert new >= 4 and report_slot(p, new, copies) == report_slot(p, j, copies) == 0
        assert not any(h.node_id in dead for h in p.paths[new])  # around the dead host
        assert url.endswith(p.paths[new][0].node_id.hex()) and time.time() <= when < p.window_end
        assert len(packet) == 1280
    # Unsent packets crossing it are re-routed when their time comes.
    for j in (2, 3):
        assert p.crosses_failed(j) == (j in crossing)
        if j in crossing:
            rerouted = p.reroute(j, None)
            assert rerouted is not None and not p.crosses_failed(j)
    # Found dead again: nothing is copied twice.
    assert p.route_around(dead) == []


def test_no_copy_leaves_after_the_send_window():
    p, ids, per_host, _ = _participant()
    p._sent_slots = set(range(len(p.paths)))
    p.window_end = time.time() - 1
    assert p.route_around(frozenset(ids[per_host:])) == []
    assert all(
        p.crosses_failed(j) == any(h.node_id in ids[per_host:] for h in path)
        for j, path in enumerate(p.paths)
    )


class _Unlisted(tuple):
    """Relay indices that may be indexed and counted but never listed (iterating fails the test)."""

    def __iter__(self):
        raise AssertionError("a route over a large roster listed every relay (O(n) per route)")


def test_a_route_over_a_large_roster_draws_its_relays_without_listing_them():
    """A host's share of 10,000 members drew each route from a list of all relays: O(n²) per host.

    Rejection draws from the relays while they are at least twice those left out (the sender, the
    avoided, the hops drawn): the routes stay disjoint, avoid what they must, and never list.
    """
    view = _view(40)
    view.relay_capable = _Unlisted(range(40))  # type: ignore[misc]
    avoid = frozenset(view.node_ids[30:40])  # 10 avoided, 1 sender, 3 hops: 2 × 14 ≤ 40
    rng = np.random.default_rng(5)
    seen: set[bytes] = set()
    for _ in range(200):
        path = choose_routes(view, 0, 3, 1, ROUND, rng, avoid)[0]
        nodes = [h.node_id for h in path]
        assert len(set(nodes)) == 3 and view.node_ids[0] not in nodes and not avoid & set(nodes)
        seen.update(nodes)
    assert seen == set(view.node_ids[1:30])  # every eligible relay is drawn (200 routes of 3 among 29)
