"""An aggregator that answers a host's batch of median answers with results that do not fit it.

The batch route's results are the host's only word on each answer. A hostile or broken aggregator
can send fewer or more results than answers, or no JSON at all. The host must not take such a reply
to mean that any answer was stored, and must not drop a signed, already recorded answer either:
each answer goes again in its own request. Here the aggregator is a real HTTP server on loopback,
and the host's real :class:`~peer.client.AggregatorClient` reads its replies.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from anonml.protocol import BatchResults, ItemResult, MedianAnswer, MedianAnswerBatch
from peer.client import AggregatorClient
from peer.median_answer import SignedAnswer, send_together
from tests.scripted_http import ScriptedHandler, served


@dataclass
class _Aggregator:
    batch_reply: bytes = b""
    batches: int = 0
    alone: list[MedianAnswer] = field(default_factory=list)
    url: str = ""


@pytest.fixture
def aggregator() -> Iterator[_Aggregator]:
    state = _Aggregator()

    class Handler(ScriptedHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.body()
            if self.path.endswith("/medians/answers/batch"):
                MedianAnswerBatch.model_validate_json(body)
                state.batches += 1
                self.reply(200, state.batch_reply)
            else:
                state.alone.append(MedianAnswer.model_validate_json(body))
                self.reply(201, b'{"ok": true, "detail": ""}')

    with served(Handler) as state.url:
        yield state


@dataclass
class _Relay:
    def count(self, what: str, n: int = 1) -> None:
        return None


@dataclass
class _Member:
    """What delivery needs of a participation: its client, relay counters and shortfall."""

    client: AggregatorClient
    relay: _Relay = field(default_factory=_Relay)
    shortfall: list[str] = field(default_factory=list)

    def _short(self, why: str) -> None:
        self.shortfall.append(why)


def _signed(client: AggregatorClient, n: int) -> list[SignedAnswer]:
    out = []
    for i in range(n):
        identity = bytes([i + 1]) * 64
        message = MedianAnswer(problem_id="p", feature=0, step=0, identity=identity, bit=bool(i % 2),
                               signature=bytes(64))
        out.append(SignedAnswer(cast(Any, _Member(client)), message, time.time() + 10.0))
    return out


def _stored() -> bytes:
    return BatchResults(results=(ItemResult(status=201),)).model_dump_json().encode()


@pytest.mark.parametrize(
    "reply",
    [
        _stored(),  # one result for three answers
        BatchResults(results=(ItemResult(status=201),) * 4).model_dump_json().encode(),  # four for three
        b"<html>stored, all of them</html>",  # not JSON
    ],
    ids=["too-few-results", "too-many-results", "not-json"],
)
def test_a_batch_reply_that_does_not_fit_its_answers_sends_each_alone(aggregator, reply):
    aggregator.batch_reply = reply
    client = AggregatorClient(aggregator.url)
    answers = _signed(client, 3)
    left = send_together(client, answers)
    for s in answers:
        left[id(s.participation)]()
    assert aggregator.batches == 1
    assert aggregator.alone == [s.message for s in answers]  # each once, in its own request
    assert all(not cast(_Member, s.participation).shortfall for s in answers)
