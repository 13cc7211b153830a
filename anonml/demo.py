"""``anonml demo``: the whole AnonML protocol on loopback, with simulated MOOC students.

1. **Simulate** ``students`` learners (:mod:`anonml.datasets.mooc`) writing real
   edX tracking logs; a quarter are held out to score the models.
2. **Import** each peer's log with the ``edx`` importer into that peer's *own*
   event store, and give each peer its own identity and privacy ledger.
3. **Serve** a real aggregator (:mod:`aggregator`), an independent witness
   (``anonml witness serve``, :mod:`witness`, its own process) and one
   peer host (:mod:`peer`, all peer identities in one process with one relay)
   under uvicorn on 127.0.0.1. Every peer's policy trusts the witness.
   Then **probe** the host's relays: a short burst of real onions through three of
   its identities (:func:`peer.probe.measure_hop_seconds`) gives its cost per relay
   hop under the machine's present load, and the round's send and release windows
   are sized from it (:func:`packet_windows`).
4. **Propose** the dropout problem (``user_window`` instancer ×
   ``mooc_engagement`` featurizer, by name — never code; the witness declared)
   and let the peers
   decide by their policy, compute their examples locally, and **register**.
5. The witness **co-signs** the roster transcript (its signature is the
   beacon of the partition plan) and later the bins transcript; peers check
   both before releasing anything.
   **Median rounds** set the bins, the **report round** carries every report
   over a 3-hop onion route with a one-time token, the aggregator **trains**
   and **publishes** the signed model, and every peer downloads it.
6. **Print** peers, packets relayed, tokens verified, rejects, ε per peer
   (from each peer's own ledger), the private model's held-out AUC against a
   non-private logistic regression trained on the same peers' true features,
   and each phase's wall time.

Every wait of the round comes from a measured cost: the roster wait, the median
steps' bound and the report delay are the aggregator's floors from its measured
time per registration (:func:`anonml.schedule.schedule_floors`; the demo proposes
less, :data:`~anonml.demo_problem.DEMO_ROSTER_SECONDS`), the send and release
windows the host's measured relay cost (:func:`packet_windows`), the witness's
wait its measured co-signing (:data:`~anonml.demo_problem.DEMO_WITNESS_SECONDS`).
So on a loaded machine every wait grows with the costs, and the run takes longer
but loses nothing; the table shows the waits the round kept and each phase's time.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import requests

from anonml import demo_problem, demo_result
from anonml.demo_peers import Progress, SimulatedPeer, scratch_parent, simulate_peers, split_held_out
from anonml.demo_problem import *  # noqa: F403 - the module's __all__, re-exported, listed once there
from anonml.demo_problem import (
    DEMO_FEATURES,
    DEMO_HOPS,
    DEMO_MEDIAN_POOL_FRACTION,
    DEMO_MEDIAN_STEPS,
    DEMO_POLL_SECONDS,
    DEMO_REPORT_DELAY_SECONDS,
    DEMO_ROSTER_SECONDS,
    DEMO_ROUTES,
    DEMO_WITNESS_SECONDS,
    dropout_draft,
    packet_windows,
    probed_hop_seconds,
)
from anonml.demo_result import DemoResult
from anonml.demo_score import clip_to_ranges, score_models
from anonml.errors import AnonMLError, ProtocolError
from anonml.learn import PartitionPlan, roster_plan
from anonml.phases import MODEL_PHASES, ProblemPhase
from anonml.plugins import PluginRef, create
from anonml.protocol import (
    ModelDocument,
    ProblemDraft,
    ProblemStatus,
    WitnessRef,
    roster_beacon,
    route_count,
)
from peer.client import AggregatorClient
from peer.phases import ParticipationPhase

# The demo's parts live in their own modules (problem and waits, simulated peers, scoring,
# result); their names stay importable from here, where tests and benchmarks take them.
__all__ = [
    *demo_problem.__all__,
    *demo_result.__all__,
    "Progress",
    "SimulatedPeer",
    "run_demo",
    "simulate_peers",
]


def _wait(url: str, pid: str, until: Callable[[ProblemStatus], bool], timeout: float) -> ProblemStatus:
    deadline = time.monotonic() + timeout
    while True:
        status = AggregatorClient(url).status(pid)
        if until(status) or status.phase == ProblemPhase.FAILED:
            if status.phase == ProblemPhase.FAILED:
                raise AnonMLError(f"problem {pid} failed: {status.message}")
            return status
        if time.monotonic() > deadline:
            raise AnonMLError(f"problem {pid} stuck in phase {status.phase} after {timeout:.0f} s")
        time.sleep(0.1)


@dataclass
class _Services:
    """The demo's running services: witness and aggregator processes, the peer host and its server."""

    witness: Any
    aggregator: Any
    host: Any
    peer_server: Any
    admin_token: str
    max_loss_fraction: float

    def stop(self) -> None:
        self.peer_server.stop()
        self.aggregator.stop()
        self.witness.stop()


