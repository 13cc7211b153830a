"""The relay probe times real packets through a real host's relays and leaves nothing behind."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

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
