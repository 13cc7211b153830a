"""The dropout problem ``anonml demo`` proposes, and the waits of its round sized from measured costs.

:func:`dropout_draft` is the MOOC dropout problem (one single-feature partition
per feature); :func:`packet_windows` sizes the round's send and release
windows from the peer host's measured cost per relay hop
(:mod:`peer.probe`). The constants are the demo's own settings, each with the
requirement it comes from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from anonml.learn import SimulationConfig
from anonml.model import FeatureSpec
from anonml.plugins import PluginRef
from anonml.protocol import DEFAULT_ROUTES, MedianSettings, ProblemDraft, Schedule, WitnessRef
from anonml.schedule import schedule_floors

if TYPE_CHECKING:
    from peer.host import PeerHost

__all__ = [
    "DEMO_FEATURES",
    "DEMO_HOPS",
    "DEMO_MEDIAN_POOL_FRACTION",
    "DEMO_MEDIAN_STEPS",
    "DEMO_POLL_SECONDS",
    "DEMO_PROBES",
    "DEMO_REPORT_DELAY_SECONDS",
    "DEMO_ROSTER_SECONDS",
    "DEMO_ROUTES",
    "DEMO_WITNESS_SECONDS",
    "WINDOW_HEADROOM",
    "dropout_draft",
    "packet_windows",
    "probed_hop_seconds",
]

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

#: The roster wait the demo proposes: ``2r``, the least any wait takes (a poll to see the roster, one
#: to see the first median query). The aggregator raises it to its floor ``2r + n M``
#: (:func:`anonml.schedule.schedule_floors`: every member checks the roster and compares its
#: fingerprint, as much work as registering, at ``M`` measured per registration), which grows with
#: the roster and the load. The 10 s proposed before were fixed when a fixed 2 s left the median pool
#: answering nothing (the floors and the host's one roster check for all its identities came
#: after); a member still checking when a median step begins answers within the step's bound.
DEMO_ROSTER_SECONDS = 2 * DEMO_POLL_SECONDS

#: Seconds the aggregator allows the demo's witness to co-sign the roster and, later, the bins
#: (``Schedule.witness_seconds``; the bins' part is a fixed wait before ``t_s``). One co-signature is
#: one request to the witness's own process: the roster's took 0.19-0.7 s at load 15-24 on 2 cores
#: (``roster co-signed`` in the demo's timings), so 3 s holds four times the slowest seen.
DEMO_WITNESS_SECONDS = 3.0

#: Routes each report travels over in the demo: one. Redundant routes (:data:`anonml.protocol.DEFAULT_ROUTES`)
#: deliver a report whose first route died with a relay host; the demo's relays are all on its one
#: peer host, so a second route shares every failure of the first, and its copies would double the
#: packets ``m`` the send and release windows and the report delay must hold (:func:`packet_windows`).
DEMO_ROUTES = 1

#: How many times its measured hop cost the packet windows give each hop: the relays run at
#: utilisation 1/4 of the capacity the probe measured, so a queue that forms drains within its
#: stage, and a load that quadruples between the probe and the round still fits (:func:`packet_windows`).
#: At 2, beside ``stress-ng --cpu 2``, a probe taken as the stressors' load was still building
#: measured 5.2 ms per hop and the round lost 50 of 225 reports (windows 3.3 s and 14.2 s); probes
#: of 6.4 and 7.2 ms in the same conditions lost none (4.0 / 17.4 s and 4.5 / 19.7 s). At 3, CI's
#: run of tests/e2e/test_under_load.py (two busy loops beside four test workers on 2 cores, whose
#: load changes from test to test) lost 1 of 27 reports once.
WINDOW_HEADROOM = 4.0

#: Steps of the demo's median searches (``MedianSettings.steps``; the learning library's default is 3)
#: and the share of its peers in the median pool (``MedianSettings.pool_fraction``; 0.25 before). At 3
#: steps the pool of 75 gave each of the 4 features about 19 peers, 6 a question: at ε 3 a step of 6
#: answers still errs often enough that a third step, whose bracket is an eighth of the wide public
#: range, sometimes put a cut outside the students' values and the feature was lost. The simulated run
#: of the demo's own problem on the students of seeds 0-3 (held-out AUC, mean and sd over the draws;
#: 40 draws at 3 steps, 60 at 2): 0.782 / 0.765 / 0.783 / 0.799, sd 0.066 / 0.019 / 0.038 / 0.072, at
#: 3 steps and a 25 % pool; 0.798 / 0.766 / 0.798 / 0.820, sd 0.016 / 0.017 / 0.026 / 0.029, at 2 steps;
#: 0.809 / 0.772 / 0.804 / 0.833, sd 0.011 / 0.019 / 0.024 / 0.034, at 2 steps and a 35 % pool (105
#: peers, 13 a question), whose draws fall outside the demo's 0.03 of their mean 2 / 3 / 13 / 18 % of the
#: time against 30 / 12 / 28 / 42 % at 3 steps and 25 % (30 % of the peers: between the two). A run's
#: own bins are one such draw, so the demo's check that the protocol lands within 0.03 of the simulated
#: mean now fails less often, and the median phase is a step shorter.
DEMO_MEDIAN_STEPS = 2
DEMO_MEDIAN_POOL_FRACTION = 0.35

#: The proposal's features: name → public range for the first two weeks. Narrower
#: than the featurizer's generous declared ranges (a proposer may know its course);
#: peers clip into them, and they bound the median search.
DEMO_FEATURES: dict[str, tuple[float, float]] = {
    "time_on_site_minutes": (0.0, 600.0),
    "video_seconds_watched": (0.0, 10_800.0),
    "seq_navigations": (0.0, 100.0),
    "distinct_problems": (0.0, 20.0),
}


def probed_hop_seconds(host: PeerHost) -> float:
    """The wall seconds per relay hop ``host`` sustains now: the slowest of :data:`DEMO_PROBES`
    bursts over :data:`DEMO_HOPS` of its relays (:func:`peer.probe.measure_hop_seconds`), what
    :func:`packet_windows` sizes a round's windows from.

    One burst goes first and is not counted: a host's first relay round pays once for what its later
    ones reuse, and a window sized from it is sized for a cost the round does not have. On the quiet
    2-core machine, in two sequences of eight bursts right after the host started the first took 5.6 ms
    per hop in one (2.2 ms in the other) and the fourteen after them 2.0-2.8 ms; three ``anonml demo``
    runs that counted the first measured 6.0, 2.8 and 5.4 ms and their report rounds took 54.7, 31.6
    and 50.7 s.
    """
    from peer.probe import measure_hop_seconds  # the peer's relay stack: only when probing

    measure_hop_seconds(host, hops=DEMO_HOPS)  # the warm-up burst (docstring)
    return max(measure_hop_seconds(host, hops=DEMO_HOPS).seconds_per_hop for _ in range(DEMO_PROBES))


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
    routes: int = DEFAULT_ROUTES,
    witness_seconds: float = 10.0,
) -> ProblemDraft:
    """The MOOC dropout problem: active in the first weeks, silent until ``weeks`` → dropout.

    One single-feature partition per feature (k_p = F, k_h = k_s = 1): each
    report peer spends its whole ε on one feature and the label, which at
    these sizes beats splitting its budget over several reports. The median
    search takes the learning library's simulation defaults (steps, confidence)
    unless ``median_steps`` is given, so the two compute the same thing.
    ``routes``: copies of each report, each over its own route.
    ``witnesses`` are declared in the proposal; the aggregator collects their
    cosignatures within ``witness_seconds`` after the roster and the bins.
    ``roster_seconds`` is the time every peer has, between the co-signed
    roster and the first median query, to check the roster and its
    cosignatures and compare fingerprints: with hundreds of identities in one
    process on a busy 2-core machine this takes seconds, so :func:`run_demo`
    proposes :data:`DEMO_ROSTER_SECONDS` and leaves the wait to the
    aggregator's measured floor.
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
        routes=routes,
    )