@dataclass
class _ProtocolRun:
    """What the protocol's run left: the problem's last status, the published model and the counters."""

    problem_id: str
    draft: ProblemDraft
    status: ProblemStatus
    document: ModelDocument
    relay: dict[str, int]
    packets_sent: int
    #: Packets the peers gave up on (a first hop overloaded or down past the send window), every reason.
    packets_not_sent: int
    witness_log: int
    #: Roster members' public keys in roster order, and the plan they were assigned by.
    members: list[bytes]
    plan: PartitionPlan
    #: How the peers' participations ended: phase → count.
    participations: dict[str, int]


def _roster_plan(url: str, pid: str, draft: ProblemDraft) -> tuple[list[bytes], PartitionPlan]:
    """The published roster's members and the plan every party derives from it and its witnesses' beacon."""
    client = AggregatorClient(url)
    roster, bundle = client.roster(pid), client.cosignatures(pid, "roster")
    members = [bytes(e.identity) for e in roster.entries]
    plan = roster_plan(draft, roster, roster_beacon(bundle.cosignatures))
    return members, plan


@dataclass
class _Launch:
    """The witness and aggregator processes starting in the background, and what the demo needs of them."""

    pool: ThreadPoolExecutor
    witness: Future[Any]
    aggregator: Future[Any]
    admin_token: str
    max_loss_fraction: float

    def processes(self) -> tuple[Any, Any]:
        """The started witness and aggregator (waiting for them); if either failed, the other is stopped."""
        try:
            return self.witness.result(), self.aggregator.result()
        except BaseException:
            self.abandon()
            raise
        finally:
            self.pool.shutdown(wait=False)

    def abandon(self) -> None:
        """Stop whichever process started (the demo failed before it needed them)."""
        for future in (self.witness, self.aggregator):
            future.cancel()
            if not future.cancelled() and future.exception() is None:
                future.result().stop()
        self.pool.shutdown(wait=False)


def _launch_processes(root: Path, report_delay_seconds: float) -> _Launch:
    """Start the witness and the aggregator, each its own process, while this one simulates and imports.

    They need nothing of the students: started first, their imports and start-up run beside the
    import (each on a core of its own when the machine is quiet; beside ``stress-ng --cpu 2`` three
    processes of the demo's get more of the two cores than one), and only what is left of their start
    counts as "start services".
    """
    from aggregator.app import start_server_process
    from aggregator.settings import AggregatorSettings
    from witness import start_witness_process

    token = "demo-" + os.urandom(8).hex()
    settings = AggregatorSettings(
        db_url=f"sqlite:///{root / 'aggregator.db'}",
        identity_file=root / "aggregator-identity.json",
        admin_token=token,
        intake_grace_seconds=max(1.0, report_delay_seconds / 2),
        port=0,
        allow_loopback_http=True,  # every service of the demo is on this machine
        peer_poll_seconds=DEMO_POLL_SECONDS,  # the round's waits are sized for the hosts' polling
    )
    pool = ThreadPoolExecutor(max_workers=2)
    witness = pool.submit(start_witness_process, root / "witness")  # independent of the aggregator
    aggregator = pool.submit(start_server_process, settings)
    return _Launch(pool, witness, aggregator, token, settings.max_loss_fraction)


