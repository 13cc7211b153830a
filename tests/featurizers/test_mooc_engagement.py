"""mooc_engagement against values computed by hand on a small hand-written dataset."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from anonml.errors import PluginError
from anonml.model import Dataset, Event
from anonml.plugins import create
from featurizers.mooc_engagement import FEATURES, MoocEngagementFeaturizer

ORIGIN = datetime(2024, 1, 8, tzinfo=UTC)  # a Monday: week 0 is Jan 8–14, week 1 Jan 15–21


def ev(when: str, type_: str, source: str = "edx", **fields: object) -> Event:
    return Event(source=source, type=type_, timestamp=datetime.fromisoformat(when + "+00:00"),
                 fields=fields, user="ada")


def server_check(when: str, problem: str, grade: float, top: float, ok: bool) -> Event:
    return ev(when, "problem_check", event_source="server", problem_id=problem, grade=grade,
              max_grade=top, attempts=1, success=ok)


EVENTS = [
    # week 0, session 1 (Jan 9): gaps 60, 120, 1020, 1, 299, 60, 840 s
    ev("2024-01-09T10:00:00", "page_view"),
    ev("2024-01-09T10:01:00", "play_video", video_id="vid_a", current_time=12.5),
    ev("2024-01-09T10:03:00", "pause_video", video_id="vid_a", current_time=132.5),  # watched 120
    server_check("2024-01-09T10:20:00", "p1", 1, 2, False),
    ev("2024-01-09T10:20:01", "problem_check", event_source="browser", inputs=1),  # not counted
    server_check("2024-01-09T10:25:00", "p1", 2, 2, True),
    ev("2024-01-09T10:26:00", "seq_goto", old=1, new=2),
    ev("2024-01-09T10:40:00", "page_close"),
    # week 0, session 2 (Jan 9, 7 h later): gaps 300, 60, 60, 120, 1260 s
    ev("2024-01-09T18:00:00", "forum_thread_viewed", thread_id="t1"),
    ev("2024-01-09T18:05:00", "play_video", video_id="vid_b", current_time=0.0),
    ev("2024-01-09T18:06:00", "seek_video", video_id="vid_b", old_time=50.0, new_time=20.0),  # 50
    ev("2024-01-09T18:07:00", "play_video", video_id="vid_b", current_time=20.0),
    ev("2024-01-09T18:09:00", "load_video", video_id="vid_c"),  # other video: wall clock 120
    ev("2024-01-09T18:30:00", "forum_thread_created", post_id="t2"),
    # week 0, session 3 (Jan 11): gap 30 s; the play is followed by a new session: 0 s
    ev("2024-01-11T09:00:00", "page_view"),
    ev("2024-01-11T09:00:30", "play_video", video_id="vid_a", current_time=0.0),
    # week 1, session 4 (Jan 15): gaps 600, 120 s
    ev("2024-01-15T12:00:00", "play_video", video_id="vid_x", current_time=5.0),
    ev("2024-01-15T12:10:00", "stop_video", video_id="vid_x", current_time=605.0),  # 600
    ev("2024-01-15T12:12:00", "forum_response_created", post_id="r1"),
    # week 1, session 5 (Jan 16): gaps 30, 30, 60 s
    ev("2024-01-16T08:00:00", "seq_next", old=2, new=3),
    ev("2024-01-16T08:00:30", "seq_prev", old=3, new=2),
    server_check("2024-01-16T08:01:00", "p2", 0, 1, False),
    server_check("2024-01-16T08:02:00", "p1", 1, 1, True),
]
NOISE = [
    ev("2024-01-09T10:10:00", "page_view", source="browser_history"),  # another source: ignored
    Event(source="edx", type="page_view", fields={}, user="ada"),  # static: ignored
]

# Hand-computed (module docstring formulas; session gap 30 min, gap cap 10 min):
#   time on site: s1 60+120+600+1+299+60+600 = 1740 s; s2 300+60+60+120+600 = 1140 s;
#   s3 30 s; s4 600+120 = 720 s; s5 30+30+60 = 120 s -> 3750 s = 62.5 min
#   video seconds: 120 + 50 + 120 + 0 + 600 = 890
#   average grade: (1/2 + 2/2 + 0/1 + 1/1) / 4 = 0.625
TOTALS = {
    "sessions": 5,
    "active_days": 4,
    "time_on_site_minutes": 62.5,
    "video_plays": 5,
    "video_seconds_watched": 890,
    "problem_attempts": 4,
    "distinct_problems": 2,
    "correct_submissions": 2,
    "average_grade": 0.625,
    "forum_posts": 2,
    "forum_views": 1,
    "page_views": 2,
    "seq_navigations": 3,
}
WEEK0 = {
    "sessions": 3, "active_days": 2, "time_on_site_minutes": 48.5, "video_plays": 4,
    "video_seconds_watched": 290, "problem_attempts": 2, "distinct_problems": 1,
    "correct_submissions": 1, "average_grade": 0.75, "forum_posts": 1, "forum_views": 1,
    "page_views": 2, "seq_navigations": 1,
}
WEEK1 = {
    "sessions": 2, "active_days": 2, "time_on_site_minutes": 14.0, "video_plays": 1,
    "video_seconds_watched": 600, "problem_attempts": 2, "distinct_problems": 2,
    "correct_submissions": 1, "average_grade": 0.5, "forum_posts": 1, "forum_views": 0,
    "page_views": 0, "seq_navigations": 2,
}


def dataset(events: list[Event], start: datetime | None = ORIGIN) -> Dataset:
    end = None if start is None else start + timedelta(days=14)
    return Dataset.of("ada", events, start=start, end=end)


def named(featurizer: MoocEngagementFeaturizer, values: list[float]) -> dict[str, float]:
    return dict(zip([s.name for s in featurizer.features()], values, strict=True))


def test_thirteen_features_with_hand_computed_totals() -> None:
    f = MoocEngagementFeaturizer({"weeks": 2})
    got = named(f, f.featurize(dataset(EVENTS + NOISE)))
    assert list(got) == list(TOTALS)
    assert got == pytest.approx(TOTALS)


def test_per_week_features_split_at_the_dataset_start() -> None:
    f = MoocEngagementFeaturizer({"weeks": 2, "per_week": True})
    got = named(f, f.featurize(dataset(EVENTS + NOISE)))
    expected = {f"{k}_w0": v for k, v in WEEK0.items()} | {f"{k}_w1": v for k, v in WEEK1.items()}
    assert got == pytest.approx(expected)


def test_per_week_totals_add_up_for_additive_features() -> None:
    for name in ("sessions", "time_on_site_minutes", "video_seconds_watched", "problem_attempts"):
        assert WEEK0[name] + WEEK1[name] == pytest.approx(TOTALS[name])


def test_per_week_ignores_events_outside_the_weeks_and_defaults_origin_to_first_event() -> None:
    late = ev("2024-01-30T10:00:00", "page_view")  # week 3 of a Jan 9 origin
    f = MoocEngagementFeaturizer({"weeks": 2, "per_week": True})
    without_start = named(f, f.featurize(dataset(EVENTS + [late], start=None)))
    # origin = first event (Jan 9 10:00): the Jan 15/16 events are still week 0's,
    # so week 0 holds every event but the late one and week 1 is empty.
    assert without_start["page_views_w0"] == 2 and without_start["page_views_w1"] == 0
    assert without_start["sessions_w0"] == 5 and without_start["sessions_w1"] == 0


def test_session_gap_and_cap_are_parameters() -> None:
    f = MoocEngagementFeaturizer({"weeks": 2, "session_gap_minutes": 20, "gap_cap_minutes": 20})
    got = named(f, f.featurize(dataset(EVENTS)))
    # The 21-minute gap of session 2 now splits it: 6 sessions; uncapped in-session gaps:
    # s1 60+120+1020+1+299+60+840 = 2400; s2a 540; s3 30; s4 720; s5 120 -> 3810 s = 63.5 min.
    assert got["sessions"] == 6
    assert got["time_on_site_minutes"] == pytest.approx(63.5)


def test_values_are_clipped_into_the_declared_range() -> None:
    hourly = [ev((ORIGIN + timedelta(hours=h)).strftime("%Y-%m-%dT%H:%M:%S"), "page_view") for h in range(40)]
    f = MoocEngagementFeaturizer({"weeks": 1})
    got = named(f, f.featurize(dataset(hourly)))
    assert got["sessions"] == 30.0  # 40 sessions, high = 30 for one week
    assert got["page_views"] == 40.0
    assert got["active_days"] == 2.0


def test_empty_instance_is_all_zero() -> None:
    f = MoocEngagementFeaturizer()
    assert f.featurize(dataset([])) == [0.0] * len(FEATURES)


def test_ranges_scale_with_weeks_except_average_grade() -> None:
    specs = {s.name: s for s in MoocEngagementFeaturizer({"weeks": 3}).features()}
    assert (specs["sessions"].low, specs["sessions"].high) == (0.0, 90.0)
    assert specs["active_days"].high == 21.0
    assert specs["average_grade"].high == 1.0
    weekly = MoocEngagementFeaturizer({"weeks": 3, "per_week": True}).features()
    assert len(weekly) == 39 and weekly[13].name == "sessions_w1" and weekly[13].high == 30.0


def test_bad_params_are_refused() -> None:
    with pytest.raises(PluginError, match="gap_cap_minutes must not exceed"):
        MoocEngagementFeaturizer({"session_gap_minutes": 5, "gap_cap_minutes": 10})
    with pytest.raises(PluginError, match="weeks"):
        MoocEngagementFeaturizer({"weeks": 0})


def test_registered_as_an_entry_point() -> None:
    f = create("featurizer", "mooc_engagement", {"weeks": 4})
    assert isinstance(f, MoocEngagementFeaturizer) and f.params.weeks == 4
