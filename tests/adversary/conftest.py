"""Fixtures of the adversary suite: a malicious aggregator and the students honest peers run.

``adversary`` is :class:`tests.adversary.malicious.MaliciousAggregator` (the real
aggregator app under uvicorn on loopback, its own database from ``database_url``, with hooks);
``cohort`` simulates students whose stores, identities and ledgers are files in
the test's ``tmp_path`` (call it with the number wanted). Peers are started
with :func:`tests.adversary.malicious.start_peers` and stopped by the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from anonml.demo import SimulatedPeer
from tests.adversary.malicious import MaliciousAggregator, start_adversary, students


@pytest.fixture
def adversary(tmp_path: Path, database_url: str) -> Iterator[MaliciousAggregator]:
    agg = start_adversary(tmp_path, database_url)
    try:
        yield agg
    finally:
        assert agg.handle is not None
        agg.handle.stop()


@pytest.fixture
def cohort(tmp_path: Path) -> Iterator[Callable[..., list[SimulatedPeer]]]:
    made: list[SimulatedPeer] = []

    def make(n: int, *, seed: int = 3) -> list[SimulatedPeer]:
        peers = students(tmp_path / f"cohort-{len(made)}", n, seed=seed)
        made.extend(peers)
        return peers

    try:
        yield make
    finally:
        for p in made:
            p.store.close()
            p.ledger.close()
