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

With the defaults it finishes in about two minutes on a quiet 2-core machine; on a
loaded one every wait grows with the measured costs, so it takes longer but loses nothing.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import requests
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from anonml.crypto import Identity
from anonml.datasets.mooc import simulate_students, write_edx_logs
from anonml.errors import AnonMLError, ProtocolError
from anonml.featurize import featurize_dataset
from anonml.learn import AnonMLClassifier, PartitionPlan, SimulationConfig, roster_plan, simulated_learner
from anonml.model import FeatureSpec
from anonml.phases import MODEL_PHASES, ProblemPhase
from anonml.plugins import PluginRef, create
from anonml.privacy import PrivacyLedger
from anonml.protocol import (
    DEFAULT_ROUTES,
    MedianSettings,
    ModelDocument,
    ProblemDraft,
    ProblemStatus,
    ReportAccount,
    Schedule,
    WitnessRef,
    roster_beacon,
    route_count,
)
from anonml.randomness import generator_from
from anonml.schedule import schedule_floors
from anonml.store import EventStore
from peer.client import AggregatorClient

__all__ = [
    "DemoResult",
    "DEMO_FEATURES",
    "SimulatedPeer",
    "dropout_draft",
    "simulate_peers",
    "run_demo",
]

Progress = Callable[[str, int, int], None]

#: How often the demo's peer hosts poll; the aggregator sizes the round's waits for it.
DEMO_POLL_SECONDS = 0.2

#: Relays on every report's route (:func:`dropout_draft`).
DEMO_HOPS = 3

#: The report delay the demo proposes (the aggregator raises it to its measured floor,
#: :func:`anonml.schedule.schedule_floors`): time to build every packet before ``t_s``.
DEMO_REPORT_DELAY_SECONDS = 6.0

#: Relay probes before the round; the slowest is kept. Two bursts back to back on a loaded 2-core
#: machine measured up to twice apart (12.8 and 27.9 ms per hop at load 14): one burst may
#: catch a lull that the round, 20–60 s long, will not have.
DEMO_PROBES = 2

#: How many times its measured hop cost the packet windows give each hop: the relays run at
#: utilisation 1/2 of the capacity the probe measured, so a queue that forms drains within its
#: stage, and a load that doubles between the probe and the round still fits (:func:`packet_windows`).
WINDOW_HEADROOM = 2.0

#: The proposal's features: name → public range for the first two weeks. Narrower
#: than the featurizer's generous declared ranges (a proposer may know its course);
#: peers clip into them, and they bound the median search.
DEMO_FEATURES: dict[str, tuple[float, float]] = {
    "time_on_site_minutes": (0.0, 600.0),
    "video_seconds_watched": (0.0, 10_800.0),
    "seq_navigations": (0.0, 100.0),
    "distinct_problems": (0.0, 20.0),
}


@dataclass
class SimulatedPeer:
    """One simulated student: its store, identity, ledger, and (for scoring only) true example."""

    username: str
    store: EventStore
    identity: Identity
    ledger: PrivacyLedger
    x: np.ndarray
    y: int


