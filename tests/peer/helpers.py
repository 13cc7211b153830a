"""Simulated MOOC students as peers, and the short-window dropout problem the peer tests propose."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path
from typing import Any

import numpy as np

from anonml.demo import DEMO_FEATURES, SimulatedPeer, dropout_draft, simulate_peers
from anonml.plugins import PluginRef, create
from anonml.protocol import ProblemDraft
from peer.db import PeerDB
from peer.host import PeerHost
from peer.participant import PeerNode
from peer.policy import PeerPolicy
from peer.settings import PeerSettings

#: What the peer tests' dropout problem sets beyond the demo's: ε, the peers it needs, no median
#: pool, and short windows (seconds).
SHORT_DROPOUT = {
    "epsilon": 2.0,
    "min_peers": 4,
    "pool_fraction": 0.0,
    "report_delay_seconds": 1.5,
    "send_window_seconds": 1.5,
    "release_window_seconds": 1.0,
}


def mooc_dropout_draft(**options: Any) -> ProblemDraft:
    """The demo's dropout problem (2 history weeks of 4) as :data:`SHORT_DROPOUT` sets it.

    ``options`` override those or go on to :func:`anonml.demo.dropout_draft` (witnesses, median step, …).
    """
    featurizer = create("featurizer", PluginRef(name="mooc_engagement", params={"weeks": 2}))
    return dropout_draft(featurizer.features(), history_weeks=2, weeks=4, **(SHORT_DROPOUT | options))


def simulated_nodes(
    root: Path, n: int, *, seed: int, rng_base: int = 0
) -> tuple[list[SimulatedPeer], list[PeerNode]]:
    """``n`` simulated students (own store, identity, ledger under ``root``) and their peer nodes.

    Node ``i`` draws witness choices, paths and noise from ``default_rng(rng_base + i)``,
    so a test's routes are reproducible.
    """
    simulated, _ = simulate_peers(n, root, weeks=4, history_weeks=2, seed=seed, features=list(DEMO_FEATURES))
    nodes = [
        PeerNode(p.identity, p.store, p.ledger, user=p.username, rng=np.random.default_rng(rng_base + i))
        for i, p in enumerate(simulated)
    ]
    return simulated, nodes


def simulation_host(nodes: list[PeerNode], db: Path, aggregator_url: str, *, workers: int = 4) -> PeerHost:
    """A host running ``nodes`` that accepts every problem up to ε = 4, polling every 0.1 s."""
    return PeerHost(
        nodes,
        PeerDB(f"sqlite:///{db}"),
        PeerPolicy.for_simulation(auto_accept=True, max_epsilon_per_problem=4.0),
        [aggregator_url],
        poll_seconds=0.1,
        roster_comparisons=2,
        workers=workers,
    )


def non_loopback_address() -> str | None:
    """This machine's address on its outward interface (a UDP connect sends nothing), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if ipaddress.ip_address(address).is_loopback else address


#: Where :func:`peer_settings` puts each of a daemon's files under its home: databases, then the rest.
HOME_DATABASES = {"store_url": "events.db", "ledger_url": "ledger.db", "state_url": "peer.db"}
HOME_FILES = {
    "identity_file": "identity.json", "credentials_dir": "credentials", "policy_file": "policy.json"
}


def peer_settings(home: Path, local_token: str = "a-local-token", **overrides: Any) -> PeerSettings:
    """A daemon's settings with every file under ``home`` (what ``anonml peer start`` builds: SQLite
    databases and files named by :data:`HOME_DATABASES` and :data:`HOME_FILES`), a 30 s poll and
    ``local_token``; ``overrides`` set any other field."""
    databases = {name: f"sqlite:///{home / file}" for name, file in HOME_DATABASES.items()}
    files = {name: home / file for name, file in HOME_FILES.items()}
    return PeerSettings(**databases, **files, local_token=local_token, poll_seconds=30, **overrides)