def _start_services(launch: _Launch, root: Path, peers: list[SimulatedPeer], epsilon: float) -> _Services:
    """One host serving every peer, beside the witness and aggregator ``launch`` started."""
    from peer.app import start_peer_server
    from peer.db import PeerDB
    from peer.host import PeerHost
    from peer.participant import PeerNode
    from peer.policy import PeerPolicy

    try:
        nodes = [PeerNode(p.identity, p.store, p.ledger, user=p.username) for p in peers]
        peer_db = PeerDB(f"sqlite:///{root / 'peers.db'}")
    except BaseException:
        launch.abandon()
        raise
    witness, aggregator = launch.processes()
    try:
        host = PeerHost(
            nodes,
            peer_db,
            PeerPolicy.for_simulation(
                auto_accept=True,
                max_epsilon_per_problem=max(epsilon, 1.0),
                witnesses=[witness.identity.hex()],
                witness_threshold=1,
            ),
            [aggregator.url],
            poll_seconds=DEMO_POLL_SECONDS,
            roster_comparisons=2,
            workers=8,
        )
        peer_server = start_peer_server(host)
    except BaseException:
        aggregator.stop()
        witness.stop()
        raise
    return _Services(witness, aggregator, host, peer_server, launch.admin_token, launch.max_loss_fraction)


