"""Registration and the signed roster against a real server (admin authentication, body caps and the
route listing: ``test_route_contracts.py``, in process)."""

from __future__ import annotations

import json

import requests

from anonml.crypto import Identity
from anonml.learn import commit_seed, make_plan
from anonml.protocol import (
    MAX_BATCH_ITEMS,
    AssignmentBatch,
    AssignmentBatchRequest,
    BatchResults,
    Problem,
    RegistrationBatch,
    sign_message,
    transcript_hash,
    verify_message,
)
from tests.aggregator.helpers import (
    ADMIN,
    WirePeer,
    assignment_of,
    close_registration,
    draft,
    post,
    propose,
    roster_of,
    wait_phase,
)
from tests.databases import table_rows


def _registered(db_url: str) -> list[bytes]:
    return [bytes(row[0]) for row in table_rows(db_url, "SELECT identity FROM registrations ORDER BY id")]


def test_proposal_is_signed_and_commits_to_a_hidden_seed(aggregator):
    problem = propose(aggregator.url, draft())
    verify_message(problem, bytes(problem.aggregator))  # raises if the signature is wrong
    listed = requests.get(f"{aggregator.url}/problems?phase=registration").json()
    assert [Problem.model_validate(p).id for p in listed] == [problem.id]
    # The seed stays secret until the roster: the roster endpoint refuses before close.
    assert requests.get(f"{aggregator.url}/problems/{problem.id}/roster").status_code == 409


def test_registration_refusals_each_have_a_reason_and_keep_what_was_stored(aggregator):
    problem = propose(aggregator.url, draft())
    good = WirePeer()
    assert good.register(aggregator.url, problem).status_code == 201

    again = good.register(aggregator.url, problem)
    assert again.status_code == 409 and "already registered" in again.json()["detail"]

    forged = WirePeer().registration(problem, signer=Identity.generate())
    bad_sig = post(f"{aggregator.url}/problems/{problem.id}/registrations", forged)
    assert bad_sig.status_code == 403 and "signature" in bad_sig.json()["detail"]

    other_round = WirePeer().registration(problem, round_id=problem.round_id + 1)
    wrong_round = post(f"{aggregator.url}/problems/{problem.id}/registrations", other_round)
    assert wrong_round.status_code == 403 and "round" in wrong_round.json()["detail"]

    # A certificate made by another identity, re-signed by this one.
    thief, victim = WirePeer(), WirePeer()
    stolen = victim.registration(problem)
    swapped = sign_message(stolen.model_copy(update={"identity": thief.public}), thief.identity)
    cert = post(f"{aggregator.url}/problems/{problem.id}/registrations", swapped)
    assert cert.status_code == 403 and "certificate" in cert.json()["detail"]

    malformed = post(f"{aggregator.url}/problems/{problem.id}/registrations", b'{"problem_id": 3}')
    assert malformed.status_code == 422
    assert (
        post(f"{aggregator.url}/problems/p-nope/registrations", WirePeer().registration(problem)).status_code
        == 404
    )

    assert _registered(aggregator.settings.db_url) == [good.public]
    status = requests.get(f"{aggregator.url}/problems/{problem.id}/status").json()
    assert status["registered"] == 1
    assert status["rejects"] == {"duplicate registration": 1, "bad signature": 1, "bad relay certificate": 2}


def test_roster_is_published_at_close_in_registration_order_with_the_seed(aggregator):
    problem = propose(aggregator.url, draft(min_peers=4, pool_fraction=0.25))
    peers = [WirePeer() for _ in range(8)]
    for p in peers:
        assert p.register(aggregator.url, problem).status_code == 201
    assert requests.post(f"{aggregator.url}/problems/{problem.id}/close", headers=ADMIN).status_code == 200
    wait_phase(aggregator.url, problem.id, ("medians", "reporting"))

    late = WirePeer().register(aggregator.url, problem)
    assert late.status_code == 409 and "closed" in late.json()["detail"]

    roster = roster_of(aggregator.url, problem.id)
    verify_message(roster, bytes(problem.aggregator))
    assert [bytes(e.identity) for e in roster.entries] == [p.public for p in peers]
    assert commit_seed(bytes(roster.seed)) == bytes(problem.seed_commitment)
    assert roster.median_pool_size == 2  # floor(0.25 · 8)
    # Served again, the roster is byte-identical: the transcript peers compare is stable.
    again = roster_of(aggregator.url, problem.id)
    assert transcript_hash("roster", problem, roster) == transcript_hash("roster", problem, again)
    # Each peer's signed assignment is what the seed gives.
    plan = make_plan(
        bytes(roster.seed), [bytes(e.identity) for e in roster.entries], 3, n_partitions=2, median_pool_size=2
    )
    for i, p in enumerate(peers):
        got = requests.get(
            f"{aggregator.url}/problems/{problem.id}/assignments/{p.identity.fingerprint.hex()}"
        ).json()
        assert (got["role"], got["index"]) == (plan.assignment(i).role, plan.assignment(i).index)


