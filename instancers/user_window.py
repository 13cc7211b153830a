"""``user_window``: one example per user, features before a cutoff, label from a later window.

The entity is the user. Time is counted in periods of ``period_days`` (weeks by
default) from an origin: the user's first event, or a fixed date such as a
course's start. The example's events are those in the history window
``[origin, origin + history_periods)``; its label is a predicate over the label
window ``[origin + label_start, origin + label_end)``.

The thesis's MOOC dropout problem (ch. 4) is the default: a student active in
the first ``history_periods`` weeks is labelled a dropout (1) if they do
nothing between week ``label_start`` and week ``label_end``; a student with no
activity in the history window is not an example at all.

Besides that bit, the label window gives two other targets: ``label="events"``
is the number of matching events in it (a numeric label, for a problem whose
label spec is numeric with a public range and bins), and ``label="level"`` the
activity level, the number of ``level_cuts`` the count reaches (class 0 below
the first cut, …, class ``len(level_cuts)`` from the last): K classes for a
problem whose label spec names K = ``len(level_cuts) + 1`` classes.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import Field, model_validator

from anonml.model import Dataset, Event
from anonml.plugins import Instance, Instancer, PluginParams

__all__ = ["UserWindowInstancer", "EventMatch"]


class EventMatch(PluginParams):
    """Which events count as activity: a source and/or type (``None`` matches any)."""

    source: str | None = None
    type: str | None = None

    def matches(self, event: Event) -> bool:
        return (self.source is None or event.source == self.source) and (
            self.type is None or event.type == self.type
        )


class UserWindowInstancer(Instancer):
    """One labelled example per user from a history window and a later label window."""

    name = "user_window"
    version = "1.0"
    description = "entity = user; features before a cutoff; label = predicate over a later window"

    class Params(PluginParams):
        """Windows are in periods of ``period_days`` counted from the origin.

        ``label="inactive"`` gives 1 when the label window has fewer than
        ``min_events`` matching events (dropout); ``"active"`` gives the opposite;
        ``"events"`` the count itself; ``"level"`` the number of ``level_cuts``
        (increasing counts) the count reaches.
        """

        period_days: float = Field(default=7.0, gt=0, le=366)
        origin: datetime | Literal["first_event"] = "first_event"
        history_periods: int = Field(default=2, ge=1, le=520)
        label_start: int = Field(default=2, ge=0, le=520)
        label_end: int = Field(default=6, ge=1, le=1040)
        label: Literal["inactive", "active", "events", "level"] = "inactive"
        min_events: int = Field(default=1, ge=1, le=1_000_000)
        level_cuts: tuple[int, ...] = Field(default=(1, 50), min_length=1, max_length=15)
        activity: EventMatch = EventMatch()
        require_history_activity: bool = True

        @model_validator(mode="after")
        def _check_windows(self) -> UserWindowInstancer.Params:
            if self.label_end <= self.label_start:
                raise ValueError("label_end must be after label_start")
            if self.label_start < self.history_periods:
                raise ValueError(
                    "label_start must not be before the end of the history window "
                    "(the label would leak into the features)"
                )
            if isinstance(self.origin, datetime) and self.origin.tzinfo is None:
                raise ValueError("origin must carry a timezone")
            if any(b <= a for a, b in zip(self.level_cuts, self.level_cuts[1:], strict=False)):
                raise ValueError("level_cuts must be increasing")
            return self

    def make_instances(self, dataset: Dataset) -> list[Instance]:
        p = self.params
        origin = dataset.first_time if p.origin == "first_event" else p.origin
        if origin is None:
            return []
        period = timedelta(days=p.period_days)
        history = dataset.window(origin, origin + p.history_periods * period)
        active_history = [e for e in history.events if e.timestamp is not None and p.activity.matches(e)]
        if p.require_history_activity and not active_history:
            return []
        label_window = dataset.window(origin + p.label_start * period, origin + p.label_end * period)
        n_active = sum(
            1 for e in label_window.events if e.timestamp is not None and p.activity.matches(e)
        )
        active = n_active >= p.min_events
        if p.label == "events":
            label = n_active
        elif p.label == "level":
            label = sum(n_active >= cut for cut in p.level_cuts)
        else:
            label = int(not active) if p.label == "inactive" else int(active)
        return [Instance(entity=dataset.user, dataset=history, label=label)]
