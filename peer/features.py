"""A peer's own example, computed locally from its own event store.

The problem names an installed instancer and featurizer (by name, version and
params); the peer runs them over its own events only, keeps the proposed
features by name, clips each numeric value into its declared range (the range
the bins and the median search assume) and takes the instancer's label as a
bit. Nothing leaves this module but the numbers the caller then perturbs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from anonml.errors import AnonMLError
from anonml.featurize import featurize_dataset
from anonml.model import FeatureKind
from anonml.plugins import Featurizer, Instancer
from anonml.protocol import Problem
from anonml.store import EventStore
from peer.policy import load_plugins

__all__ = ["LocalExample", "local_example", "store_user"]


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
) -> LocalExample:
    """Run the problem's plugins over this peer's events and return its example.

    If the instancer yields several examples, one is chosen uniformly at random
    (a peer reports one example per problem: its slot count is fixed).
    ``plugins`` is :func:`~peer.policy.load_plugins`'s result, when the caller
    already loaded them (a host shares them between its identities: plugins
    are pure functions of their params).

    Raises
    ------
    AnonMLError
        When a plugin is missing, the store holds no example for the user, or
        the label is not a bit.
    """
    instancer, featurizer, columns = plugins if plugins is not None else load_plugins(problem)
    who = store_user(store, user)
    rows = featurize_dataset(store.dataset(who), instancer, featurizer)
    if not rows:
        raise AnonMLError(f"the instancer {instancer.name!r} finds no example in {who!r}'s events")
    if len(rows) > 1:
        gen = rng if rng is not None else np.random.default_rng()
        row = rows[int(gen.integers(len(rows)))]
    else:
        row = rows[0]
    values = np.asarray([row.values[c] for c in columns], dtype=float)
    for j, spec in enumerate(problem.draft.features):
        if spec.kind is FeatureKind.NUMERIC:
            values[j] = float(np.clip(values[j], spec.low, spec.high))
    return LocalExample(values, _label_bit(row.label))
