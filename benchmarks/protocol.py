"""A 1,000-peer AnonML round over real HTTP, against the in-process simulation of the same computation.

Setup: one aggregator process (``python -m aggregator``) and ``--hosts`` peer
host processes, each hosting its share of the peers (own identity, event
store and ledger per peer; one relay per process), all on loopback. Each
host simulates its students and imports their edX logs (not timed as
protocol). Then the dropout problem of ``anonml demo`` runs end to end:
registration, median rounds, the report round over 3-hop onion routes with
one-time tokens, training, publication, model download.

The round's waits are the aggregator's: the proposal asks for 1 s each and
the aggregator raises them to :func:`anonml.schedule.schedule_floors` for the
roster size and the measured cost of a registration (the round's schedule is
read back from the problem's status). Each host keeps its students' events
in one event store and their releases in one ledger (``simulate_peers(...,
shared=True)``): every identity still computes its own example and keeps its
own budget, without 20,000 SQLite files to create at 10,000 peers.

Measured, in one run:

* **wall time per phase** (proposal → registration closed → medians → report
  round → training), and the fixed waits the schedule imposes;
* **packets/s through relays** during the round (hops processed ÷ the report
  round's length), and the relays' **capacity**: a burst of 1-hop packets at
  one host process over HTTP, as fast as 8 client threads can send;
* **redemptions/s at the aggregator**: a burst of valid token-bearing
  deliveries at a fresh aggregator's intake (MAC check, spent-set insert and
  report insert in one transaction each), 8 client threads;
* the **ratio** of protocol time (proposal to published model) to the time of
  :meth:`anonml.learn.AnonMLClassifier.fit` — the learning library's
  in-process simulation of the same computation (same plan shape, ε, bins,
  median pool) on the same peers' data — in the same run; and of the
  non-fixed time (protocol time minus the schedule's fixed waits: roster,
  report delay, send and release windows, intake grace) to it;
* the **CPU seconds** of the aggregator and the host processes (all their threads; Linux
  ``/proc``) from the proposal to the published model, and their sum per peer: what one more
  peer costs the machine, to compare across roster sizes;
* the **report account**: expected = received + lost, and every loss with its
  reason (late, refused at the intake by reason, not arrived — with the
  relays' and senders' own loss counters beside it).

Writes ``benchmarks/results/protocol.json`` (1,000 peers) or
``benchmarks/results/protocol_<peers>.json``.
Run: ``python -m benchmarks.protocol [--peers 1000] [--hosts 3]`` from the repository root.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import requests

from aggregator.app import create_app, start_server, start_server_process
from aggregator.settings import AggregatorSettings
from anonml.crypto import (
    Hop,
    Identity,
    PublicIdentity,
    SphinxRelay,
    WindowSchedule,
    build_packet,
    finalize_tokens,
    seal_payload,
)
from anonml.demo import DEMO_FEATURES, dropout_draft, simulate_peers
from anonml.learn import simulated_learner
from anonml.phases import ProblemPhase
from anonml.plugins import PluginRef, create
from anonml.privacy import PrivacyLedger, RandomizedResponse
from anonml.protocol import (
    IntakeDelivery,
    MedianSettings,
    PrivateReport,
    ProblemStatus,
    Registration,
    TokenBatchResponse,
    pack_bits,
    report_slot,
    sign_message,
    token_batch_request,
)
from anonml.serving import spawn_child
from anonml.store import EventStore
from benchmarks.reporting import RESULTS, machine, now, process_cpu_seconds, rate, timed_map, write_json
from peer import round_packets
from peer.app import start_peer_server
from peer.client import AggregatorClient
from peer.db import PeerDB
from peer.host import PeerHost
from peer.participant import Participant, PeerNode
from peer.policy import PeerPolicy
from peer.relay import RelayRound

WEEKS, HISTORY = 8, 2
#: How often each host polls the aggregator; the aggregator is told (``peer_poll_seconds``).
POLL_SECONDS = 0.25
#: How often the benchmark reads the problem's status (the phases' times are the aggregator's own).
STATUS_POLL_SECONDS = 0.2


# --- the peer host processes ------------------------------------------------------------


#: The steps between the bins' publication and ``t_s`` that each member's host takes for it
#: (the work the report delay holds): relay round opened, bins and their cosignatures checked,
#: routes and tokens (when not done during the medians), reports perturbed and recorded, onions
#: built, the sealed outbox stored.
PRESEND_STEPS = ("open_round", "check_bins", "prepare_round", "build_packets")


class PresendMeter:
    """Thread CPU and wall seconds of each :data:`PRESEND_STEPS` call of every member of one host.

    Wraps the :class:`~peer.participant.Participant` methods in this process (the host worker's
    own), so what is measured is the host's code as it runs in the round. ``prepare_round`` calls
    made inside ``build_packets`` count in both. With ``profile``, each call also runs under its
    own :class:`cProfile.Profile` (one per thread: Python 3.11 profiles the calling thread only),
    merged into one table.
    """

    def __init__(self, profile: bool = False) -> None:
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.cpu: Counter[str] = Counter()
        self.wall: Counter[str] = Counter()
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}
        self.stats: pstats.Stats | None = None
        self.profile = profile

    def install(self) -> None:
        for name in PRESEND_STEPS:
            setattr(Participant, name, self._wrap(name, getattr(Participant, name)))
        # one onion per packet, inside build_packets: the part of its cost that grows with the packets
        round_packets._packet = self._wrap("onion", round_packets._packet)

    def _wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            w0, c0 = time.perf_counter(), time.thread_time()
            prof = cProfile.Profile() if self.profile else None
            try:
                return fn(*args, **kwargs) if prof is None else prof.runcall(fn, *args, **kwargs)
            finally:
                w1, c1 = time.perf_counter(), time.thread_time()
                with self._lock:
                    self.calls[name] += 1
                    self.cpu[name] += c1 - c0
                    self.wall[name] += w1 - w0
                    self.first.setdefault(name, w0)
                    self.last[name] = w1
                    if prof is not None:
                        if self.stats is None:
                            self.stats = pstats.Stats(prof)
                        else:
                            self.stats.add(prof)

        return timed

    def summary(self) -> dict[str, Any]:
        """Per step: calls, CPU and wall seconds summed; and ``span_seconds``, from the first
        ``open_round`` call's start to the last ``build_packets`` call's end (the host's wall time
        for its members' pre-send work once the bins are out, its threads overlapping; the
        ``prepare_round`` calls during the medians are before it)."""
        steps = {
            name: {
                "calls": self.calls[name],
                "cpu_seconds": round(self.cpu[name], 4),
                "wall_seconds": round(self.wall[name], 4),
            }
            for name in (*PRESEND_STEPS, "onion")
            if self.calls[name]
        }
        span = None
        if "open_round" in self.first and "build_packets" in self.last:
            span = round(self.last["build_packets"] - self.first["open_round"], 4)
        return {"steps": steps, "span_seconds": span, "members": self.calls["build_packets"]}

    def profile_text(self, lines: int = 45) -> str:
        """The merged profile's top ``lines`` functions by cumulative time ("" when not profiled)."""
        if self.stats is None:
            return ""
        out = io.StringIO()
        self.stats.stream = out
        self.stats.sort_stats("cumulative").print_stats(lines)
        self.stats.sort_stats("tottime").print_stats(lines)
        return out.getvalue()


