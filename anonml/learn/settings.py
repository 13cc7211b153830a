"""From a problem draft to the learner that performs its computation: one source of truth.

The aggregator trains a problem's model from real reports
(``aggregator/training.py``); the demo and the protocol benchmark run the same
computation in-process (:meth:`AnonMLClassifier.fit` simulates one peer per
row) to show the range the protocol should reach. Both read the draft through
:func:`learner_settings`, so a setting added to the draft (plan shape, bins,
mode, median search) reaches both or neither.

What the protocol fixes and the draft does not say:

* the consistency step is Norm-Sub (:data:`PROTOCOL_CONSISTENCY`, applied by
  :func:`~anonml.learn.histograms.estimate_histogram` after debiasing);
* there is no calibration pool and no pilot round (every report peer sends its
  k_h reports once, and the median pool answers median queries only), so a
  protocol-built model's probabilities are the ensemble's own;
* the label domain K is the draft's label spec's (``draft.label.k``): the
  aggregator passes it to every histogram and the spec's classes to the model
  (a numeric label's classes are its bins 0..K−1); the simulation takes K from
  the labels it is given, so a simulated K-class or binned-target run reads the
  same settings;
* the ensemble's own knobs (smoothing, combine, the paper mode's partition
  classifier and its cross-validation) keep :class:`AnonMLClassifier`'s defaults.

What the simulation cannot follow: a median answer's ε of its own
(``median.epsilon``; the simulation spends the problem's ε on it, and sizes the
median pool's need with it, where the roster uses ``median.epsilon``:
:meth:`~anonml.protocol.ProblemDraft.median_pool_size`) and the
median step's quorum and deadline (every simulated peer answers). Without
``median.epsilon`` both size the median pool by the same rule
(:func:`~anonml.privacy.median.median_pool_size`; the cap is ``floor`` of the
fraction on a roster, ``round`` in the simulation).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from anonml.learn.partition import PartitionPlan, make_plan
from anonml.randomness import SeedLike

if TYPE_CHECKING:
    from anonml.learn.model import AnonMLClassifier
    from anonml.protocol import ProblemDraft, Roster

__all__ = ["PROTOCOL_CONSISTENCY", "learner_settings", "simulated_learner", "roster_plan"]

#: The consistency step the aggregator applies to every debiased histogram.
PROTOCOL_CONSISTENCY = "norm_sub"


def learner_settings(draft: ProblemDraft) -> dict[str, Any]:
    """:class:`AnonMLClassifier` keyword arguments for the computation a draft asks for.

    Parameters
    ----------
    draft : ProblemDraft
        The aggregator's proposal.

    Returns
    -------
    dict
        ``mode``, ``epsilon``, the plan (``n_partitions`` = k_p, ``n_subsets`` =
        k_h, ``subset_size`` = k_s, ``subsets``), ``n_bins``, ``features``, the
        median search (``median_fraction``, ``median_steps``,
        ``median_confidence``), ``consistency`` and the pools the protocol does
        not have (``calibration_fraction = pilot_fraction = 0``). No
        ``random_state``: the caller decides where randomness comes from.
    """
    return {
        "mode": draft.mode,
        "epsilon": float(draft.epsilon),
        "n_partitions": draft.kp,
        "n_subsets": draft.kh,
        "subset_size": draft.ks,
        "subsets": None if draft.subsets is None else [list(s) for s in draft.subsets],
        "n_bins": draft.bins,
        "features": list(draft.features),
        "median_fraction": float(draft.median.pool_fraction),
        "median_steps": draft.median.steps,
        "median_confidence": float(draft.median.confidence),
        "consistency": PROTOCOL_CONSISTENCY,
        "calibration_fraction": 0.0,
        "pilot_fraction": 0.0,
    }


def simulated_learner(draft: ProblemDraft, random_state: SeedLike = None) -> AnonMLClassifier:
    """An unfitted :class:`AnonMLClassifier` that simulates ``draft``'s protocol run when fitted.

    ``fit(X, y)`` with one row per peer then spends each peer's budget as the
    protocol would (:func:`learner_settings`); ``random_state`` as in
    :func:`anonml.randomness.generator_from`.
    """
    # The learner loads scikit-learn (seconds on a loaded machine): only here, never for a plan
    # (roster_plan), which an aggregator and every peer build on the protocol's path.
    from anonml.learn.model import AnonMLClassifier

    return AnonMLClassifier(**learner_settings(draft), random_state=random_state)


def roster_plan(draft: ProblemDraft, roster: Roster, beacon: bytes = b"") -> PartitionPlan:
    """The partition plan of ``roster`` (its seed, its members in order) under ``draft`` and ``beacon``.

    :func:`~anonml.learn.partition.make_plan` with the plan shape of :func:`learner_settings`
    (the simulated learner's and the protocol's are one), the roster's ``median_pool_size``,
    the draft's calibration pool (:meth:`~anonml.protocol.ProblemDraft.calibration_pool_size`
    of the roster's size) and the witnesses' ``beacon`` (DESIGN §6–7). Raises ValueError when the
    roster's size does not fit the draft's plan (the beacon never changes that).
    """
    settings = learner_settings(draft)
    shape = {name: settings[name] for name in ("n_partitions", "n_subsets", "subset_size", "subsets")}
    keys = [bytes(e.identity) for e in roster.entries]
    return make_plan(
        bytes(roster.seed),
        keys,
        len(draft.features),
        median_pool_size=roster.median_pool_size,
        calibration_pool_size=draft.calibration_pool_size(len(keys)),
        beacon=beacon,
        **shape,
    )
