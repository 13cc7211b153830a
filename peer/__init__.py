"""The peer daemon: relay, round participation, local privacy ledger.

A FastAPI app (:mod:`peer.app`) hosting one identity — or, for simulations,
many (:class:`peer.host.PeerHost`) — that meets aggregators only through
:mod:`anonml.protocol` messages over HTTP and never imports :mod:`aggregator`.
"""

from peer.app import create_app, create_daemon, start_peer_server
from peer.host import PeerHost
from peer.participant import Participant, PeerNode
from peer.policy import Decision, PeerPolicy, evaluate_problem
from peer.settings import PeerSettings

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
