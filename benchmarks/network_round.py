"""``python -m benchmarks.network_round``: a round across network namespaces beside one on loopback.

The same problem (the fault tests' dropout problem, :func:`tests.faults.helpers.fault_draft`) with
the same simulated identities (:data:`SIZES`, three relaying hosts) is run twice in one run:

1. **across namespaces** (:mod:`tests.network.namespaces`): the aggregator and each peer host in a
   network namespace of its own, joined by veth pairs over a bridge; every service serves https
   with a certificate from a CA made for the run and every client verifies it; the aggregator and
   every relay are reached only through a user-space delay proxy in their namespace that holds each
   direction :data:`~tests.network.namespaces.DELAY_MS` ms (this kernel has no ``netem``), so every
   request a peer makes — registration, tokens, each onion hop, the model — crosses 2 × 50 ms plus
   the proxy's own cost;
2. **on loopback**: the aggregator and the same hosts as processes on 127.0.0.1, plain http, no delay.

Per run: seconds from the proposal to every identity registered, from closing registration to the
round's end, and in all; the report account; and the latency of one exchange with a hop — the
least of :data:`SAMPLES` ``GET {relay URL}/roster/{problem}`` on a new connection (TCP and TLS
handshakes included, as a relay's first post to the next hop pays them), through the proxy and
straight to the relay, and the same for the aggregator's ``/healthz``. The round's windows are
fixed by the problem's schedule (and sized from the measured relay cost), so the round's time
mostly shows whether the slower links made anything late, and the hop latency what a slower link
costs each exchange. Needs root and ``ip netns``.

Writes ``benchmarks/results/network_round.json`` with the 1-minute load average before and after
each run (the machine is shared).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from aggregator.app import start_server_process
from benchmarks.reporting import RESULTS, machine, now, write_json
from peer.client import AggregatorClient
from tests.adversary.malicious import wait_until
from tests.aggregator.helpers import aggregator_settings, close_registration, propose, status, wait_phase
from tests.faults.helpers import fault_draft, write_hosts
from tests.network.namespaces import DELAY_MS, RELAY_PORT, RELAY_PROXY_PORT, deployment, network, why_not

#: Hosts and the identities each runs (every one relaying).
SIZES = {"p1": 4, "p2": 4, "p3": 4}
#: New-connection exchanges per latency figure (the least is what the path costs).
SAMPLES = 5
OUT = RESULTS / "network_round.json"


def _least_seconds(url: str, samples: int = SAMPLES) -> float:
    """Fewest seconds a ``GET url`` answered 200 on a new connection took, of ``samples``."""
    taken = []
    for _ in range(samples):
        start = time.monotonic()
        reply = requests.get(url, timeout=60, headers={"Connection": "close"})
        taken.append(time.monotonic() - start)
        if reply.status_code != 200:
            raise RuntimeError(f"GET {url}: HTTP {reply.status_code}")
    return min(taken)


def _round(url: str, members: int) -> tuple[dict[str, Any], str]:
    """Propose the problem at ``url`` (its registration deadline from now), wait for ``members``
    registrations, close registration, wait for the end."""
    load = os.getloadavg()[0]
    started = time.monotonic()
    problem = propose(url, fault_draft())
    wait_until(lambda: status(url, problem.id).registered == members, "every identity to register", 300)
    registered = time.monotonic()
    close_registration(url, problem.id, or_deadline=True)
    closed = time.monotonic()
    final = wait_phase(url, problem.id, ("done", "degraded", "failed"), timeout=600)
    ended = time.monotonic()
    account = final.reports
    bins = AggregatorClient(url).bins(problem.id)
    return {
        "phase": final.phase,
        "message": final.message,
        "propose_to_all_registered_s": round(registered - started, 2),
        "close_to_end_s": round(ended - closed, 2),
        "propose_to_end_s": round(ended - started, 2),
        "reports_expected_received_lost": None if account is None else [
            account.expected, account.received, account.lost
        ],
        "duplicates": None if account is None else account.duplicates,
        # the windows the aggregator set (sized from its measured costs, at least the proposal's)
        "send_window_s": round(bins.delta, 2),
        "release_window_s": round(bins.t_r - bins.t_s - bins.delta, 2),
        "load_1m_before_after": [round(load, 2), round(os.getloadavg()[0], 2)],
    }, problem.id


def _relay_urls(url: str, problem_id: str) -> list[str]:
    return [e.relay_url for e in AggregatorClient(url).roster(problem_id).entries if e.relay_url]


def across_namespaces(root: Path) -> dict[str, Any]:
    """The round over https between namespaces, every service behind a delay proxy (module docstring)."""
    with network(list(SIZES)) as net, deployment(net, root) as d:
        os.environ["REQUESTS_CA_BUNDLE"] = str(d.ca.bundle)  # this process's clients verify the run's CA
        try:
            started = time.monotonic()
            d.start_aggregator()
            d.start_hosts(SIZES)
            start_seconds = time.monotonic() - started
            result, problem_id = _round(d.url, sum(SIZES.values()))
            relay = _relay_urls(d.url, problem_id)[0] + f"/roster/{problem_id}"
            direct = relay.replace(f":{RELAY_PROXY_PORT}/", f":{RELAY_PORT}/")
            result |= {
                "services_start_s": round(start_seconds, 1),
                "hop_exchange_through_proxy_s": round(_least_seconds(relay), 4),
                "hop_exchange_direct_s": round(_least_seconds(direct), 4),
                "aggregator_exchange_through_proxy_s": round(_least_seconds(f"{d.slow_url}/healthz"), 4),
                "aggregator_exchange_direct_s": round(_least_seconds(f"{d.url}/healthz"), 4),
                "netem": "yes" if net.delayed else f"none ({net.no_delay_reason})",
            }
        finally:
            os.environ.pop("REQUESTS_CA_BUNDLE", None)
    return result


def on_loopback(root: Path) -> dict[str, Any]:
    """The same round on 127.0.0.1, plain http, nothing in between."""
    started = time.monotonic()
    aggregator = start_server_process(aggregator_settings(root, port=0))
    hosts = [host for host, _ in write_hosts(root, SIZES, [aggregator.url]).values()]
    try:
        for host in hosts:
            host.start()
        start_seconds = time.monotonic() - started
        result, problem_id = _round(aggregator.url, sum(SIZES.values()))
        relay = _relay_urls(aggregator.url, problem_id)[0] + f"/roster/{problem_id}"
        result |= {
            "services_start_s": round(start_seconds, 1),
            "hop_exchange_s": round(_least_seconds(relay), 4),
            "aggregator_exchange_s": round(_least_seconds(f"{aggregator.url}/healthz"), 4),
        }
    finally:
        for host in hosts:
            host.stop()
        aggregator.stop()
    return result


def _ratio(a: float, b: float) -> float:
    return round(a / b, 2) if b > 0 else float("inf")


def main(argv: list[str] | None = None) -> int:
    reason = why_not()
    if reason is not None:
        print(f"network_round: cannot run here: {reason}", file=sys.stderr)
        return 1
    draft = fault_draft()  # what both runs propose (each its own, made when it proposes)
    runs: dict[str, Callable[[Path], dict[str, Any]]] = {
        "namespaces": across_namespaces, "loopback": on_loopback,
    }
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="anonml-network-round-") as tmp:
        for name, run in runs.items():
            (Path(tmp) / name).mkdir()
            results[name] = run(Path(tmp) / name)
            print(f"{name}: {json.dumps(results[name])}", file=sys.stderr)
    ns, lo = results["namespaces"], results["loopback"]
    doc = {
        "benchmark": "network_round",
        "when": now(),
        "machine": machine(load_average_1_5_15m_at_end=[round(v, 2) for v in os.getloadavg()]),
        "identities_per_host": SIZES,
        "proxy_delay_ms_each_way": DELAY_MS,
        "schedule_s_as_proposed": {
            "report_delay": draft.schedule.report_delay_seconds,
            "send_window": draft.schedule.send_window_seconds,
            "release_window": draft.schedule.release_window_seconds,
        },
        "hops": draft.hops,
        "routes": draft.routes,
        "namespaces": ns,
        "loopback": lo,
        "ratios_namespaces_over_loopback": {
            "propose_to_end": _ratio(ns["propose_to_end_s"], lo["propose_to_end_s"]),
            "close_to_end": _ratio(ns["close_to_end_s"], lo["close_to_end_s"]),
            "propose_to_all_registered": _ratio(
                ns["propose_to_all_registered_s"], lo["propose_to_all_registered_s"]
            ),
            "hop_exchange": _ratio(ns["hop_exchange_through_proxy_s"], lo["hop_exchange_s"]),
        },
    }
    write_json(OUT, doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
