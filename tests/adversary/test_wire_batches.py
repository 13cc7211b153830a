"""The batch intake (``POST /intake/batch``): each delivery on its own, one transaction for all.

A real aggregator under uvicorn with its own database; the attacker is a roster member speaking
the wire protocol directly. Every item must get what its own ``POST /intake`` would have got —
status, detail, counted reason — and a bad or replayed item must never sink the good ones.
"""

from __future__ import annotations

import numpy as np
import requests

from anonml.crypto import Redemption
from anonml.protocol import (
    MAX_BATCH_ITEMS,
    IntakeBatch,
    IntakeDelivery,
    PrivateReport,
    pack_bits,
    report_slot,
)
from tests.adversary.test_wire_intake import OpenRound, _open
from tests.aggregator.conftest import aggregator  # noqa: F401 - a fixture, registered by import
from tests.aggregator.helpers import ADMIN, delivery, post, report_for, sealed_delivery, status, wait_phase


def _batch(r: OpenRound, items: list[IntakeDelivery]) -> requests.Response:
    return post(f"{r.url}/intake/batch", IntakeBatch(deliveries=tuple(items)))


def _statuses(answer: requests.Response) -> list[int]:
    assert answer.status_code == 200, answer.text
    return [item["status"] for item in answer.json()["results"]]


def _honest(r: OpenRound, peer_index: int, rng: np.random.Generator) -> tuple[IntakeDelivery, bytes]:
    """One honest delivery of peer ``peer_index`` (its partition-0 … slot), and its token nonce."""
    d, nonce, _, _ = _honest_parts(r, peer_index, rng)
    return d, nonce


def _honest_parts(
    r: OpenRound, peer_index: int, rng: np.random.Generator
) -> tuple[IntakeDelivery, bytes, Redemption, PrivateReport]:
    """:func:`_honest` with what is sealed inside: the redemption and the report."""
    peer = r.peers[peer_index]
    pid = r.problem.id
    (token,) = peer.tokens(r.url, r.problem, r.roster, [report_slot(pid, peer.assignment.index, 0)])
    report = report_for(r.problem, r.bins, peer.assignment, np.r_[rng.uniform(0, 10, 2), 1.0], 1, rng=rng)
    return delivery(token, report), token.nonce, token.redeem(report.to_bytes()), report


def test_each_item_gets_what_its_own_request_would_and_bad_ones_sink_no_good_one(aggregator):  # noqa: F811
    r = _open(aggregator, n=6, kp=1)
    rng = np.random.default_rng(3)
    parts = [_honest_parts(r, i, rng) for i in range(4)]
    good = [p[0] for p in parts]
    # A forged MAC (its last byte flipped), bits outside the mechanism's support, a sealed payload
    # altered on the way (it no longer opens), a report for no known problem — and cover.
    red0, report0 = parts[0][2], parts[0][3].to_bytes()
    flipped = Redemption(red0.slot, red0.nonce, red0.mac[:-1] + bytes([red0.mac[-1] ^ 1]))
    forged = sealed_delivery(r.problem, flipped, report0)
    own = parts[2][3]
    ones = own.model_copy(update={"bits": pack_bits(np.ones(own.mechanism.m, dtype=bool))})
    out_of_support = sealed_delivery(r.problem, parts[2][2], ones.to_bytes())
    altered = bytearray(good[3].sealed)
    altered[100] ^= 1
    unsealable = good[3].model_copy(update={"sealed": bytes(altered)})
    stranger = own.model_copy(update={"problem_id": "p-nosuchproblem"})
    unknown = sealed_delivery(r.problem, parts[3][2], stranger.to_bytes())
    cover = sealed_delivery(r.problem, None, None)
    items = [forged, good[0], out_of_support, good[1], unsealable, good[2], unknown, cover, good[3]]
    answer = _batch(r, items)
    results = answer.json()["results"]
    # Cover is answered exactly as a stored report: the exit learns nothing from the answer.
    assert _statuses(answer) == [403, 201, 422, 201, 400, 201, 404, 201, 201]
    assert results[7] == results[1] == {"status": 201, "detail": ""}
    assert "exactly one 1" in results[2]["detail"] and "does not open" in results[4]["detail"]
    assert "no problem 'p-nosuchproblem'" in results[6]["detail"]
    # The same refusals a single request gets, item for item (the MAC check first in both).
    for item, result in zip(items, results, strict=True):
        if result["status"] != 201:
            single = post(f"{r.url}/intake", item)
            assert (single.status_code, single.json()["detail"]) == (result["status"], result["detail"])
    assert r.stored() == 4
    rejects = r.rejects()
    # Counted once per refusal, batch and single alike; those naming no problem under none; the
    # unsealable one under the problem of its round. Cover is no refusal: counted apart.
    assert rejects == {"bad token": 2, "out of support": 2, "unsealable": 2}
    assert r.rows("SELECT count FROM reject_counts WHERE reason = 'dropped: cover'") == [(1,)]
    account = status(r.url, r.problem.id).reports
    assert account is not None and account.cover == 1 and account.received == 4


