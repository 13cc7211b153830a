"""Admission under overload: a request is answered ``503`` with ``Retry-After`` at once (or after a
bounded wait) instead of queueing past its client's deadline (:class:`Admission`, :class:`AdmissionGate`)."""

from __future__ import annotations

import asyncio
import collections
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from anonml.serving.body import HttpMiddleware, empty_receive

__all__ = ["RouteClass", "LaneStats", "Admission", "AdmissionGate"]


@dataclass(frozen=True)
class RouteClass:
    """Requests admitted together: a name and the deadline (seconds) their clients give a whole call."""

    name: str
    client_deadline: float

    def __post_init__(self) -> None:
        if not self.client_deadline > 0:
            raise ValueError(
                f"RouteClass {self.name!r}: client_deadline must be > 0, not {self.client_deadline}"
            )


@dataclass(frozen=True)
class LaneStats:
    """One route class's admission so far: requests at work and waiting now, admitted and shed in all,
    and the measured mean service time (seconds; None before the first completion)."""

    in_flight: int
    waiting: int
    admitted: int
    shed: int
    shed_on_arrival: int
    shed_after_wait: int
    service_seconds: float | None


class _Lane:
    """The admission state of one route class; touched only on the server's event loop."""

    def __init__(self, route: RouteClass) -> None:
        self.route = route
        self.in_flight = 0
        # Queued requests in arrival order: each one's future (True: admitted, False: shed) and the
        # monotonic time its allowance ends.
        self.waiting: collections.deque[tuple[asyncio.Future[bool], float]] = collections.deque()
        self.admitted = 0
        self.shed_on_arrival = 0
        self.shed_after_wait = 0
        self.service: float | None = None  # EWMA of seconds from admission to the answer's end
        self.gap: float | None = None  # EWMA of seconds between two answers while requests queued
        self.gaps = 0  # how many such gaps were measured
        self.last_done: float | None = None  # monotonic time of the last answer
        self.queued_since = 0.0  # monotonic time the queue last went from empty to not empty

    def stats(self) -> LaneStats:
        return LaneStats(
            self.in_flight,
            len(self.waiting),
            self.admitted,
            self.shed_on_arrival + self.shed_after_wait,
            self.shed_on_arrival,
            self.shed_after_wait,
            None if self.service is None else round(self.service, 4),
        )


class Admission:
    """Who is served now and who is told to come back (:class:`AdmissionGate`'s state and policy).

    Per route class (``classify(method, path)``; None: never gated, e.g. ``/healthz``) at most
    ``concurrency`` requests are at work in the app; the next wait in FIFO order for a slot. A
    request may wait at most ``wait_share`` of its class's client deadline, which leaves the rest
    of that deadline for its own service and the network. With every one of the ``c`` slots busy
    and ``q`` requests ahead of it, a request waits for ``q + 1`` answers: ``(q + 1) · g``, where
    ``g`` is the measured time between two successive answers while requests queue (the inverse
    of the service rate; an exponentially weighted mean, weight ``1/8`` per answer; the first
    answer of a busy spell only starts the clock, since it also carries the time to fill the
    slots). Until ``c`` such gaps are measured — the first answers of a burst come close together,
    having started together — Little's law stands in for newcomers: ``g = S / c``, with ``S`` the
    mean admission-to-answer time (weighted alike), which a cold first request rather overstates;
    the queue is trimmed (below) only on measured gaps. A newcomer whose expected wait exceeds its
    allowance is answered ``503`` with ``Retry-After`` at once; so is a queued request as soon as
    its expected wait exceeds what is left of its allowance (checked from the back of the queue
    whenever a slot frees), and one that waited its whole allowance. Its client hears within the
    allowance — never after its deadline — and the app never saw the request, so nothing is
    accepted and then lost. ``Retry-After`` is the time the queue ahead needs to drain,
    ``⌈(q + 1) · g⌉`` seconds (1 to ``max_retry_after``); clients add jitter
    (:func:`peer.client.retry_wait`) so the shed do not come back in one wave. Before the first
    answer of a class, its requests wait (at most their allowance). Erring high at a cold start
    sheds some that could have been served (they come back after Retry-After); erring low would
    keep a thousand waiting the whole allowance, on a loaded machine past their deadline (measured:
    ``benchmarks/aggregator_load.py``).

    ``on_shed(class name)`` is told of each shed request (a host's counters).
    """

    def __init__(
        self,
        classify: Callable[[str, str], RouteClass | None],
        *,
        concurrency: int = 4,
        wait_share: float = 1 / 3,
        max_retry_after: int = 30,
        on_shed: Callable[[str], None] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"Admission: concurrency must be >= 1, got {concurrency}")
        if not 0 < wait_share < 1:
            raise ValueError(f"Admission: wait_share must be in (0, 1), got {wait_share}")
        if max_retry_after < 1:
            raise ValueError(f"Admission: max_retry_after must be >= 1, got {max_retry_after}")
        self.classify = classify
        self.concurrency = concurrency
        self.wait_share = wait_share
        self.max_retry_after = max_retry_after
        self.on_shed = on_shed
        self._lanes: dict[str, _Lane] = {}

    def stats(self) -> dict[str, LaneStats]:
        """Each route class's :class:`LaneStats`, by name (a snapshot)."""
        return {name: lane.stats() for name, lane in list(self._lanes.items())}

    def shed(self) -> int:
        """Requests shed so far, all classes together."""
        return sum(s.shed for s in self.stats().values())

    def lane(self, route: RouteClass) -> _Lane:
        lane = self._lanes.get(route.name)
        if lane is None:
            lane = self._lanes[route.name] = _Lane(route)
        return lane

    def per_answer(self, lane: _Lane, *, measured: bool = False) -> float | None:
        """Seconds between two answers of ``lane`` while requests queue (``g``): measured once ``c``
        gaps were, Little's ``S / c`` before (None then with ``measured``); None before any answer."""
        if lane.gap is not None and lane.gaps >= self.concurrency:
            return lane.gap
        if measured or lane.service is None:
            return None
        return lane.service / self.concurrency

    def expected_wait(self, lane: _Lane, ahead: int, *, measured: bool = False) -> float:
        """Seconds until a slot frees for a request with ``ahead`` requests queued before it
        (0 while a slot is free, and while nothing is measured yet)."""
        gap = self.per_answer(lane, measured=measured)
        if lane.in_flight < self.concurrency or gap is None:
            return 0.0
        return (ahead + 1) * gap

    def retry_after(self, lane: _Lane, ahead: int) -> int:
        """Whole seconds the ``ahead`` queued requests (and the busy slots) need to drain, 1 to
        ``max_retry_after``."""
        gap = self.per_answer(lane)
        drain = 0.0 if gap is None else (ahead + 1) * gap
        return max(1, min(self.max_retry_after, math.ceil(drain)))

    def allowance(self, lane: _Lane) -> float:
        """Seconds a request of ``lane`` may wait for a slot."""
        return lane.route.client_deadline * self.wait_share

    def release(self, lane: _Lane, started: float) -> None:
        """A request admitted at ``started`` (monotonic) was answered: measure it, hand its slot on,
        and shed from the back of the queue what can no longer be served within its allowance."""
        now = time.monotonic()
        took = now - started
        lane.service = took if lane.service is None else lane.service + (took - lane.service) / 8
        if lane.waiting and lane.last_done is not None and lane.last_done >= lane.queued_since:
            gap = now - lane.last_done  # two answers while requests queued: one service gap
            lane.gap = gap if lane.gap is None else lane.gap + (gap - lane.gap) / 8
            lane.gaps += 1
        lane.last_done = now
        lane.in_flight -= 1
        while lane.waiting:
            waiter, _ = lane.waiting.popleft()
            if not waiter.done():
                lane.in_flight += 1  # taken on the waiter's behalf: no newcomer can slip in between
                waiter.set_result(True)
                break
        while lane.waiting:
            waiter, gives_up = lane.waiting[-1]
            wait = self.expected_wait(lane, len(lane.waiting) - 1, measured=True)
            if not waiter.done() and wait <= gives_up - now:
                break
            lane.waiting.pop()
            if not waiter.done():
                waiter.set_result(False)

    def count_shed(self, lane: _Lane, on_arrival: bool) -> None:
        if on_arrival:
            lane.shed_on_arrival += 1
        else:
            lane.shed_after_wait += 1
        if self.on_shed is not None:
            self.on_shed(lane.route.name)


