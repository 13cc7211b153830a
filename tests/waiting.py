"""The one way a test waits for something to happen: poll a condition until a deadline.

No test sleeps a fixed time and then looks: on a loaded machine a fixed wait is either too short
(a flaky failure) or, summed over the suite, far too long. :func:`wait_until` polls instead and
returns as soon as the condition holds; the deadline only bounds how long a broken system is given
before the test fails, naming what it waited for.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import requests

__all__ = ["POLL_SECONDS", "wait_until", "wait_for_clock", "answers_ok"]

T = TypeVar("T")

#: Seconds between two polls: short beside every deadline of the suite (seconds to minutes), long
#: enough that a poll over HTTP or SQL does not load the machine the system under test runs on.
POLL_SECONDS = 0.05


def wait_until(
    predicate: Callable[[], T], timeout: float, what: str | Callable[[], str], *, every: float = POLL_SECONDS
) -> T:
    """Poll ``predicate`` every ``every`` seconds until it returns a truthy value, and return that value.

    Fails (``AssertionError``) once ``timeout`` seconds have passed without it, naming ``what`` —
    a string, or a callable asked for the message then (to say what the system was doing instead).
    The predicate is called once more after the deadline, so a condition met while the test was
    descheduled is not failed for it.
    """
    if timeout < 0:
        raise ValueError(f"wait_until({what if isinstance(what, str) else what()!r}): timeout {timeout} < 0")
    deadline = time.monotonic() + timeout
    while True:
        found = predicate()
        if found:
            return found
        if time.monotonic() >= deadline:
            found = predicate()
            if found:
                return found
            said = what if isinstance(what, str) else what()
            raise AssertionError(f"timed out after {timeout:g} s waiting for {said}")
        time.sleep(every)


def answers_ok(url: str, timeout: float = 10.0) -> bool:
    """One GET of ``url`` for :func:`wait_until`: True on 200; False, not a failure, when the server
    refuses the connection or has not answered within ``timeout`` (starting, or slow on a loaded
    machine) — the poll's deadline decides."""
    try:
        return requests.get(url, timeout=timeout).status_code == 200
    except requests.RequestException:
        return False


def wait_for_clock(moment: float, timeout: float, what: str = "the clock") -> None:
    """Until the wall clock (POSIX seconds) passes ``moment``: a time of the protocol's schedule
    (a window's end), not a guess at how long something takes. Fails if that is more than
    ``timeout`` seconds away."""
    wait_until(lambda: time.time() > moment, timeout, f"{what} to pass {moment:.3f}",
               every=min(POLL_SECONDS, 0.02))
