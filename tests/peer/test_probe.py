"""The relay probe times real packets through a real host's relays and leaves nothing behind."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer

import numpy as np
import pytest
import requests

from anonml.crypto import Identity
from anonml.errors import AnonMLError
from anonml.privacy import PrivacyLedger
from anonml.store import EventStore
from peer.app import PeerServer, start_peer_server
from peer.db import PeerDB
from peer.host import PeerHost
from peer.participant import PeerNode
from peer.policy import PeerPolicy
from peer.probe import measure_hop_seconds
from tests.scripted_http import ScriptedHandler, served


@pytest.fixture
def server(tmp_path) -> Iterator[PeerServer]:
    nodes = [
        PeerNode(Identity.generate(), EventStore("sqlite://"), PrivacyLedger("sqlite://")) for _ in range(3)
    ]
    db = PeerDB(f"sqlite:///{tmp_path / 'peers.db'}")  # a file: the held packets are stored as in a round
    host = PeerHost(nodes, db, PeerPolicy(allow_loopback_http=True), [], rng=np.random.default_rng(5))
    server = start_peer_server(host)
    yield server
    server.stop()


def test_every_probe_packet_crosses_every_hop_and_nothing_is_left(server: PeerServer) -> None:
    host = server.host
    host.relay.count("received", 7)  # a real round's count, which the probe must not disturb
    probe = measure_hop_seconds(host, packets=12, hops=3, senders=4)
    assert (probe.packets, probe.hops) == (12, 3)
    assert probe.seconds > 0
    assert probe.seconds_per_hop == pytest.approx(probe.seconds / 36)
    # The counters are the real rounds' only: the probe's received/held/forwarded/delivered given back.
    assert {k: v for k, v in host.relay.counters.items() if v} == {"received": 7}
    # Its rounds are closed: no held packet, replay tag or round key remains in the state DB.
    for node in host.nodes.values():
        assert host.db.held(node.node_id.hex()) == []
    with host.db.engine.connect() as con:
        assert con.exec_driver_sql("SELECT count(*) FROM peer_replay_tags").scalar() == 0
        assert con.exec_driver_sql("SELECT count(*) FROM peer_round_keys").scalar() == 0


def test_a_probe_that_cannot_run_says_why(server: PeerServer) -> None:
    with pytest.raises(AnonMLError, match="needs 4 identities on the host, it has 3"):
        measure_hop_seconds(server.host, hops=4)
    with pytest.raises(AnonMLError, match="packets, hops, senders ≥ 1"):
        measure_hop_seconds(server.host, packets=0)
    idle = PeerHost([], PeerDB("sqlite://"), PeerPolicy(allow_loopback_http=True), [])
    with pytest.raises(AnonMLError, match="start its server before probing"):
        measure_hop_seconds(idle)


class _SheddingProxy(ThreadingHTTPServer):
    """Forwards every POST to ``upstream``, except that the first ``shed`` posts to ``path`` are
    answered 503 with ``Retry-After: 1``, as an overloaded relay answers them."""

    daemon_threads = True

    def __init__(self, upstream: str, path: str, shed: int) -> None:
        super().__init__(("127.0.0.1", 0), _SheddingHandler)
        self.upstream, self.path, self.left = upstream, path, shed
        self.shed = 0
        self.lock = threading.Lock()

    def take_shed(self, path: str) -> bool:
        with self.lock:
            if path != self.path or self.left == 0:
                return False
            self.left -= 1
            self.shed += 1
            return True


class _SheddingHandler(ScriptedHandler):
    server: _SheddingProxy

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        body = self.body()
        if self.server.take_shed(self.path):
            self.reply(503, content_type=None, headers={"retry-after": "1"})
            return
        reply = requests.post(
            self.server.upstream + self.path,
            data=body,
            headers={"content-type": self.headers.get("content-type", "")},
            timeout=60,
        )
        kind = reply.headers.get("content-type", "application/octet-stream")
        self.reply(reply.status_code, reply.content, kind)


@contextmanager
def _shedding_proxy(host: PeerHost, shed: int) -> Iterator[_SheddingProxy]:
    """Puts a shedding proxy in front of ``host``'s relays (its relay URL points at the proxy)."""
    first = next(iter(host.nodes.values())).node_id.hex()
    upstream = host.relay_base.rstrip("/")
    proxy = _SheddingProxy(upstream, f"/relay/{first}", shed)
    with served(proxy) as host.relay_base:
        try:
            yield proxy
        finally:
            host.relay_base = upstream


def test_a_first_hop_that_sheds_is_waited_out_and_the_wait_is_measured(server: PeerServer) -> None:
    with _shedding_proxy(server.host, shed=3) as proxy:
        probe = measure_hop_seconds(server.host, packets=6, hops=3, senders=2)
    assert proxy.shed == 3  # three posts answered 503, each sent again after its Retry-After
    assert probe.packets == 6
    # Two senders met three 1 s Retry-Afters: at least two waits lie one after the other on one
    # sender, and the probe's time includes them (a busy relay must give longer windows, not fail).
    assert probe.seconds >= 2.0
    assert {k: v for k, v in server.host.relay.counters.items() if v} == {}


def test_a_first_hop_that_keeps_shedding_past_the_timeout_fails_the_probe(server: PeerServer) -> None:
    with _shedding_proxy(server.host, shed=10_000) as proxy:
        with pytest.raises(AnonMLError, match=r"refused packets: statuses \{503: 4\}"):
            measure_hop_seconds(server.host, packets=4, hops=3, senders=4, timeout=3.0)
    # Each packet was tried again until a further 1 s wait would pass the timeout (about three
    # posts each on a quiet machine), not given up at its first 503.
    assert 4 < proxy.shed <= 16
    for node in server.host.nodes.values():
        assert server.host.db.held(node.node_id.hex()) == []