@dataclass
class DemoResult:
    """What the demo did, what it cost in privacy, and how well the model predicts dropout."""

    students: int
    peers: int
    held_out: int
    events_imported: int
    examples: int
    dropout_rate: float
    features: list[str]
    epsilon: float
    auc: float
    auc_central: float
    auc_simulation: tuple[float, float]
    epsilon_per_peer: dict[str, float]
    packets_sent: int
    packets_relayed: int
    tokens_issued: int
    tokens_verified: int
    median_answers: int
    rejects: dict[str, int]
    relay_rejects: dict[str, int]
    problem_id: str
    witness_log: int = 0
    phase_seconds: dict[str, float] = field(default_factory=dict)
    median_pool: int = 0
    reports: ReportAccount | None = None
    phase: str = ProblemPhase.DONE
    message: str = ""
    max_loss_fraction: float = 0.1
    #: AUC mean and sd of the in-process computation given this run's own plan and
    #: published bins (only the peers' perturbation drawn afresh); None when not computed.
    auc_same_run: tuple[float, float] | None = None
    #: The peer host's measured wall seconds per relay hop before the round (None: windows given).
    hop_seconds: float | None = None
    #: The round's send and release windows as the aggregator fixed them (seconds).
    packet_windows: tuple[float, float] | None = None
    #: The held-out AUC as the aggregator scored its own model on the held-out students' rows
    #: (``POST /problems/{id}/evaluation``, what its console shows); None when not scored.
    auc_aggregator: float | None = None

    def shortfalls(self) -> list[str]:
        """Why the protocol's run fell short of what it should compute (empty: it did not).

        Short when the median pool answered nothing (the bins fell back to
        equal-width cuts), when more than ``max_loss_fraction`` of the expected
        reports were lost, when the problem ended anything but ``done``, or when
        the protocol's AUC is below the lower range (mean − 3 standard
        deviations, and at least 0.02 below the mean) of the in-process
        simulation — either the whole computation's, or, sharper, the one
        given this run's own plan and bins (:attr:`auc_same_run`), which a
        report round that lost or garbled nothing matches up to the peers'
        perturbation whatever bins the median search found.
        """
        out: list[str] = []
        if self.phase != ProblemPhase.DONE:
            out.append(f"the problem ended {self.phase!r}: {self.message or 'no message'}")
        if self.median_pool > 0 and self.median_answers == 0:
            out.append(
                f"none of the {self.median_pool} median-pool peers answered a median query, so the bins "
                "are equal-width cuts of the declared ranges, not private medians"
            )
        if self.reports is not None and self.reports.lost_fraction > self.max_loss_fraction:
            out.append(f"{self.reports.describe()}, more than the {self.max_loss_fraction:.0%} allowed")
        ranges = [("in-process simulation", self.auc_simulation)]
        if self.auc_same_run is not None:
            ranges.append(("in-process run with the same plan and bins", self.auc_same_run))
        if self.auc_aggregator is not None and abs(self.auc_aggregator - self.auc) > 1e-9:
            out.append(
                f"the aggregator scored its model at AUC {self.auc_aggregator:.6f} on the held-out rows, "
                f"the demo at {self.auc:.6f}: not the same model or not the same rows"
            )
        for name, (mean, sd) in ranges:
            floor = mean - max(3 * sd, 0.02)
            if self.auc < floor:
                out.append(
                    f"the protocol's held-out AUC {self.auc:.3f} is below the {name}'s range "
                    f"({mean:.3f} ± {sd:.3f}, floor {floor:.3f})"
                )
        return out

    def explanation(self) -> str:
        """One paragraph saying the run fell short, and why (empty when :meth:`shortfalls` is)."""
        why = self.shortfalls()
        if not why:
            return ""
        return (
            f"THE PROTOCOL RUN FELL SHORT (problem {self.problem_id}): "
            + "; ".join(why)
            + ". The table above is what happened, not what AnonML computes on a healthy run; "
            "this usually means the machine was too loaded for the protocol's schedule "
            "(peers not ready in time, deliveries late). Rerun with fewer --students or on a quieter machine."
        )

    def rows(self) -> list[tuple[str, str]]:
        """``(what, value)`` lines for a two-column table."""
        mean, sd = self.auc_simulation
        eps = self.epsilon_per_peer
        rows = [
            ("students simulated (one event store each)", f"{self.students:,}"),
            ("events imported (edx importer)", f"{self.events_imported:,}"),
            ("peers in the protocol / held out for scoring", f"{self.peers:,} / {self.held_out:,}"),
            ("dropout rate", f"{self.dropout_rate:.1%}"),
            ("features", ", ".join(self.features)),
            (
                "median answers (binary randomised response)",
                f"{self.median_answers:,} of pool {self.median_pool:,}",
            ),
            ("tokens issued / verified at intake", f"{self.tokens_issued:,} / {self.tokens_verified:,}"),
            ("packets sent by peers (3-hop onions, cover included)", f"{self.packets_sent:,}"),
            ("packets relayed (hops processed)", f"{self.packets_relayed:,}"),
            ("transcripts co-signed by the witness (its log)", f"{self.witness_log:,}"),
            (
                "reports expected / received / lost",
                "not counted"
                if self.reports is None
                else f"{self.reports.expected:,} / {self.reports.received:,} / {self.reports.describe()}",
            ),
            (
                "relay cost per hop measured before the round",
                "not measured (windows given)"
                if self.hop_seconds is None
                else f"{self.hop_seconds * 1e3:.1f} ms",
            ),
            (
                "send / release window",
                "not known"
                if self.packet_windows is None
                else "{:.1f} s / {:.1f} s".format(*self.packet_windows),
            ),
            ("problem's final phase", self.phase + (f" ({self.message})" if self.message else "")),
            ("rejects at the aggregator", _counts(self.rejects)),
            ("rejects at the relays", _counts(self.relay_rejects)),
            (
                "ε per peer (ledgers: min / mean / max)",
                f"{eps['min']:.3g} / {eps['mean']:.3g} / {eps['max']:.3g} of ε = {self.epsilon:g}",
            ),
            ("held-out AUC: AnonML over the protocol", f"{self.auc:.3f}"),
            (
                "held-out AUC: as the aggregator's console scores it",
                "not scored" if self.auc_aggregator is None else f"{self.auc_aggregator:.3f}",
            ),
            ("held-out AUC: same computation simulated in-process", f"{mean:.3f} ± {sd:.3f}"),
            (
                "held-out AUC: in-process with this run's plan and bins",
                "not computed" if self.auc_same_run is None else "{:.3f} ± {:.3f}".format(*self.auc_same_run),
            ),
            ("held-out AUC: non-private logistic regression", f"{self.auc_central:.3f}"),
        ]
        rows += [(f"time: {phase}", f"{seconds:.2f} s") for phase, seconds in self.phase_seconds.items()]
        return rows


