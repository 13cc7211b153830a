"""The peer daemon: relay, round participation, local privacy ledger.

A FastAPI app (:mod:`peer.app`) hosting one identity — or, for simulations,
many (:class:`peer.host.PeerHost`) — that meets aggregators only through
:mod:`anonml.protocol` messages over HTTP and never imports :mod:`aggregator`.

The names below load their module when first used (PEP 562), so a command that
only reads the state database or the ledger (:mod:`peer.records`) does not load
the relay, the worker and the participants.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from peer.app import create_app, create_daemon, start_peer_server
    from peer.host import PeerHost
    from peer.participant import Participant, PeerNode
    from peer.policy import Decision, PeerPolicy, evaluate_problem
    from peer.settings import PeerSettings

#: Public name → the module that defines it.
_HOMES = {
    "PeerSettings": "peer.settings",
    "PeerPolicy": "peer.policy",
    "Decision": "peer.policy",
    "evaluate_problem": "peer.policy",
    "PeerNode": "peer.participant",
    "Participant": "peer.participant",
    "PeerHost": "peer.host",
    "create_app": "peer.app",
    "create_daemon": "peer.app",
    "start_peer_server": "peer.app",
}

__all__ = [
    "PeerSettings",
    "PeerPolicy",
    "Decision",
    "evaluate_problem",
    "PeerNode",
    "Participant",
    "PeerHost",
    "create_app",
    "create_daemon",
    "start_peer_server",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'peer' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