def host_worker() -> None:
    """``--host-worker``: config JSON on stdin; print ready, then stats when asked, then stop."""
    cfg = json.loads(sys.stdin.readline())
    root = Path(cfg["root"])
    meter = PresendMeter(profile=cfg.get("profile", False))
    meter.install()
    t = time.perf_counter()
    peers, events = simulate_peers(
        cfg["students"],
        root,
        weeks=cfg["weeks"],
        history_weeks=HISTORY,
        seed=cfg["seed"],
        features=list(DEMO_FEATURES),
        shared=True,
    )
    prep = time.perf_counter() - t
    nodes = [PeerNode(p.identity, p.store, p.ledger, user=p.username) for p in peers]
    host = PeerHost(
        nodes,
        PeerDB(f"sqlite:///{root / 'peers.db'}"),
        PeerPolicy.for_simulation(auto_accept=True, max_epsilon_per_problem=cfg["epsilon"]),
        [cfg["aggregator"]],
        poll_seconds=POLL_SECONDS,
        roster_comparisons=2,
        workers=8,
    )
    server = start_peer_server(host, timeout=60 + 0.05 * len(nodes))
    print(
        json.dumps({"ready": server.url, "peers": len(nodes), "events": events, "prep_s": prep}), flush=True
    )
    pid = sys.stdin.readline().strip()
    if not pid:  # the round was abandoned: stop at once
        server.stop()
        return
    deadline = time.monotonic() + cfg["finish_seconds"]
    while time.monotonic() < deadline and not (pid in host.sessions and host.sessions[pid].finished):
        time.sleep(0.1)
    parts = host.sessions[pid].participants if pid in host.sessions else []
    states = Counter(p.status for p in parts)
    reasons = Counter(p.reason[:80] for p in parts if p.reason)
    print(
        json.dumps(
            {
                "relay": dict(host.relay.counters),
                "host": dict(host.counters),
                "states": dict(states),
                "reasons": dict(reasons),
                "x": [p.x.tolist() for p in peers],
                "y": [p.y for p in peers],
                "epsilon": [p.ledger.budget(p.identity.fingerprint.hex(), pid).total for p in peers],
                "presend": meter.summary(),
                "profile": meter.profile_text(),
            }
        ),
        flush=True,
    )
    server.stop()
    for closable in {id(c): c for p in peers for c in (p.store, p.ledger)}.values():
        closable.close()