def packet_windows(
    n_peers: int, *, hops: int, slots_per_peer: int, hop_seconds: float
) -> tuple[float, float]:
    """The send and release windows (seconds) for a round whose relays sustain one hop per ``hop_seconds``.

    Requirement: every packet of the round reaches its first hop inside the send
    window, and each of the ``h`` release stages (:mod:`peer.relay`) carries all
    ``m = n · k_h · r`` packets (``slots_per_peer`` = k_h·r: each slot travels over
    r routes) one hop before the next stage begins — else packets queue past
    their stage and reach a relay after ``t_r`` ("late"). The demo's single host
    relays for every identity on one interpreter, so its cost per hop ``c``
    (:func:`peer.probe.measure_hop_seconds`: wall seconds per relay request it
    sustained just before the round, under whatever load the machine has) is
    serial (the demo keeps the slowest of :data:`DEMO_PROBES` probes). With
    ``L = WINDOW_HEADROOM · c`` these are the floors of
    :func:`anonml.schedule.schedule_floors` for the packet windows:

    * send window ``δ = r + m L``;
    * release window ``r + (3/2) h m L`` (the stages share the two thirds of the
      window before the relays' guard);

    with ``r`` = :data:`DEMO_POLL_SECONDS`. A fixed 6 s release window (2 s guard,
    three stages of 1.33 s for 300 packets each) holds only ``c`` ≤ 4.4 ms and lost
    145–182 of 225 reports beside two busy loops; measured there at load 10–12 on
    2 cores, ``c`` = 7.1 ms gave 4.5 s and 19.4 s and all 225 reports arrived.
    """
    floors = schedule_floors(
        n_peers,
        hops=hops,
        slots_per_peer=slots_per_peer,
        request_seconds=WINDOW_HEADROOM * hop_seconds,
        reaction_seconds=DEMO_POLL_SECONDS,
    )
    return floors.send_window_seconds, floors.release_window_seconds


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) or "none"


