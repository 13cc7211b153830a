"""The suite's one poll helper (tests/waiting.py): returns what it waited for, fails naming it."""

from __future__ import annotations

import itertools
import time

import pytest

from tests.waiting import answers_ok, wait_for_clock, wait_until


def test_wait_until_returns_the_first_truthy_value_without_waiting_longer():
    calls = itertools.count(1)
    found = wait_until(lambda: (n := next(calls)) >= 3 and f"call {n}", 30, "the third call", every=0.0)
    assert found == "call 3" and next(calls) == 4  # polled exactly three times


def test_wait_until_fails_after_its_deadline_naming_what_it_waited_for():
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"timed out after 0.2 s waiting for the impossible"):
        wait_until(lambda: False, 0.2, "the impossible")
    assert time.monotonic() - started >= 0.2


def test_the_message_may_be_computed_when_the_wait_fails():
    seen = []
    with pytest.raises(AssertionError, match="still 7"):
        wait_until(lambda: seen.append(7), 0.0, lambda: f"a change: still {seen[-1]}")
    assert seen == [7, 7]  # polled once more at the deadline before failing


def test_a_condition_met_by_the_last_poll_at_the_deadline_passes():
    polls = itertools.count()
    assert wait_until(lambda: next(polls) == 1, 0.0, "the second poll") is True


def test_a_negative_timeout_is_refused_naming_the_wait():
    with pytest.raises(ValueError, match="'x'.*-1"):
        wait_until(lambda: True, -1, "x")


def test_wait_for_clock_returns_once_the_moment_passed_and_fails_if_it_is_too_far():
    moment = time.time() + 0.1
    wait_for_clock(moment, 30)
    assert time.time() > moment
    with pytest.raises(AssertionError, match="the far future"):
        wait_for_clock(time.time() + 3600, 0.1, "the far future")


def test_answers_ok_is_false_not_an_error_where_nothing_listens():
    assert answers_ok("http://127.0.0.1:9/healthz", timeout=2) is False
