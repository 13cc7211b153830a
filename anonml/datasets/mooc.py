"""A MOOC simulator: students with a latent engagement level writing real edX tracking logs.

The model (seeded, vectorised over students):

* ability ``a_i ~ N(0, 1)``;
* initial engagement ``e_i0 = expit(0.9 + 1.1 z_i + 0.5 a_i)``, ``z_i ~ N(0, 1)``;
* a personal weekly decay ``d_i ~ N(0.72, 0.15)`` clipped to ``[0.3, 1.02]`` and
  multiplicative noise: ``e_iw = clip(e_i,w-1 · d_i · exp(ε_iw), 0, 1)``,
  ``ε_iw ~ N(0, 0.15²)``;
* the student drops out in the first week ``w >= 1`` with ``e_iw < 0.2``
  (:data:`DROPOUT_THRESHOLD`) and is silent from then on; week 0 is always
  active (everyone who enrolled shows up once).

In an active week the student has ``1 + Poisson(3 e)`` sessions, and each
session ``Poisson(λ(e))`` sequence moves, video plays (load, play, sometimes a
seek and replay, then pause or stop), problems (1–3 graded attempts, correct
with probability ``expit(1.3 a + 0.4 + 0.5 attempt − difficulty)``), forum
views and posts and page views, closed by ``page_close``; every rate grows with
``e``. Early weeks thus reveal both the level ``e_0`` and the trend ``d`` that
decide the dropout week: dropout is learnable from the first weeks' activity.

:func:`write_edx_logs` writes one tracking log per student in edX's format,
mixing what real logs mix: ``event`` as an object (server), a JSON-encoded
string (browser) or a URL-encoded form (browser ``problem_check``); ``name``
superseding ``event_type`` (mobile video, new sequence and enrolment events);
``time`` with and without its ``+00:00`` offset; implicit page requests; plain
and gzipped files; and a few logged-out lines (blank or ``"anonymous"``
username) that an importer must drop.

Everything is a pure function of the seed: the same seed writes the same bytes.
Per-student detail (gaps, choices) uses a :class:`random.Random` seeded from
the numpy generator, because per-event numpy scalar draws would dominate the
run time.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from scipy.special import expit

from anonml.randomness import generator_from

__all__ = [
    "COURSE_ID",
    "COURSE_START",
    "DROPOUT_THRESHOLD",
    "SimulatedStudent",
    "StudentLog",
    "simulate_students",
    "write_edx_logs",
    "write_sample",
]

COURSE_ID = "course-v1:AnonMLx+MOOC101+2024_T1"
COURSE_START = datetime(2024, 1, 8, tzinfo=UTC)  # a Monday
DROPOUT_THRESHOLD = 0.2

_HOST = "courses.example.org"
_AGENT = "Mozilla/5.0 (X11; Linux x86_64) AnonML-simulator/1.0"
_VIDEOS_PER_WEEK = 4
_PROBLEMS_PER_WEEK = 5
_UNITS_PER_WEEK = 6
_WEEK = 7 * 86400.0


@dataclass(frozen=True, slots=True)
class SimulatedStudent:
    """One simulated learner and the tracking-log lines their browser and the server wrote.

    ``engagement[w]`` is the latent level in week ``w`` for every simulated week;
    the student is active in week ``w`` iff ``dropout_week is None or w < dropout_week``.
    ``lines`` are the log records in time order, including ``n_unattributed``
    logged-out lines (blank or ``"anonymous"`` username) that are not theirs.
    """

    username: str
    user_id: int
    ability: float
    decay: float
    engagement: tuple[float, ...]
    dropout_week: int | None
    lines: tuple[dict, ...]
    n_unattributed: int

    @property
    def n_events(self) -> int:
        """Lines attributable to this student (what an importer should keep)."""
        return len(self.lines) - self.n_unattributed


@dataclass(frozen=True, slots=True)
class StudentLog:
    """Ground truth for one written log file."""

    username: str
    path: Path
    dropout_week: int | None
    engagement: tuple[float, ...]
    ability: float
    n_events: int
    n_unattributed: int

    @classmethod
    def of(cls, student: SimulatedStudent, path: Path) -> StudentLog:
        """The ground truth of ``student``'s log written at ``path``: every other field is the student's."""
        facts = {f.name: getattr(student, f.name) for f in fields(cls) if f.name != "path"}
        return cls(path=path, **facts)


@dataclass(frozen=True, slots=True)
class _Course:
    course_id: str
    org: str
    start: float  # POSIX seconds
    videos: tuple[tuple[tuple[str, float], ...], ...]  # per week: (video id, length s)
    problems: tuple[tuple[tuple[str, str, int, float], ...], ...]  # (usage key, html id, max, difficulty)
    sequences: tuple[str, ...]
    base_url: str

    @classmethod
    def build(cls, course_id: str, start: datetime, weeks: int) -> _Course:
        key = course_id.split(":", 1)[1] if course_id.startswith("course-v1:") else course_id
        key = re.sub(r"[^A-Za-z0-9_.+-]", "_", key)

        def block(kind: str, label: str) -> str:
            digest = hashlib.blake2b(f"{course_id}/{label}".encode(), digest_size=16).hexdigest()
            return f"block-v1:{key}+type@{kind}+block@{digest}"

        # Fixed course content, drawn from a generator keyed by the course only, so
        # that two cohorts of the same course share their videos and problems.
        content = random.Random(course_id)
        videos, problems = [], []
        for w in range(weeks):
            videos.append(
                tuple(
                    (block("video", f"w{w}v{k}").rsplit("@", 1)[1], float(content.randint(180, 900)))
                    for k in range(_VIDEOS_PER_WEEK)
                )
            )
            week_problems = []
            for k in range(_PROBLEMS_PER_WEEK):
                usage = block("problem", f"w{w}p{k}")
                html = re.sub(r"[^A-Za-z0-9]", "_", usage)
                week_problems.append((usage, html, content.choice((1, 1, 2, 3)), content.uniform(-0.5, 1.0)))
            problems.append(tuple(week_problems))
        sequences = tuple(block("sequential", f"w{w}") for w in range(weeks))
        return cls(
            course_id=course_id,
            org=key.split("+", 1)[0],
            start=start.timestamp(),
            videos=tuple(videos),
            problems=tuple(problems),
            sequences=sequences,
            base_url=f"https://{_HOST}/courses/{course_id}/courseware",
        )


def _check_simulation(n: int, weeks: int, course_id: str, start: datetime) -> None:
    """Refuse arguments :func:`simulate_students` cannot simulate, naming the argument."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if isinstance(weeks, bool) or not isinstance(weeks, int) or not 1 <= weeks <= 52:
        raise ValueError(f"weeks must be an integer in [1, 52], got {weeks!r}")
    if start.tzinfo is None or start.utcoffset() is None:
        raise ValueError("start must be timezone-aware")
    if not course_id:
        raise ValueError("course_id must not be empty")


