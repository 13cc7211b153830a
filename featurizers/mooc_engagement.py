"""``mooc_engagement``: weekly engagement features of one learner from edX events.

Thirteen features in the spirit of the thesis's MOOC dropout features (Cyphers
2017, ch. 4, after Veeramachaneni et al.'s MOOC feature sets), computed from
the ``edx`` events of an instance dataset (the instancer has already cut it to
the history window). Only timed events of ``Params.source`` count, in time order
``t_1 <= … <= t_n``, with gaps ``g_k = t_{k+1} − t_k``, session gap ``G`` and
gap cap ``C`` (both in minutes):

==========================  ======================================================
``sessions``                ``1 + #{k : g_k > G}`` (0 with no events)
``active_days``             distinct UTC calendar dates with an event
``time_on_site_minutes``    ``Σ_{k : g_k <= G} min(g_k, C)``
``video_plays``             ``play_video`` events
``video_seconds_watched``   per play at position ``c0``: the next event's position
                            if it is the same video's ``pause_video``/``stop_video``
                            (``current_time``) or ``seek_video`` (``old_time``),
                            giving ``max(0, c1 − c0)``; otherwise the wall-clock gap
                            to the next event, ``min(g, C)`` if ``g <= G`` else 0
``problem_attempts``        server-graded ``problem_check`` events (those with
                            ``success``; browser echoes of the same submission
                            carry no grade and are not counted)
``distinct_problems``       distinct ``problem_id`` among them
``correct_submissions``     those with ``success`` true
``average_grade``           mean of ``grade / max_grade`` over them (``max_grade >
                            0``); 0 with none
``forum_posts``             ``forum_thread_created`` + ``forum_response_created`` +
                            ``forum_comment_created``
``forum_views``             ``forum_thread_viewed``
``page_views``              ``page_view`` (implicit page requests)
``seq_navigations``         ``seq_goto`` + ``seq_next`` + ``seq_prev``
==========================  ======================================================

With ``per_week=False`` (default) each feature is the total over the whole
instance; its declared range is the per-week range times ``weeks``. With
``per_week=True`` there are ``13 × weeks`` features named ``<feature>_w<k>``:
week ``k`` is ``[origin + 7k days, origin + 7(k+1) days)`` with origin the
dataset's ``start`` (else its first event); events outside the ``weeks`` weeks are
ignored, a session counts in the week it starts, a gap and a play in the week
of their first event.

Every feature declares a ``[low, high]`` range (public: it bounds private
median estimation and binning); computed values are **clipped into the range**.
Ranges are generous for real courses (e.g. 30 sessions, 30 hours on site and 10
hours of video per week).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import Field, model_validator

from anonml.model import Dataset, Event, FeatureSpec
from anonml.plugins import Featurizer, PluginParams

__all__ = ["MoocEngagementFeaturizer", "FEATURES"]

# name -> (per-week high, scales with weeks, description); every low is 0.
FEATURES: dict[str, tuple[float, bool, str]] = {
    "sessions": (30.0, True, "sessions (runs of events with gaps <= session_gap_minutes)"),
    "active_days": (7.0, True, "distinct UTC dates with activity"),
    "time_on_site_minutes": (1800.0, True, "sum of in-session gaps, each capped at gap_cap_minutes"),
    "video_plays": (150.0, True, "play_video events"),
    "video_seconds_watched": (36000.0, True, "seconds of video between a play and its pause/stop/seek"),
    "problem_attempts": (200.0, True, "server-graded problem_check events"),
    "distinct_problems": (100.0, True, "distinct problems checked"),
    "correct_submissions": (200.0, True, "problem checks graded correct"),
    "average_grade": (1.0, False, "mean grade/max_grade over problem checks (0 with none)"),
    "forum_posts": (50.0, True, "forum threads, responses and comments created"),
    "forum_views": (150.0, True, "forum threads viewed"),
    "page_views": (400.0, True, "implicit page requests"),
    "seq_navigations": (400.0, True, "seq_goto, seq_next and seq_prev events"),
}
_NAMES = tuple(FEATURES)
_WEEK = timedelta(days=7)
_POSTS = frozenset({"forum_thread_created", "forum_response_created", "forum_comment_created"})
_SEQ = frozenset({"seq_goto", "seq_next", "seq_prev"})
_PLAY_END = frozenset({"pause_video", "stop_video"})


@dataclass(slots=True)
class _Bin:
    """Running sums of one week (or of the whole instance)."""

    counts: dict[str, float] = field(default_factory=lambda: dict.fromkeys(_NAMES, 0.0))
    days: set = field(default_factory=set)
    problems: set = field(default_factory=set)
    grade_sum: float = 0.0
    graded: int = 0

    def values(self) -> dict[str, float]:
        out = dict(self.counts)
        out["active_days"] = float(len(self.days))
        out["distinct_problems"] = float(len(self.problems))
        out["average_grade"] = self.grade_sum / self.graded if self.graded else 0.0
        return out


class MoocEngagementFeaturizer(Featurizer):
    """Engagement features of a learner's edX events (formulas in the module docstring).

    Examples
    --------
    >>> f = MoocEngagementFeaturizer({"weeks": 2})
    >>> [s.name for s in f.features()][:3]
    ['sessions', 'active_days', 'time_on_site_minutes']
    >>> f.features()[0].high
    60.0
    """

    name = "mooc_engagement"
    version = "1.0"
    description = "13 weekly engagement features of edX tracking-log events (thesis ch. 4)"

    class Params(PluginParams):
        """``weeks``: history length the ranges are sized for (and the per-week count).

        ``session_gap_minutes``: a longer silence starts a new session.
        ``gap_cap_minutes``: the most one in-session gap adds to time on site.
        """

        weeks: int = Field(default=2, ge=1, le=52)
        per_week: bool = False
        session_gap_minutes: float = Field(default=30.0, gt=0, le=1440)
        gap_cap_minutes: float = Field(default=10.0, gt=0, le=1440)
        source: str = Field(default="edx", min_length=1, max_length=64)

        @model_validator(mode="after")
        def _cap_within_gap(self) -> MoocEngagementFeaturizer.Params:
            if self.gap_cap_minutes > self.session_gap_minutes:
                raise ValueError("gap_cap_minutes must not exceed session_gap_minutes")
            return self

    def __init__(self, params: Any = None) -> None:
        super().__init__(params)
        self._specs = self._build_specs()

    def features(self) -> list[FeatureSpec]:
        return list(self._specs)

    def _build_specs(self) -> tuple[FeatureSpec, ...]:
        p = self.params
        scale = 1 if p.per_week else p.weeks
        specs = []
        for suffix in [f"_w{k}" for k in range(p.weeks)] if p.per_week else [""]:
            for name, (high, scales, text) in FEATURES.items():
                specs.append(
                    FeatureSpec(
                        name=name + suffix,
                        low=0.0,
                        high=high * scale if scales else high,
                        description=text + (f" in week {suffix[2:]}" if suffix else ""),
                    )
                )
        return tuple(specs)

    def featurize(self, dataset: Dataset) -> list[float]:
        p = self.params
        events = sorted(
            (e for e in dataset.events if e.timestamp is not None and e.source == p.source),
            key=lambda e: e.timestamp,  # type: ignore[arg-type, return-value]
        )
        n_bins = p.weeks if p.per_week else 1
        bins = [_Bin() for _ in range(n_bins)]
        if events:
            origin = dataset.start if dataset.start is not None else events[0].timestamp
            self._accumulate(events, bins, origin)  # type: ignore[arg-type]
        out = []
        for spec, value in zip(self._specs, (v for b in bins for v in b.values().values()), strict=True):
            out.append(min(max(value, spec.low), spec.high))  # type: ignore[type-var]
        return out

    def _week(self, when: datetime, origin: datetime) -> int | None:
        if not self.params.per_week:
            return 0
        k = (when - origin) // _WEEK
        return k if 0 <= k < self.params.weeks else None

    def _accumulate(self, events: Sequence[Event], bins: list[_Bin], origin: datetime) -> None:
        session_gap = self.params.session_gap_minutes * 60.0
        cap = self.params.gap_cap_minutes * 60.0
        previous_gap = None  # gap before the current event, seconds
        for i, ev in enumerate(events):
            when: datetime = ev.timestamp  # type: ignore[assignment]  # featurize kept timed events only
            nxt = events[i + 1] if i + 1 < len(events) else None
            gap = (nxt.timestamp - when).total_seconds() if nxt is not None else None  # type: ignore[operator]
            k = self._week(when, origin)
            if k is None:
                previous_gap = gap
                continue
            b = bins[k]
            c = b.counts
            if previous_gap is None or previous_gap > session_gap:
                c["sessions"] += 1
            b.days.add(when.date())
            if gap is not None and gap <= session_gap:
                c["time_on_site_minutes"] += min(gap, cap) / 60.0
            previous_gap = gap
            t = ev.type
            if t == "play_video":
                c["video_plays"] += 1
                c["video_seconds_watched"] += _watched(ev, nxt, gap, session_gap, cap)
            elif t == "problem_check":
                f = ev.fields
                if "success" in f:
                    c["problem_attempts"] += 1
                    if f["success"] is True:
                        c["correct_submissions"] += 1
                    if "problem_id" in f:
                        b.problems.add(f["problem_id"])
                    grade, top = f.get("grade"), f.get("max_grade")
                    if _is_number(grade) and _is_number(top) and top > 0:  # type: ignore[operator]
                        b.grade_sum += min(max(grade / top, 0.0), 1.0)  # type: ignore[operator]
                        b.graded += 1
            elif t in _POSTS:
                c["forum_posts"] += 1
            elif t == "forum_thread_viewed":
                c["forum_views"] += 1
            elif t == "page_view":
                c["page_views"] += 1
            elif t in _SEQ:
                c["seq_navigations"] += 1


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _watched(play: Event, nxt: Event | None, gap: float | None, session_gap: float, cap: float) -> float:
    """Seconds of video one play accounts for (rule in the module docstring)."""
    if nxt is None or gap is None:
        return 0.0
    start = play.fields.get("current_time")
    same_video = play.fields.get("video_id") == nxt.fields.get("video_id") or (
        "video_id" not in play.fields or "video_id" not in nxt.fields
    )
    if _is_number(start) and same_video:
        end = None
        if nxt.type in _PLAY_END:
            end = nxt.fields.get("current_time")
        elif nxt.type == "seek_video":
            end = nxt.fields.get("old_time")
        if _is_number(end):
            return max(0.0, float(end) - float(start))  # type: ignore[arg-type]
    return min(gap, cap) if gap <= session_gap else 0.0
