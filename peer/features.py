"""A peer's own example, computed locally from its own event store.

The problem names an installed instancer and featurizer (by name, version and
params); the peer runs them over its own events only, keeps the proposed
features by name, clips each numeric value into its declared range (the range
the bins and the median search assume) and reads the instancer's label as the
proposal's :class:`~anonml.protocol.LabelSpec` says: a bit, the index of a
named class, or the ordered bin of a numeric target over its public range
(clipped into the end bins, like a feature). Nothing leaves this module but
the numbers the caller then perturbs.

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
from typing import Any

import numpy as np

from anonml.errors import AnonMLError
from anonml.featurize import featurize_dataset
from anonml.model import FeatureKind, FeatureSpec
from anonml.plugins import Featurizer, Instancer
from anonml.protocol import LabelSpec, ModelDocument, Problem, verify_message
from anonml.randomness import resolve_rng
from anonml.store import EventStore
from peer.policy import load_plugins

__all__ = [
    "LocalExample",
    "LocalPrediction",
    "label_index",
    "local_example",
    "predict_example",
    "predict_locally",
    "store_user",
    "invalid_features",
]


@dataclass(frozen=True)
class LocalExample:
    """The peer's feature vector (proposal order) and label index in 0..K−1 (:func:`label_index`)."""

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


def label_index(label: object, spec: LabelSpec) -> int:
    """The instancer's ``label`` as an index into the label domain 0..K−1 of ``spec``.

    * binary: 0 or 1 (bool, int or float);
    * classes: a class name, or its index;
    * numeric: a finite number, binned over the public range with
      :func:`anonml.learn.regression.target_bins` (out-of-range values go to an end bin).

    Raises :class:`~anonml.errors.AnonMLError` naming the label and the spec
    otherwise (the caller then sends stand-ins: what is sent never depends on it).
    """
    if spec.kind == "classes":
        if isinstance(label, str) and label in spec.classes:
            return spec.classes.index(label)
        if isinstance(label, int | np.integer) and not isinstance(label, bool) and 0 <= int(label) < spec.k:
            return int(label)
        raise AnonMLError(f"the instancer's label {label!r} is none of the {spec.describe()}")
    if spec.kind == "numeric":
        if isinstance(label, bool) or not isinstance(label, int | float | np.integer | np.floating):
            raise AnonMLError(f"the instancer's label {label!r} is not a number ({spec.describe()})")
        value = float(label)
        if not np.isfinite(value):
            raise AnonMLError(f"the instancer's label {value} is not finite ({spec.describe()})")
        # The learner's module (scikit-learn, seconds on a loaded host): only for a numeric label.
        from anonml.learn.regression import target_bins, target_edges

        return int(target_bins(np.asarray([value]), target_edges(*spec.numeric_range()))[0])
    if isinstance(label, bool | int | np.integer) and int(label) in (0, 1):
        return int(label)
    if isinstance(label, float) and label in (0.0, 1.0):
        return int(label)
    raise AnonMLError(f"the instancer's label {label!r} is not a bit (0/1), as this binary problem needs")


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
        the label does not fit the problem's label spec (:func:`label_index`).
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
    return LocalExample(values, label_index(row.label, problem.draft.label))


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
    """The model's answer for this peer's own example.

    ``label`` is the predicted class index (0/1 for a binary problem, the
    class's index, or the most likely target bin); ``probability`` is
    ``P(label = 1)`` for a binary problem and the predicted class's
    probability otherwise; ``answer`` is what to show: the 0/1 label, the
    class name, or (numeric label) the predicted value
    ``Σ_k P̂(bin k | x)·c_k`` (:class:`anonml.learn.AnonMLRegressor`);
    ``probabilities`` are ``P̂(k | x)`` for every class index k (the label's domain, in order).
    """

    probability: float
    label: int
    features: dict[str, float]
    answer: int | str | float = 0
    kind: str = "binary"
    probabilities: tuple[float, ...] = ()


def predict_example(model: Any, x: np.ndarray, spec: LabelSpec) -> tuple[float, int, int | str | float]:
    """``(probability, label index, answer)`` of the published ``model`` for one raw vector ``x``
    (:class:`LocalPrediction` says what each is for each label kind)."""
    from anonml.learn import AnonMLRegressor

    row = np.asarray(x, dtype=float)[None, :]
    proba = model.predict_proba(row)[0]
    classes = [c.item() if isinstance(c, np.generic) else c for c in model.classes_]
    if [str(c) for c in classes] != [str(c) for c in spec.model_classes()]:
        raise AnonMLError(
            f"the model's classes {classes[:20]} are not the problem's label domain ({spec.describe()})"
        )
    if spec.kind == "binary":
        label = int(model.predict(row)[0].item())
        return float(proba[1]), label, label
    best = int(np.argmax(proba))
    index = int(classes[best]) if spec.kind == "numeric" else spec.classes.index(str(classes[best]))
    if spec.kind == "classes":
        return float(proba[best]), index, spec.classes[index]
    low, high, bins = spec.numeric_range()
    regressor = AnonMLRegressor.from_classifier(model, (low, high), bins)
    return float(proba[best]), index, float(regressor.predict(row)[0])


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
    The answer is in the problem's label domain (:func:`predict_example`).

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
    spec = problem.draft.label
    probability, label, answer = predict_example(model, example.x, spec)
    names = [f.name for f in problem.draft.features]
    every = tuple(float(p) for p in model.predict_proba(np.asarray(example.x, dtype=float)[None, :])[0])
    return LocalPrediction(
        probability, label, dict(zip(names, example.x.tolist(), strict=True)), answer, spec.kind, every
    )