def _spawn_host(cfg: dict) -> subprocess.Popen:
    return spawn_child([str(Path(__file__).resolve()), "--host-worker"], first_line=json.dumps(cfg))


# --- the round --------------------------------------------------------------------------


def _status(url: str, pid: str) -> ProblemStatus:
    return AggregatorClient(url).status(pid)


class RoundFailed(RuntimeError):
    """The problem failed; ``args[0]`` is what the round did up to then (written as the result)."""


def run_round(
    n_peers: int,
    n_hosts: int,
    epsilon: float,
    grace: float,
    scratch: Path,
    weeks: int = WEEKS,
    profile: Path | None = None,
) -> dict:
    token = os.urandom(12).hex()
    agg = start_server_process(
        AggregatorSettings(
            db_url=f"sqlite:///{scratch / 'aggregator.db'}",
            identity_file=scratch / "aggregator-id.json",
            admin_token=token,
            allow_loopback_http=True,
            port=0,
            intake_grace_seconds=grace,
            peer_poll_seconds=POLL_SECONDS,
        )
    )
    # Generous bounds for a loaded 2-core machine; the schedule itself is the aggregator's.
    patience = 120 + 0.5 * n_peers
    hosts, readies, reports = [], [], []
    try:
        t = time.perf_counter()
        shares = np.array_split(np.arange(n_peers), n_hosts)
        for i, share in enumerate(shares):
            (scratch / f"host{i}").mkdir()
            hosts.append(
                _spawn_host(
                    {
                        "root": str(scratch / f"host{i}"),
                        "students": int(share.size),
                        "seed": 1000 + i,
                        "aggregator": agg.url,
                        "epsilon": epsilon,
                        "finish_seconds": patience,
                        "weeks": weeks,
                        "profile": profile is not None,
                    }
                )
            )
        for proc in hosts:
            readies.append(json.loads(proc.stdout.readline()))
        prep = time.perf_counter() - t
        peers = sum(r["peers"] for r in readies)
        featurizer = create("featurizer", PluginRef(name="mooc_engagement", params={"weeks": HISTORY}))
        # Every wait asks for 1 s: the aggregator raises each to its floor for this roster.
        draft = dropout_draft(
            featurizer.features(),
            history_weeks=HISTORY,
            weeks=weeks,
            epsilon=epsilon,
            min_peers=peers // 2,
            registration_seconds=patience * 2,
            roster_seconds=1.0,
            report_delay_seconds=1.0,
            send_window_seconds=1.0,
            release_window_seconds=1.0,
            median_step_seconds=1.0,
        )
        admin = AggregatorClient(agg.url, token)
        marks: dict[str, float] = {}
        servers = {"aggregator": [agg.process.pid], "hosts": [proc.pid for proc in hosts]}
        cpu0 = {role: sum(map(process_cpu_seconds, pids)) for role, pids in servers.items()}
        t0 = time.perf_counter()
        pid = admin.propose(draft).id
        while (st := _status(agg.url, pid)).registered < peers:
            time.sleep(STATUS_POLL_SECONDS)
            if time.perf_counter() - t0 > patience:
                raise RuntimeError(f"registration did not complete: {st.registered} of {peers}")
        marks["all registered"] = time.perf_counter() - t0
        admin.close(pid)
        phase = "registration"
        while phase not in ("done", "degraded", "failed"):
            st = _status(agg.url, pid)
            if st.phase != phase:
                marks[st.phase] = time.perf_counter() - t0
                phase = st.phase
            time.sleep(STATUS_POLL_SECONDS)
            if time.perf_counter() - t0 > 4 * patience:
                raise RuntimeError(f"stuck in {phase}")
        total = time.perf_counter() - t0
        cpu = {role: sum(map(process_cpu_seconds, pids)) - cpu0[role] for role, pids in servers.items()}
        for proc in hosts:
            proc.stdin.write(pid + "\n")
            proc.stdin.flush()
        reports = [json.loads(proc.stdout.readline()) for proc in hosts]
        if phase == "failed":
            raise RoundFailed(
                {
                    "peers": peers,
                    "hosts": n_hosts,
                    "failed": st.message,
                    "prep_seconds": round(prep, 2),
                    "protocol_seconds": round(time.perf_counter() - t0, 2),
                    "phase_seconds": {
                        "proposal → all registered": round(marks["all registered"], 2),
                        **{k: round(v, 2) for k, v in st.phase_seconds.items()},
                    },
                    "round_schedule_seconds": None
                    if st.schedule is None
                    else st.schedule.model_dump(mode="json"),
                    "tokens_issued": st.tokens_issued,
                    "median_answers": st.median_answers,
                    "report_account": None if st.reports is None else st.reports.model_dump(),
                    "peer_states": dict(sum((Counter(r["states"]) for r in reports), Counter())),
                    "peer_reasons": dict(sum((Counter(r["reasons"]) for r in reports), Counter())),
                    "relay_counters": dict(sum((Counter(r["relay"]) for r in reports), Counter())),
                }
            )
    finally:
        for proc in hosts:
            if proc.stdin and not proc.stdin.closed:
                proc.stdin.close()  # a host still waiting for the problem id stops at EOF
        for proc in hosts:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        agg.stop()
    relay, host = Counter(), Counter()
    for r in reports:
        relay.update(r["relay"])
        host.update(r["host"])
    if profile is not None:
        profile.write_text(
            "\n".join(f"=== host {i} ===\n{r['profile']}" for i, r in enumerate(reports)), encoding="utf-8"
        )
    sched = st.schedule
    assert sched is not None and st.reports is not None
    report_round = st.phase_seconds.get("reporting", float("nan"))
    hops = relay["forwarded"] + relay["delivered"]  # cover is delivered too: the exit cannot tell it
    X = np.asarray([x for r in reports for x in r["x"]])
    y = np.asarray([v for r in reports for v in r["y"]])
    eps = [e for r in reports for e in r["epsilon"]]
    account = st.reports
    accounted = account.received + account.late + sum(account.refused.values()) + account.not_arrived
    return {
        "peers": peers,
        "hosts": n_hosts,
        "events_imported": sum(r["events"] for r in readies),
        "weeks_simulated": weeks,
        "prep_seconds": round(prep, 2),
        "epsilon": epsilon,
        "protocol_seconds": round(total, 2),
        "phase_seconds": {
            "proposal → all registered": round(marks["all registered"], 2),
            **{k: round(v, 2) for k, v in st.phase_seconds.items()},
        },
        "round_schedule_seconds": {
            k: round(v, 3)
            for k, v in sched.model_dump().items()
            if k.endswith("_seconds") and k != "witness_seconds"
        },
        "fixed_waits_seconds": {
            "roster_seconds": round(sched.roster_seconds, 3),
            "report_delay + send window + release window + grace": round(
                sched.report_delay_seconds + sched.send_window_seconds + sched.release_window_seconds + grace,
                3,
            ),
        },
        "tokens_issued": st.tokens_issued,
        "reports_accepted": st.reports_accepted,
        "median_answers": st.median_answers,
        "rejects": st.rejects,
        "report_account": {
            **account.model_dump(),
            "received + lost with a reason": accounted,
            "every report accounted for": accounted == account.expected
            and account.lost == account.expected - account.received,
            "senders' count of their reports lost in transit": relay["reports lost in transit"],
            "relay and sender loss counters": {
                k: v
                for k, v in (relay + host).items()
                if any(w in k for w in ("late", "lost", "not sent", "refused", "rejected"))
            },
        },
        "relay_counters": dict(relay),
        "host_counters": dict(host),
        "hops_processed": hops,
        "packets_per_s_in_round": round(hops / report_round, 1),
        "peer_states": dict(sum((Counter(r["states"]) for r in reports), Counter())),
        "peer_reasons": dict(sum((Counter(r["reasons"]) for r in reports), Counter())),
        "epsilon_per_peer": {"min": min(eps), "max": max(eps), "mean": float(np.mean(eps))},
        # Every process of the round, proposal to published model: what one more peer costs the machine.
        "cpu_seconds": {
            **{role: round(v, 2) for role, v in cpu.items()},
            "total": round(sum(cpu.values()), 2),
            "ms_per_peer": round(1000 * sum(cpu.values()) / max(1, peers), 2),
        },
        "presend_cost": _presend_cost(
            [r["presend"] for r in reports],
            peers,
            profiled=profile is not None,
            # n M: the roster floor's work term (2r + n M), the registrations' measured flow
            members_work_seconds=sched.roster_seconds - 2 * POLL_SECONDS,
            report_delay_work_seconds=sched.report_delay_seconds - 2 * POLL_SECONDS,
        ),
        "_X": X,
        "_y": y,
        "_draft": draft,
    }