def _demo_draft(
    services: _Services,
    n_peers: int,
    history_weeks: int,
    weeks: int,
    epsilon: float,
    windows: tuple[float, float, float, float, float],
    routes: int = DEMO_ROUTES,
) -> ProblemDraft:
    """The dropout problem the demo proposes, declaring its witness.

    ``windows`` = (report delay, send window, release window, roster seconds, median step seconds).
    """
    report_delay, send_window, release_window, roster_seconds, median_step_seconds = windows
    featurizer = create("featurizer", PluginRef(name="mooc_engagement", params={"weeks": history_weeks}))
    return dropout_draft(
        featurizer.features(),
        history_weeks=history_weeks,
        weeks=weeks,
        epsilon=epsilon,
        min_peers=max(10, n_peers // 2),
        report_delay_seconds=report_delay,
        send_window_seconds=send_window,
        release_window_seconds=release_window,
        roster_seconds=roster_seconds,
        median_step_seconds=median_step_seconds,
        witnesses=[WitnessRef(identity=services.witness.identity, url=services.witness.url)],
        witness_seconds=DEMO_WITNESS_SECONDS,
        routes=routes,
        median_steps=DEMO_MEDIAN_STEPS,
        pool_fraction=DEMO_MEDIAN_POOL_FRACTION,
    )


def _register(services: _Services, draft: ProblemDraft, n_peers: int, report: Progress) -> str:
    """Propose ``draft``, wait until every peer that joined registered, close registration."""
    url = services.aggregator.url
    admin = AggregatorClient(url, services.admin_token)
    pid = admin.propose(draft).id

    def everyone_registered(s: ProblemStatus) -> bool:
        report("register", s.registered, n_peers)
        session = services.host.sessions.get(pid)
        if session is None:  # peers are still deciding and computing their examples
            return False
        return s.registered >= sum(1 for p in session.participants if p.phase != ParticipationPhase.ABORTED)

    _wait(url, pid, everyone_registered, timeout=120)
    admin.close(pid)
    _wait(url, pid, lambda s: s.phase != ProblemPhase.REGISTRATION, timeout=60)
    return pid


def _run_protocol(
    services: _Services, draft: ProblemDraft, n_peers: int, timer: dict[str, float], report: Progress
) -> _ProtocolRun:
    """Every phase of the problem, timed, through to the peers holding the published model."""
    url = services.aggregator.url
    t = time.perf_counter()
    pid = _register(services, draft, n_peers, report)
    timer["registration"] = time.perf_counter() - t
    t = time.perf_counter()
    _wait(url, pid, lambda s: s.phase != ProblemPhase.WITNESSING, timeout=60)
    timer["roster co-signed"] = time.perf_counter() - t
    t = time.perf_counter()
    _wait(
        url,
        pid,
        lambda s: report("medians", s.median_answers, s.median_pool) or s.phase != ProblemPhase.MEDIANS,
        timeout=60 + draft.schedule.roster_seconds + draft.median.steps * draft.schedule.median_step_seconds,
    )
    timer["median rounds"] = time.perf_counter() - t
    t = time.perf_counter()
    _wait(
        url,
        pid,
        lambda s: (
            report("report round", s.reports_accepted, s.report_peers * s.slots_per_peer)
            or s.phase != ProblemPhase.REPORTING
        ),
        timeout=180,
    )
    timer["report round"] = time.perf_counter() - t
    t = time.perf_counter()
    status = _wait(url, pid, lambda s: s.phase in MODEL_PHASES, timeout=120)
    document = AggregatorClient(url).model(pid)
    timer["training + publication"] = time.perf_counter() - t
    t = time.perf_counter()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        session = services.host.sessions.get(pid)
        if session is not None and session.finished:
            break
        time.sleep(0.1)
    timer["peers download model"] = time.perf_counter() - t
    ended = Counter(str(x.phase) for x in session.participants) if session is not None else Counter()
    witness_log = len(requests.get(f"{services.witness.url}/log", params={"limit": 1000}, timeout=30).json())
    members, plan = _roster_plan(url, pid, draft)
    return _ProtocolRun(
        pid,
        draft,
        status,
        document,
        dict(services.host.relay.counters),
        int(services.host.counters["packets sent"]),
        sum(n for what, n in services.host.counters.items() if what.startswith("packets not sent")),
        witness_log,
        members,
        plan,
        dict(ended),
    )


def _demo_result(
    students: int,
    epsilon: float,
    people: tuple[list[SimulatedPeer], list[SimulatedPeer], list[SimulatedPeer]],
    events: int,
    run: _ProtocolRun,
    scores: tuple[float, float, list[float], list[float]],
    totals: list[float],
    timer: dict[str, float],
    max_loss_fraction: float,
) -> DemoResult:
    """Gather the run's figures: ``people`` = (everyone, peers, held out), ``scores`` as :func:`_score`."""
    everyone, peers, held = people
    auc, auc_central, simulated, same_run = scores
    status, relay = run.status, run.relay
    return DemoResult(
        students=students,
        peers=len(peers),
        held_out=len(held),
        events_imported=events,
        examples=len(everyone),
        dropout_rate=float(np.mean([p.y for p in everyone])),
        features=[f.name for f in run.draft.features],
        epsilon=epsilon,
        auc=auc,
        auc_central=auc_central,
        auc_simulation=(float(np.mean(simulated)), float(np.std(simulated))),
        epsilon_per_peer={
            "min": float(min(totals)),
            "max": float(max(totals)),
            "mean": float(math.fsum(totals) / len(totals)),
        },
        packets_sent=run.packets_sent,
        packets_not_sent=run.packets_not_sent,
        participations=run.participations,
        packets_relayed=int(relay.get("forwarded", 0) + relay.get("delivered", 0)),
        tokens_issued=status.tokens_issued,
        tokens_verified=status.reports_accepted,
        median_answers=status.median_answers,
        rejects=dict(status.rejects),  # a report's redundant copies are the account's duplicates
        relay_rejects={k.removeprefix("rejected: "): v for k, v in relay.items() if k.startswith("rejected")},
        problem_id=run.problem_id,
        witness_log=run.witness_log,
        phase_seconds=timer,
        median_pool=status.median_pool,
        reports=status.reports,
        phase=status.phase,
        message=status.message,
        max_loss_fraction=max_loss_fraction,
        auc_same_run=(float(np.mean(same_run)), float(np.std(same_run))) if same_run else None,
        round_waits={}
        if status.schedule is None
        else {k: float(v) for k, v in status.schedule.model_dump().items() if k.endswith("_seconds")},
        packet_windows=(
            None
            if status.schedule is None
            else (status.schedule.send_window_seconds, status.schedule.release_window_seconds)
        ),
    )


def _aggregator_score(services: _Services, run: _ProtocolRun, held: list[SimulatedPeer]) -> float | None:
    """The held-out AUC the aggregator computes for its own model on the held-out students' rows,
    posted as its operator would (``POST /problems/{id}/evaluation``, a CSV as ``anonml featurize``
    writes it); None when the held-out rows hold one class only (no AUC) or the aggregator did not
    answer (the table then says "not scored")."""
    specs = list(run.draft.features)
    X = clip_to_ranges(np.asarray([p.x for p in held]), specs)
    lines = [",".join([*(s.name for s in specs), "label"])]
    for row, peer in zip(X, held, strict=True):
        lines.append(",".join([*(repr(float(v)) for v in row), str(int(peer.y))]))
    try:
        evaluation = AggregatorClient(services.aggregator.url, services.admin_token).evaluate(
            run.problem_id, "\n".join(lines).encode(), name="the demo's held-out students"
        )
    except ProtocolError:  # shown as "not scored"; the demo's own AUC still stands
        return None
    return evaluation.metrics.get("auc")


def _probed_windows(services: _Services, members: int, routes: int) -> tuple[tuple[float, float], float]:
    """The round's send and release windows sized from the peer host's cost per relay hop measured
    now (:func:`probed_hop_seconds`, :func:`packet_windows`), and that cost in seconds."""
    hop_seconds = probed_hop_seconds(services.host)
    # k_h = 1 (dropout_draft): every member sends one slot, a report or cover, over
    # route_count routes — each route's copy is a packet the relays carry.
    copies = route_count(routes, DEMO_HOPS, members)
    windows = packet_windows(members, hops=DEMO_HOPS, slots_per_peer=copies, hop_seconds=hop_seconds)
    return windows, hop_seconds


def run_demo(
    students: int = 400,
    *,
    weeks: int = 8,
    history_weeks: int = 2,
    seed: int = 0,
    epsilon: float = 3.0,
    held_out_fraction: float = 0.25,
    simulation_runs: int = 20,
    report_delay_seconds: float = DEMO_REPORT_DELAY_SECONDS,
    windows: tuple[float, float] | None = None,
    roster_seconds: float = DEMO_ROSTER_SECONDS,
    median_step_seconds: float = 20.0,
    routes: int = DEMO_ROUTES,
    workdir: Path | None = None,
    progress: Progress | None = None,
) -> DemoResult:
    """Run the whole protocol on loopback (module docstring) and return what happened.

    ``report_delay_seconds`` is the time the peers have to build their packets
    (raised by the aggregator to its measured floor); ``windows`` the send and
    release windows, or None to size them from the peer host's measured cost per
    relay hop just before the round (:func:`packet_windows`; fixed windows lost
    most reports beside two busy CPU loops); ``roster_seconds`` the peers' time to
    check the co-signed roster before the first median query (:func:`dropout_draft`;
    raised by the aggregator to its measured floor); ``median_step_seconds`` bounds one median step,
    which ends as soon as its whole group answered (so a generous bound costs
    nothing on a quiet machine and keeps answers coming under load); ``routes`` the copies of
    each report, each over its own route (:data:`~anonml.demo_problem.DEMO_ROUTES`); ``progress``
    is an optional callable ``(phase: str, done: int, total: int)``.
    """
    timer: dict[str, float] = {}
    report = progress or (lambda phase, done, total: None)
    with tempfile.TemporaryDirectory(prefix="anonml-demo-", dir=scratch_parent()) as scratch:
        root = Path(workdir) if workdir is not None else Path(scratch)
        launch = _launch_processes(root, report_delay_seconds)
        try:
            t = time.perf_counter()
            everyone, events = simulate_peers(
                students,
                root,
                weeks=weeks,
                history_weeks=history_weeks,
                seed=seed,
                features=list(DEMO_FEATURES),
                progress=report,
            )
            timer["simulate + import"] = time.perf_counter() - t
            peers, held = split_held_out(everyone, held_out_fraction, seed)
        except BaseException:
            launch.abandon()
            raise

        t = time.perf_counter()  # what is left of the start once the import is done
        services = _start_services(launch, root, peers, epsilon)
        timer["start services"] = time.perf_counter() - t
        try:
            hop_seconds = None
            if windows is None:
                t = time.perf_counter()
                windows, hop_seconds = _probed_windows(services, len(peers), routes)
                timer["relay probe"] = time.perf_counter() - t
            sizes = (report_delay_seconds, *windows, roster_seconds, median_step_seconds)
            draft = _demo_draft(services, len(peers), history_weeks, weeks, epsilon, sizes, routes)
            run = _run_protocol(services, draft, len(peers), timer, report)
            auc_aggregator = _aggregator_score(services, run, held)
        finally:
            services.stop()
            for p in peers:
                p.store.close()

        t = time.perf_counter()
        scores = score_models(run, peers, held, seed, simulation_runs)
        totals = [p.ledger.budget(p.identity.fingerprint.hex(), run.problem_id).total for p in peers]
        for p in everyone:
            p.ledger.close()
        timer["score models"] = time.perf_counter() - t
    people = (everyone, peers, held)
    result = _demo_result(
        students, epsilon, people, events, run, scores, totals, timer, services.max_loss_fraction
    )
    result.hop_seconds = hop_seconds
    result.auc_aggregator = auc_aggregator
    return result
