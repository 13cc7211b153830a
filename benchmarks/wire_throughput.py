"""Intake and relay throughput over HTTP, each against its primitive alone, in one run.

Two servers, each in its own process on loopback, driven by this process:

* **intake**: an aggregator (``python -m aggregator``, SQLite file) with one
  problem in its report round; ``--reports`` valid token-bearing deliveries
  (registrations and token issuance are set-up, not timed) sent either one per
  request to ``POST /intake`` (``--threads`` clients, a kept-alive
  ``requests.Session`` each, what a last-hop relay of an older version sends) or
  in batches of ``--batch`` to ``POST /intake/batch`` (two clients, what a
  last-hop relay sends at its release time). Rate = accepted reports ÷ wall time
  of the burst. Baseline, in this process: the redemption check alone
  (:meth:`anonml.crypto.TokenVerifier.redeem`, in-memory spent set; CPU time of
  one thread → checks/s per core).
* **relay**: one peer host process hosting two identities A and B, both relaying
  one round with a state DB file and a vault (every held packet persisted,
  sealed, as in a real round) and release times "at once" (the round's guard
  covers its whole release window). ``--packets`` 2-hop cover packets A → B are
  sent to A, one per request (``--threads`` clients) or in batches of
  ``--batch`` to ``POST /relay/{node}/batch``; A peels, persists, releases
  to B over HTTP (batched per next hop by the relay itself), B peels and the
  cover packet ends. Rate = hops processed (2 per packet) ÷ wall time until B
  has counted every packet. Baseline, in this process: per-hop processing alone
  (:meth:`anonml.crypto.SphinxRelay.process`, intermediate hop, CPU time).

Each server is sampled with ``py-spy`` (if installed) during its burst; the top
entries (own samples and inclusive samples, as % of the samples) go into the
result so they can be quoted. Ratios are computed within this run.

Writes ``benchmarks/results/wire_throughput.json``.
Run: ``python -m benchmarks.wire_throughput [--reports 2000] [--packets 2000]`` from the repository root.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import requests

from aggregator.app import start_server_process
from anonml.crypto import (
    Hop,
    Identity,
    MemorySpentSet,
    SphinxRelay,
    TokenKey,
    TokenVerifier,
    WindowSchedule,
    build_packet,
)
from anonml.protocol import IntakeBatch, IntakeDelivery
from anonml.serving import spawn_child
from benchmarks.crypto import _tokens
from benchmarks.reporting import machine, now, process_cpu_seconds, write_json
from peer.client import AggregatorClient
from tests.aggregator import helpers

RESULTS = Path(__file__).resolve().parent / "results" / "wire_throughput.json"
TARGET_RATIO = 0.25
PROJECT = ("anonml/", "aggregator/", "peer/")  # this project's frames, as py-spy names their files
JSON = {"content-type": "application/json"}
OCTETS = {"content-type": "application/octet-stream"}


# --- baselines: the primitives alone ------------------------------------------------------


def _per_second(fn: Callable[[int], object], n: int) -> float:
    """Calls of ``fn(i)`` per CPU second of this thread (best of three rounds of ``n // 3``)."""
    best = float("inf")
    third = max(1, n // 3)
    for r in range(3):
        t = time.thread_time()
        for i in range(r * third, (r + 1) * third):
            fn(i)
        best = min(best, (time.thread_time() - t) / third)
    return 1.0 / best


def redemption_rate(n: int) -> float:
    """Redemption checks per second on one core (MAC, hash-to-group, in-memory spent set)."""
    key = TokenKey.generate(np.random.default_rng(3))
    redemptions = _tokens(key, n, np.random.default_rng(4))
    verifier = TokenVerifier(key, MemorySpentSet())
    return _per_second(lambda i: verifier.redeem(*redemptions[i]), n)


def per_hop_rate(n: int) -> float:
    """Intermediate-hop packet processings per second on one core."""
    rng = np.random.default_rng(5)
    relays, hops = [], []
    for _ in range(2):
        key, cert = Identity.generate(rng).new_round_relay_key(1, rng)
        relays.append(SphinxRelay(key))
        hops.append(Hop.from_certificate(cert, 1))
    intake = Identity.generate(rng).public.relay_key
    packets = [
        build_packet(hops, None, None, round_id=1, destination=bytes(16), intake_key=intake) for _ in range(n)
    ]
    return _per_second(lambda i: relays[0].process(packets[i]), n)


# --- profiles -------------------------------------------------------------------------------


class Profile:
    """``py-spy record`` of one process while a burst runs; top frames by own and inclusive samples."""

    def __init__(self, pid: int, out: Path) -> None:
        self.out = out
        self.proc = None
        if shutil.which("py-spy") is not None:
            self.proc = subprocess.Popen(
                [
                    "py-spy",
                    "record",
                    "--pid",
                    str(pid),
                    "--format",
                    "raw",
                    "--rate",
                    "200",
                    "--output",
                    str(out),
                    "--nonblocking",
                    "--threads",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(1.0)  # attach before the burst

    def stop(self, top: int = 12) -> dict | None:
        if self.proc is None:
            return None
        self.proc.send_signal(2)  # SIGINT: py-spy writes what it sampled
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None
        if not self.out.exists():
            return None
        return top_frames(self.out.read_text(encoding="utf-8").splitlines(), top)


def top_frames(lines: Iterable[str], top: int) -> dict:
    """From collapsed stacks (``frame;frame;… count``): the frames with most own / inclusive samples.

    Samples of threads parked in a condition wait or in the event loop's epoll
    are left out, so the shares are of the time the process was working;
    inclusive shares are listed for this project's own functions only.
    """
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    # A thread parked in a condition wait or the event loop's epoll is waiting, not working.
    idle = ("Condition.wait (threading.py", "EpollSelector.select (selectors.py")
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [
            f for f in stack.split(";") if not f.startswith("thread (") and not f.startswith("process ")
        ]
        if not frames or frames[-1].startswith(idle):
            continue
        n = int(count)
        total += n
        own[frames[-1]] += n
        # Inclusive: per function (the line numbers dropped), counted once per sample.
        for f in {re.sub(r":\d+\)$", ")", f) for f in frames}:
            if f.partition("(")[2].startswith(PROJECT):
                inclusive[f] += n

    def share(c: Counter[str]) -> list[list]:
        return [[f, round(100.0 * v / max(1, total), 1)] for f, v in c.most_common(top)]

    return {"busy_samples": total, "own_percent": share(own), "inclusive_percent": share(inclusive)}


# --- intake ---------------------------------------------------------------------------------


def _intake_deliveries(url: str, n: int) -> list[IntakeDelivery]:
    """An open report round on the aggregator at ``url`` and ``n`` valid deliveries for it."""
    kh = 4
    problem = helpers.propose(url, helpers.draft(kp=1, kh=kh, n_numeric=kh, min_peers=4, send_window=3600.0))
    peers = helpers.register_and_close(url, problem, max(4, -(-n // kh)), ("reporting",), timeout=120)
    roster = AggregatorClient(url).roster(problem.id)
    bins = helpers.bins_of(url, problem.id)
    rng = np.random.default_rng(7)
    out = []
    for p in peers:
        assignment = helpers.assignment_of(url, problem.id, p)
        for k, token in enumerate(p.tokens(url, problem, roster, helpers.slots(problem))):
            value = np.r_[rng.uniform(0, 10, kh), 1.0]
            report = helpers.report_for(problem, bins, assignment, value, int(rng.integers(2)), k, rng=rng)
            data = report.to_bytes()
            out.append(helpers.sealed_delivery(problem, token.redeem(data), data))
    return out[:n]


def _burst(send: Callable[[object], list[int]], items: list, threads: int) -> tuple[float, Counter[str]]:
    local = threading.local()

    def one(item: object) -> list[int]:
        if getattr(local, "session", None) is None:
            local.session = requests.Session()
        return send((local.session, item))

    t = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        codes = Counter(str(c) for cs in pool.map(one, items) for c in cs)
    return time.perf_counter() - t, codes


def _batch_sender(url: str, headers: dict[str, str]) -> Callable[[tuple], list[int]]:
    """POST a batch body to ``url``; the per-item statuses (the request's own if it was refused)."""

    def send(arg: tuple) -> list[int]:
        session, body = arg
        answer = session.post(url, data=body, headers=headers, timeout=120)
        if answer.status_code != 200:
            return [answer.status_code]
        return [r["status"] for r in answer.json()["results"]]

    return send


def intake_run(n: int, mode: str, batch: int, threads: int, scratch: Path) -> dict:
    root = scratch / f"intake-{mode}"
    root.mkdir()
    server = start_server_process(helpers.aggregator_settings(root, port=0, tick_seconds=0.5))
    try:
        deliveries = _intake_deliveries(server.url, n)
        profile = Profile(server.process.pid, root / "profile.txt")
        cpu = process_cpu_seconds(server.process.pid)
        if mode == "single":
            bodies = [d.model_dump_json() for d in deliveries]

            def send(arg: tuple) -> list[int]:
                session, body = arg
                return [session.post(f"{server.url}/intake", data=body, headers=JSON, timeout=60).status_code]

            seconds, codes = _burst(send, bodies, threads)
        else:
            chunks = [deliveries[i : i + batch] for i in range(0, len(deliveries), batch)]
            bodies = [IntakeBatch(deliveries=tuple(c)).model_dump_json() for c in chunks]
            seconds, codes = _burst(_batch_sender(f"{server.url}/intake/batch", JSON), bodies, threads)
        cpu = process_cpu_seconds(server.process.pid) - cpu
        top = profile.stop()
    finally:
        server.stop()
    accepted = codes.get("201", 0)
    return {
        "mode": mode,
        "reports": len(deliveries),
        "batch": batch if mode == "batch" else 1,
        "client_threads": threads,
        "seconds": round(seconds, 3),
        "reports_per_s": round(accepted / seconds, 1),
        "server_cpu_seconds": round(cpu, 3),
        "reports_per_server_cpu_s": round(accepted / cpu, 1),
        "status_codes": dict(codes),
        "profile": top,
    }


# --- relay ----------------------------------------------------------------------------------


def relay_worker() -> None:
    """``--relay-worker``: a peer host with two relaying identities; config on stdin, stats on demand."""
    from anonml.privacy import PrivacyLedger
    from anonml.store import EventStore
    from peer.app import start_peer_server
    from peer.db import PeerDB
    from peer.host import PeerHost
    from peer.participant import PeerNode
    from peer.policy import PeerPolicy
    from peer.relay import RelayRound, StoredReplayCache

    cfg = json.loads(sys.stdin.readline())
    root = Path(cfg["root"])
    nodes = [
        PeerNode(Identity.generate(), EventStore("sqlite://"), PrivacyLedger("sqlite://")) for _ in range(2)
    ]
    db = PeerDB(f"sqlite:///{root / 'peers.db'}")
    host = PeerHost(nodes, db, PeerPolicy(allow_loopback_http=True), [], workers=8)
    server = start_peer_server(host)
    now = time.time()
    schedule = WindowSchedule(now - 2.0, 1.0, now + 3600.0)  # the send window is over
    routes = {n.node_id: f"{server.url}/relay/{n.node_id.hex()}" for n in nodes}
    certs = []
    for node in nodes:
        key, cert = node.identity.new_round_relay_key(1)
        certs.append(bytes(cert).hex())
        host.relay.open_round(
            RelayRound(
                node_id=node.node_id,
                round_id=1,
                relay=SphinxRelay(key, StoredReplayCache(db, node.node_id, 1)),
                schedule=schedule,
                routes=dict(routes),
                destination=bytes(16),
                intake_url="http://127.0.0.1:9/intake",
                guard=3600.0,  # release_end = t_s + δ: every release is due at once
                stages=2,
                vault=node.vault,
                owner=node.fingerprint,
            )
        )
    print(
        json.dumps({"url": server.url, "nodes": [n.node_id.hex() for n in nodes], "certs": certs}), flush=True
    )
    for line in sys.stdin:
        if line.strip() != "stats":
            break
        print(json.dumps(dict(host.relay.counters)), flush=True)
    server.stop()


def relay_run(n: int, mode: str, batch: int, threads: int, scratch: Path) -> dict:
    from anonml.crypto.identity import RelayKeyCertificate

    root = scratch / f"relay-{mode}"
    root.mkdir()
    config = json.dumps({"root": str(root)})
    proc = spawn_child(["-m", "benchmarks.wire_throughput", "--relay-worker"], first_line=config)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        ready = json.loads(proc.stdout.readline())

        def stats() -> Counter[str]:
            proc.stdin.write("stats\n")
            proc.stdin.flush()
            return Counter(json.loads(proc.stdout.readline()))

        hops = [
            Hop.from_certificate(RelayKeyCertificate.from_bytes(bytes.fromhex(c)), 1) for c in ready["certs"]
        ]
        intake = Identity.generate().public.relay_key
        packets = [
            build_packet(hops, None, None, round_id=1, destination=bytes(16), intake_key=intake)
            for _ in range(n)
        ]
        first = f"{ready['url']}/relay/{ready['nodes'][0]}"
        profile = Profile(proc.pid, root / "profile.txt")
        cpu = process_cpu_seconds(proc.pid)
        if mode == "single":

            def send(arg: tuple) -> list[int]:
                session, packet = arg
                return [session.post(first, data=packet, headers=OCTETS, timeout=60).status_code]

            items: list = packets
        else:
            send = _batch_sender(f"{first}/batch", OCTETS)
            items = [b"".join(packets[i : i + batch]) for i in range(0, n, batch)]
        t = time.perf_counter()
        _, codes = _burst(send, items, threads)
        sent = time.perf_counter() - t
        deadline = time.monotonic() + 300
        counters = stats()
        while counters["cover"] < codes.get("202", 0) and time.monotonic() < deadline:
            time.sleep(0.05)
            counters = stats()
        seconds = time.perf_counter() - t
        cpu = process_cpu_seconds(proc.pid) - cpu  # and the few stats requests it answered
        top = profile.stop()
    finally:
        if not proc.stdin.closed:
            proc.stdin.close()
        proc.wait(timeout=60)
    done = counters["cover"]
    return {
        "mode": mode,
        "packets": n,
        "batch": batch if mode == "batch" else 1,
        "client_threads": threads,
        "seconds_to_send": round(sent, 3),
        "seconds_until_last_hop": round(seconds, 3),
        "hops_processed": 2 * done,
        "hops_per_s": round(2 * done / seconds, 1),
        "server_cpu_seconds": round(cpu, 3),
        "hops_per_server_cpu_s": round(2 * done / cpu, 1),
        "status_codes": dict(codes),
        "relay_counters": dict(counters),
        "profile": top,
    }


def profiles_text(doc: dict) -> str:
    """The runs' profiles as plain text, for quoting."""
    lines = [f"{doc['benchmark']} — {doc['when']}, load {doc['machine']['load_average_1m_before_after']}"]
    for server in ("intake", "relay"):
        for mode, run in doc[server].items():
            profile = run.get("profile")
            lines.append(f"\n== {server}, {mode} ==")
            if not profile:
                lines.append("(no py-spy profile)")
                continue
            lines.append(f"busy samples: {profile['busy_samples']}")
            for kind in ("own_percent", "inclusive_percent"):
                lines.append(f"-- {kind.replace('_', ' ')} --")
                lines.extend(f"{share:5.1f}%  {frame}" for frame, share in profile[kind])
    return "\n".join(lines) + "\n"


# --- main -------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=2000)
    parser.add_argument("--packets", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=100, help="items per batch request")
    parser.add_argument("--threads", type=int, default=8, help="client threads for single requests")
    parser.add_argument("--modes", default="single,batch", help="comma-separated: single, batch")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--relay-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.relay_worker:
        relay_worker()
        return
    modes = [m for m in args.modes.split(",") if m]
    load_before = round(os.getloadavg()[0], 2)
    print("baselines …", file=sys.stderr)
    redeem = redemption_rate(1500)
    hop = per_hop_rate(1500)
    intake, relay = {}, {}
    with tempfile.TemporaryDirectory(prefix="anonml-wire-") as tmp:
        scratch = Path(tmp)
        for mode in modes:
            threads = args.threads if mode == "single" else 2
            print(f"intake, {mode} …", file=sys.stderr)
            intake[mode] = intake_run(args.reports, mode, args.batch, threads, scratch)
            intake[mode]["ratio_to_redemption_check"] = round(intake[mode]["reports_per_s"] / redeem, 4)
            intake[mode]["cpu_ratio_to_redemption_check"] = round(
                intake[mode]["reports_per_server_cpu_s"] / redeem, 4
            )
            print(f"relay, {mode} …", file=sys.stderr)
            relay[mode] = relay_run(args.packets, mode, args.batch, threads, scratch)
            relay[mode]["ratio_to_per_hop_processing"] = round(relay[mode]["hops_per_s"] / hop, 4)
            relay[mode]["cpu_ratio_to_per_hop_processing"] = round(
                relay[mode]["hops_per_server_cpu_s"] / hop, 4
            )
    doc = {
        "benchmark": "wire throughput: intake and relays over HTTP vs their primitives",
        "when": now(),
        "machine": machine(load_average_1m_before_after=[load_before, round(os.getloadavg()[0], 2)]),
        "target_ratio": TARGET_RATIO,
        "baseline": {
            "redemption_checks_per_s_one_core": round(redeem, 1),
            "per_hop_processings_per_s_one_core": round(hop, 1),
        },
        "intake": intake,
        "relay": relay,
    }
    write_json(args.output, doc)
    args.output.with_name(args.output.stem + "_profiles.txt").write_text(profiles_text(doc), encoding="utf-8")
    summary = {
        m: {
            "wall": (intake[m]["ratio_to_redemption_check"], relay[m]["ratio_to_per_hop_processing"]),
            "server cpu": (
                intake[m]["cpu_ratio_to_redemption_check"],
                relay[m]["cpu_ratio_to_per_hop_processing"],
            ),
        }
        for m in modes
    }
    print(json.dumps({"baseline": doc["baseline"], "ratios (intake, relay)": summary}, indent=2))
    print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