def _presend_cost(
    hosts: list[dict[str, Any]],
    peers: int,
    *,
    profiled: bool,
    members_work_seconds: float,
    report_delay_work_seconds: float,
) -> dict:
    """Each pre-send step summed over the hosts (:class:`PresendMeter`), with CPU and wall
    milliseconds per call; per member, the CPU of its ``open_round``, ``check_bins`` and
    ``build_packets`` (``prepare_round`` inside the latter already counted), and the host wall
    time: each host's span over its members, the slowest host's. The slowest host's span is
    also stated in registrations per member (over ``n M`` = ``members_work_seconds``, when the
    roster floor was the roster's wait) and against the report delay's work term
    (``report_delay_work_seconds``: the report delay less ``2r``), which it must stay inside."""
    steps: dict[str, dict[str, float]] = {}
    for h in hosts:
        for name, v in h["steps"].items():
            acc = steps.setdefault(name, {"calls": 0, "cpu_seconds": 0.0, "wall_seconds": 0.0})
            for key in acc:
                acc[key] += v[key]
    for v in steps.values():
        v["cpu_ms_per_call"] = round(1000 * v["cpu_seconds"] / max(1, v["calls"]), 3)
        v["wall_ms_per_call"] = round(1000 * v["wall_seconds"] / max(1, v["calls"]), 3)
        v["cpu_seconds"], v["wall_seconds"] = round(v["cpu_seconds"], 3), round(v["wall_seconds"], 3)
    cpu = sum(
        steps.get(name, {}).get("cpu_seconds", 0.0) for name in ("open_round", "check_bins", "build_packets")
    )
    spans = [
        h["span_seconds"] / h["members"] for h in hosts if h["span_seconds"] is not None and h["members"]
    ]
    return {
        "steps": steps,
        "cpu_ms_per_member": round(1000 * cpu / max(1, peers), 3),
        "host_wall_ms_per_member": round(1000 * max(spans, default=0.0), 3),
        "host_span_seconds": [h["span_seconds"] for h in hosts],
        "slowest_span_over_n_M": round(
            max(h["span_seconds"] or 0.0 for h in hosts) / members_work_seconds, 3
        ),
        "slowest_span_over_report_delay_work": round(
            max(h["span_seconds"] or 0.0 for h in hosts) / report_delay_work_seconds, 3
        ),
        "profiled (times inflated by cProfile)": profiled,
    }


