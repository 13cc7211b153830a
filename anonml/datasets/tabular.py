"""Tabular data sets beyond Adult, for the generalisation benchmark: all ship with a package.

Each loader returns a :class:`TabularData` (rows, labels, feature specs with
public ranges); :func:`random_split` draws a stratified train/test split per
trial, so results carry a standard error over splits as well as over the
privacy noise.

* :func:`synthetic` — a generator with known structure: three categorical and
  three numeric features, conditionally independent given a binary label
  (so naive Bayes is Bayes-optimal on it), plus two pure-noise features and
  one near-copy of a signal feature (correlated evidence, which over-counts);
  public ranges are the generator's.
* :func:`mooc_dropout` — the MOOC simulator (:mod:`anonml.datasets.mooc`):
  per student, counts of video, problem, forum and page events in each of the
  first two weeks; label: drops out by week 4. Students who never came back
  after week 0 are left out (their week-1 silence would give the label away).
  Counts are clipped to a public range [0, 150].
* :func:`breast_cancer` — scikit-learn's bundled Wisconsin diagnostic data
  (569 rows, 30 numeric features): a small-n set on which private learning
  has ~18 reports per feature. Its ranges are the published data set's
  min/max widened by 5 % — public for a published data set, but read from
  the same rows (stated in the benchmark).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from anonml.model import FeatureKind, FeatureSpec
from anonml.randomness import generator_from

__all__ = ["TabularData", "TabularSplit", "synthetic", "mooc_dropout", "breast_cancer", "random_split"]


@dataclass(frozen=True)
class TabularData:
    """Rows ``X`` (category indices, 0/1, numbers), labels ``y`` in {0, 1}, and their specs."""

    name: str
    X: np.ndarray
    y: np.ndarray
    features: tuple[FeatureSpec, ...]


@dataclass(frozen=True)
class TabularSplit:
    """One train/test split of a :class:`TabularData` (the benchmark harness's input)."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    features: tuple[FeatureSpec, ...]


def random_split(data: TabularData, seed: int, test_fraction: float = 0.3) -> TabularSplit:
    """A stratified split: ``test_fraction`` of each class to the test set, drawn from ``seed``."""
    rng = generator_from(seed, name="seed")
    test = np.zeros(data.y.size, dtype=bool)
    for c in np.unique(data.y):
        members = np.flatnonzero(data.y == c)
        test[rng.choice(members, size=int(round(test_fraction * members.size)), replace=False)] = True
    return TabularSplit(data.X[~test], data.y[~test], data.X[test], data.y[test], data.features)


def synthetic(n: int = 20_000, seed: int = 0) -> TabularData:
    """The known-structure generator (module docstring)."""
    rng = generator_from(seed, name="seed")
    y = (rng.random(n) < 0.3).astype(np.int64)
    cat_p = [
        ([0.5, 0.3, 0.2], [0.2, 0.3, 0.5]),
        ([0.7, 0.3], [0.45, 0.55]),
        ([0.25, 0.25, 0.25, 0.25], [0.1, 0.2, 0.3, 0.4]),
    ]
    columns: list[np.ndarray] = []
    specs: list[FeatureSpec] = []
    for j, (p0, p1) in enumerate(cat_p):
        k = len(p0)
        col = np.where(y == 1, rng.choice(k, n, p=p1), rng.choice(k, n, p=p0))
        columns.append(col)
        specs.append(FeatureSpec(name=f"cat{j}", kind=FeatureKind.CATEGORICAL, categories=tuple("abcd"[:k])))
    for j, shift in enumerate((1.0, 0.6, 0.3)):
        col = np.clip(rng.normal(loc=shift * y, scale=1.0), -4.0, 5.0)
        columns.append(col)
        specs.append(FeatureSpec(name=f"num{j}", low=-4.0, high=5.0))
    for j in range(2):
        columns.append(rng.normal(size=n).clip(-4.0, 4.0))
        specs.append(FeatureSpec(name=f"noise{j}", low=-4.0, high=4.0))
    columns.append(np.clip(columns[3] + rng.normal(scale=0.3, size=n), -4.0, 5.0))  # a near-copy of num0
    specs.append(FeatureSpec(name="num0_copy", low=-4.0, high=5.0))
    return TabularData("synthetic", np.column_stack(columns).astype(float), y, tuple(specs))


_FAMILIES = ("video", "problem", "forum", "page")
_COUNT_HIGH = 150.0


def _family(record: dict) -> str | None:
    kind = str(record.get("name") or record.get("event_type") or "")
    if "video" in kind:
        return "video"
    if "problem" in kind:
        return "problem"
    if "forum" in kind or "thread" in kind or "comment" in kind:
        return "forum"
    if kind.startswith("/courses") or "page" in kind or "seq" in kind:
        return "page"
    return None


def mooc_dropout(n: int = 6000, seed: int = 0) -> TabularData:
    """Early-activity features of simulated students and whether they drop out by week 4."""
    from anonml.datasets.mooc import COURSE_START, simulate_students  # noqa: PLC0415 - heavy, on demand

    students = simulate_students(n, weeks=6, seed=seed)
    rows: list[list[float]] = []
    labels: list[int] = []
    for s in students:
        if s.dropout_week is not None and s.dropout_week <= 1:
            continue
        counts = np.zeros((2, len(_FAMILIES)))
        for record in s.lines:
            if record.get("username") != s.username:
                continue
            when = datetime.fromisoformat(str(record["time"]).replace("Z", "+00:00"))
            if when.tzinfo is None:
                when = when.replace(tzinfo=COURSE_START.tzinfo)
            week = (when - COURSE_START).days // 7
            family = _family(record)
            if week in (0, 1) and family is not None:
                counts[week, _FAMILIES.index(family)] += 1
        rows.append(list(np.minimum(counts.ravel(), _COUNT_HIGH)))
        labels.append(int(s.dropout_week is not None and s.dropout_week <= 4))
    specs = tuple(
        FeatureSpec(name=f"week{w}_{family}", low=0.0, high=_COUNT_HIGH)
        for w in (0, 1)
        for family in _FAMILIES
    )
    return TabularData(
        "mooc_dropout", np.asarray(rows, dtype=float), np.asarray(labels, dtype=np.int64), specs
    )


def breast_cancer() -> TabularData:
    """scikit-learn's bundled breast-cancer data, label 1 = malignant (module docstring on ranges)."""
    from sklearn.datasets import load_breast_cancer  # noqa: PLC0415

    bunch = load_breast_cancer()
    X = np.asarray(bunch.data, dtype=float)
    y = (np.asarray(bunch.target) == 0).astype(np.int64)  # sklearn codes malignant as 0
    low, high = X.min(axis=0), X.max(axis=0)
    pad = 0.05 * (high - low)
    names: Sequence[str] = [str(n).replace(" ", "_") for n in bunch.feature_names]
    specs = tuple(
        FeatureSpec(name=name, low=float(lo - p), high=float(hi + p))
        for name, lo, hi, p in zip(names, low, high, pad, strict=True)
    )
    return TabularData("breast_cancer", X, y, specs)
