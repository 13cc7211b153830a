"""The peer's retry rule (issue 26, item 1): what is transient, the jittered backoff, the deadline."""

from __future__ import annotations

import random
import time

import pytest

from anonml.errors import ProtocolError
from anonml.outbound import OutboundError
from peer.client import HTTPRefusal, backoff_delay, transient, with_retries


def test_no_answer_and_not_now_statuses_are_transient_refusals_are_not():
    assert transient(OutboundError("http://a: ConnectionRefusedError"))
    for status in (408, 425, 429, 500, 502, 503, 504):
        assert transient(HTTPRefusal("http://a", status, "not now"))
    for status in (400, 403, 404, 409, 422):
        assert not transient(HTTPRefusal("http://a", status, "no"))
    assert not transient(ProtocolError("http://a: malformed answer"))
    assert not transient(ValueError("a bug"))


def test_backoff_is_uniform_below_a_doubling_capped_bound():
    rng = random.Random(5)
    for attempt in range(10):
        bound = min(4.0, 0.25 * 2.0**attempt)
        draws = [backoff_delay(attempt, rng=rng) for _ in range(2000)]
        assert all(0.0 <= d <= bound for d in draws)
        # full jitter: mean bound / 2, standard error bound / sqrt(12 · 2000)
        assert abs(sum(draws) / len(draws) - bound / 2) < 4 * bound / (12 * 2000) ** 0.5


def test_with_retries_retries_transient_failures_and_stops_at_once_on_a_refusal():
    tries: list[int] = []

    def flaky() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise HTTPRefusal("http://a", 503, "busy")
        return "ok"

    retried: list[BaseException] = []
    assert with_retries(flaky, until=time.time() + 60, on_retry=retried.append, rng=random.Random(1)) == "ok"
    assert len(tries) == 3 and len(retried) == 2

    def refused() -> str:
        tries.append(1)
        raise HTTPRefusal("http://a", 409, "query closed")

    tries.clear()
    with pytest.raises(HTTPRefusal, match="409"):
        with_retries(refused, until=time.time() + 60)
    assert len(tries) == 1


def test_with_retries_gives_up_with_the_last_failure_at_its_deadline():
    tries: list[float] = []

    def down() -> str:
        tries.append(time.time())
        raise OutboundError("http://a: ConnectionRefusedError")

    until = time.time() + 1.0
    with pytest.raises(OutboundError):
        with_retries(down, until=until, rng=random.Random(2))
    assert len(tries) >= 1 and all(t < until for t in tries)