def dropout_draft(
    featurizer_specs: Sequence[FeatureSpec],
    *,
    history_weeks: int,
    weeks: int,
    epsilon: float,
    min_peers: int,
    registration_seconds: float = 60.0,
    roster_seconds: float = 2.0,
    median_step_seconds: float = 3.0,
    report_delay_seconds: float = 3.0,
    send_window_seconds: float = 3.0,
    release_window_seconds: float = 3.0,
    pool_fraction: float = 0.25,
    median_steps: int | None = None,
    witnesses: Sequence[WitnessRef] = (),
    witness_seconds: float = 10.0,
) -> ProblemDraft:
    """The MOOC dropout problem: active in the first weeks, silent until ``weeks`` → dropout.

    One single-feature partition per feature (k_p = F, k_h = k_s = 1): each
    report peer spends its whole ε on one feature and the label, which at
    these sizes beats splitting its budget over several reports. The median
    search takes the learning library's simulation defaults (steps, confidence)
    unless ``median_steps`` is given, so the two compute the same thing.
    ``witnesses`` are declared in the proposal; the aggregator collects their
    cosignatures within ``witness_seconds`` after the roster and the bins.
    ``roster_seconds`` is the time every peer has, between the co-signed
    roster and the first median query, to check the roster and its
    cosignatures and compare fingerprints: with hundreds of identities in one
    process on a busy 2-core machine this takes seconds (:func:`run_demo`
    gives 10 s: at 2 s the median pool of the 300-peer demo answered nothing
    there and the bins fell back to equal-width cuts).
    """
    defaults = {f.name: f.default for f in fields(SimulationConfig)}
    steps = median_steps if median_steps is not None else int(defaults["median_steps"])
    declared = {spec.name: spec for spec in featurizer_specs}
    features = tuple(
        FeatureSpec(name=name, low=low, high=high, description=declared[name].description)
        for name, (low, high) in DEMO_FEATURES.items()
    )
    return ProblemDraft(
        title="Will a student drop out of the MOOC?",
        description=f"Label 1: active in the first {history_weeks} weeks, inactive until week {weeks}.",
        instancer=PluginRef(
            name="user_window",
            version="1.0",
            params={"history_periods": history_weeks, "label_start": history_weeks, "label_end": weeks},
        ),
        featurizer=PluginRef(name="mooc_engagement", version="1.0", params={"weeks": history_weeks}),
        features=features,
        epsilon=epsilon,
        kp=len(features),
        kh=1,
        ks=1,
        bins=2,
        median=MedianSettings(
            pool_fraction=pool_fraction, steps=steps, confidence=float(defaults["median_confidence"])
        ),
        schedule=Schedule(
            registration_deadline=datetime.now(UTC) + timedelta(seconds=registration_seconds),
            roster_seconds=roster_seconds,
            median_step_seconds=median_step_seconds,
            report_delay_seconds=report_delay_seconds,
            send_window_seconds=send_window_seconds,
            release_window_seconds=release_window_seconds,
            witness_seconds=witness_seconds,
        ),
        min_peers=min_peers,
        hops=DEMO_HOPS,
        witnesses=tuple(witnesses),
    )


def _scratch_parent() -> str | None:
    # Hundreds of small SQLite files: on tmpfs their fsyncs cost nothing.
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def simulate_peers(
    students: int,
    root: Path,
    *,
    weeks: int,
    history_weeks: int,
    seed: int,
    features: Sequence[str],
    progress: Progress | None = None,
    shared: bool = False,
) -> tuple[list[SimulatedPeer], int]:
    """Simulate students and import each one's log into its own store (with its own keys and ledger).

    Also computes each student's true example (for the non-private reference and
    for scoring; the peers compute their own again inside the protocol).
    ``shared``: one event store and one ledger file for all the students
    instead of two files each (each student's events still under its own
    user, each identity's releases under its own fingerprint): opening a
    SQLite file and bringing its schema up to date costs about 0.1 s, which
    at 10,000 students is most of the preparation. Every identity still
    computes its own example from its own events and keeps its own budget.

    Returns
    -------
    peers : list of SimulatedPeer
        Students with an example (active in the history window), in username order.
    events : int
        Events imported over all stores.
    """
    sim = simulate_students(students, weeks=weeks, seed=seed)
    logs = write_edx_logs(sim, root / "logs")
    importer = create("importer", "edx")
    instancer = create(
        "instancer",
        PluginRef(
            name="user_window",
            params={"history_periods": history_weeks, "label_start": history_weeks, "label_end": weeks},
        ),
    )
    featurizer = create("featurizer", PluginRef(name="mooc_engagement", params={"weeks": history_weeks}))
    names = [spec.name for spec in featurizer.features()]
    columns = [names.index(f) for f in features]
    rng = generator_from(seed, name="seed")
    stores = root / "stores"
    stores.mkdir(parents=True, exist_ok=True)
    peers, events = [], 0
    common: tuple[EventStore, PrivacyLedger] | None = None
    if shared:
        common = (
            EventStore(f"sqlite:///{stores / 'events.db'}"),
            PrivacyLedger(f"sqlite:///{stores / 'ledger.db'}"),
        )
        events = sum(r.inserted for r in common[0].import_files([(log.path, importer, None) for log in logs]))
    for i, log in enumerate(logs):
        if common is not None:
            store = common[0]
        else:
            store = EventStore(f"sqlite:///{stores / (log.username + '.db')}")
            events += store.import_file(log.path, importer).inserted
        rows = featurize_dataset(store.dataset(log.username), instancer, featurizer)
        if rows:
            ledger = (
                common[1]
                if common is not None
                else PrivacyLedger(f"sqlite:///{stores / (log.username + '-ledger.db')}")
            )
            x = np.asarray([rows[0].values[c] for c in columns], dtype=float)
            peers.append(
                SimulatedPeer(log.username, store, Identity.generate(rng), ledger, x, int(rows[0].label))
            )
        elif common is None:
            store.close()
        if progress is not None:
            progress("import", i + 1, len(logs))
    return peers, events


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


