"""A host's median answers sent together (:func:`peer.median_answer.send_together`): each answer ends as
its own request would have (stored, replayed, not counted, refused, not delivered before the step's
deadline), the batch route missing or refused as a whole sends each alone, and a "not now" for one
item sends that one alone — against a scripted client, no server (the route itself is tested in
``tests/aggregator/test_medians.py``, the whole path in the protocol suites)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from anonml.outbound import OutboundError
from anonml.protocol import Ack, BatchResults, ItemResult, MedianAnswer
from peer import median_answer
from peer.client import AggregatorClient, HTTPRefusal
from peer.median_answer import SignedAnswer, send_together

URL = "http://aggregator.test"


@dataclass
class Relay:
    counts: Counter = field(default_factory=Counter)

    def count(self, what: str, n: int = 1) -> None:
        self.counts[what] += n


@dataclass
class Client:
    """The two answer routes: the batch one scripted (results, or what it raises), the single one taken."""

    batch: tuple[ItemResult, ...] | Exception
    base_url: str = URL
    batches: list[int] = field(default_factory=list)
    alone: list[MedianAnswer] = field(default_factory=list)

    def answer_batch(self, problem_id: str, answers: list[MedianAnswer]) -> BatchResults:
        self.batches.append(len(answers))
        if isinstance(self.batch, Exception):
            raise self.batch
        return BatchResults(results=self.batch[: len(answers)])

    def answer(self, answer: MedianAnswer) -> Ack:
        self.alone.append(answer)
        return Ack()


@dataclass
class Member:
    """What delivery needs of a participation: its client, its relay counters, its shortfall."""

    client: Client
    relay: Relay
    shortfall: list[str] = field(default_factory=list)

    def _short(self, why: str) -> None:
        self.shortfall.append(why)


def signed(client: Client, n: int, until: float | None = None) -> list[SignedAnswer]:
    relay = Relay()
    out = []
    for i in range(n):
        message = MedianAnswer(problem_id="p", feature=0, step=1, identity=bytes([i + 1]) * 64, bit=True,
                               signature=bytes(64))
        p = cast(Any, Member(client, relay))
        out.append(SignedAnswer(p, message, time.time() + 5.0 if until is None else until))
    return out


def finish(answers: list[SignedAnswer], client: Client) -> list[BaseException | None]:
    """Run what is left for each answer, as the worker does; what each raised (the worker aborts it)."""
    left = send_together(cast(AggregatorClient, client), answers)
    assert set(left) == {id(s.participation) for s in answers}
    raised: list[BaseException | None] = []
    for s in answers:
        try:
            left[id(s.participation)]()
        except Exception as exc:
            raised.append(exc)
        else:
            raised.append(None)
    return raised


def test_each_item_ends_as_its_own_request_would_have():
    client = Client((
        ItemResult(status=201),
        ItemResult(status=409, detail="this peer already answered a median query of this problem"),
        ItemResult(status=409, detail="no open query for feature 0, step 1"),
        ItemResult(status=403, detail="answer signature rejected: bad"),
        ItemResult(status=503, detail="busy, try again"),
    ))
    answers = signed(client, 5)
    raised = finish(answers, client)
    assert client.batches == [5]
    members = [cast(Member, s.participation) for s in answers]
    assert raised[:3] == [None, None, None] and raised[4] is None
    assert isinstance(raised[3], HTTPRefusal) and raised[3].status == 403  # refused: the worker aborts it
    assert members[0].relay.counts["median answers delivered (replayed)"] == 1  # the second one's 409
    assert members[0].shortfall == [] and members[1].shortfall == []
    (why,) = members[2].shortfall
    assert why == "median answer (feature 0, step 1) not counted: no open query for feature 0, step 1"
    assert client.alone == [answers[4].message]  # the "not now" item, in its own request
    assert members[4].shortfall == []


def test_without_the_batch_route_each_answer_goes_alone(monkeypatch):
    monkeypatch.setattr(median_answer, "MAX_BATCH_ITEMS", 2)
    client = Client(HTTPRefusal(f"{URL}/problems/p/medians/answers/batch", 404, "Not Found"))
    answers = signed(client, 5)
    assert finish(answers, client) == [None] * 5
    assert client.batches == [2, 2, 1]  # MAX_BATCH_ITEMS a request
    assert client.alone == [s.message for s in answers]
    assert all(not cast(Member, s.participation).shortfall for s in answers)


def test_a_batch_unanswered_to_the_deadline_leaves_each_answer_not_delivered():
    client = Client(OutboundError(f"{URL}: connection refused"))
    answers = signed(client, 3, until=time.time() - 1.0)  # the step's deadline has passed
    assert finish(answers, client) == [None] * 3
    assert client.batches == [3] and client.alone == []
    for s in answers:
        (why,) = cast(Member, s.participation).shortfall
        assert why.startswith("median answer (feature 0, step 1) not delivered before the step's deadline")


@pytest.mark.parametrize("status", [413, 422])
def test_a_batch_refused_as_a_whole_sends_each_alone(status):
    client = Client(HTTPRefusal(f"{URL}/problems/p/medians/answers/batch", status, "no"))
    answers = signed(client, 2)
    assert finish(answers, client) == [None, None]
    assert client.alone == [s.message for s in answers]