# --- capacities ---------------------------------------------------------------------------


def relay_capacity(n_packets: int, scratch: Path, threads: int = 8) -> dict:
    """1-hop packets at one relay process over HTTP, as fast as ``threads`` clients send."""
    node = PeerNode(Identity.generate(), EventStore("sqlite://"), PrivacyLedger("sqlite://"))
    # A state DB file, as a host has: an in-memory SQLite database is one connection, which
    # concurrent requests would share.
    state = PeerDB(f"sqlite:///{scratch / 'relay-capacity.db'}")
    host = PeerHost([node], state, PeerPolicy(allow_loopback_http=True), [])
    server = start_peer_server(host)
    try:
        key, cert = node.identity.new_round_relay_key(1)
        now = time.time()
        schedule = WindowSchedule(now, 600.0, now + 1200.0)  # held, never released during the burst
        aggregator = Identity.generate().public
        destination, intake = aggregator.node_id, aggregator.relay_key
        host.relay.open_round(
            RelayRound(
                node.node_id,
                1,
                SphinxRelay(key),
                schedule,
                {node.node_id: "http://127.0.0.1:9"},
                destination,
                "http://127.0.0.1:9",
            )
        )
        hop = Hop.from_certificate(cert, 1)
        packets = [
            build_packet([hop], None, None, round_id=1, destination=destination, intake_key=intake)
            for _ in range(n_packets)
        ]
        url = f"{server.url}/relay/{node.node_id.hex()}"
        local = threading.local()

        def send(packet: bytes) -> int:
            session = getattr(local, "s", None) or requests.Session()
            local.s = session
            return session.post(
                url, data=packet, headers={"content-type": "application/octet-stream"}
            ).status_code

        codes, seconds = timed_map(send, packets, threads)
    finally:
        server.stop()
    return rate("packets", n_packets, codes, seconds)


