"""From a store to a feature matrix: instancer × featurizer over every user.

This is the local half of AnonML: each peer runs it over its own store, and
the same code builds a centralised matrix for baselines and tests.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from anonml.errors import AnonMLError
from anonml.model import Dataset, FeatureMatrix, FeatureVector
from anonml.plugins import Featurizer, Instancer

__all__ = ["build_matrix", "check_inputs", "featurize_dataset", "write_matrix"]

if TYPE_CHECKING:
    from anonml.store import EventStore


def featurize_dataset(
    dataset: Dataset, instancer: Instancer, featurizer: Featurizer
) -> list[FeatureVector]:
    """The labelled feature vectors of one user's dataset."""
    rows = []
    for inst in instancer.make_instances(dataset):
        values = featurizer.featurize(inst.dataset)
        rows.append(FeatureVector(entity=inst.entity, values=tuple(values), label=inst.label))
    return rows


def check_inputs(
    store: EventStore, featurizer: Featurizer, users: Sequence[str] | None = None
) -> list[str]:
    """The users to featurize, after checking there is something to featurize.

    A featurizer that reads one source (``params.source``, e.g.
    ``mooc_engagement`` reads ``edx``) over a store without any of it would
    write all-zero rows that look like data; that, an empty store and users
    the store does not hold are refused with what to do instead.

    Raises
    ------
    AnonMLError
        Nothing to featurize, naming what is missing.
    """
    known = store.users()
    if not known:
        raise AnonMLError("the event store holds no events: import something first (anonml import FILE)")
    chosen = list(users) if users else known
    absent = sorted(set(chosen) - set(known))
    if absent:
        raise AnonMLError(f"no events of user(s) {', '.join(map(repr, absent))}; the store holds "
                          f"{len(known):,} user(s) (see 'anonml events')")
    source = getattr(getattr(featurizer, "params", None), "source", None)
    if isinstance(source, str) and not any(store.count(user=u, source=source) for u in chosen):
        raise AnonMLError(
            f"featurizer {featurizer.name!r} reads {source!r} events and the store holds none "
            f"for {'these users' if users else 'any user'}; import {source} data first "
            f"(or set its params' source)"
        )
    return chosen


def build_matrix(
    datasets: Iterable[Dataset],
    instancer: Instancer,
    featurizer: Featurizer,
    *,
    on_dataset: Callable[[Dataset], None] | None = None,
) -> FeatureMatrix:
    """One :class:`~anonml.model.FeatureMatrix` over many users' datasets."""
    rows: list[FeatureVector] = []
    for dataset in datasets:
        rows.extend(featurize_dataset(dataset, instancer, featurizer))
        if on_dataset is not None:
            on_dataset(dataset)
    return FeatureMatrix(features=tuple(featurizer.features()), rows=tuple(rows))


def write_matrix(matrix: FeatureMatrix, path: Path) -> None:
    """Write ``.csv`` (header: entity, features…, label) or ``.npz`` (X, y, names, entities)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=["entity", *matrix.feature_names, "label"])
            writer.writeheader()
            writer.writerows(matrix.iter_dicts())
    elif suffix == ".npz":
        X, y = matrix.to_numpy()
        np.savez(
            path,
            X=X,
            y=np.asarray([] if y is None else y),
            feature_names=np.asarray(matrix.feature_names),
            entities=np.asarray([r.entity for r in matrix.rows]),
            features_json=np.asarray(json.dumps([f.model_dump(mode="json") for f in matrix.features])),
        )
    else:
        raise AnonMLError(f"{path}: unknown output format {suffix!r}; use .csv or .npz")

