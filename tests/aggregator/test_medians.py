"""Median rounds over HTTP: disjoint groups, one signed answer each, edges near the medians."""

from __future__ import annotations

import numpy as np
import requests

from aggregator.medians import median_groups
from anonml.crypto import Identity
from anonml.privacy import BinaryRandomizedResponse
from anonml.protocol import BatchResults, MedianAnswerBatch, MedianQuery, verify_message
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
    groups = median_groups(list(range(23)), n_numeric=2, searches=1, steps=5, confidence=0.5)
    flat = [int(i) for feature in groups for g in feature for i in g]
    assert sorted(flat) == list(range(23))  # every pool member in exactly one group
    # shares of 12 and 11: five or four steps would leave groups of 2 (12 // 5, 11 // 4), too few to
    # move a search at 5 or 4 Bonferroni steps (search_steps); four of 3 and three of 3 can
    assert [len(feature) for feature in groups] == [4, 3]
    small = median_groups(list(range(3)), n_numeric=2, searches=2, steps=4, confidence=0.5)
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


def test_a_batch_of_answers_gets_for_each_what_its_own_request_would_and_stores_only_the_valid(aggregator):
    """``POST …/medians/answers/batch``: one bad answer never sinks the others; each item gets the
    single route's status and detail, refusals are counted under the same reasons, and the search
    runs to its bins on answers sent only in batches."""
    d = draft(n_numeric=2, pool_fraction=0.5, kp=2, min_peers=4, epsilon=4.0, steps=2, median_step=5.0)
    problem = propose(aggregator.url, d)
    peers = register_and_close(aggregator.url, problem, 40, ("medians",))
    members = in_roster_order(aggregator.url, problem.id, peers)
    base = f"{aggregator.url}/problems/{problem.id}"
    batch_url = f"{base}/medians/answers/batch"
    (q, *_) = [MedianQuery.model_validate(raw) for raw in requests.get(f"{base}/medians").json()]
    a, b, c = q.members[:3]
    not_named = next(i for i in range(len(members)) if i not in q.members)
    items = [
        members[a].answer(problem, q.feature, q.step, True),
        WirePeer().answer(problem, q.feature, q.step, True),  # not on the roster
        members[not_named].answer(problem, q.feature, q.step, True),
        members[b].answer(problem, q.feature, q.step, True, signer=Identity.generate()),  # forged
        members[c].answer(problem, q.feature, q.step, False),
        members[a].answer(problem, q.feature, q.step, False),  # a's second answer
    ]
    r = post(batch_url, MedianAnswerBatch(answers=tuple(items)))
    assert r.status_code == 200, r.text
    results = BatchResults.model_validate_json(r.content).results
    assert [x.status for x in results] == [201, 403, 403, 403, 201, 409]
    assert "not on the roster" in results[1].detail and "not asked" in results[2].detail
    assert "signature" in results[3].detail and "already answered" in results[5].detail
    st = requests.get(f"{base}/status").json()
    assert st["median_answers"] == 2
    assert st["rejects"] == {"not a member": 1, "not named": 1, "bad signature": 1, "duplicate answer": 1}
    for bad in (b'{"answers": []}', MedianAnswerBatch.model_construct(answers=tuple(items[:1] * 257))):
        assert post(batch_url, bad).status_code == 422  # an empty batch, or one over MAX_BATCH_ITEMS
    answered = {a, c}

    def answer_the_open_queries_in_one_batch() -> bool:
        if requests.get(f"{base}/status").json()["phase"] != "medians":
            return True
        todo = [
            members[i].answer(problem, q.feature, q.step, True)
            for q in (MedianQuery.model_validate(raw) for raw in requests.get(f"{base}/medians").json())
            for i in q.members
            if i not in answered
        ]
        if todo:
            r = post(batch_url, MedianAnswerBatch(answers=tuple(todo)))
            assert r.status_code == 200, r.text
            assert {x.status for x in BatchResults.model_validate_json(r.content).results} <= {201, 409}
            index = {bytes(m.public): i for i, m in enumerate(members)}
            answered.update(index[bytes(t.identity)] for t in todo)
        return False

    wait_until(answer_the_open_queries_in_one_batch, 30, "the median search to end")
    wait_phase(aggregator.url, problem.id, ("reporting",))
    verify_message(bins_of(aggregator.url, problem.id), bytes(problem.aggregator))
