"""``declarative``: features proposed as data, never as code (DESIGN §4).

Each feature is *event filter × aggregation × time window*:

* **filter** — source, type, and field predicates (``eq``, ``ne``, ``lt``,
  ``le``, ``gt``, ``ge``, ``in``, ``exists``);
* **aggregation** — ``count``, ``sum``, ``mean``, ``min``, ``max``, ``last``,
  ``exists``, ``distinct`` (the last five and ``sum``/``mean`` read one field);
* **window** — the last ``window_days`` before the instance's end (its
  cutoff, or its last event when it has none), or the whole instance.

An aggregator can therefore propose a new feature as a JSON document; a peer
validates it against this schema and computes it with this fixed code. Every
numeric feature declares its range ``[low, high]`` (public: it bounds median
estimation and binning); computed values are clipped into it.

Examples
--------
A feature as the aggregator proposes it (JSON), validated as a peer does:

>>> feature = FeatureDefinition.model_validate_json(
...     '{"name": "video_plays_7d", "source": "edx", "type": "play_video",'
...     ' "aggregation": "count", "window_days": 7, "low": 0, "high": 200}'
... )
>>> spec = feature.spec()
>>> spec.name, spec.kind.value, spec.low, spec.high
('video_plays_7d', 'numeric', 0.0, 200.0)
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Literal

from pydantic import Field, model_validator

from anonml.model import Dataset, Event, FeatureKind, FeatureSpec
from anonml.plugins import Featurizer, PluginParams

__all__ = ["DeclarativeFeaturizer", "FeatureDefinition", "FieldPredicate"]

Scalar = bool | int | float | str


class FieldPredicate(PluginParams):
    """``fields[field] <op> value``; an event without the field never matches (but ``exists``)."""

    field: str = Field(min_length=1)
    op: Literal["eq", "ne", "lt", "le", "gt", "ge", "in", "exists"] = "eq"
    value: Scalar | list[Scalar] | None = None

    @model_validator(mode="after")
    def _check_value(self) -> FieldPredicate:
        if self.op == "in" and not isinstance(self.value, list):
            raise ValueError(f"predicate on {self.field!r}: 'in' needs a list value")
        if self.op not in {"in", "exists"} and (self.value is None or isinstance(self.value, list)):
            raise ValueError(f"predicate on {self.field!r}: {self.op!r} needs one scalar value")
        return self

    def matches(self, event: Event) -> bool:
        if self.field not in event.fields:
            return False
        if self.op == "exists":
            return True
        actual = event.fields[self.field]
        if self.op == "in":
            return actual in self.value  # type: ignore[operator]
        if self.op == "eq":
            return actual == self.value
        if self.op == "ne":
            return actual != self.value
        try:
            if self.op == "lt":
                return actual < self.value  # type: ignore[operator]
            if self.op == "le":
                return actual <= self.value  # type: ignore[operator]
            if self.op == "gt":
                return actual > self.value  # type: ignore[operator]
            return actual >= self.value  # type: ignore[operator]
        except TypeError:
            return False  # incomparable types (text vs number) do not match


class FeatureDefinition(PluginParams):
    """One declarative feature."""

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    source: str | None = None
    type: str | None = None
    where: tuple[FieldPredicate, ...] = ()
    aggregation: Literal["count", "sum", "mean", "min", "max", "last", "exists", "distinct"] = "count"
    field: str | None = None
    window_days: float | None = Field(default=None, gt=0, le=36_600)
    low: float = 0.0
    high: float = Field(default=1.0)
    default: float = 0.0
    description: str = ""

    @model_validator(mode="after")
    def _check(self) -> FeatureDefinition:
        needs_field = self.aggregation in {"sum", "mean", "min", "max", "last", "distinct"}
        if needs_field and not self.field:
            raise ValueError(f"feature {self.name!r}: aggregation {self.aggregation!r} needs a field")
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.low >= self.high:
            raise ValueError(f"feature {self.name!r}: range [{self.low}, {self.high}] is empty")
        if self.aggregation == "exists":
            object.__setattr__(self, "low", 0.0)
            object.__setattr__(self, "high", 1.0)
        return self

    def spec(self) -> FeatureSpec:
        kind = FeatureKind.BOOL if self.aggregation == "exists" else FeatureKind.NUMERIC
        return FeatureSpec(
            name=self.name, kind=kind, low=self.low, high=self.high, description=self.description
        )

    def matches(self, event: Event) -> bool:
        return (
            (self.source is None or event.source == self.source)
            and (self.type is None or event.type == self.type)
            and all(p.matches(event) for p in self.where)
        )

    def compute(self, dataset: Dataset) -> float:
        """The aggregated value over the matching events in the window, clipped to range."""
        events = self._window(dataset)
        matched = [e for e in events if self.matches(e)]
        value = self._aggregate(matched)
        return min(max(value, self.low), self.high)

    def _window(self, dataset: Dataset) -> tuple[Event, ...]:
        if self.window_days is None:
            return dataset.events
        end: datetime | None = dataset.end or dataset.last_time
        if end is None:
            return dataset.events
        start = end - timedelta(days=self.window_days)
        if dataset.end is None:
            # no cutoff: the window ends just after the last event, so it is included
            end = end + timedelta(microseconds=1)
        return tuple(
            e for e in dataset.events if e.timestamp is not None and start <= e.timestamp < end
        )

    def _aggregate(self, events: list[Event]) -> float:
        agg = self.aggregation
        if agg == "count":
            return float(len(events))
        if agg == "exists":
            return 1.0 if events else 0.0
        values = [e.fields[self.field] for e in events if self.field in e.fields]  # type: ignore[index]
        if agg == "distinct":
            return float(len(set(values)))
        if agg == "last":
            return _number(values[-1]) if values else self.default
        numbers = [_number(v) for v in values]
        numbers = [x for x in numbers if math.isfinite(x)]
        if not numbers:
            return self.default
        if agg == "sum":
            return float(sum(numbers))
        if agg == "mean":
            return float(sum(numbers) / len(numbers))
        if agg == "min":
            return float(min(numbers))
        return float(max(numbers))


def _number(value: object) -> float:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, datetime):
        return value.timestamp()
    return math.nan  # categories and text have no numeric value


class DeclarativeFeaturizer(Featurizer):
    """Features as data: filter × aggregation × window, each with a declared range."""

    name = "declarative"
    version = "1.0"
    description = "features proposed as data: event filter x aggregation x time window"

    class Params(PluginParams):
        features: tuple[FeatureDefinition, ...] = Field(min_length=1, max_length=512)

        @model_validator(mode="after")
        def _unique(self) -> DeclarativeFeaturizer.Params:
            names = [f.name for f in self.features]
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"duplicate feature names: {', '.join(dupes)}")
            return self

    def features(self) -> list[FeatureSpec]:
        return [f.spec() for f in self.params.features]

    def featurize(self, dataset: Dataset) -> list[float]:
        return [f.compute(dataset) for f in self.params.features]
