"""From stored reports to the published model (DESIGN §6, learning library).

Per (partition, subset, mechanism) the aggregator sums the reports' bit
vectors and debiases them with the mechanism that produced them,
``n̂ = (ñ − q·n)/(p − q)`` followed by the Norm-Sub consistency step
(:func:`anonml.learn.histograms.estimate_histogram`, thesis eq. 7.1). Honest
peers of one partition all choose the same least-error mechanism, so there is
one group per (partition, subset); a report made otherwise gets its own
histogram rather than being debiased with the wrong ``p, q``. The histograms
train the ensemble of the problem's ``mode`` (default: smoothed cell
posteriors; paper: thesis eq. 6.2 votes) with the settings
:func:`~anonml.learn.settings.learner_settings` reads from the draft (the ones
the demo's simulation uses too) and become an
:class:`~anonml.learn.model.AnonMLClassifier` with the published bins, which
serialises to versioned JSON.

The label is the draft's :class:`~anonml.protocol.LabelSpec`: every
histogram's label domain is its K, and the model's ``classes_`` are 0/1, the
class names, or the target bins 0..K−1 (a numeric label: the peer turns the
class probabilities into a value with the public bin midpoints). The model's
``privacy_`` carries the conditional shuffle bound of the report pool
(:func:`shuffle_statement`), computed from the reports that arrived in each
(partition, subset); with a draft's ``central_target`` it is computed at the
target's δ and ``privacy_.central_target`` states the target, the local ε,
the central ε those groups give and whether it is met.

A problem with a calibration pool (:meth:`~anonml.protocol.ProblemDraft.calibration_pool_size`)
has its pool's answers signed and sent directly, as median answers are: the shuffle bound covers the
report pool only, says so (:data:`~anonml.privacy.amplification.SIGNED_ANSWERS_NOT_SHUFFLED`),
and counts the calibration peers who answered among those outside it
(:func:`with_calibration_answers`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aggregator.state import DUPLICATE_COPY, ProblemContext, binning_of
from anonml.errors import ProtocolError
from anonml.phases import ROUND_PHASES, ProblemPhase
from anonml.privacy.descriptor import MechanismDescriptor
from anonml.protocol import (
    Bins,
    ModelDocument,
    Problem,
    ProblemDraft,
    ReportAccount,
    Roster,
    ShuffleStatement,
    unpack_bits,
)

if TYPE_CHECKING:
    import numpy as np

    from anonml.learn.accounting import PrivacyAccounting
    from anonml.learn.model import AnonMLClassifier
    from anonml.learn.partition import PartitionPlan
    from anonml.privacy.amplification import ShuffleBound

__all__ = [
    "ReportGroup",
    "group_reports",
    "train_problem",
    "binning_of",
    "account_reports",
    "delivery_window_open",
    "report_round_over",
    "report_peers",
    "expected_reports",
    "shuffle_statement",
    "with_calibration_answers",
    "publication_outcome",
]


#: Intake refusals that are not losses (the report they repeat was stored).
NOT_A_LOSS = frozenset({DUPLICATE_COPY})


def account_reports(
    report_peers: int,
    slots_per_peer: int,
    received: int,
    late: int,
    refused: dict[str, int],
    *,
    cover: int = 0,
    window_open: bool = False,
    routes: int = 1,
    routes_asked: int = 1,
) -> ReportAccount:
    """Reports expected / received / pending / lost and why (:class:`~anonml.protocol.ReportAccount`).

    ``expected = report_peers × slots_per_peer``. While the delivery window
    is open (``window_open``, :func:`delivery_window_open`) a report not
    received yet may still arrive: ``pending = max(0, expected − received)``
    and nothing is lost (the refusals stay in the status's ``rejects``). Once
    it closed, ``lost = max(0, expected − received)``. The intake's refusal
    counts explain the loss up to its size:
    ``late`` first, then the other reasons in order (a refused delivery may
    also be a forgery or a repeat, so refusals beyond the loss explain
    nothing); ``not_arrived`` is what no refusal explains. Repeats of a stored
    report (:data:`NOT_A_LOSS`) are no loss. ``cover``: cover payloads the
    intake opened and dropped, reported beside the account and never in it.
    ``routes``: copies each report was sent as (:func:`~anonml.protocol.route_count`; ``routes_asked``
    the problem's setting); the refused repeats (:data:`NOT_A_LOSS`) are the account's ``duplicates``
    — with ``r`` routes an honest round sees up to ``(r − 1) · received`` of them.
    """
    expected = max(0, report_peers) * max(0, slots_per_peer)
    redundancy = {
        "routes": routes,
        "routes_asked": max(routes, routes_asked),
        "duplicates": sum(max(0, refused.get(reason, 0)) for reason in NOT_A_LOSS),
        "cover": max(0, cover),
    }
    if window_open:
        return ReportAccount(
            expected=expected, received=received, lost=0, pending=max(0, expected - received), **redundancy
        )
    lost = max(0, expected - received)
    left = lost
    late_lost = min(late, left)
    left -= late_lost
    why: dict[str, int] = {}
    for reason, count in sorted(refused.items()):
        if reason in NOT_A_LOSS or reason == "late" or count <= 0 or left <= 0:
            continue
        why[reason] = min(count, left)
        left -= why[reason]
    return ReportAccount(
        expected=expected,
        received=received,
        lost=lost,
        late=late_lost,
        refused=why,
        not_arrived=left,
        **redundancy,
    )


@dataclass
class ReportGroup:
    """Summed bits of the reports of one (partition, subset) made by one mechanism."""

    partition: int
    subset: int
    mechanism: MechanismDescriptor
    bit_sums: np.ndarray
    n: int


#: Phases in which reports may still arrive: the round's delivery window closes at ``t_r`` + grace,
#: or earlier when an admin trains at once (the phase leaves ``reporting``).


def delivery_window_open(phase: str, t_r: float | None, grace: float, now: float) -> bool:
    """True while a report not received yet may still arrive (it is *pending*, not lost).

    The window is open while the problem is in :data:`ROUND_PHASES` and, once
    the bins fixed ``t_r``, until ``t_r + grace`` (the intake refuses a
    delivery as ``late`` after that: :mod:`aggregator.routes.intake`).
    """
    return phase in ROUND_PHASES and (t_r is None or now <= t_r + grace)


def report_round_over(t_r: float | None, grace: float, now: float, all_received: Callable[[], bool]) -> bool:
    """Whether the report round ends at ``now`` and the problem trains.

    At ``t_r + grace``, the intake's last moment for a late delivery; or already past ``t_r``
    once every expected report is stored (``all_received``, asked only then): every token is
    redeemed, so nothing more can be counted — a later copy is answered as a duplicate — and the
    grace would only wait. Never before ``t_r``: the release window is the relays', whose timing
    hides the senders whatever the intake holds.
    """
    if t_r is None or now <= t_r:
        return False
    return now > t_r + grace or all_received()


def report_peers(draft: ProblemDraft, roster: Roster) -> int:
    """The report pool's members: the roster less its median and calibration pools."""
    return draft.report_pool_size(len(roster.entries), roster.median_pool_size)


def expected_reports(ctx: ProblemContext) -> int:
    """Reports the round expects: :func:`report_peers` times ``k_h``, the account's ``expected``."""
    draft = ctx.problem.draft
    return report_peers(draft, ctx.require_roster()) * draft.kh


def shuffle_statement(
    draft: ProblemDraft, bound: ShuffleBound | None, *, planned: bool
) -> ShuffleStatement | None:
    """``bound`` (the report pool's conditional shuffle (ε, δ)) on the wire, beside the local ε.

    The bound is the report pool's alone
    (:func:`~anonml.privacy.amplification.unlinkable_pools_bound`, FMT 2021
    with k_h reports of ε/k_h per peer) for the fewest reports of one
    (partition, subset): the roster's smallest partition before the round
    (``planned``), the fewest received after it (the model's ``privacy_.shuffle``),
    with the pools it covers and the median peers outside it.
    """
    if bound is None:
        return None
    return ShuffleStatement(local_epsilon=draft.epsilon, planned=planned, **bound.to_dict())


def group_reports(reports: Iterable[tuple[int, int, str, bytes]]) -> list[ReportGroup]:
    """Sum ``(partition, subset, mechanism JSON, packed bits)`` rows per group, in a stable order."""
    import numpy as np  # training only: not at the service's start (issue 31)

    groups: dict[tuple[int, int, str], ReportGroup] = {}
    for partition, subset, mechanism_json, bits in reports:
        key = (partition, subset, mechanism_json)
        group = groups.get(key)
        if group is None:
            mechanism = MechanismDescriptor.model_validate_json(mechanism_json)
            group = ReportGroup(partition, subset, mechanism, np.zeros(mechanism.m, dtype=np.int64), 0)
            groups[key] = group
        group.bit_sums += unpack_bits(bits, group.mechanism.m)
        group.n += 1
    return [groups[k] for k in sorted(groups)]


def train_problem(
    problem: Problem,
    roster: Roster,
    bins: Bins,
    plan: PartitionPlan,
    reports: Iterable[tuple[int, int, str, bytes]],
    median_answered: int,
    rng: np.random.Generator | None = None,
) -> tuple[AnonMLClassifier, dict[str, float]]:
    """Train the problem's model from its reports.

    Returns
    -------
    model : AnonMLClassifier
        Fitted from the debiased histograms with the published bins.
    metrics : dict
        ``reports``, ``histograms``, ``report_peers``, ``median_answers``, and
        ``label_classes`` (K).

    Raises
    ------
    ProtocolError
        When no report arrived.
    """
    # The learner (scikit-learn, NumPy) is imported here, not when the service starts.
    from anonml.learn import (
        AnonMLClassifier,
        SubsetHistogram,
        estimate_histogram,
        learner_settings,
    )
    from anonml.randomness import resolve_rng

    draft = problem.draft
    rng = resolve_rng(rng)
    binning = binning_of(problem, bins)
    groups = group_reports(reports)
    if not groups:
        raise ProtocolError(f"problem {problem.id}: no report arrived, nothing to train on")
    settings = learner_settings(draft)
    learner = AnonMLClassifier(**settings)
    k = draft.label.k
    histograms: list[SubsetHistogram] = []
    received: dict[tuple[int, int], int] = {}
    for g in groups:
        features = plan.subsets[g.partition][g.subset]
        shape = tuple(binning.n_bins[f] for f in features)
        histograms.append(
            estimate_histogram(
                g.bit_sums, g.mechanism, g.n, features, shape, consistency=learner.consistency, n_classes=k
            )
        )
        received[(g.partition, g.subset)] = received.get((g.partition, g.subset), 0) + g.n
    ensemble = learner.ensemble_from(histograms, [g.n for g in groups], rng)
    pool = report_peers(draft, roster)
    accounting = _received_accounting(draft, roster, received, pool, median_answered)
    model = AnonMLClassifier.from_ensemble(
        binning, ensemble, classes=draft.label.model_classes(), privacy=accounting, **settings
    )
    n_reports = sum(g.n for g in groups)  # the calibration pool's answers come after (calibration_round)
    metrics = {
        "reports": float(n_reports),
        "histograms": float(len(histograms)),
        "report_peers": float(pool),
        "median_answers": float(median_answered),
        "label_classes": float(k),
    }
    return model, metrics


def _received_accounting(
    draft: ProblemDraft,
    roster: Roster,
    received: dict[tuple[int, int], int],
    report_peers: int,
    median_answered: int,
) -> PrivacyAccounting:
    """The model's ``privacy_``: the local ε per role and the report pool's shuffle bound.

    ``received`` counts the reports that arrived per (partition, subset); the bound
    (:func:`~anonml.privacy.amplification.unlinkable_pools_bound`) is the one for the fewest of them,
    and with a ``central_target`` it is taken at the target's δ and the target is stated beside it.
    """
    from anonml.learn import PrivacyAccounting
    from anonml.privacy.amplification import CentralTarget, unlinkable_pools_bound

    # A slot nobody's report reached shuffles nothing; the fewest reports that did arrive decide.
    # The median peers who answered are outside it: their signed answers keep their local ε.
    target = draft.central_target
    fewest = min(received.values())
    bound = unlinkable_pools_bound(
        {"report": (float(draft.report_epsilon), int(draft.kh), fewest)},
        peers_outside=median_answered,
        delta=None if target is None else target.delta,
    )
    if bound is not None and draft.calibration_pool_size(len(roster.entries)):
        bound = _signed_answers_outside(bound, 0)
    central = (
        None
        if target is None
        else CentralTarget.of(target.epsilon, target.delta, draft.epsilon, bound, smallest_group=fewest)
    )
    return PrivacyAccounting(
        epsilon_total=max(draft.epsilon, draft.median_epsilon if median_answered else 0.0),
        report_epsilon=draft.report_epsilon,
        reports_per_peer=draft.kh,
        report_peers=report_peers,
        median_peers=median_answered,
        median_epsilon=draft.median_epsilon,
        shuffle=bound,
        central_target=central,
    )


def _signed_answers_outside(bound: ShuffleBound, calibration_answered: int) -> ShuffleBound:
    """``bound`` with the calibration pool's signed answers stated outside it (module docstring)."""
    import dataclasses

    from anonml.privacy.amplification import ASSUMPTIONS, SIGNED_ANSWERS_NOT_SHUFFLED

    return dataclasses.replace(
        bound,
        assumptions=ASSUMPTIONS + SIGNED_ANSWERS_NOT_SHUFFLED,
        peers_outside=(bound.peers_outside or 0) + calibration_answered,
    )


def with_calibration_answers(privacy: PrivacyAccounting, answered: int) -> PrivacyAccounting:
    """The privacy statement of a model once ``answered`` calibration-pool peers answered.

    Each spent ε (the problem's) on one signed answer, its only release (the pools are
    disjoint): ``calibration_peers = answered``, and they are counted outside the shuffle bound,
    which covers the report pool only.
    """
    import dataclasses

    shuffle = None if privacy.shuffle is None else _signed_answers_outside(privacy.shuffle, answered)
    return dataclasses.replace(privacy, calibration_peers=int(answered), shuffle=shuffle)


def publication_outcome(document: ModelDocument, max_loss_fraction: float) -> tuple[ProblemPhase, str]:
    """Where a problem goes when ``document`` is published, and the message that says every shortfall.

    ``degraded`` when more than ``max_loss_fraction`` of the reports were lost, else ``done``; the
    message names lost reports, missing median answers and a calibration that fell short.
    """
    account, medians, calibration = document.reports, document.medians, document.calibration
    shortfall = "; ".join(
        [
            *([account.describe()] if account is not None and account.lost else []),
            *([medians.describe()] if medians is not None and medians.missing else []),
            *(
                [calibration.describe()]
                if calibration is not None and (calibration.missing or not calibration.calibrated)
                else []
            ),
        ]
    )
    if account is not None and account.lost_fraction > max_loss_fraction:
        return ProblemPhase.DEGRADED, f"{shortfall}; more than {max_loss_fraction:.0%} lost, model published"
    return ProblemPhase.DONE, shortfall