def test_a_batch_of_registrations_answers_each_as_its_own_request_would(aggregator):
    problem = propose(aggregator.url, draft(min_peers=2))
    url = f"{aggregator.url}/problems/{problem.id}/registrations/batch"
    a, b, c, forger = WirePeer(), WirePeer(), WirePeer(), WirePeer()
    items = (
        a.registration(problem),
        b.registration(problem),
        c.registration(problem, signer=forger.identity),  # not signed by its identity
        a.registration(problem),  # the same identity again within the batch
        b.registration(problem).model_copy(update={"problem_id": "p-other"}),
    )
    reply = post(url, RegistrationBatch(registrations=items))
    assert reply.status_code == 200
    results = BatchResults.model_validate_json(reply.content).results
    assert [r.status for r in results] == [201, 201, 403, 409, 422]
    assert "signature" in results[2].detail and "already registered" in results[3].detail
    assert "p-other" in results[4].detail
    assert _registered(aggregator.settings.db_url) == [a.public, b.public]  # in the batch's order
    # Two registrations timed in one request count as two for the round's schedule floors.
    assert aggregator.state.meter(problem.id).count == 2

    again = post(url, RegistrationBatch(registrations=(a.registration(problem), c.registration(problem))))
    assert [r.status for r in BatchResults.model_validate_json(again.content).results] == [409, 201]
    st = requests.get(f"{aggregator.url}/problems/{problem.id}/status").json()
    assert st["registered"] == 3
    assert st["rejects"] == {"bad signature": 1, "duplicate registration": 2, "malformed": 1}

    # Only a body that is no batch is refused whole.
    too_many = json.dumps({"registrations": [json.loads(a.registration(problem).model_dump_json())] * 257})
    assert post(url, too_many).status_code == 422
    assert post(url, json.dumps({"registrations": []})).status_code == 422
    unknown = post(
        f"{aggregator.url}/problems/p-nope/registrations/batch",
        RegistrationBatch(registrations=(WirePeer().registration(problem),)),
    )
    assert [r.status for r in BatchResults.model_validate_json(unknown.content).results] == [404]

    assert requests.post(f"{aggregator.url}/problems/{problem.id}/close", headers=ADMIN).status_code == 200
    late = post(url, RegistrationBatch(registrations=(WirePeer().registration(problem),)))
    (closed,) = BatchResults.model_validate_json(late.content).results
    assert closed.status == 409 and "closed" in closed.detail
    assert _registered(aggregator.settings.db_url) == [a.public, b.public, c.public]


def test_assignments_of_many_members_come_in_one_request_each_as_the_single_route_signs_it(aggregator):
    problem = propose(aggregator.url, draft(min_peers=4, pool_fraction=0.25))
    peers = [WirePeer() for _ in range(6)]
    for p in peers:
        assert p.register(aggregator.url, problem).status_code == 201
    url = f"{aggregator.url}/problems/{problem.id}/assignments"

    def ask(fingerprints, pid=problem.id):
        return post(url, AssignmentBatchRequest(problem_id=pid, fingerprints=tuple(fingerprints)))

    fps = [p.identity.fingerprint.hex() for p in peers]
    early = ask(fps)
    assert early.status_code == 409 and "not closed" in early.json()["detail"]
    assert requests.post(f"{aggregator.url}/problems/{problem.id}/close", headers=ADMIN).status_code == 200
    wait_phase(aggregator.url, problem.id, ("medians", "reporting"))

    order = [4, 0, 5, 2]  # any order, answered in the order asked
    got = ask([fps[i] for i in order])
    assert got.status_code == 200
    batch = AssignmentBatch.model_validate_json(got.content)
    assert len(batch.assignments) == len(order)
    for i, notice in zip(order, batch.assignments, strict=True):
        verify_message(notice, bytes(problem.aggregator))
        single = assignment_of(aggregator.url, problem.id, peers[i])
        assert bytes(notice.identity) == peers[i].public
        assert (notice.role, notice.index, notice.subsets) == (single.role, single.index, single.subsets)

    stranger = Identity.generate().fingerprint.hex()
    unknown = ask([fps[0], stranger])
    assert unknown.status_code == 404 and stranger in unknown.json()["detail"]
    wrong_problem = ask(fps[:1], pid="p-other")
    assert wrong_problem.status_code == 422 and "p-other" in wrong_problem.json()["detail"]
    too_many = {"problem_id": problem.id, "fingerprints": [fps[0]] * (MAX_BATCH_ITEMS + 1)}
    assert post(url, json.dumps(too_many)).status_code == 422
    assert post(url, json.dumps({"problem_id": problem.id, "fingerprints": []})).status_code == 422
    traversal = {"problem_id": problem.id, "fingerprints": ["../../status"]}
    assert post(url, json.dumps(traversal)).status_code == 422
    assert post(f"{aggregator.url}/problems/p-nope/assignments", AssignmentBatchRequest(
        problem_id="p-nope", fingerprints=(fps[0],))).status_code == 404


def test_too_few_registrations_fail_the_problem_with_a_reason(aggregator):
    problem = propose(aggregator.url, draft(min_peers=5))
    for _ in range(2):
        WirePeer().register(aggregator.url, problem)
    close_registration(aggregator.url, problem.id)
    st = wait_phase(aggregator.url, problem.id, ("failed",))
    assert "only 2 peers registered" in st.message
    assert requests.get(f"{aggregator.url}/problems/{problem.id}/roster").status_code == 409