def _clip(x: np.ndarray, specs: Sequence[FeatureSpec]) -> np.ndarray:
    lows = np.asarray([s.low for s in specs], dtype=float)
    highs = np.asarray([s.high for s in specs], dtype=float)
    return np.clip(x, lows, highs)


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
    witness_log: int
    #: Roster members' public keys in roster order, and the plan they were assigned by.
    members: list[bytes]
    plan: PartitionPlan


def _roster_plan(url: str, pid: str, draft: ProblemDraft) -> tuple[list[bytes], PartitionPlan]:
    """The published roster's members and the plan every party derives from it and its witnesses' beacon."""
    client = AggregatorClient(url)
    roster, bundle = client.roster(pid), client.cosignatures(pid, "roster")
    members = [bytes(e.identity) for e in roster.entries]
    plan = roster_plan(draft, roster, roster_beacon(bundle.cosignatures))
    return members, plan


def _split_held_out(
    everyone: list[SimulatedPeer], fraction: float, seed: int
) -> tuple[list[SimulatedPeer], list[SimulatedPeer]]:
    """(peers, held out): a seeded ``fraction`` of the students scores the models; their stores close."""
    order = generator_from(seed, name="seed").permutation(len(everyone))
    n_held = int(round(fraction * len(everyone)))
    held = [everyone[i] for i in sorted(order[:n_held])]
    peers = [everyone[i] for i in sorted(order[n_held:])]
    for p in held:
        p.store.close()
    return peers, held


