"""What a host fetches once for all its identities when the model is out (:mod:`peer.model_step`):
the receipts always; the median queries asked only when an identity may have missed one, each
checked against the aggregator's signature; a transient failure is awaited, a refusal is not, and
every miss is counted."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from anonml.crypto import Identity
from anonml.outbound import OutboundError
from anonml.protocol import (
    CalibrationRequest,
    ChoiceQuestion,
    ClassMapQuestion,
    MedianQuery,
    ProblemDraft,
    ReportReceipts,
    sign_message,
)
from peer.client import AggregatorClient, HTTPRefusal
from peer.model_step import fetch_for_host
from peer.participant import Participant
from tests.aggregator.helpers import draft, signed_problem

AGGREGATOR = Identity.generate()
PROBLEM = signed_problem(draft(), AGGREGATOR, pid="p-model-step")


def query(step: int, signer: Identity = AGGREGATOR) -> MedianQuery:
    unsigned = MedianQuery(problem_id=PROBLEM.id, feature=0, step=step, threshold=1.5, members=(0, 1),
                           epsilon=1.0, signature=bytes(64))
    return sign_message(unsigned, signer)


def receipts(*digests: bytes) -> ReportReceipts:
    return ReportReceipts(problem_id=PROBLEM.id, digests=digests)


@dataclass
class Taking:
    """An identity about to take the model: only what the fetch looks at."""

    in_median_pool: bool
    shortfall: list[str] = field(default_factory=list)


@dataclass
class Aggregator:
    """Answers (or raises) for the two downloads; counts what was asked."""

    digests: ReportReceipts | Exception = field(default_factory=receipts)
    queries: list[MedianQuery] | Exception = field(default_factory=list)
    calls: Counter[str] = field(default_factory=Counter)

    def _answer(self, what: str, value: Any) -> Any:
        self.calls[what] += 1
        if isinstance(value, Exception):
            raise value
        return value

    def receipts(self, problem_id: str) -> ReportReceipts:
        return self._answer("receipts", self.digests)

    def asked_medians(self, problem_id: str) -> list[MedianQuery]:
        return self._answer("asked", self.queries)


def fetch(agg: Aggregator, *taking: Taking) -> tuple[Any, Counter[str]]:
    counted: Counter[str] = Counter()
    out = fetch_for_host(cast(AggregatorClient, agg), PROBLEM, cast(list[Participant], list(taking)),
                         lambda what: counted.update([what]))
    return out, counted


def test_the_queries_asked_are_fetched_only_when_an_identity_may_have_missed_one() -> None:
    asked = [query(0), query(1)]
    agg = Aggregator(digests=receipts(b"\x01" * 32), queries=asked)
    out, counted = fetch(agg, Taking(in_median_pool=False), Taking(in_median_pool=True, shortfall=["said"]))
    assert agg.calls == {"receipts": 1} and out.asked == [] and out.receipts == {b"\x01" * 32}
    out, counted = fetch(agg, Taking(in_median_pool=False), Taking(in_median_pool=True))
    assert agg.calls["asked"] == 1 and out.asked == asked and not out.awaited and not counted


def test_a_query_not_signed_by_the_aggregator_voids_the_list_and_is_counted() -> None:
    forged = [query(0), query(1, signer=Identity.generate())]
    out, counted = fetch(Aggregator(queries=forged), Taking(in_median_pool=True))
    assert out.asked == [] and not out.awaited and "signature" in out.error.lower()
    assert counted == {"median questions not fetched": 1}


@pytest.mark.parametrize(
    ("error", "awaited"),
    [
        (OutboundError("http://aggregator.test: connection refused"), True),
        (HTTPRefusal("http://aggregator.test", 503, "overloaded"), True),
        (HTTPRefusal("http://aggregator.test", 404, "no such problem"), False),
    ],
    ids=["unreachable", "overloaded", "refused"],
)
def test_a_transient_failure_is_awaited_a_refusal_is_not_and_both_are_counted(error, awaited: bool) -> None:
    out, counted = fetch(Aggregator(digests=error, queries=error), Taking(in_median_pool=True))
    assert out.receipts is None and out.asked == []
    assert out.awaited == (["receipts", "median questions"] if awaited else [])
    assert counted == {"receipts not fetched": 1, "median questions not fetched": 1}
    assert out.error == str(error)


@dataclass
class PoolMember:
    """An identity of the calibration pool that has not answered yet (still reporting)."""

    in_median_pool: bool = False
    in_calibration_pool: bool = True
    phase: str = "reporting"
    shortfall: list[str] = field(default_factory=list)


@pytest.mark.parametrize("forged", ["question", "choice"])
def test_a_calibration_request_with_either_question_unsigned_by_the_aggregator_is_voided(forged: str) -> None:
    # K >= 3: the map half's question and the choice half's are each checked (a forged choice list
    # must not pass for the aggregator's).
    problem = signed_problem(
        ProblemDraft.model_validate({**draft().model_dump(), "calibration_fraction": 0.5}),
        AGGREGATOR,
        pid="p-model-step-calibration",
    )
    common = {"problem_id": problem.id, "model_digest": b"\x02" * 32, "epsilon": 1.0, "members": (0, 1),
              "deadline": 1e10, "signature": bytes(64)}
    signer = {which: Identity.generate() if which == forged else AGGREGATOR
              for which in ("question", "choice")}
    question = sign_message(ClassMapQuestion(classes=3, **common), signer["question"])
    uniform = ((1 / 3,) * 3,) * 3
    choice = sign_message(ChoiceQuestion(class_map=uniform, weights=(0.5, 1.0), clip=1.0, **common),
                          signer["choice"])
    request = CalibrationRequest.model_construct(question=question, model=None, choice=choice)

    class Calibrating(Aggregator):
        def calibration(self, problem_id: str) -> CalibrationRequest:
            return self._answer("calibration", request)

    counted: Counter[str] = Counter()
    taking = cast(list[Participant], [PoolMember()])
    client = cast(AggregatorClient, Calibrating())
    out = fetch_for_host(client, problem, taking, lambda what: counted.update([what]))
    assert out.calibration is None and "signature" in out.error.lower()
    assert counted == {"calibration question not fetched": 1}