def _engagement_paths(
    rng: np.random.Generator, n: int, weeks: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Ability, weekly decay, engagement paths and first week below the dropout threshold.

    Engagement starts at ``expit(0.9 + 1.1 z + 0.5 ability)`` and is multiplied
    each week by ``decay * exp(noise)``, clipped to [0, 1] (module docstring).
    ``first_below[i]`` is the first week ``w >= 1`` with engagement under
    :data:`DROPOUT_THRESHOLD`, or -1 if there is none.
    """
    ability = rng.normal(size=n)
    engagement = np.empty((n, weeks))
    engagement[:, 0] = expit(0.9 + 1.1 * rng.normal(size=n) + 0.5 * ability)
    decay = np.clip(rng.normal(0.72, 0.15, size=n), 0.3, 1.02)
    noise = rng.normal(0.0, 0.15, size=(n, weeks))
    for w in range(1, weeks):
        engagement[:, w] = np.clip(engagement[:, w - 1] * decay * np.exp(noise[:, w]), 0.0, 1.0)
    below = engagement[:, 1:] < DROPOUT_THRESHOLD
    first_below = np.where(below.any(axis=1), below.argmax(axis=1) + 1, -1)
    return ability, decay, engagement, first_below


def simulate_students(
    n: int,
    *,
    weeks: int = 10,
    seed: int | np.random.Generator | None = None,
    course_id: str = COURSE_ID,
    start: datetime = COURSE_START,
) -> list[SimulatedStudent]:
    """Simulate ``n`` students over ``weeks`` weeks of one course (model in the module docstring).

    Parameters
    ----------
    n : int
        Number of students (``>= 1``).
    weeks : int, default=10
        Course length in weeks (1–52); week ``w`` is ``[start + 7w days, start + 7(w+1) days)``.
    seed : int, numpy.random.Generator or None, default=None
        Randomness; ``None`` seeds from the OS CSPRNG. The same int gives the same students.
    course_id : str, default=COURSE_ID
    start : datetime, default=COURSE_START
        Course start, timezone-aware.

    Returns
    -------
    list of SimulatedStudent
        In username order (``learner0000``, ``learner0001``, ...).

    Examples
    --------
    >>> students = simulate_students(3, weeks=2, seed=0)
    >>> [s.username for s in students]
    ['learner0000', 'learner0001', 'learner0002']
    >>> students == simulate_students(3, weeks=2, seed=0)
    True
    """
    _check_simulation(n, weeks, course_id, start)
    rng = generator_from(seed, name="seed")
    course = _Course.build(course_id, start, weeks)
    ability, decay, engagement, first_below = _engagement_paths(rng, n, weeks)
    student_seeds = rng.integers(0, 2**63 - 1, size=n)

    students = []
    for i in range(n):
        dropout = int(first_below[i]) if first_below[i] > 0 else None
        active_weeks = weeks if dropout is None else dropout
        rows = engagement[i].tolist()
        gen = np.random.default_rng(int(student_seeds[i]))
        fine = random.Random(int(student_seeds[i]))
        username = f"learner{i:04d}"
        lines, n_unattributed = _student_lines(
            course, username, 1000 + i, float(ability[i]), rows[:active_weeks],
            dropped=dropout is not None, gen=gen, fine=fine,
        )
        students.append(
            SimulatedStudent(
                username=username,
                user_id=1000 + i,
                ability=float(ability[i]),
                decay=float(decay[i]),
                engagement=tuple(rows),
                dropout_week=dropout,
                lines=tuple(lines),
                n_unattributed=n_unattributed,
            )
        )
    return students


class _Writer:
    """Builds one student's records; holds the per-student state and randomness."""

    def __init__(self, course: _Course, username: str, user_id: int, fine: random.Random) -> None:
        self.course = course
        self.username = username
        self.user_id = user_id
        self.r = fine
        self.lines: list[dict] = []
        self.session = ""
        self.t = 0.0
        self.page = course.base_url

    def time(self) -> str:
        stamp = datetime.fromtimestamp(self.t, UTC).isoformat(timespec="microseconds")
        # Older edX logs wrote no offset; both spellings mean UTC.
        return stamp[:-6] if self.r.random() < 0.2 else stamp

    def record(self, source: str, event_type: str, event: object, *, name: str | None = None,
               path: str = "/event", page: str | None = None, session: bool = True,
               user: str | None = None) -> dict:
        rec: dict = {
            "username": self.username if user is None else user,
            "event_source": source,
            "event_type": event_type,
            "time": self.time(),
            "ip": "192.0.2.10",
            "agent": _AGENT,
            "host": _HOST,
            "page": page,
            "session": self.session if session else "",
            "context": {
                "course_id": self.course.course_id,
                "org_id": self.course.org,
                "user_id": self.user_id if user is None else "",
                "path": path,
            },
            "event": event,
        }
        if name is not None:
            rec["name"] = name
        self.lines.append(rec)
        return rec

    def gap(self, low: float = 4.0, high: float = 90.0) -> None:
        self.t += self.r.uniform(low, high)

    # --- activities ----------------------------------------------------------

    def page_view(self, week: int) -> None:
        unit = self.r.randrange(_UNITS_PER_WEEK)
        path = f"/courses/{self.course.course_id}/courseware/week{week}/unit{unit}/"
        self.page = f"https://{_HOST}{path}"
        self.record("server", path, '{"POST": {}, "GET": {}}', path=path, session=False)
        self.gap()

    def sequence_move(self, week: int) -> None:
        old = self.r.randint(1, _UNITS_PER_WEEK)
        kind = self.r.choice(("seq_goto", "seq_next", "seq_prev"))
        new = {"seq_next": min(old + 1, _UNITS_PER_WEEK), "seq_prev": max(old - 1, 1)}.get(
            kind, self.r.randint(1, _UNITS_PER_WEEK)
        )
        members = {"old": old, "new": new, "id": self.course.sequences[week]}
        if self.r.random() < 0.5:  # older logs: JSON string, no name
            self.record("browser", kind, json.dumps(members), page=self.page)
        else:  # newer logs: name supersedes event_type, members as an object
            name = {
                "seq_goto": "edx.ui.lms.sequence.tab_selected",
                "seq_next": "edx.ui.lms.sequence.next_selected",
                "seq_prev": "edx.ui.lms.sequence.previous_selected",
            }[kind]
            members.update(current_tab=old, tab_count=_UNITS_PER_WEEK, widget_placement="top")
            if kind == "seq_goto":
                members["target_tab"] = new
            self.record("browser", kind, members, name=name, page=self.page)
        self.gap()

    def video(self, week: int, engagement: float) -> None:
        video_id, length = self.r.choice(self.course.videos[week])
        mobile = self.r.random() < 0.1
        source = "mobile" if mobile else "browser"
        code = "mobile" if mobile else self.r.choice(("html5", "yt_8cQp2aZ"))
        as_string = mobile or self.r.random() < 0.75

        def emit(event_type: str, name: str, **members: object) -> None:
            payload = {"id": video_id, "code": code, **members}
            event = json.dumps(payload) if as_string else payload
            self.record(source, event_type, event, name=name if mobile else None, page=self.page)

        emit("load_video", "edx.video.loaded")
        self.gap(2, 10)
        position = 0.0 if self.r.random() < 0.7 else round(self.r.uniform(0, length / 2), 1)
        emit("play_video", "edx.video.played", currentTime=position)
        watch = min(length - position, length * self.r.uniform(0.2, 1.0) * (0.5 + 0.5 * engagement))
        if self.r.random() < 0.35 and watch > 20:
            self.t += watch / 2
            old = round(position + watch / 2, 1)
            new = round(self.r.uniform(0, length - 5), 1)
            emit("seek_video", "edx.video.position.changed", old_time=old, new_time=new,
                 type=self.r.choice(("onSlideSeek", "onCaptionSeek")))
            self.gap(1, 3)
            position, watch = new, min(length - new, watch / 2)
            emit("play_video", "edx.video.played", currentTime=position)
        self.t += watch
        end = round(position + watch, 1)
        if end >= length - 0.5:
            emit("stop_video", "edx.video.stopped", currentTime=end)
        else:
            emit("pause_video", "edx.video.paused", currentTime=end)
        self.gap()

    def problem(self, week: int, ability: float) -> None:
        usage, html, max_grade, difficulty = self.r.choice(self.course.problems[week])
        for attempt in range(1, 4):
            self.gap(20, 240)
            answer = f"choice_{self.r.randrange(4)}"
            form = f"input_{html}_2_1={answer}"
            if max_grade > 1:
                form += f"&input_{html}_3_1%5B%5D=choice_{self.r.randrange(3)}"
            self.record("browser", "problem_check", form, page=self.page)
            correct = self.r.random() < expit(1.3 * ability + 0.4 + 0.5 * attempt - difficulty)
            grade = max_grade if correct else self.r.randrange(max_grade)
            self.t += self.r.uniform(0.2, 1.5)
            self.record(
                "server", "problem_check",
                {
                    "problem_id": usage,
                    "attempts": attempt,
                    "grade": grade,
                    "max_grade": max_grade,
                    "success": "correct" if correct else "incorrect",
                    "answers": {f"{html}_2_1": answer},
                    "state": {"seed": 1, "done": True},
                },
                path=f"/courses/{self.course.course_id}/xblock/{usage}/handler/xmodule_handler/problem_check",
                session=False,
            )
            if correct or self.r.random() < 0.4:
                break
        self.gap()

    def forum(self, post: bool) -> None:
        thread = hashlib.blake2b(f"{self.username}{self.t}".encode(), digest_size=12).hexdigest()
        common = {"commentable_id": "course", "id": thread,
                  "url": f"https://{_HOST}/courses/{self.course.course_id}/discussion/forum/course/threads/{thread}"}
        if not post:
            self.record("server", "edx.forum.thread.viewed",
                        {**common, "title": "Question about this week", "user_forums_roles": ["Student"]},
                        name="edx.forum.thread.viewed", session=False)
        else:
            kind = self.r.choice(("thread", "response", "comment"))
            event = {**common, "body": "I think the second step uses the chain rule.",
                     "truncated": False, "options": {"followed": True}, "user_forums_roles": ["Student"]}
            if kind == "thread":
                event.update(title="Week question", thread_type="discussion", anonymous=False,
                             anonymous_to_peers=False, title_truncated=False)
            else:
                event["discussion"] = {"id": thread[::-1]}
                if kind == "comment":
                    event["response"] = {"id": thread[1:] + "0"}
            name = f"edx.forum.{kind}.created"
            self.record("server", name, event, name=name, session=False)
        self.gap(30, 300)

    def enrollment(self, active: bool) -> None:
        name = "edx.course.enrollment.activated" if active else "edx.course.enrollment.deactivated"
        self.record("server", name, {"course_id": self.course.course_id, "user_id": self.user_id,
                                     "mode": "audit"}, name=name, path="/change_enrollment")
        self.gap(5, 30)

    def logged_out(self) -> None:
        path = f"/courses/{self.course.course_id}/about"
        user = self.r.choice(("", "anonymous"))
        self.record("server", path, '{"POST": {}, "GET": {}}', path=path, session=False, user=user)
        self.gap()


def _student_lines(
    course: _Course,
    username: str,
    user_id: int,
    ability: float,
    engagement: Sequence[float],
    *,
    dropped: bool,
    gen: np.random.Generator,
    fine: random.Random,
) -> tuple[list[dict], int]:
    w = _Writer(course, username, user_id, fine)
    unattributed = 0
    for week, e in enumerate(engagement):
        week_start = course.start + week * _WEEK
        week_end = week_start + _WEEK
        n_sessions = 1 + int(gen.poisson(3.0 * e))
        starts = sorted(week_start + fine.uniform(0, 6.5 * 86400) for _ in range(n_sessions))
        # One row per session: sequence moves, videos, problems, forum views, posts, page views.
        rates = np.array([1 + 3 * e, 0.3 + 2 * e, 0.2 + 2.2 * e, 0.1 + 1.2 * e, 0.02 + 0.3 * e, 0.5 + 2 * e])
        counts = gen.poisson(rates, size=(n_sessions, rates.size)).tolist()
        last_end = -math.inf
        for s, (start, row) in enumerate(zip(starts, counts, strict=True)):
            # Sessions never overlap and never spill into the next week (the truth is per week).
            start = max(start, last_end + 3600.0)
            if start > week_end - 4 * 3600.0 and s > 0:
                break
            w.t = start
            w.session = fine.getrandbits(128).to_bytes(16, "big").hex()
            if week == 0 and s == 0:
                w.enrollment(True)
            if fine.random() < 0.01:
                w.logged_out()
                unattributed += 1
            w.page_view(week)
            n_seq, n_video, n_problem, n_view, n_post, n_page = row
            activities = (["seq"] * n_seq + ["video"] * n_video + ["problem"] * n_problem
                          + ["view"] * n_view + ["post"] * n_post + ["page"] * n_page)
            fine.shuffle(activities)
            for activity in activities:
                if w.t > week_end - 2 * 3600.0:
                    break
                if activity == "seq":
                    w.sequence_move(week)
                elif activity == "video":
                    w.video(week, e)
                elif activity == "problem":
                    w.problem(week, ability)
                elif activity == "view":
                    w.forum(post=False)
                elif activity == "post":
                    w.forum(post=True)
                else:
                    w.page_view(week)
            w.record("browser", "page_close", "", page=w.page)
            last_end = w.t
    if dropped and fine.random() < 0.3:
        w.t = last_end + 60.0
        w.enrollment(False)
    return w.lines, unattributed


def write_edx_logs(students: Sequence[SimulatedStudent], folder: str | Path) -> list[StudentLog]:
    """Write one tracking log per student into ``folder`` and return the ground truth.

    Files are named ``tracking.log-<username>``; every fourth student's log is
    gzipped (``tracking.log-<username>.gz``, header mtime 0 so bytes are
    reproducible). Lines are ``json.dumps`` of each record, as edX writes them.

    Returns
    -------
    list of StudentLog
        In the order of ``students``: path, dropout week, engagement, ability
        and the number of attributable and logged-out lines written.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    logs = []
    for i, student in enumerate(students):
        text = "".join(json.dumps(line) + "\n" for line in student.lines).encode("utf-8")
        if i % 4 == 3:
            path = folder / f"tracking.log-{student.username}.gz"
            with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
                gz.write(text)
        else:
            path = folder / f"tracking.log-{student.username}"
            path.write_bytes(text)
        logs.append(StudentLog.of(student, path))
    return logs



def write_sample(folder: str | Path, n: int, *, weeks: int = 8, seed: int = 0) -> dict[str, object]:
    """``anonml datasets mooc``: ``n`` students' logs and their ground truth in ``folder``.

    Writes the logs of :func:`write_edx_logs` and ``truth.csv`` (``username,
    user_id, dropout_week, events``; an empty dropout week: completed the
    course). Refuses a folder that already holds tracking logs, so two
    samples never mix.

    Returns
    -------
    dict
        ``folder``, ``logs``, ``events``, ``dropouts``, ``truth`` (path), ``seed``, ``weeks``.
    """
    import csv

    from anonml.errors import AnonMLError

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise AnonMLError(f"{folder}: not a folder")
    if folder.is_dir() and any(folder.glob("tracking.log-*")):
        raise AnonMLError(f"{folder}: already holds tracking logs; choose an empty folder")
    try:
        students = simulate_students(n, weeks=weeks, seed=seed)
    except ValueError as exc:
        raise AnonMLError(str(exc)) from None
    try:
        logs = write_edx_logs(students, folder)
        truth = folder / "truth.csv"
        with open(truth, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(["username", "user_id", "dropout_week", "events"])
            for student in students:
                week = "" if student.dropout_week is None else student.dropout_week
                writer.writerow([student.username, student.user_id, week, student.n_events])
    except OSError as exc:
        raise AnonMLError(f"{folder}: cannot write: {exc.strerror or exc}") from None
    return {
        "folder": str(folder),
        "logs": len(logs),
        "events": sum(s.n_events for s in students),
        "dropouts": sum(s.dropout_week is not None for s in students),
        "truth": str(truth),
        "seed": seed,
        "weeks": weeks,
    }