def _start_services(
    root: Path, peers: list[SimulatedPeer], epsilon: float, report_delay_seconds: float
) -> _Services:
    """Start the witness and the aggregator (own processes) and one host serving every peer."""
    from aggregator.app import start_server_process
    from aggregator.settings import AggregatorSettings
    from peer.app import start_peer_server
    from peer.db import PeerDB
    from peer.host import PeerHost
    from peer.participant import PeerNode
    from peer.policy import PeerPolicy
    from witness import start_witness_process

    token = "demo-" + os.urandom(8).hex()
    agg_settings = AggregatorSettings(
        db_url=f"sqlite:///{root / 'aggregator.db'}",
        identity_file=root / "aggregator-identity.json",
        admin_token=token,
        intake_grace_seconds=max(1.0, report_delay_seconds / 2),
        port=0,
        allow_loopback_http=True,  # every service of the demo is on this machine
        peer_poll_seconds=DEMO_POLL_SECONDS,  # the round's waits are sized for the hosts' polling
    )
    witness = start_witness_process(root / "witness")  # independent of the aggregator
    try:
        aggregator = start_server_process(agg_settings)  # its own process: the second core
    except BaseException:
        witness.stop()
        raise
    nodes = [PeerNode(p.identity, p.store, p.ledger, user=p.username) for p in peers]
    host = PeerHost(
        nodes,
        PeerDB(f"sqlite:///{root / 'peers.db'}"),
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
    return _Services(witness, aggregator, host, peer_server, token, agg_settings.max_loss_fraction)


def _demo_draft(
    services: _Services,
    n_peers: int,
    history_weeks: int,
    weeks: int,
    epsilon: float,
    windows: tuple[float, float, float, float, float],
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
        witness_seconds=max(2.0, report_delay),
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
        return s.registered >= sum(1 for p in session.participants if p.status != "aborted")

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
    witness_log = len(requests.get(f"{services.witness.url}/log", params={"limit": 1000}, timeout=30).json())
    members, plan = _roster_plan(url, pid, draft)
    return _ProtocolRun(
        pid,
        draft,
        status,
        document,
        dict(services.host.relay.counters),
        int(services.host.counters["packets sent"]),
        witness_log,
        members,
        plan,
    )


def _score(
    run: _ProtocolRun,
    peers: list[SimulatedPeer],
    held: list[SimulatedPeer],
    seed: int,
    simulation_runs: int,
) -> tuple[float, float, list[float], list[float]]:
    """Held-out AUCs of the published model, a non-private model and ``simulation_runs`` simulations, twice.

    The simulations are the learning library's in-process run of the same computation
    (:func:`~anonml.learn.settings.simulated_learner`: same plan shape, ε, bins, median pool)
    on the same peers: the range the protocol should hit. The first set draws
    everything afresh (plan, median search, perturbation); the second keeps the
    run's own plan and published bins and draws only the perturbation, which
    separates a report round that fell short from bins the median search's
    noise placed badly (with a few peers per question that alone moves the
    AUC by several of the first set's standard deviations).
    """
    draft, document = run.draft, run.document
    specs = list(draft.features)
    X_train = _clip(np.asarray([p.x for p in peers]), specs)
    y_train = np.asarray([p.y for p in peers])
    X_test = _clip(np.asarray([p.x for p in held]), specs)
    y_test = np.asarray([p.y for p in held])
    model = AnonMLClassifier.from_json(json.dumps(document.model))
    auc = float(roc_auc_score(y_test, model.predict_proba(X_test)[:, 1]))
    simulated = []
    for r in range(simulation_runs):
        learner = simulated_learner(draft, random_state=seed + r).fit(X_train, y_train)
        simulated.append(float(roc_auc_score(y_test, learner.predict_proba(X_test)[:, 1])))
    by_key = {bytes(p.identity.public): i for i, p in enumerate(peers)}
    rows = [by_key[key] for key in run.members]  # every roster member is one of the demo's peers
    same_run = []
    for r in range(simulation_runs):
        learner = simulated_learner(draft, random_state=seed + r).fit(
            X_train[rows], y_train[rows], plan=run.plan, binning=model.binning_
        )
        same_run.append(float(roc_auc_score(y_test, learner.predict_proba(X_test)[:, 1])))
    central = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(X_train, y_train)
    auc_central = float(roc_auc_score(y_test, central.predict_proba(X_test)[:, 1]))
    return auc, auc_central, simulated, same_run


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
    X = _clip(np.asarray([p.x for p in held]), specs)
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
    roster_seconds: float = 10.0,
    median_step_seconds: float = 20.0,
    workdir: Path | None = None,
    progress: Progress | None = None,
) -> DemoResult:
    """Run the whole protocol on loopback (module docstring) and return what happened.

    ``report_delay_seconds`` is the time the peers have to build their packets
    (raised by the aggregator to its measured floor); ``windows`` the send and
    release windows, or None to size them from the peer host's measured cost per
    relay hop just before the round (:func:`packet_windows`; fixed windows lost
    most reports beside two busy CPU loops); ``roster_seconds`` the peers' time to
    check the co-signed roster before the first median query
    (:func:`dropout_draft`); ``median_step_seconds`` bounds one median step,
    which ends as soon as its whole group answered (so a generous bound costs
    nothing on a quiet machine and keeps answers coming under load); ``progress`` is an optional callable
    ``(phase: str, done: int, total: int)``.
    """
    timer: dict[str, float] = {}
    report = progress or (lambda phase, done, total: None)
    with tempfile.TemporaryDirectory(prefix="anonml-demo-", dir=_scratch_parent()) as scratch:
        root = Path(workdir) if workdir is not None else Path(scratch)
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
        peers, held = _split_held_out(everyone, held_out_fraction, seed)

        t = time.perf_counter()
        services = _start_services(root, peers, epsilon, report_delay_seconds)
        timer["start services"] = time.perf_counter() - t
        try:
            hop_seconds = None
            if windows is None:
                from peer.probe import measure_hop_seconds

                t = time.perf_counter()
                hop_seconds = max(
                    measure_hop_seconds(services.host, hops=DEMO_HOPS).seconds_per_hop
                    for _ in range(DEMO_PROBES)
                )
                # k_h = 1 (dropout_draft): every member sends one slot, a report or cover, over
                # route_count routes — each route's copy is a packet the relays carry.
                copies = route_count(DEFAULT_ROUTES, DEMO_HOPS, len(peers))
                windows = packet_windows(
                    len(peers), hops=DEMO_HOPS, slots_per_peer=copies, hop_seconds=hop_seconds
                )
                timer["relay probe"] = time.perf_counter() - t
            sizes = (report_delay_seconds, *windows, roster_seconds, median_step_seconds)
            draft = _demo_draft(services, len(peers), history_weeks, weeks, epsilon, sizes)
            run = _run_protocol(services, draft, len(peers), timer, report)
            auc_aggregator = _aggregator_score(services, run, held)
        finally:
            services.stop()
            for p in peers:
                p.store.close()

        t = time.perf_counter()
        scores = _score(run, peers, held, seed, simulation_runs)
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
