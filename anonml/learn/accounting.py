"""What a simulated fit's peers released, and what that guarantees: :class:`PrivacyAccounting`.

Sound accounting (DESIGN §5): a report peer releases k_h reports of ε_T/k_h
each, total ε_T by sequential composition; a median-pool peer answers one
question with ε_T; a calibration-pool peer sends one report with ε_T. The pools
are disjoint, so they compose in parallel and no peer exceeds ε_T. The releases
go through the ledger's own checks and composition capped at ε_T
(:func:`anonml.privacy.ledger.releases_within_cap`; one representative per report
partition and per median step: their members release exactly the same things),
and the reported figure is the headline, the largest per-peer total
(:func:`account_releases`).

Beside it, a conditional statement: the central (ε, δ) of the *unlinkable*
pools (report and calibration) under shuffling (:func:`unlinkable_pools`,
DESIGN §11); the median pool's signed answers are outside it.

A fit that read the raw rows outside the mechanisms (a range or categories
taken from the data, or a fit inside a model-selection routine) guarantees
nothing: :func:`warn_not_private` says so and :func:`mark_not_private` records
it (``private=False`` and why).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from typing import Any

from pydantic.dataclasses import dataclass as pydantic_dataclass

from anonml.learn.calibration import CALIBRATION_BINS, class_map_groups
from anonml.learn.notices import NotPrivateWarning
from anonml.learn.partition import PartitionPlan
from anonml.learn.selection import ModelSelection
from anonml.learn.simulation_config import SimulationConfig
from anonml.model import FeatureSpec
from anonml.privacy import Mechanism, ReleaseSpec, best_mechanism
from anonml.privacy.amplification import CentralTarget, ShuffleBound, unlinkable_pools_bound
from anonml.privacy.budget import problem_budget
from anonml.privacy.ledger import releases_within_cap
from anonml.records import JsonRecord

__all__ = [
    "PrivacyAccounting",
    "account_releases",
    "unlinkable_pools",
    "warn_not_private",
    "mark_not_private",
]


@pydantic_dataclass(frozen=True)
class PrivacyAccounting(JsonRecord):
    """What the simulated peers released (sequential composition per peer).

    Attributes
    ----------
    epsilon_total : float
        Largest total ε of any peer, from the ledger (the headline guarantee).
    report_epsilon : float
        ε of one report (ε_T / k_h).
    reports_per_peer : int
        k_h.
    report_peers, median_peers : int
        Peers in the report partitions and peers that answered a median question.
    median_epsilon : float
        ε of one median answer.
    calibration_peers : int
        Peers of the calibration pool (one (score bin, label) report each, at ε_T).
    private : bool
        False when the fit read the raw rows outside the mechanisms (feature
        ranges or categories taken from the data, or a fit inside a
        model-selection routine): then no ε here is a guarantee.
    data_derived : tuple of str or None
        The features whose range or categories were read from the rows
        (:attr:`FeatureSpec.from_data <anonml.model.FeatureSpec.from_data>`).
    selection : ModelSelection or None
        The model-selection routine this fit was one of, with the ε_T of every
        fit of it that is known (:mod:`anonml.learn.selection`).
    shuffle : ShuffleBound or None
        The central (ε, δ) the aggregator's view of the *unlinkable* reports also
        satisfies if they are unlinkable within each partition
        (:func:`~anonml.privacy.amplification.unlinkable_pools_bound`, the
        protocol's computation): it covers the report pool and the calibration
        pool (whose one (score bin, label) report per peer is an anonymous LDP
        report like a report-pool one, so it is modelled as shuffled among the
        pool), never the median pool, whose answers are signed (DESIGN §11):
        ``shuffle.peers_outside`` (= ``median_peers`` here) peers keep only their
        local ε. A protocol round's calibration answers are signed too
        (``aggregator.calibration``), so a published model counts its pool
        outside as well. None when a partition holds fewer than 2 peers. An extra,
        conditional statement — the local ε stays the headline.
    central_target : CentralTarget or None
        With a central target (``central_epsilon=(ε, δ)``): the target, the
        local ε chosen for it, the central ε the fit's groups give at that δ,
        and the assumptions it rests on. None otherwise.
    """

    epsilon_total: float
    report_epsilon: float
    reports_per_peer: int
    report_peers: int
    median_peers: int
    median_epsilon: float
    calibration_peers: int = 0
    private: bool = True
    shuffle: ShuffleBound | None = None
    data_derived: tuple[str, ...] | None = None
    selection: ModelSelection | None = None
    central_target: CentralTarget | None = None


def unlinkable_pools(
    config: SimulationConfig, smallest_partition: int, calibration_peers: int
) -> dict[str, tuple[float, int, int]]:
    """The (ε₀, reports per peer, fewest per group) of the report pool and, if any, the calibration pool."""
    pools = {
        "report": (float(config.epsilon / config.n_subsets), int(config.n_subsets), int(smallest_partition))
    }
    if calibration_peers:
        # K ≥ 3: the pool reports in two groups of different questions (calibrate_classes); the
        # smaller is the one each report hides among.
        fewest = min(class_map_groups(calibration_peers)) if config.n_classes > 2 else calibration_peers
        pools["calibration"] = (float(config.epsilon), 1, int(fewest))
    return pools


def _report_releases(
    names: Sequence[str], stages: Sequence[tuple[PartitionPlan, Sequence[Mechanism]]]
) -> list[ReleaseSpec]:
    """One ledger release per report of one representative per (stage, partition): its subset's
    features and the label, under the mechanism and ε the stage chose for that report."""
    specs: list[ReleaseSpec] = []
    for stage, (stage_plan, mechanisms) in enumerate(stages):
        reports = iter(mechanisms)
        for p in range(stage_plan.n_partitions):
            for subset in stage_plan.subsets[p]:
                mechanism = next(reports)
                specs.append(
                    ReleaseSpec(
                        peer=f"report-stage-{stage}-partition-{p}",
                        problem="simulation",
                        round=1,
                        attributes=(*(names[f] for f in subset), "label"),
                        mechanism=mechanism.kind,
                        epsilon=mechanism.epsilon,
                        pool="report",
                    )
                )
    return specs


def _median_releases(names: Sequence[str], estimates: dict[int, Any]) -> list[ReleaseSpec]:
    """One ledger release per median search step (its members all answer the same question)."""
    return [
        ReleaseSpec(
            peer=f"median-{names[j]}-step-{step.step}",
            problem="simulation",
            round=0,
            attributes=(names[j],),
            mechanism="binary_rr",
            epsilon=estimate.epsilon,
            pool="median",
        )
        for j, edges in estimates.items()
        for estimate in edges.estimates
        for step in estimate.steps
    ]


def account_releases(
    stages: Sequence[tuple[PartitionPlan, Sequence[Mechanism]]],
    plan: PartitionPlan,
    features: Sequence[FeatureSpec],
    config: SimulationConfig,
    answered: int,
    estimates: dict[int, Any],
    calibration_peers: int = 0,
) -> PrivacyAccounting:
    """Check the simulated releases against a ledger's cap of ε_T and compose the totals.

    All members of one report partition make the same releases (same subsets,
    mechanisms and ε), as do all members of one median step, so one
    representative per partition and per step carries every peer's total; the
    ledger's checks (:func:`~anonml.privacy.ledger.releases_within_cap`) refuse any
    that would pass ε_T with :class:`~anonml.errors.BudgetExceeded`.
    """
    names = [f.name for f in features]
    specs = _report_releases(names, stages)
    median_specs = _median_releases(names, estimates)
    specs.extend(median_specs)
    median_epsilon = float(median_specs[-1].epsilon) if median_specs else float(config.epsilon)
    if calibration_peers and config.n_classes > 2:
        k = int(config.n_classes)
        n_map, _ = class_map_groups(calibration_peers)
        map_mechanism = best_mechanism(config.epsilon, k * k, n_map).kind
        for peer, attributes, mechanism in (
            ("calibration-map", ("predicted class", "label"), map_mechanism),
            ("calibration-choice", ("log-loss changes",), "hybrid"),
        ):
            specs.append(
                ReleaseSpec(
                    peer=peer,
                    problem="simulation",
                    round=2,
                    attributes=attributes,
                    mechanism=mechanism,
                    epsilon=float(config.epsilon),
                    pool="calibration",
                )
            )
    elif calibration_peers:
        specs.append(
            ReleaseSpec(
                peer="calibration-pool",
                problem="simulation",
                round=2,
                attributes=("score", "label"),
                mechanism=best_mechanism(config.epsilon, 2 * CALIBRATION_BINS, calibration_peers).kind,
                epsilon=float(config.epsilon),
                pool="calibration",
            )
        )
    headline = problem_budget(releases_within_cap(specs, config.epsilon), "simulation").headline
    # DESIGN §11: only unlinkable reports hide among their partition; signed median answers do not.
    smallest = min(stage_plan.smallest_partition() for stage_plan, _ in stages)
    pools = unlinkable_pools(config, smallest, calibration_peers)
    shuffle = unlinkable_pools_bound(pools, peers_outside=int(answered), delta=config.shuffle_delta)
    return PrivacyAccounting(
        epsilon_total=float(headline),
        report_epsilon=float(config.epsilon / config.n_subsets),
        reports_per_peer=int(config.n_subsets),
        report_peers=int(plan.order.size - plan.median_pool_size),
        median_peers=int(answered),
        median_epsilon=median_epsilon,
        calibration_peers=int(calibration_peers),
        shuffle=shuffle,
    )


def warn_not_private(derived: Sequence[str], selection: ModelSelection | None, cloned: bool) -> None:
    """:class:`NotPrivateWarning` for data-derived specs, and for a fit inside model selection.

    A clone made by a model-selection routine has warned already, in the
    routine's process (:class:`~anonml.learn.selection.SelectionAware`).
    Called from ``fit`` itself: ``stacklevel=3`` points the warning at the line that called ``fit``.
    """
    if derived:
        warnings.warn(
            f"the range or categories of feature(s) {list(derived)} were read from the rows "
            f"(ranges='from-data' or FeatureSpec(from_data=True)), not declared in public: the model is "
            f"not private (privacy_.private is False, privacy_.data_derived names them); declare "
            f"public ranges with infer_feature_specs(X, ranges={{name: (low, high)}}) instead",
            NotPrivateWarning,
            stacklevel=3,
        )
    if selection is not None and not cloned:
        warnings.warn(
            f"AnonMLClassifier fitted inside {selection.wrapper}: model selection fits each row many "
            f"times and scores candidates on raw rows, so it is not private (privacy_.private is False; "
            f"{selection.note})",
            NotPrivateWarning,
            stacklevel=3,
        )


def mark_not_private(
    accounting: PrivacyAccounting, derived: Sequence[str], selection: ModelSelection | None
) -> PrivacyAccounting:
    """The accounting with ``private=False`` and why: specs read from the rows, or model selection."""
    if not derived and selection is None:
        return accounting
    return dataclasses.replace(
        accounting,
        private=False,
        data_derived=tuple(derived) or accounting.data_derived,
        selection=selection or accounting.selection,
    )
