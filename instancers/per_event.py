"""``per_event``: one example per event of a type, labelled by one of its fields.

The entity is each *target* event (say, an Uber trip); the label is one of its
fields (the fare); the example's events are the user's history strictly
before the target's time, optionally limited to ``history_days``. The target
itself and anything at or after its time are never in the features, so the
label cannot leak.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field

from anonml.model import Dataset
from anonml.plugins import Instance, Instancer, PluginParams

__all__ = ["PerEventInstancer"]


class PerEventInstancer(Instancer):
    """One labelled example per target event; features from the history before it."""

    name = "per_event"
    version = "1.0"
    description = "entity = each event of a type; label = one of its fields; features from before it"

    class Params(PluginParams):
        source: str | None = None
        type: str = Field(min_length=1)
        label_field: str = Field(min_length=1)
        history_days: float | None = Field(default=None, gt=0, le=36_600)
        skip_missing_label: bool = True

    def make_instances(self, dataset: Dataset) -> list[Instance]:
        p = self.params
        instances = []
        for target in dataset.select(source=p.source, type=p.type):
            if target.timestamp is None:
                continue
            if p.label_field not in target.fields:
                if p.skip_missing_label:
                    continue
                label = None
            else:
                label = target.fields[p.label_field]
            start = None if p.history_days is None else target.timestamp - timedelta(days=p.history_days)
            history = dataset.window(start, target.timestamp)
            instances.append(
                Instance(entity=f"{dataset.user}:{target.id[:16]}", dataset=history, label=label)
            )
        return instances
