"""Every median shortfall in the account (issue 26, item 5): status, signed model, console.

A real aggregator (uvicorn on loopback) runs a two-step median search over a
pool of 10 (5 named per step) with a quorum of 0.6, so each step closes after
3 answers. Six answers are taken, one comes after its step closed (409,
late), one is a duplicate of a counted answer (409, no shortfall), and the
other three named members never answer. The account must say: 10 expected,
6 received, 4 missing — 1 late, 3 not arrived — in ``/status``, in the
signed model document (and its message), and in the console's status JSON.
"""

from __future__ import annotations

import numpy as np

from anonml.crypto import PublicIdentity
from anonml.protocol import MedianAccount, ModelDocument, verify_message
from tests.aggregator.helpers import (
    ADMIN,
    TOKEN,
    median_round,
    post,
    send_reports,
    status,
    wait_median_query,
    wait_phase,
)
from tests.webpages import login


def test_missing_median_answers_are_counted_with_their_reasons_everywhere(aggregator) -> None:
    url = aggregator.url
    problem, member = median_round(url, median_step=300.0, quorum=0.6)
    answers = f"{url}/problems/{problem.id}/medians/answers"
    named: list[int] = []
    for step in (0, 1):
        q = wait_median_query(url, problem.id, step)
        named.extend(q.members)
        for i in q.members[:3]:  # the quorum: the step closes after these
            assert post(answers, member[i].answer(problem, 0, step, True)).status_code == 201
        if step == 0:
            dup = post(answers, member[q.members[0]].answer(problem, 0, step, True))
            assert dup.status_code == 409  # a duplicate of a counted answer: not a shortfall
    wait_phase(url, problem.id, ("reporting",), timeout=60)
    late = post(answers, member[q.members[3]].answer(problem, 0, 1, True))
    assert late.status_code == 409
    want = MedianAccount(expected=10, received=6, missing=4, late=1, refused={}, not_arrived=3)
    assert len(set(named)) == 10
    st = status(url, problem.id)
    assert st.medians == want and st.median_answers == 6
    assert want.describe() == "4 of 10 median answers missing: 1 late, 3 not arrived"
    # The console's status JSON says the same.
    http, _ = login(url, "/console", TOKEN)
    counts = http.get(f"{url}/console/api/problems/{problem.id}", timeout=30).json()["items"]["counts"]
    assert (counts["median_expected"], counts["median_received"], counts["median_missing"]) == (10, 6, 4)
    assert counts["median_shortfall"] == want.describe()
    # The report peers report; the model document carries the median account, signed.
    pool = set(named)
    reporters = [p for i, p in enumerate(member) if i not in pool]
    assert send_reports(url, problem, reporters, np.random.default_rng(3)) > 0
    assert post(f"{url}/problems/{problem.id}/train", b"", ADMIN).status_code == 200
    final = wait_phase(url, problem.id, ("done", "degraded", "failed"), timeout=120)
    assert final.phase in ("done", "degraded"), final.message
    assert want.describe() in final.message
    reply = http.get(f"{url}/problems/{problem.id}/model", timeout=30)
    document = ModelDocument.model_validate_json(reply.content)
    verify_message(document, PublicIdentity.from_bytes(bytes(problem.aggregator)))
    assert document.medians == want
    assert final.medians == want