class AdmissionGate(HttpMiddleware):
    """ASGI middleware: admit a request to the app, or answer 503 with Retry-After (:class:`Admission`).

    Add it last, so it runs first: a shed request's body is never read.
    """

    def __init__(self, app: ASGIApp, admission: Admission) -> None:
        super().__init__(app)
        self.admission = admission

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.admission.classify(scope.get("method", "GET"), scope.get("path", "/"))
        if route is None:
            await self.app(scope, receive, send)
            return
        admission = self.admission
        lane = admission.lane(route)
        allowance = admission.allowance(lane)
        ahead = len(lane.waiting)
        if admission.expected_wait(lane, ahead) > allowance:
            await self._shed(lane, ahead, on_arrival=True, send=send)
            return
        if lane.in_flight < admission.concurrency and not lane.waiting:
            lane.in_flight += 1
        elif not await self._wait(lane, allowance):
            await self._shed(lane, ahead, on_arrival=False, send=send)
            return
        lane.admitted += 1
        started = time.monotonic()
        try:
            await self.app(scope, receive, send)
        finally:
            admission.release(lane, started)

    async def _wait(self, lane: _Lane, allowance: float) -> bool:
        """Queue for a slot of ``lane`` for at most ``allowance`` seconds: True once it is this
        request's (:meth:`Admission.release` took it on its behalf), False when shed."""
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        entry = (waiter, time.monotonic() + allowance)
        if not lane.waiting:
            lane.queued_since = time.monotonic()
        lane.waiting.append(entry)
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), allowance)
        except TimeoutError:
            if waiter.done():
                return waiter.result()  # decided in the same instant the wait ran out
            waiter.cancel()
            lane.waiting.remove(entry)
            return False
        except BaseException:  # cancelled (the client left, the server stops): give up place or slot
            if waiter.done() and not waiter.cancelled() and waiter.result():
                self.admission.release(lane, time.monotonic())
            elif not waiter.done():
                waiter.cancel()
                if entry in lane.waiting:
                    lane.waiting.remove(entry)
            raise

    async def _shed(self, lane: _Lane, ahead: int, *, on_arrival: bool, send: Send) -> None:
        self.admission.count_shed(lane, on_arrival)
        seconds = self.admission.retry_after(lane, ahead)
        answer = JSONResponse(
            {"detail": f"overloaded: more {lane.route.name} requests queued than can be served before the "
                       f"client's deadline; try again in {seconds} s"},
            status_code=503,
            headers={"Retry-After": str(seconds)},
        )
        await answer({"type": "http"}, empty_receive, send)
