"""When a peer registers says nothing about its data (8).

The aggregator times the registrations it receives. Before, ``decide`` computed the local example
(reading the whole event store) before the registration was sent: 0.3 ms for an empty store,
12-17 ms for 100-185 events, correlation 0.74 with the event count over 40 users. Here each
person runs their own daemon (one host, one identity) against the real aggregator on loopback;
half of them have an empty store, half a student's full history. For each, the test measures the
time from the start of the poll that discovers the problem to the moment its registration is handed
to the client, and when the store is first read for the example. Reading is made to cost
:data:`SECONDS_PER_EVENT` per event of the store (as a store of thousands of events would, on a slow
disk): any data-dependent work done before the registration then stands out plainly against the
noise of a loaded machine (correlation 0.77 and 0.84 in two runs of the code before, -0.07 after),
while work done after it cannot show.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import peer.participant
from anonml.crypto import Identity
from anonml.privacy import PrivacyLedger
from anonml.store import EventStore
from peer.client import AggregatorClient
from peer.db import PeerDB
from peer.host import PeerHost
from peer.participant import PeerNode
from peer.policy import PeerPolicy
from tests.adversary.malicious import MaliciousAggregator, mooc_draft
from tests.waiting import wait_until

#: People of each kind (empty store, full store): the correlation's standard error is about
#: 1/sqrt(2·PEOPLE − 3) (Fisher), 0.16 here.
PEOPLE = 21

#: What reading the store for the example costs per event, here.
SECONDS_PER_EVENT = 1e-3


class _Clock:
    """When each identity's registration was handed to the client, and when its store was read."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.registered: dict[str, tuple[float, float]] = {}  # fingerprint → (handed over, answered)
        self.read: dict[str, float] = {}  # store id → first read for the example

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        register_batch = AggregatorClient.register_batch
        local_example = peer.participant.local_example

        def timed_register(client: AggregatorClient, problem_id: str, registrations: Any) -> Any:
            handed = time.perf_counter()
            answer = register_batch(client, problem_id, registrations)
            answered = time.perf_counter()
            with self.lock:
                for r in registrations:
                    self.registered[bytes(r.identity).hex()] = (handed, answered)
            return answer

        def timed_example(problem: Any, store: EventStore, *args: Any, **kwargs: Any) -> Any:
            with self.lock:
                self.read.setdefault(str(id(store)), time.perf_counter())
            time.sleep(SECONDS_PER_EVENT * store.count())
            return local_example(problem, store, *args, **kwargs)

        monkeypatch.setattr(AggregatorClient, "register_batch", timed_register)
        monkeypatch.setattr(peer.participant, "local_example", timed_example)


def _pearson(x: list[float], y: list[float]) -> float:
    return float(np.corrcoef(np.asarray(x, dtype=float), np.asarray(y, dtype=float))[0, 1])


def test_registration_time_does_not_follow_the_event_store_size(
    adversary: MaliciousAggregator, cohort, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    full = cohort(PEOPLE + 1)  # one more: the first host also loads the plugins, and is not counted
    people: list[PeerNode] = []
    for i, student in enumerate(full):
        people.append(PeerNode(student.identity, student.store, student.ledger, user=student.username))
        if i:  # an empty store beside each counted full one, in alternation
            empty = tmp_path / f"empty-{i}"
            empty.mkdir()
            people.append(
                PeerNode(
                    Identity.generate(),
                    EventStore(f"sqlite:///{empty / 'events.db'}"),
                    PrivacyLedger(f"sqlite:///{empty / 'ledger.db'}"),
                )
            )
    clock = _Clock()
    clock.install(monkeypatch)
    problem = adversary.propose(mooc_draft(min_peers=4))
    policy = PeerPolicy.for_simulation(auto_accept=True, max_epsilon_per_problem=4.0)
    sizes: list[float] = []
    delays: list[float] = []
    try:
        for i, node in enumerate(people):
            db = PeerDB(f"sqlite:///{tmp_path / f'host-{i}.db'}")
            # No relay is served: registering needs only its URL (nothing is relayed here).
            host = PeerHost([node], db, policy, [adversary.url], relay_base="http://127.0.0.1:9", workers=2)
            try:
                key = bytes(node.identity.public).hex()
                deadline = time.monotonic() + 120
                while key not in clock.registered:  # polled again, as a daemon does, when the aggregator
                    assert time.monotonic() < deadline, "never registered"  # was too slow to answer
                    started = time.perf_counter()
                    host.poll_once()  # discovers, decides and registers, as a person's daemon does
                handed, answered = clock.registered[key]
                # The example is computed afterwards, off the worker's thread: wait for it.
                wait_until(lambda n=node: str(id(n.store)) in clock.read, 60, "the example to be computed")
                assert clock.read[str(id(node.store))] >= answered, "the store was read before registering"
            finally:
                host.close()
                host.db.close()
            if i:
                sizes.append(float(node.store.count()))
                delays.append(handed - started)
    finally:
        for node in people[1:]:
            if node.user is None:  # the empty stores this test opened (the cohort closes its own)
                node.store.close()
                node.ledger.close()
    assert adversary.status(problem).registered == len(people)
    assert sizes.count(0.0) == PEOPLE and max(sizes) >= 100  # empty stores and full ones
    r = _pearson(sizes, delays)
    bound = 3 / math.sqrt(len(sizes) - 3)  # three standard errors of r when there is no correlation
    assert abs(r) < bound, (r, bound, sizes, delays)
