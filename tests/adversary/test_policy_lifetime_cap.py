"""The lifetime ε cap lives in the ledger however the daemon is built (11).

Before, only ``anonml peer start`` wrote the policy's lifetime cap into the ledger: a daemon built
with the exported :func:`peer.app.create_app` (settings) or :func:`peer.app.create_daemon` had
none, and with a policy cap of 1.0 its ledger recorded ε 5.0. Here the daemon is built each way and
served on loopback; then a release past the cap is attempted through the daemon's own ledger and
through a second connection to the same ledger file (what another process would open). Both must
refuse it and record nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from fastapi import FastAPI

from aggregator.app import start_server
from anonml.errors import BudgetExceeded
from anonml.privacy import PrivacyLedger
from peer.app import create_app, create_daemon
from peer.policy import PeerPolicy
from tests.peer.helpers import peer_settings

CAP = 1.0


def _release(ledger: PrivacyLedger, fingerprint: str, problem: str, epsilon: float) -> None:
    ledger.record(
        peer=fingerprint, problem=problem, round=1, attributes=["x"], mechanism="oue", epsilon=epsilon
    )


@pytest.mark.parametrize("build", ["create_app", "create_daemon"])
def test_a_daemon_built_without_peer_start_keeps_the_policy_lifetime_cap_in_its_ledger(tmp_path: Path, build):
    policy = PeerPolicy(lifetime_epsilon_cap=CAP, max_epsilon_per_problem=5.0)
    settings = peer_settings(tmp_path, policy=policy)  # every file under tmp_path
    if build == "create_app":
        app = create_app(settings)
    else:
        app = create_app(create_daemon(settings), "a-local-token")
    assert isinstance(app, FastAPI)
    server = start_server(app)
    try:
        assert requests.get(f"{server.url}/healthz", timeout=30).status_code == 200  # it serves
        node = app.state.host.sole_node()
        with pytest.raises(BudgetExceeded, match="lifetime cap 1"):
            _release(node.ledger, node.fingerprint, "p-big", 5.0)  # the attack: ε 5 under a cap of 1
        with PrivacyLedger(settings.ledger_url) as other:  # what another process opens
            assert other.lifetime_cap(node.fingerprint) == CAP
            with pytest.raises(BudgetExceeded, match="lifetime cap 1"):
                _release(other, node.fingerprint, "p-big", 5.0)
            _release(other, node.fingerprint, "p-one", 0.6)  # within the cap: recorded
            with pytest.raises(BudgetExceeded, match="lifetime cap 1"):
                _release(node.ledger, node.fingerprint, "p-two", 0.6)  # 1.2 in all: refused
            assert other.lifetime_total(node.fingerprint) == pytest.approx(0.6)
        assert [r.problem for r in node.ledger.releases(peer=node.fingerprint)] == ["p-one"]
    finally:
        server.stop()