def intake_capacity(n_reports: int, scratch: Path, threads: int = 8) -> dict:
    """Valid deliveries at a fresh aggregator's intake: redemptions/s (one transaction each)."""
    token = "bench"
    settings = AggregatorSettings(
        db_url=f"sqlite:///{scratch / 'intake.db'}",
        identity_file=scratch / "i-id.json",
        admin_token=token,
        tick_seconds=0.05,
        allow_loopback_http=True,
    )
    server = start_server(create_app(settings))
    admin = AggregatorClient(server.url, token)
    json_h = {"content-type": "application/json"}
    try:
        featurizer = create("featurizer", PluginRef(name="mooc_engagement", params={"weeks": HISTORY}))
        draft = dropout_draft(
            featurizer.features(),
            history_weeks=HISTORY,
            weeks=WEEKS,
            epsilon=2.0,
            min_peers=2,
            report_delay_seconds=600.0,
            send_window_seconds=600.0,
            release_window_seconds=5.0,
        )
        draft = draft.model_copy(update={"median": MedianSettings(pool_fraction=0.0), "kp": 1})
        problem = admin.propose(draft)
        peers = [Identity.generate() for _ in range(n_reports)]
        intake_key = PublicIdentity.from_bytes(bytes(problem.aggregator)).relay_key
        with requests.Session() as s:
            for ident in peers:
                _, cert = ident.new_round_relay_key(problem.round_id)
                reg = sign_message(
                    Registration(
                        problem_id=problem.id,
                        aggregator=problem.aggregator,
                        identity=bytes(ident.public),
                        relay_url=f"http://127.0.0.1:9/relay/{ident.public.node_id.hex()}",
                        relay_certificate=bytes(cert),
                        signature=bytes(64),
                    ),
                    ident,
                )
                s.post(
                    f"{server.url}/problems/{problem.id}/registrations",
                    data=reg.model_dump_json(),
                    headers=json_h,
                ).raise_for_status()
            admin.close(problem.id)
            while admin.status(problem.id).phase != ProblemPhase.REPORTING:
                time.sleep(0.05)
            roster = admin.roster(problem.id)
            mech = RandomizedResponse.from_epsilon(2.0, 4)
            rng = np.random.default_rng(0)
            deliveries = []
            for ident in peers:
                slot = report_slot(problem.id, 0, 0)  # k_p = 1: everyone reports in partition 0
                batch, req = token_batch_request(problem.id, ident, bytes(roster.token_key), [slot])
                answer = TokenBatchResponse.model_validate_json(
                    s.post(
                        f"{server.url}/problems/{problem.id}/tokens",
                        data=batch.model_dump_json(),
                        headers=json_h,
                    ).content
                )
                tok = finalize_tokens(req, answer.wire())[0]
                report = PrivateReport(
                    problem_id=problem.id,
                    partition=0,
                    subset=0,
                    mechanism=mech.descriptor(),
                    bits=pack_bits(mech.perturb(np.asarray([int(rng.integers(4))]), rng)[0]),
                )
                data = report.to_bytes()
                sealed = seal_payload(intake_key, problem.round_id, tok.redeem(data), data)
                deliveries.append(
                    IntakeDelivery(version=2, round_id=problem.round_id, sealed=sealed).model_dump_json()
                )
        local = threading.local()

        def send(body: str) -> int:
            session = getattr(local, "s", None) or requests.Session()
            local.s = session
            return session.post(f"{server.url}/intake", data=body, headers=json_h).status_code

        codes, seconds = timed_map(send, deliveries, threads)
    finally:
        server.stop()
    return rate("redemptions", n_reports, codes, seconds)


