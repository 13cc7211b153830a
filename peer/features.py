"""A peer's own example, computed locally from its own event store.

The problem names an installed instancer and featurizer (by name, version and
params); the peer runs them over its own events only, keeps the proposed
features by name, clips each numeric value into its declared range (the range
the bins and the median search assume) and takes the instancer's label as a
bit. Nothing leaves this module but the numbers the caller then perturbs.

Whether a peer takes part never depends on this computation (DESIGN §7, the
aggregator chooses the plugins and their params, so any condition they
compute is the aggregator's question): a failure here makes the peer send
stand-ins (:mod:`peer.reports`), never fall silent. :func:`invalid_features`
names the values a report cannot carry (NaN, infinite, out of range, a
category the proposal does not list), which are replaced the same way.
Only events of the sources the person offers (``offered_sources``) are read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from anonml.errors import AnonMLError
from anonml.featurize import featurize_dataset
from anonml.model import FeatureKind, FeatureSpec
from anonml.plugins import Featurizer, Instancer
from anonml.protocol import ModelDocument, Problem, verify_message
from anonml.randomness import resolve_rng
from anonml.store import EventStore
from peer.policy import load_plugins

__all__ = [
    "LocalExample", "LocalPrediction", "local_example", "predict_locally", "store_user", "invalid_features"
]


@dataclass(frozen=True)
class LocalExample:
    """The peer's feature vector (proposal order) and label bit."""

    x: np.ndarray
    y: int


def store_user(store: EventStore, user: str | None) -> str:
    """``user``, or the store's only user; a clear error otherwise."""
    if user is not None:
        return user
    users = store.users()
    if len(users) != 1:
        raise AnonMLError(
            f"event store {store.url} holds {len(users)} users ({', '.join(users[:5])}); set the peer's user"
        )
    return users[0]


def _label_bit(label: object) -> int:
    if isinstance(label, bool | int | np.integer) and int(label) in (0, 1):
        return int(label)
    if isinstance(label, float) and label in (0.0, 1.0):
        return int(label)
    raise AnonMLError(f"the instancer's label {label!r} is not a bit (0/1); AnonML reports one label bit")


def local_example(
    problem: Problem,
    store: EventStore,
    user: str | None,
    rng: np.random.Generator | None = None,
    plugins: tuple[Instancer, Featurizer, list[int]] | None = None,
    sources: list[str] | None = None,
) -> LocalExample:
    """Run the problem's plugins over this peer's events and return its example.

    If the instancer yields several examples, one is chosen uniformly at random
    (a peer reports one example per problem: its slot count is fixed).
    ``plugins`` is :func:`~peer.policy.load_plugins`'s result, when the caller
    already loaded them (a host shares them between its identities: plugins
    are pure functions of their params). ``sources`` (the person's
    ``offered_sources``) limits the events read; None reads all.

    Raises
    ------
    AnonMLError
        When a plugin is missing, the store holds no example for the user, or
        the label is not a bit.
    """
    instancer, featurizer, columns = plugins if plugins is not None else load_plugins(problem)
    who = store_user(store, user)
    dataset = store.dataset(who)
    if sources is not None:
        offered = set(sources)
        kept = tuple(e for e in dataset.events if e.source in offered)
        dataset = dataset.model_copy(update={"events": kept})
    rows = featurize_dataset(dataset, instancer, featurizer)
    if not rows:
        raise AnonMLError(f"the instancer {instancer.name!r} finds no example in {who!r}'s events")
    if len(rows) > 1:
        gen = resolve_rng(rng)
        row = rows[int(gen.integers(len(rows)))]
    else:
        row = rows[0]
    values = np.asarray([row.values[c] for c in columns], dtype=float)
    for j, spec in enumerate(problem.draft.features):
        if spec.kind is FeatureKind.NUMERIC:
            values[j] = float(np.clip(values[j], spec.low, spec.high))
    return LocalExample(values, _label_bit(row.label))


def invalid_features(x: np.ndarray, specs: tuple[FeatureSpec, ...]) -> dict[int, str]:
    """Feature index → why ``x`` cannot be reported for it (empty when every value is valid).

    Numeric values must be finite (they were clipped into ``[low, high]``);
    booleans 0 or 1; categorical values an index of the proposal's categories.
    """
    bad: dict[int, str] = {}
    for j, spec in enumerate(specs):
        value = float(x[j]) if j < len(x) else float("nan")
        if not np.isfinite(value):
            bad[j] = f"{spec.name} is {value}"
        elif spec.kind is FeatureKind.BOOL and value not in (0.0, 1.0):
            bad[j] = f"{spec.name} = {value:g} is not a bit"
        elif spec.kind is FeatureKind.CATEGORICAL and (
            value != int(value) or not 0 <= value < len(spec.categories)
        ):
            bad[j] = f"{spec.name} = {value:g} is not one of its {len(spec.categories)} categories"
        elif spec.kind is FeatureKind.NUMERIC and not spec.low <= value <= spec.high:  # type: ignore[operator]
            bad[j] = f"{spec.name} = {value:g} is outside [{spec.low:g}, {spec.high:g}]"
    return bad


@dataclass(frozen=True)
class LocalPrediction:
    """The model's answer for this peer's own example: ``P(label = 1)``, the label, the feature values."""

    probability: float
    label: int
    features: dict[str, float]


def predict_locally(
    problem: Problem,
    document: ModelDocument,
    store: EventStore,
    user: str | None,
    sources: list[str] | None = None,
) -> LocalPrediction:
    """Check the model's signature (the problem's aggregator) and predict for this peer's example.

    The example is :func:`local_example`'s (offered ``sources`` only); nothing
    leaves the machine. ``anonml peer predict`` and the dashboard both call this.

    Raises
    ------
    AnonMLError
        A bad signature (:class:`~anonml.errors.CryptoError`), a model for
        another problem, or no example in the store.
    """
    from anonml.learn import AnonMLClassifier

    verify_message(document, bytes(problem.aggregator))
    if document.problem_id != problem.id:
        raise AnonMLError(f"the model is for problem {document.problem_id}, not {problem.id}")
    model = AnonMLClassifier.from_json(json.dumps(document.model))
    example = local_example(problem, store, user, sources=sources)
    proba = float(model.predict_proba(example.x[None, :])[0, 1])
    label = int(model.predict(example.x[None, :])[0].item())
    names = [f.name for f in problem.draft.features]
    return LocalPrediction(proba, label, dict(zip(names, example.x.tolist(), strict=True)))
