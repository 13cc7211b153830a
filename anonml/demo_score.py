"""Scoring ``anonml demo``'s models on the held-out students.

The published model against the same computation simulated in-process (twice:
drawing everything afresh, and with the run's own plan and bins) and a
non-private logistic regression (:func:`score_models`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Protocol

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from anonml.demo_peers import SimulatedPeer
from anonml.learn import AnonMLClassifier, PartitionPlan, simulated_learner
from anonml.model import FeatureSpec
from anonml.protocol import ModelDocument, ProblemDraft

__all__ = ["ProtocolOutcome", "clip_to_ranges", "score_models"]


class ProtocolOutcome(Protocol):
    """What scoring reads of a protocol run: its draft, published model, roster members and plan."""

    draft: ProblemDraft
    document: ModelDocument
    members: list[bytes]
    plan: PartitionPlan


def clip_to_ranges(x: np.ndarray, specs: Sequence[FeatureSpec]) -> np.ndarray:
    """``x`` clipped column by column into the proposal's public ranges, as every peer clips its own."""
    lows = np.asarray([s.low for s in specs], dtype=float)
    highs = np.asarray([s.high for s in specs], dtype=float)
    return np.clip(x, lows, highs)


def score_models(
    run: ProtocolOutcome,
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
    X_train = clip_to_ranges(np.asarray([p.x for p in peers]), specs)
    y_train = np.asarray([p.y for p in peers])
    X_test = clip_to_ranges(np.asarray([p.x for p in held]), specs)
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

