"""Median rounds over HTTP: disjoint groups, one signed answer each, edges near the medians."""

from __future__ import annotations

import numpy as np
import requests

from aggregator.medians import median_groups
from anonml.crypto import Identity
from anonml.privacy import BinaryRandomizedResponse
from anonml.protocol import MedianQuery, verify_message
from tests.aggregator.helpers import (
    WirePeer,
    bins_of,
    draft,
    in_roster_order,
    post,
    propose,
    register_and_close,
    wait_phase,
)
from tests.waiting import wait_until


def test_median_groups_split_the_pool_disjointly():
    groups = median_groups(list(range(23)), n_numeric=2, searches=1, steps=5)
    flat = [int(i) for feature in groups for g in feature for i in g]
    assert sorted(flat) == list(range(23))  # every pool member in exactly one group
    assert [len(feature) for feature in groups] == [5, 5]
    small = median_groups(list(range(3)), n_numeric=2, searches=2, steps=4)
    assert [[g.tolist() for g in f] for f in small] == [[[0], [1]], []]  # 2 → one step per edge; 1 → none


def test_median_search_asks_fresh_groups_and_refuses_bad_answers(aggregator):
    # 40 peers, all in the median pool's share: feature 0 holds 2.0 everywhere, feature 1 holds 8.0.
    d = draft(n_numeric=2, pool_fraction=0.5, kp=2, min_peers=4, epsilon=4.0, steps=2, median_step=5.0)
    problem = propose(aggregator.url, d)
    peers = register_and_close(aggregator.url, problem, 40, ("medians",))
    members = in_roster_order(aggregator.url, problem.id, peers)
    values = {0: 2.0, 1: 8.0}
    rr = BinaryRandomizedResponse(4.0)
    rng = np.random.default_rng(11)
    answers_url = f"{aggregator.url}/problems/{problem.id}/medians/answers"
    answered: set[int] = set()
    seen: list[MedianQuery] = []
    checked = False

    def answer_the_open_queries() -> bool:
        """Answer (and probe) every open query; True once the search is over."""
        nonlocal checked
        if requests.get(f"{aggregator.url}/problems/{problem.id}/status").json()["phase"] != "medians":
            return True
        for raw in requests.get(f"{aggregator.url}/problems/{problem.id}/medians").json():
            q = MedianQuery.model_validate(raw)
            verify_message(q, bytes(problem.aggregator))
            if q not in seen:
                seen.append(q)
            if not checked:
                outsider = WirePeer().answer(problem, q.feature, q.step, True)
                r = post(answers_url, outsider)
                assert r.status_code == 403 and "not on the roster" in r.json()["detail"]
                not_named = next(i for i in range(len(members)) if i not in q.members)
                r = post(answers_url, members[not_named].answer(problem, q.feature, q.step, True))
                assert r.status_code == 403 and "not asked" in r.json()["detail"]
                forged = members[q.members[0]].answer(
                    problem, q.feature, q.step, True, signer=Identity.generate()
                )
                assert post(answers_url, forged).status_code == 403
            for i in q.members:
                if i in answered:
                    continue
                truth = values[q.feature] > q.threshold
                bit = bool(rr.perturb(np.asarray([truth]), rng)[0])
                assert (
                    post(answers_url, members[i].answer(problem, q.feature, q.step, bit)).status_code == 201
                )
                answered.add(i)
                if not checked:  # the group is still open: a second answer is a duplicate
                    again = post(answers_url, members[i].answer(problem, q.feature, q.step, not bit))
                    assert again.status_code == 409 and "already answered" in again.json()["detail"]
                    checked = True
        return False

    wait_until(answer_the_open_queries, 30, "the median search to end")
    wait_phase(aggregator.url, problem.id, ("reporting",))
    # Every query went to a disjoint group, and each member answered at most once.
    groups = [set(q.members) for q in seen]
    assert sum(len(g) for g in groups) == len(set().union(*groups))
    assert {q.epsilon for q in seen} == {4.0}
    assert seen[0].threshold == 5.0  # the search starts at min + (max - min)/2
    bins = bins_of(aggregator.url, problem.id)
    verify_message(bins, bytes(problem.aggregator))
    (cut0,), (cut1,), () = bins.edges
    # Two steps halve [0, 10] twice: the bracket holding the median has width 2.5.
    assert 0.0 <= cut0 <= 2.5 and 7.5 <= cut1 <= 10.0
    st = requests.get(f"{aggregator.url}/problems/{problem.id}/status").json()
    assert st["median_answers"] == len(answered)
    assert st["rejects"] == {"not a member": 1, "not named": 1, "bad signature": 1, "duplicate answer": 1}
