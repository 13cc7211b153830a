"""A round with sender-only peers (no relay URL, nothing listening) and a relay that holds no data.

Real processes on loopback: the aggregator, a host of four relaying identities, a host of
three sender-only identities (``relay = false``: the process listens on no port at all and
only opens connections) and a relay-only host (``anonml relay serve``'s policy: it relays,
holds no data, sends only stand-ins). The round must run to ``done`` with every report
that was issued a token accepted, the sender-only members listed without a relay, every
route through relaying members only, and the sender-only identities ``done``.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import requests

from aggregator.app import start_server_process
from anonml.protocol import Roster
from peer.simulate import SimulationManifest
from tests.aggregator.helpers import aggregator_settings, close_registration, propose, status, wait_phase
from tests.faults.helpers import fault_draft, write_hosts
from tests.waiting import wait_until

# 8 members of which 5 relay: f = min(1, 0.2·8/5) = 0.32, a route hostile end to end 0.32³ ≈ 0.033:
# above the default 0.01, so these simulated peers' policies accept up to 0.05 (docs/threat-model.md).
MAX_HOSTILE_ROUTE = 0.05


def _refused(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(5)
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.slow
def test_sender_only_peers_and_a_data_free_relay_take_part_in_a_round(tmp_path: Path):
    aggregator = start_server_process(aggregator_settings(tmp_path, port=0))
    hosts = write_hosts(tmp_path, {"relays": 4, "senders": 3, "relay": 1}, [aggregator.url], log=True)
    roles = {"relays": {}, "senders": {"relay": False}, "relay": {"relay_only": True}}
    for name, (host, _) in hosts.items():
        manifest = SimulationManifest.model_validate_json(host.manifest.read_text())
        changes = {**roles[name], "max_hostile_route": MAX_HOSTILE_ROUTE}
        host.manifest.write_text(manifest.model_copy(update=changes).model_dump_json())
    senders = hosts["senders"][0]
    try:
        for host, _ in hosts.values():
            host.start()
        assert senders.url == "sender-only"
        sender_port = SimulationManifest.model_validate_json(senders.manifest.read_text()).port
        assert _refused(sender_port)  # nothing of the sender-only host accepts a connection
        problem = propose(aggregator.url, fault_draft())
        wait_until(lambda: status(aggregator.url, problem.id).registered == 8, 120, "all to register")
        close_registration(aggregator.url, problem.id)
        final = wait_phase(aggregator.url, problem.id, ("done", "degraded", "failed"), timeout=240)
        roster = Roster.model_validate_json(
            requests.get(f"{aggregator.url}/problems/{problem.id}/roster", timeout=30).content
        )
        wait_until(
            lambda: {r[0] for r in senders.rows("SELECT phase FROM peer_participations")} == {"done"},
            60,
            "the sender-only identities to download the model",
        )
        sender_rows = senders.rows("SELECT phase, reason FROM peer_participations")
        relay_facts = hosts["relay"][0].rows("SELECT facts_json FROM peer_participations")
        sender_paths = senders.rows("SELECT facts_json FROM peer_participations")
    except BaseException:
        for name, (host, _) in hosts.items():
            print(f"--- {name} ---\n{host.log()[-3000:]}")
        raise
    finally:
        for host, _ in hosts.values():
            host.stop()
        aggregator.stop()

    assert final.phase == "done", final.message
    assert final.tokens_issued > 0 and final.reports_accepted == final.tokens_issued, final
    assert final.reports.lost == 0 and final.reports.received == final.reports.expected, final.reports
    sender_only = [e for e in roster.entries if not e.relays]
    assert len(sender_only) == 3 and all(e.relay_url is None for e in sender_only)
    assert [status for status, _ in sender_rows] == ["done"] * 3, sender_rows
    # every hop of every sender-only identity's routes is a relaying member
    relaying = {bytes.fromhex(e.relay_url.rsplit("/", 1)[1]) for e in roster.entries if e.relays}
    paths = [path for (facts,) in sender_paths for path in json.loads(facts)["paths"]]
    hops = {bytes.fromhex(hop[0]) for path in paths for hop in path}
    assert hops and hops <= relaying
    # the relay-only member sent stand-ins only: it holds no data
    (facts,) = relay_facts[0]
    assert "relay-only member: it holds no data" in json.loads(facts)["standins"]