def test_a_token_replayed_inside_a_batch_or_across_batches_is_stored_once(aggregator):  # noqa: F811
    r = _open(aggregator, n=6, kp=1)
    rng = np.random.default_rng(4)
    a, b, c = (_honest(r, i, rng)[0] for i in range(3))
    # A copy is answered as a stored delivery (the relay cannot tell a copy from a report or cover),
    # stored once and counted as a duplicate.
    assert _statuses(_batch(r, [a, b, a])) == [201, 201, 201]  # the same delivery twice in one batch
    assert r.stored() == 2 and r.duplicates() == 1
    # Across batches: both copies counted, the new delivery among them stored.
    assert _statuses(_batch(r, [b, c, a])) == [201, 201, 201]
    assert post(f"{r.url}/intake", a).status_code == 201  # and the single route agrees
    assert r.stored() == 3 and r.duplicates() == 4
    assert r.rows("SELECT COUNT(*) FROM spent_tokens") == [(0,)]  # staged until the round closes


def test_batch_size_limits_refuse_the_whole_request_with_a_clear_error(aggregator):  # noqa: F811
    r = _open(aggregator, n=4, kp=1)
    rng = np.random.default_rng(5)
    one, _ = _honest(r, 0, rng)
    url = f"{r.url}/intake/batch"
    too_many = {"deliveries": [one.model_dump(mode="json")] * (MAX_BATCH_ITEMS + 1)}
    answer = requests.post(url, json=too_many, timeout=60)
    assert answer.status_code == 422 and f"at most {MAX_BATCH_ITEMS} items" in answer.text
    empty = requests.post(url, json={"deliveries": []}, timeout=60)
    assert empty.status_code == 422 and "at least 1 item" in empty.text
    cap = aggregator.settings.max_body_bytes
    huge = requests.post(url, data=b"{" + b" " * cap + b"}", headers={"content-type": "application/json"})
    assert huge.status_code == 413 and f"larger than {cap} bytes" in huge.json()["detail"]
    assert r.stored() == 0
    # Exactly the limit is taken (every copy after the first is a duplicate: answered as stored, counted).
    full = requests.post(
        url, json={"deliveries": [one.model_dump(mode="json")] * MAX_BATCH_ITEMS}, timeout=60
    )
    assert _statuses(full) == [201] * MAX_BATCH_ITEMS
    assert r.stored() == 1 and r.duplicates() == MAX_BATCH_ITEMS - 1


def test_a_batch_after_the_round_closed_stores_nothing(aggregator):  # noqa: F811
    r = _open(aggregator, n=4, kp=1)
    rng = np.random.default_rng(6)
    items = [_honest(r, i, rng)[0] for i in range(2)]
    assert post(f"{r.url}/problems/{r.problem.id}/train", b"", ADMIN).status_code == 200
    wait_phase(r.url, r.problem.id, ("training", "done", "degraded", "failed"))
    answer = _batch(r, items)
    assert _statuses(answer) == [409, 409]
    assert all("report round" in item["detail"] for item in answer.json()["results"])
    assert r.stored() == 0 and r.rows("SELECT COUNT(*) FROM spent_tokens") == [(0,)]
