"""Peers check what the aggregator shows them: a split roster makes the victim abort."""

from __future__ import annotations

from pathlib import Path

import pytest

from anonml.crypto import TokenKey
from anonml.protocol import Roster, sign_message
from peer.app import start_peer_server
from peer.client import AggregatorClient
from tests.aggregator.helpers import close_registration, propose, status, wait_phase
from tests.peer.helpers import mooc_dropout_draft, simulated_nodes, simulation_host
from tests.waiting import wait_until


class SplitViewClient(AggregatorClient):
    """A malicious aggregator's answer to one peer: the roster with another token key, validly signed."""

    def __init__(self, base_url: str, signer) -> None:
        super().__init__(base_url)
        self.signer = signer

    def roster(self, problem_id: str) -> Roster:
        honest = super().roster(problem_id)
        forged = honest.model_copy(update={"token_key": bytes(TokenKey.generate().public_key)})
        return sign_message(forged, self.signer)


@pytest.mark.slow
def test_a_peer_shown_another_token_key_aborts_before_taking_tokens(aggregator, tmp_path: Path):
    # Seeded node generators: witness choices, paths and noise are reproducible.
    simulated, nodes = simulated_nodes(tmp_path, 8, seed=3)
    honest = start_peer_server(simulation_host(nodes[:7], tmp_path / "a.db", aggregator.url))
    victim_host = simulation_host(nodes[7:], tmp_path / "b.db", aggregator.url)
    victim = start_peer_server(victim_host)
    try:
        d = mooc_dropout_draft(send_window_seconds=1.0)
        # roster_seconds (2 s by default) gives every peer time to publish its witness first.
        problem = propose(aggregator.url, d)
        wait_until(
            lambda: problem.id in victim_host.sessions and status(aggregator.url, problem.id).registered >= 8,
            120, "the victim's session and every registration",
        )
        split = SplitViewClient(aggregator.url, aggregator.state.identity)
        session = victim_host.sessions[problem.id]
        session.client = split
        for p in session.participants:
            p.client = split
        close_registration(aggregator.url, problem.id, or_deadline=True)
        wait_phase(aggregator.url, problem.id, ("done", "degraded", "failed"), timeout=180)
        victim_node = nodes[7].fingerprint
        wait_until(lambda: victim_host.db.participation(problem.id, victim_node).phase == "aborted", 60,
                   "the victim to abort")
        row = victim_host.db.participation(problem.id, victim_node)
        assert "roster fingerprint differs" in row.reason
        assert nodes[7].ledger.releases(peer=victim_node) == []  # it released nothing
        st = status(aggregator.url, problem.id)
        # Honest peers that compared with the victim saw the split too and stopped; none took a
        # token the victim could have been tagged with, and every token issued was redeemed.
        wait_until(lambda: honest.host.sessions[problem.id].finished, 60, "the honest session to finish")
        rows = [honest.host.db.participation(problem.id, n.fingerprint) for n in nodes[:7]]
        for row, node in zip(rows, nodes[:7], strict=True):
            if row.phase == "aborted":  # it compared with the victim: it saw the split and released nothing
                assert "roster fingerprint differs" in row.reason
                assert node.ledger.releases(peer=node.fingerprint) == []
        # The others went on. The victim's reports never come, and packets routed through a member
        # that stopped are lost too (which members stop depends on whom each compared with): the
        # problem ends degraded or, if nothing arrived, failed — its account says what was lost.
        assert {row.phase for row in rows} <= {"done", "degraded", "aborted", "failed"}
        assert st.phase in ("done", "degraded", "failed")
        assert st.reports is not None and st.reports.expected == 8 * d.kh
        assert st.reports.received == st.reports_accepted <= st.tokens_issued <= 7 * d.kh
        assert st.reports.lost == st.reports.expected - st.reports.received >= d.kh
        if st.phase == "failed":
            assert "no report arrived" in st.message or "lost" in st.message, st.message
    finally:
        honest.stop()
        victim.stop()
        for p in simulated:
            p.store.close()
            p.ledger.close()