# --- main -------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", type=int, default=1000)
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--epsilon", type=float, default=3.0)
    parser.add_argument("--grace", type=float, default=2.0, help="intake grace after t_r (s)")
    parser.add_argument(
        "--weeks", type=int, default=WEEKS, help="course weeks simulated (fewer: fewer events per peer)"
    )
    parser.add_argument("--out", type=Path, default=None, help="result file (default: by peer count)")
    parser.add_argument(
        "--profile-presend",
        type=Path,
        default=None,
        help="cProfile every host's pre-send steps; their merged tables go to this file",
    )
    parser.add_argument("--host-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.host_worker:
        host_worker()
        return
    started = time.perf_counter()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(
        prefix="anonml-bench-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None
    ) as scratch:
        root = Path(scratch)
        print(f"round with {args.peers} peers in {args.hosts} host processes …", file=sys.stderr)
        try:
            result = run_round(
                args.peers, args.hosts, args.epsilon, args.grace, root, args.weeks, args.profile_presend
            )
        except RoundFailed as failure:
            out = args.out or RESULTS / f"protocol_{args.peers}.json"
            doc = {
                "benchmark": "protocol",
                "when": now(),
                "machine": {
                    "cpus": os.cpu_count(),
                    "load_average_1_5_15m_before": list(load_before),
                    "load_average_1_5_15m_after_round": list(os.getloadavg()),
                },
                "wall_seconds_preparation_and_round": round(time.perf_counter() - started, 1),
                "round": failure.args[0],
            }
            out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
            raise SystemExit(f"the round failed: {failure.args[0]['failed']} (written to {out})") from None
        round_wall = time.perf_counter() - started
        load_after_round = os.getloadavg()
        X, y, draft = result.pop("_X"), result.pop("_y"), result.pop("_draft")
        specs = list(draft.features)
        Xc = np.clip(X, [s.low for s in specs], [s.high for s in specs])
        times = []
        for r in range(3):  # best of 3: the in-process simulation of the same computation
            t = time.perf_counter()
            simulated_learner(draft, random_state=r).fit(Xc, y)
            times.append(time.perf_counter() - t)
        simulation = min(times)
        waits = sum(result["fixed_waits_seconds"].values())
        print("relay capacity …", file=sys.stderr)
        relay = relay_capacity(2000, root)
        print("intake capacity …", file=sys.stderr)
        intake = intake_capacity(500, root)
    doc = {
        "benchmark": "protocol",
        "when": now(),
        "machine": machine(
            load_average_1m=round(os.getloadavg()[0], 2),
            load_average_1_5_15m_before=[round(v, 2) for v in load_before],
            load_average_1_5_15m_after_round=[round(v, 2) for v in load_after_round],
        ),
        "wall_seconds_preparation_and_round": round(round_wall, 1),
        "wall_seconds_total": round(time.perf_counter() - started, 1),
        "round": result,
        "relay_capacity": relay,
        "intake_capacity": intake,
        "simulation_seconds": round(simulation, 4),
        "ratio_protocol_to_simulation": round(result["protocol_seconds"] / simulation, 1),
        "ratio_protocol_minus_fixed_waits_to_simulation": round(
            (result["protocol_seconds"] - waits) / simulation, 1
        ),
    }
    out = args.out or RESULTS / ("protocol.json" if args.peers == 1000 else f"protocol_{args.peers}.json")
    write_json(out, doc)
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
