"""Overload answered before the client's deadline: 503 with Retry-After, never a queue past it.

A real uvicorn server whose one route takes a fixed 0.25 s (an ``asyncio.sleep``: its service
time does not depend on how loaded the machine is) behind :class:`anonml.serving.AdmissionGate`
with two slots is flooded by more concurrent clients than it can serve within their deadline.
Every client hears back before its deadline, with 200 or with 503 and a ``Retry-After``; the
gate's shed count is the number of 503s, and the route ran exactly once per 200 (a shed
request never reaches the app, so nothing is accepted and then lost). Clients that retry per
Retry-After (:func:`peer.client.with_retries`) all get through, never sooner than they were
asked to wait. A relay delivering to an intake that sheds it waits its Retry-After too.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from email.utils import formatdate

import pytest
from fastapi import FastAPI

import anonml.serving as serving
from anonml.outbound import Reply, fetch, retry_after_seconds
from peer.client import HTTPRefusal, retry_wait, with_retries
from peer.dispatch import Dispatcher
from peer.relay import RelayService, _Release
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

SERVICE_SECONDS = 0.25
SLOTS = 2
CLIENT_DEADLINE = 6.0  # the gate lets a request wait a third of it: 2 s
FLOOD = 80  # 80 · 0.25 s / 2 slots = 10 s of work: past the deadline unless some are shed

WORK = serving.RouteClass("work", CLIENT_DEADLINE)


class SlowService:
    """A uvicorn server on loopback whose ``GET /work`` takes :data:`SERVICE_SECONDS`, gated."""

    def __init__(self, path: str = "/work") -> None:
        self.calls = 0
        self.served_at: list[float] = []  # monotonic, as each call began
        self.shed_at: list[float] = []  # monotonic, as each request was shed
        self.admission = serving.Admission(
            lambda method, p: WORK if p == path else None,
            concurrency=SLOTS,
            wait_share=1 / 3,
            on_shed=lambda _: self.shed_at.append(time.monotonic()),
        )
        app = FastAPI()

        @app.api_route(path, methods=["GET", "POST"])
        async def work() -> dict[str, int]:
            self.calls += 1
            self.served_at.append(time.monotonic())
            await asyncio.sleep(SERVICE_SECONDS)
            return {"call": self.calls}

        @app.get("/healthz")
        async def healthz() -> dict[str, str]:
            return {"status": "ok"}

        app.add_middleware(serving.AdmissionGate, admission=self.admission)
        sock = serving.bind("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self.server = serving.uvicorn_server(app, lifespan="off")
        self.thread = serving.start_in_thread(self.server, sock, name="slow service")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture
def slow_service():
    service = SlowService()
    yield service
    service.stop()


def _flood(n: int, call) -> list:
    """``call(i)`` for i in range(n), all at once from threads of their own (released together)."""
    start = threading.Barrier(n)

    def one(i: int):
        start.wait(timeout=60)
        return call(i)

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(one, range(n)))


def test_a_flood_is_answered_before_the_deadline_with_200_or_503_and_retry_after(slow_service) -> None:
    url = f"{slow_service.url}/work"
    # fetch raises OutboundError if no complete answer came within the deadline: the test fails then.
    replies: list[Reply] = _flood(FLOOD, lambda i: fetch("GET", url, deadline=CLIENT_DEADLINE))

    statuses = Counter(r.status for r in replies)
    assert set(statuses) <= {200, 503}, statuses
    shed = [r for r in replies if r.status == 503]
    assert shed, "10 s of work for a 6 s deadline: the gate must shed some"
    assert statuses[200] >= SLOTS, statuses
    for reply in shed:
        assert reply.retry_after is not None and reply.retry_after >= 1, reply
        assert "overloaded" in reply.text
    stats = slow_service.admission.stats()["work"]
    assert stats.shed == len(shed) == slow_service.admission.shed()
    assert stats.admitted == statuses[200] == slow_service.calls  # a shed request never ran
    # The gate releases a slot once the app returns, after the answer was sent: the client can hold
    # the last answer a moment before the server counts its request done.
    def settled() -> bool:
        lane = slow_service.admission.stats()["work"]
        return lane.in_flight == 0 and lane.waiting == 0

    wait_until(settled, 30, "every admitted request to release its slot")


def test_clients_that_honour_retry_after_all_get_through(slow_service) -> None:
    url = f"{slow_service.url}/work"
    waits: list[tuple[float, float]] = []  # (asked Retry-After, seconds until the next try began)
    gave_up = [0]  # tries the client abandoned at its deadline (the gate may have admitted them)
    lock = threading.Lock()

    def patient(i: int) -> int:
        failed_at: list[tuple[float, float]] = []

        def call() -> int:
            began = time.monotonic()
            if failed_at:
                asked, when = failed_at.pop()
                with lock:
                    waits.append((asked, began - when))
            try:
                reply = fetch("GET", url, deadline=CLIENT_DEADLINE)
            except OSError:  # TimeoutError included: retried, and it may have run
                with lock:
                    gave_up[0] += 1
                raise
            if reply.status >= 300:
                failed_at.append((reply.retry_after or 0.0, time.monotonic()))
                raise HTTPRefusal(url, reply.status, reply.text, reply.retry_after)
            return reply.status

        return with_retries(call, until=time.time() + 600)

    assert _flood(FLOOD, patient) == [200] * FLOOD
    # Each got through exactly once, plus at most one run per try its client gave up on: on a
    # machine at load ~30 an admitted request can outlast the client's deadline (83 of 80 ran so).
    assert FLOOD <= slow_service.calls <= FLOOD + gave_up[0], (slow_service.calls, gave_up[0])
    assert waits, "the flood must have shed some to retry"
    for asked, waited in waits:
        assert asked >= 1 and waited >= asked, (asked, waited)
    assert slow_service.admission.shed() == len(waits)


def test_a_relay_delivering_to_a_shedding_intake_waits_its_retry_after() -> None:
    """An intake whose measured service says no newcomer fits its allowance sheds the delivery with
    ``Retry-After: 3``; the relay keeps it and delivers it once, no sooner than 3 s later."""
    service = SlowService(path="/intake")
    dispatcher = Dispatcher(workers=4, name="overload-test")
    relay = RelayService(dispatcher, allow_loopback_http=True)
    try:
        lane = service.admission.lane(WORK)
        # Both slots busy, 2.5 s between answers as measured: a newcomer's wait, 2.5 s, is past its
        # 2 s allowance, and the queue drains in ⌈2.5⌉ = 3 s.
        lane.in_flight, lane.gap, lane.gaps = SLOTS, 2.5, SLOTS
        now = time.time()
        release = _Release(f"{service.url}/intake", b"{}", "application/json", "delivered", now + 120)
        dispatcher.at(now, lambda: relay._due(release))
        wait_until(lambda: service.shed_at, 60, "the delivery to reach the intake (and be shed)")
        lane.in_flight, lane.gap = 0, None  # the intake has recovered
        wait_until(lambda: relay.counters["delivered"], 60, lambda: f"a delivery: {dict(relay.counters)}")
        assert relay.counters["delivered after retry"] == 1 and relay.counters["delivered lost"] == 0
        assert service.calls == 1 and len(service.shed_at) == 1
        assert service.served_at[0] - service.shed_at[0] >= 3.0  # Retry-After: 3, honoured
    finally:
        dispatcher.close()
        relay.keep_alive.close()
        service.stop()


def test_retry_after_is_read_as_seconds_or_a_date_and_waited_with_jitter() -> None:
    assert retry_after_seconds(None) is None
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds(" 0 ") == 0.0
    assert retry_after_seconds("99999999999") == 3600.0  # capped: no server parks a client for ever
    now = 1_800_000_000.0
    assert retry_after_seconds(formatdate(now + 42, usegmt=True), now=now) == pytest.approx(42.0)
    assert retry_after_seconds(formatdate(now - 42, usegmt=True), now=now) == 0.0
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds("-3") is None
    refusal = HTTPRefusal("http://x", 503, "overloaded", retry_after=3.0)
    rng = random.Random(7)
    draws = [retry_wait(2, refusal, rng=rng) for _ in range(2000)]
    # Retry-After plus full jitter on [0, min(4, 0.25 · 2^2)] = [0, 1]: uniform, mean 3.5.
    assert min(draws) >= 3.0 and max(draws) <= 4.0
    assert sum(draws) / len(draws) == pytest.approx(3.5, abs=4 * (1 / 12) ** 0.5 / len(draws) ** 0.5)
    plain = [retry_wait(2, HTTPRefusal("http://x", 502, "bad gateway"), rng=rng) for _ in range(200)]
    assert max(plain) <= 1.0  # no Retry-After: the backoff alone


def test_admission_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        serving.Admission(lambda m, p: None, concurrency=0)
    with pytest.raises(ValueError, match="wait_share"):
        serving.Admission(lambda m, p: None, wait_share=1.0)
    with pytest.raises(ValueError, match="client_deadline"):
        serving.RouteClass("x", 0)


def test_the_aggregator_gates_every_route_class_and_counts_in_healthz(tmp_path) -> None:
    from aggregator.app import INTAKE, READS, WRITES, create_app, route_class, start_server
    from tests.aggregator.helpers import aggregator_settings

    assert route_class("POST", "/intake") is INTAKE and route_class("POST", "/intake/batch") is INTAKE
    assert route_class("GET", "/problems/p-1/status") is READS
    assert route_class("POST", "/problems/p-1/registrations") is WRITES
    assert route_class("GET", "/openapi.json") is None
    assert INTAKE.client_deadline < READS.client_deadline  # relays post with a packet's 5 s deadline
    server = start_server(create_app(aggregator_settings(tmp_path, admission_concurrency=1)))
    try:
        for _ in range(3):
            assert fetch("GET", f"{server.url}/problems").status == 200
        health = fetch("GET", f"{server.url}/healthz")
        assert health.status == 200
        admission = json.loads(health.body)["admission"]
        assert admission["shed"] == 0
        assert admission["classes"]["reads"]["admitted"] == 3
        assert admission["classes"]["health"]["in_flight"] == 1  # this very request
        assert server.app.state.admission.concurrency == 1
    finally:
        server.stop()


def test_a_peer_host_gates_relay_posts_only_and_counts_what_it_sheds() -> None:
    from types import SimpleNamespace

    from anonml.outbound import PACKET_DEADLINE
    from peer.app import RELAY_POSTS, relay_admission

    dispatcher = Dispatcher(workers=1, name="overload-test")
    try:
        host = SimpleNamespace(relay=RelayService(dispatcher))
        admission = relay_admission(host)  # type: ignore[arg-type]
        assert admission.classify("POST", "/relay/ab12/batch") is RELAY_POSTS
        assert admission.classify("POST", "/relay/ab12") is RELAY_POSTS
        assert RELAY_POSTS.client_deadline == PACKET_DEADLINE
        for method, path in (("GET", "/local/status"), ("GET", "/healthz"), ("GET", "/relay/ab12/roster/p")):
            assert admission.classify(method, path) is None  # the user's own pages never wait on it
        admission.count_shed(admission.lane(RELAY_POSTS), on_arrival=True)
        assert host.relay.counters["posts shed: overloaded"] == 1 and admission.shed() == 1
    finally:
        dispatcher.close()
