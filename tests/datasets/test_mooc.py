"""The MOOC simulator: determinism, the latent model, the written logs, learnable dropout."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from anonml.datasets.mooc import (
    COURSE_START,
    DROPOUT_THRESHOLD,
    SimulatedStudent,
    simulate_students,
    write_edx_logs,
)
from anonml.errors import RecordError
from importers.edx import EdxImporter

WEEK_S = 7 * 86400


@pytest.fixture(scope="module")
def cohort() -> list[SimulatedStudent]:
    return simulate_students(400, weeks=8, seed=11)


def _time(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)  # edX: naive = UTC


def _week(value: str) -> int:
    return int((_time(value) - COURSE_START).total_seconds() // WEEK_S)


def _attributable(student: SimulatedStudent) -> list[dict]:
    return [line for line in student.lines if line["username"] not in ("", "anonymous")]


def test_same_seed_same_students_and_same_bytes(tmp_path: Path) -> None:
    a = simulate_students(12, weeks=4, seed=7)
    b = simulate_students(12, weeks=4, seed=7)
    assert a == b
    logs_a = write_edx_logs(a, tmp_path / "a")
    logs_b = write_edx_logs(b, tmp_path / "b")
    assert [p.path.read_bytes() for p in logs_a] == [p.path.read_bytes() for p in logs_b]
    assert simulate_students(12, weeks=4, seed=8)[0].lines != a[0].lines


def test_dropout_follows_the_engagement_threshold(cohort: list[SimulatedStudent]) -> None:
    dropouts = 0
    for s in cohort:
        e = np.array(s.engagement)
        assert len(e) == 8 and ((0 <= e) & (e <= 1)).all()
        if s.dropout_week is None:
            assert (e[1:] >= DROPOUT_THRESHOLD).all()
        else:
            dropouts += 1
            assert s.dropout_week >= 1
            assert e[s.dropout_week] < DROPOUT_THRESHOLD
            assert (e[1 : s.dropout_week] >= DROPOUT_THRESHOLD).all()
    assert 0.3 * len(cohort) < dropouts < 0.95 * len(cohort)  # both classes are present


def test_students_are_active_every_week_before_dropout_and_silent_after(
    cohort: list[SimulatedStudent],
) -> None:
    for s in cohort:
        weeks = Counter(_week(line["time"]) for line in _attributable(s))
        active = 8 if s.dropout_week is None else s.dropout_week
        assert sorted(weeks) == list(range(active)), s.username


def test_engagement_dynamics_match_the_model(cohort: list[SimulatedStudent]) -> None:
    # log(e_w / e_{w-1}) - log(d) = eps ~ N(0, 0.15^2) wherever clipping at 1 cannot bite;
    # pairs are selected on e_{w-1} and d only (e_{w-1} d e^{4 sigma} < 1), never on eps.
    residuals = []
    for s in cohort:
        for w in range(1, 8):
            prev = s.engagement[w - 1]
            if 0 < prev and prev * s.decay * np.exp(4 * 0.15) < 1:
                residuals.append(np.log(s.engagement[w] / prev) - np.log(s.decay))
    r = np.array(residuals)
    n = r.size
    assert n > 1000
    # mean within 3 standard errors 0.15/sqrt(n); sample sd within 3 * 0.15/sqrt(2n)
    assert abs(r.mean()) < 3 * 0.15 / np.sqrt(n)
    assert abs(r.std(ddof=1) - 0.15) < 3 * 0.15 / np.sqrt(2 * n)


def test_sessions_per_week_are_one_plus_poisson_three_e(cohort: list[SimulatedStudent]) -> None:
    # Each session ends with one page_close. E[sessions - 1 - 3e] = 0 and
    # Var = 3e (Poisson), so the mean over N student-weeks is within 3 sqrt(sum 3e)/N.
    diffs, variance = [], 0.0
    for s in cohort:
        closes = Counter(_week(line["time"]) for line in s.lines if line["event_type"] == "page_close"
                         and line["username"] not in ("", "anonymous"))
        for w in range(8 if s.dropout_week is None else s.dropout_week):
            diffs.append(closes[w] - 1 - 3 * s.engagement[w])
            variance += 3 * s.engagement[w]
    assert abs(np.mean(diffs)) < 3 * np.sqrt(variance) / len(diffs)


def test_dropout_is_learnable_from_the_first_two_weeks(cohort: list[SimulatedStudent]) -> None:
    # Students active in weeks 0 and 1; label: dropped out by week 4. Features: log(1 + lines)
    # in weeks 0 and 1. Observed held-out AUC for this seed: 0.74. The Hanley-McNeil standard
    # error at ~90 per class is ~0.036, so 0.65 sits 2.5 SE below the observation and 4 SE
    # above the 0.5 of a model whose dropout ignored engagement.
    X, y = [], []
    for s in cohort:
        if s.dropout_week is not None and s.dropout_week < 2:
            continue
        weeks = Counter(_week(line["time"]) for line in _attributable(s))
        X.append([np.log1p(weeks[0]), np.log1p(weeks[1])])
        y.append(int(s.dropout_week is not None and s.dropout_week <= 4))
    X_arr, y_arr = np.array(X), np.array(y)
    half = len(y_arr) // 2
    model = LogisticRegression().fit(X_arr[:half], y_arr[:half])
    auc = roc_auc_score(y_arr[half:], model.predict_proba(X_arr[half:])[:, 1])
    assert auc > 0.65


def test_written_logs_mix_real_shapes_and_import_cleanly(tmp_path: Path) -> None:
    students = simulate_students(40, weeks=3, seed=5)
    logs = write_edx_logs(students, tmp_path)
    assert [log.path.name.endswith(".gz") for log in logs] == [i % 4 == 3 for i in range(40)]
    shapes, times, names = Counter(), Counter(), Counter()
    for s in students:
        for line in s.lines:
            event = line["event"]
            if isinstance(event, dict):
                shapes["object"] += 1
            elif event.startswith("{"):
                shapes["json string"] += 1
            elif "=" in event:
                shapes["form"] += 1
            times["offset" if line["time"].endswith("+00:00") else "naive"] += 1
            names["name" in line] += 1
    assert set(shapes) == {"object", "json string", "form"}
    assert times["offset"] > 0 and times["naive"] > 0
    assert names[True] > 0 and names[False] > 0

    importer = EdxImporter()
    types: Counter[str] = Counter()
    dropped: Counter[str] = Counter()
    for student, log in zip(students, logs, strict=True):
        events = []
        for item in importer.parse(log.path):
            assert not isinstance(item, RecordError), str(item)
            events.append(item)
        dropped += importer.dropped
        assert len(events) == log.n_events == student.n_events
        assert sum(importer.dropped.values()) == log.n_unattributed
        assert {e.user for e in events} == {student.username}
        types.update(e.type for e in events)
    assert sum(dropped.values()) == sum(s.n_unattributed for s in students) > 0
    assert set(types) >= {
        "problem_check", "play_video", "pause_video", "load_video", "seek_video", "seq_goto",
        "seq_next", "seq_prev", "page_close", "page_view", "forum_thread_viewed",
        "forum_thread_created", "forum_response_created", "forum_comment_created",
        "enrollment_activated",
    }
    assert types["enrollment_activated"] == 40


def test_ground_truth_matches_the_students(tmp_path: Path) -> None:
    students = simulate_students(5, weeks=6, seed=2)
    logs = write_edx_logs(students, tmp_path)
    for s, log in zip(students, logs, strict=True):
        assert (log.username, log.dropout_week, log.engagement, log.ability) == (
            s.username, s.dropout_week, s.engagement, s.ability,
        )
        assert log.n_events == len(_attributable(s)) > 0
        assert log.n_unattributed == len(s.lines) - log.n_events


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n": 0}, "n must be a positive integer"),
        ({"n": 3, "weeks": 0}, "weeks must be an integer in"),
        ({"n": 3, "start": datetime(2024, 1, 8)}, "start must be timezone-aware"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        simulate_students(**kwargs)
