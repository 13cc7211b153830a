"""The edX tracking-log importer on hand-written fixtures (one per awkward variant) and the store."""

from __future__ import annotations

import gzip
import json
import random
import zlib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from anonml.errors import RecordError
from anonml.model import Event, Text
from anonml.plugins import create
from anonml.store import EventStore
from importers.edx import EdxImporter, sanitize_type
from importers.edx_events import naive_as_utc
from tests.importers.helpers import parse_failure, reject_reasons

FIXTURES = Path(__file__).parent / "fixtures" / "edx"
COURSE = "course-v1:FixtureX+EDX1+2024"
PAGE = "https://courses.example.org/courses/course-v1:FixtureX+EDX1+2024/courseware/w1/u1/"
SESSION = "0123456789abcdef0123456789abcdef"

# tracking.log: 25 lines, of which 3 cannot be attributed (blank, "anonymous", missing username).
EXPECTED_TYPES = [
    "enrollment_activated",
    "page_view",
    "play_video",
    "pause_video",
    "play_video",  # mobile: name edx.video.played supersedes event_type
    "seek_video",
    "stop_video",
    "load_video",
    "problem_check",  # browser, URL-encoded form
    "problem_check",  # server
    "problem_check",  # server
    "seq_goto",
    "seq_next",  # name edx.ui.lms.sequence.next_selected
    "seq_prev",
    "page_close",
    "forum_thread_created",
    "forum_response_created",
    "forum_comment_created",
    "forum_thread_viewed",
    "enrollment_deactivated",
    "edx_ui_lms_link_clicked",  # unknown: kept, sanitised
    "textbook_pdf_page_navigated",  # unknown, +02:00 offset
]


def parse(path: Path) -> tuple[list[Event], list[RecordError], EdxImporter]:
    importer = EdxImporter()
    events, errors = [], []
    for item in importer.parse(path):
        (errors if isinstance(item, RecordError) else events).append(item)
    return events, errors, importer


@pytest.fixture(scope="module")
def sample() -> list[Event]:
    events, errors, _ = parse(FIXTURES / "tracking.log")
    assert errors == []
    return events


def test_every_variant_becomes_one_typed_event(sample: list[Event]) -> None:
    assert [e.type for e in sample] == EXPECTED_TYPES
    assert {e.source for e in sample} == {"edx"}
    assert {e.user for e in sample} == {"ada"}


def test_unattributable_lines_are_dropped_and_counted() -> None:
    events, _, importer = parse(FIXTURES / "tracking.log")
    assert len(events) == 22
    assert importer.dropped == {"blank username": 2, "anonymous username": 1}


def test_server_problem_check_is_typed(sample: list[Event]) -> None:
    first, second = sample[9], sample[10]
    assert first.timestamp == datetime(2024, 1, 9, 18, 30, 1, tzinfo=UTC)
    assert first.fields == {
        "event_source": "server",
        "course_id": COURSE,
        "user_id": 41,
        "problem_id": "block-v1:FixtureX+EDX1+2024+type@problem+block@p1",
        "grade": 1.0,
        "max_grade": 2.0,
        "attempts": 1,
        "success": False,
    }
    assert (second.fields["success"], second.fields["attempts"], second.fields["grade"]) == (True, 2, 2.0)


def test_browser_problem_check_reads_the_url_encoded_form(sample: list[Event]) -> None:
    browser = sample[8]
    assert browser.fields["event_source"] == "browser"
    assert browser.fields["inputs"] == 2
    assert browser.fields["problem_html_id"] == "block-v1_FixtureX_EDX1_2024_type_problem_block_p1"
    assert "success" not in browser.fields and "grade" not in browser.fields


def test_video_events_from_json_strings_objects_and_mobile(sample: list[Event]) -> None:
    play, pause, mobile, seek = sample[2], sample[3], sample[4], sample[5]
    assert (play.fields["video_id"], play.fields["code"]) == ("vid_a", "html5")
    assert play.fields["current_time"] == 12.5
    assert pause.fields["current_time"] == 132.5  # event given as an object
    assert mobile.fields["event_source"] == "mobile"
    assert mobile.fields["current_time"] == 0.0 and isinstance(mobile.fields["current_time"], float)
    assert "session" not in mobile.fields  # blank session is absent, not ""
    assert mobile.timestamp == datetime(2024, 1, 9, 18, 10, tzinfo=UTC)
    assert {k: seek.fields[k] for k in ("old_time", "new_time", "seek_type")} == {
        "old_time": 60.0,
        "new_time": 30.5,
        "seek_type": "onSlideSeek",
    }
    assert "current_time" not in sample[7].fields  # load_video without a position


def test_sequence_navigation_fields(sample: list[Event]) -> None:
    goto, nxt, prev = sample[11], sample[12], sample[13]
    assert (goto.fields["old"], goto.fields["new"]) == (1, 4)
    assert (nxt.fields["old"], nxt.fields["new"], nxt.fields["tab_count"]) == (4, 5, 6)
    assert prev.fields["sequence_id"] == "block-v1:FixtureX+EDX1+2024+type@sequential+block@s1"


def test_page_view_time_without_offset_is_utc(sample: list[Event]) -> None:
    view = sample[1]
    assert view.timestamp == datetime(2024, 1, 9, 10, 0, 0, 250000, tzinfo=UTC)
    assert view.fields["path"] == Text("/courses/course-v1:FixtureX+EDX1+2024/courseware/w1/u1/")
    assert isinstance(view.fields["path"], Text)


def test_time_with_another_offset_is_converted_to_utc(sample: list[Event]) -> None:
    assert sample[-1].timestamp == datetime(2024, 1, 10, 8, 0, tzinfo=UTC)  # 10:00+02:00


def test_forum_events(sample: list[Event]) -> None:
    thread, response, comment, viewed = sample[15:19]
    assert thread.fields["post_id"] == "t100"
    assert thread.fields["thread_type"] == "question"
    assert thread.fields["anonymous"] is False
    assert thread.fields["title"] == Text("Why does step 2 hold?")
    assert (response.fields["post_id"], response.fields["thread_id"]) == ("r200", "t099")
    assert (comment.fields["thread_id"], comment.fields["response_id"]) == ("t099", "r199")
    assert viewed.fields["thread_id"] == "t099"
    assert "target_username" not in viewed.fields and "bob" not in json.dumps(viewed.fields)


def test_enrollment_falls_back_to_event_members(sample: list[Event]) -> None:
    activated, deactivated = sample[0], sample[19]
    assert activated.fields["mode"] == "audit"
    assert activated.fields["session"] == SESSION
    # context.course_id and context.user_id are null here: the event's own members fill in.
    assert deactivated.fields["course_id"] == COURSE
    assert deactivated.fields["user_id"] == 41


def test_unknown_type_keeps_only_common_fields(sample: list[Event]) -> None:
    clicked = sample[20]
    assert clicked.fields == {
        "event_source": "browser",
        "course_id": COURSE,
        "user_id": 41,
        "session": SESSION,
        "page": Text(PAGE),
    }


def test_gzipped_log() -> None:
    events, errors, importer = parse(FIXTURES / "tracking.log-20240109.gz")
    assert errors == []
    assert [e.type for e in events] == ["play_video", "pause_video"]
    assert importer.dropped == {"blank username": 1}


def test_blank_lines_are_skipped() -> None:
    events, errors, _ = parse(FIXTURES / "blank_lines.log")
    assert ([e.type for e in events], errors) == (["play_video", "pause_video"], [])


def test_empty_file_has_no_events() -> None:
    assert parse(FIXTURES / "empty.log")[:2] == ([], [])


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("bad_json.log", "invalid JSON at column 488: Expecting ',' delimiter"),
        ("bad_time.log", "field 'time': not an ISO 8601 timestamp: 'last tuesday'"),
        ("missing_time.log", "missing field 'time'"),
        ("bad_event_json.log", "field 'event': invalid JSON string: Expecting value"),
        ("bad_grade.log", "field 'event.grade': expected a number, got 'ten'"),
        ("bad_success.log", "field 'event.success': expected 'correct' or 'incorrect', got 'maybe'"),
        ("non_object_line.log", "expected a JSON object, got list"),
        ("missing_type.log", "missing field 'event_type' (and no 'name')"),
    ],
)
def test_bad_record_is_yielded_with_file_line_and_reason(name: str, reason: str) -> None:
    path = FIXTURES / name
    events, errors, _ = parse(path)
    assert reject_reasons(errors, path) == [f":2: {reason}"]
    assert events and events[0].type == "play_video"  # the good line before it still parses


def test_a_json_file_that_is_not_a_tracking_log_raises() -> None:
    path = FIXTURES / "not_edx.jsonl"
    assert parse_failure(EdxImporter(), path) == (
        f"{path}:1: not an edX tracking log: the first JSON record is not an object "
        "with 'event_type' or 'name'"
    )


def test_a_file_with_no_json_line_raises_after_reporting_its_lines() -> None:
    path = FIXTURES / "not_json.txt"
    items = []
    with pytest.raises(RecordError) as info:
        for item in EdxImporter().parse(path):
            items.append(item)
    assert str(info.value) == f"{path}: not an edX tracking log: no line is a JSON object"
    assert [e.line for e in items] == [1, 2]


def test_a_comment_heading_the_log_is_one_bad_record_not_a_refusal() -> None:
    path = FIXTURES / "commented.log"
    events, errors, _ = parse(path)
    assert [e.type for e in events] == ["play_video", "pause_video"]
    comment = "a '#' comment line, not JSON (--skip-bad reports it and imports the rest)"
    assert [(e.line, e.reason) for e in errors] == [(1, comment), (3, comment)]
    assert EdxImporter().detect(path) >= 0.85  # judged by the first JSON line


def test_a_comment_heading_the_log_imports_with_skip_bad(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path / 'events.db'}")
    with pytest.raises(RecordError, match=r"commented\.log:1: a '#' comment line, not JSON \(--skip-bad"):
        store.import_file(FIXTURES / "commented.log", EdxImporter())
    report = store.import_file(FIXTURES / "commented.log", EdxImporter(), skip_bad=True)
    assert (report.inserted, report.rejected) == (2, 2)


def test_a_json_quoted_form_is_decoded_before_it_is_read() -> None:
    events, errors, _ = parse(FIXTURES / "quoted_form.log")
    assert errors == []
    assert [(e.user, e.fields) for e in events] == [
        ("ada", {"event_source": "browser", "course_id": COURSE, "user_id": 41, "session": SESSION,
                 "inputs": 2, "problem_html_id": "block-v1_FixtureX_EDX1_2024_type_problem_block_p1"}),
        ("bob", {"event_source": "browser", "course_id": COURSE, "user_id": 42, "session": SESSION,
                 "inputs": 1, "problem_html_id": "p7"}),
    ]


def test_anonymous_enrollments_go_to_the_learner_the_log_names() -> None:
    events, errors, importer = parse(FIXTURES / "anonymous_enrollment.log")
    assert errors == []
    enrolments = [(e.user, e.fields["mode"], e.fields["user_id"]) for e in events
                  if e.type == "enrollment_activated"]
    assert enrolments == [("ada", "audit", 41), ("bob", "verified", 42)]
    # staff enrolling learner 43 (the context names user 7) is not the learner's act; 99 is never named
    assert importer.dropped == {"anonymous username": 1,
                                "anonymous enrollment of a learner not named in this log": 1}


def _write_lines(path: Path, *records: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _rec(**members: object) -> dict:
    return {"username": "ada", "event_source": "browser", "time": "2024-01-09T10:00:00+00:00", **members}


def test_blank_name_falls_back_to_event_type_and_numbers_may_be_strings(tmp_path: Path) -> None:
    path = _write_lines(
        tmp_path / "t.log",
        _rec(name="", event_type="play_video", event={"id": "v", "currentTime": "7.25"},
             context={"user_id": "42"}),
    )
    (event,), errors, _ = parse(path)
    assert errors == []
    assert (event.type, event.fields["current_time"], event.fields["user_id"]) == ("play_video", 7.25, 42)


def test_non_finite_and_non_numeric_members_are_errors(tmp_path: Path) -> None:
    path = _write_lines(
        tmp_path / "t.log",
        _rec(event_type="pause_video", event={"id": "v", "currentTime": "NaN"}),
        _rec(event_type="page_close", context={"user_id": "abc"}),
        _rec(event_type="seq_goto", event={"old": 1.5, "new": 2}),
        _rec(event_type="seq_goto", event=[1, 2]),
    )
    _, errors, _ = parse(path)
    assert reject_reasons(errors, path) == [
        ":1: field 'event.currentTime': 'NaN' is not a finite number",
        ":2: field 'context.user_id': expected a number, got 'abc'",
        ":3: field 'event.old': expected an integer, got 1.5",
        ":4: field 'event': expected an object for seq_goto, got [1, 2]",
    ]


def test_sanitize_type() -> None:
    assert sanitize_type("edx.ui.lms.link_clicked") == "edx_ui_lms_link_clicked"
    assert sanitize_type("  Weird--Name!! ") == "weird_name"
    assert sanitize_type("...") == "unknown"
    assert len(sanitize_type("a." * 300)) <= 256


# --- detection ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tracking.log", "tracking.log-20240109.gz", "bad_json.log"])
def test_detect_scores_tracking_logs_high(name: str) -> None:
    assert EdxImporter().detect(FIXTURES / name) >= 0.9


@pytest.mark.parametrize("name", ["not_edx.jsonl", "not_json.txt", "empty.log", "no_such_file.log"])
def test_detect_scores_other_files_zero(name: str) -> None:
    assert EdxImporter().detect(FIXTURES / name) == 0.0


def test_detect_is_zero_for_folders() -> None:
    assert EdxImporter().detect(FIXTURES) == 0.0


def test_detect_judges_a_first_line_longer_than_the_head_by_its_keys(tmp_path: Path) -> None:
    path = _write_lines(
        tmp_path / "long.log",
        _rec(event_type="problem_check", event={"state": "x" * 40000}),
    )
    assert 0.5 <= EdxImporter().detect(path) < 0.9


def test_registered_as_an_entry_point() -> None:
    importer = create("importer", "edx")
    assert isinstance(importer, EdxImporter) and importer.version == "1.0"


# --- end to end into a real store ----------------------------------------------------


def test_import_into_store_and_reimport_adds_nothing(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    report = store.import_file(FIXTURES / "tracking.log", EdxImporter())
    assert (report.accepted, report.inserted, report.duplicate, report.rejected) == (22, 22, 0, 0)
    assert store.users() == ["ada"]
    assert store.count(type="problem_check") == 3
    again = store.import_file(FIXTURES / "tracking.log", EdxImporter())
    assert (again.accepted, again.inserted, again.duplicate) == (22, 0, 22)
    assert store.count() == 22
    stored = store.events(type="problem_check")
    assert [e.fields.get("success") for e in stored] == [None, False, True]


def test_bad_record_rolls_the_import_back(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    store.import_file(FIXTURES / "tracking.log-20240109.gz", EdxImporter())
    before = (store.count(), len(store.imports()))
    with pytest.raises(RecordError) as info:
        store.import_file(FIXTURES / "bad_grade.log", EdxImporter())
    assert str(info.value).endswith("bad_grade.log:2: field 'event.grade': expected a number, got 'ten'")
    assert (store.count(), len(store.imports())) == before


def test_skip_bad_imports_the_rest_and_reports_each(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    report = store.import_file(FIXTURES / "bad_json.log", EdxImporter(), skip_bad=True)
    assert (report.accepted, report.inserted, report.rejected) == (2, 2, 1)
    assert reject_reasons(report.errors, FIXTURES / "bad_json.log") == [
        ":2: invalid JSON at column 488: Expecting ',' delimiter"
    ]
    assert [e.type for e in store.events()] == ["play_video", "stop_video"]


def test_detect_passes_over_comments_but_not_pretty_printed_json(tmp_path: Path) -> None:
    pretty = tmp_path / "events.json"
    pretty.write_text(json.dumps({"event_type": "x", "time": "2024-01-01T00:00:00Z"}, indent=2) + "\n")
    assert EdxImporter().detect(pretty) == 0.0
    banner = tmp_path / "banner.log"
    banner.write_text("# exported 2024-01-10\n# course X\n" + (FIXTURES / "tracking.log").read_text())
    assert EdxImporter().detect(banner) == pytest.approx(0.85)  # 0.95 less 0.05 per skipped line


def _outcome(importer: EdxImporter, path: Path) -> tuple[list[str], str | None, dict]:
    """Every item of a parse (events by content, errors by text), the error that ended it, the drops."""
    items: list[str] = []
    try:
        for item in importer.parse(path):
            items.append(str(item) if isinstance(item, RecordError) else item.model_dump_json())
    except RecordError as exc:
        return items, str(exc), dict(importer.dropped)
    return items, None, dict(importer.dropped)


@pytest.mark.parametrize("path", sorted(FIXTURES.iterdir()), ids=lambda p: p.name)
@pytest.mark.parametrize("chunk_lines", [1, 2, 3, 7])
def test_parsing_by_chunks_of_any_size_gives_the_same_events_errors_and_drops(
    path: Path, chunk_lines: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Names learned in one chunk attribute enrolments of another; the format check and bad lines
    come out where they would line by line (the parallel import relies on it)."""
    whole = _outcome(EdxImporter(), path)
    monkeypatch.setattr(EdxImporter, "chunk_lines", chunk_lines)
    assert _outcome(EdxImporter(), path) == whole


def _awkward_log(path: Path) -> Path:
    base = {"username": "a", "event_type": "play_video", "time": "2024-01-08T00:00:00+00:00",
            "event_source": "browser", "event": {"id": "v", "currentTime": 1}}
    lines = [json.dumps(base)]
    lines.append(json.dumps(base).replace('"username": "a"', '"username": "b\\ud800"'))  # lone surrogate
    for change in (
        {"time": "2024-01-08T01:00:00+02:00"}, {"time": "2024-01-08T00:00:00"},
        {"time": " 2024-01-08T00:00:00Z "}, {"time": "2024-01-08T00:00:00z"}, {"time": "yesterday"},
        {"time": 5}, {"username": "Léa"},
        {"username": "ANONYMOUS"}, {"username": " anonymous "}, {"event_type": "x" * 300},
        {"event_type": "/courses/x/ünï/"}, {"name": "  ", "event_type": " seq_goto "},
        {"event": {"id": "v", "currentTime": "NaN"}}, {"event": {"id": "v", "currentTime": 1e400}},
        {"page": "$t:not a tag"}, {"context": {"course_id": "$c", "user_id": 2**70}},
        {"page": "x\ud800"},  # a lone surrogate in a field: UTF-8 cannot store it
    ):
        lines.append(json.dumps({**base, **change}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("fixture", ["tracking.log", "anonymous_enrollment.log", None])
def test_make_gives_what_the_validating_constructor_gives(fixture, tmp_path, monkeypatch):
    path = FIXTURES / fixture if fixture else _awkward_log(tmp_path / "tracking.log")

    def outcome() -> list[str]:
        return [f"{item!r} {item.id}" if isinstance(item, Event) else str(item)
                for item in EdxImporter().parse(path)]

    fast = outcome()
    monkeypatch.setattr(Event, "make", classmethod(
        lambda cls, source, type, timestamp, fields, user: cls(
            source=source, type=type, timestamp=timestamp, fields=fields, user=user)))
    assert outcome() == fast
    if fixture is None:  # the surrogates reach the full check, which names them and the line
        assert any(":2: invalid event: user:" in line for line in fast)
        last = len(path.read_text(encoding="utf-8").splitlines())
        assert fast[-1].endswith(f":{last}: invalid event: fields: Value error, field 'page' holds a lone "
                                 "surrogate: not valid Unicode text, cannot be stored"), fast[-1]


def _play_lines(count: int) -> list[bytes]:
    """``count`` distinct play_video lines of one learner, in the shape of tracking.log's."""
    return [
        json.dumps({
            "username": "ada", "event_source": "browser", "event_type": "play_video",
            "time": f"2024-01-09T10:{i // 60:02d}:{i % 60:02d}.000000+00:00", "session": SESSION,
            "context": {"course_id": COURSE, "user_id": 41, "path": "/event"},
            "event": json.dumps({"id": f"video number {i}", "code": "html5", "currentTime": i}),
        }).encode() + b"\n"
        for i in range(count)
    ]


def _write(path: Path, lines: list[bytes]) -> Path:
    raw = b"".join(lines)
    path.write_bytes(gzip.compress(raw) if path.suffix == ".gz" else raw)
    return path


@pytest.mark.parametrize("name", ["tracking.log", "tracking.log-20240110.gz"])
def test_one_bad_byte_is_one_bad_record_at_its_true_line(tmp_path: Path, name: str) -> None:
    """A 0xFF in line 150 (a text-mode reader decoding 8 KiB at a time named line 143 and stopped)."""
    lines = _play_lines(300)
    lines[149] = lines[149].replace(b"video number", b"video \xffnumber")
    path = _write(tmp_path / name, lines)
    store = EventStore(f"sqlite:///{tmp_path / 'events.db'}")
    with pytest.raises(RecordError) as info:
        store.import_file(path, EdxImporter())
    column = lines[149].index(b"\xff") + 1
    assert str(info.value) == f"{path}:150: not UTF-8 text: byte 0xff at column {column} (invalid start byte)"
    assert store.count() == 0
    report = store.import_file(path, EdxImporter(), skip_bad=True)
    assert (report.inserted, report.rejected) == (299, 1) and [e.line for e in report.errors] == [150]
    assert sorted(e.fields["video_id"] for e in store.events()) == sorted(
        f"video number {i}" for i in range(300) if i != 149
    )


def test_scattered_corrupt_bytes_each_cost_only_their_own_line(tmp_path: Path) -> None:
    """20 random bytes (0x80-0xFF) written over ASCII in 20 random lines: 20 bad records, 380 events."""
    rng = random.Random(20)
    lines = _play_lines(400)
    hit = sorted(rng.sample(range(400), 20))
    for index in hit:
        line = bytearray(lines[index])
        line[rng.randrange(len(line) - 1)] = rng.randrange(0x80, 0x100)  # never the line end
        lines[index] = bytes(line)
    path = _write(tmp_path / "tracking.log", lines)
    events, errors, _ = parse(path)
    assert [e.line for e in errors] == [i + 1 for i in hit]
    assert all(e.reason.startswith("not UTF-8 text: byte 0x") for e in errors)
    assert len(events) == 380


def test_a_line_cut_short_keeps_its_position(tmp_path: Path) -> None:
    lines = _play_lines(3)
    lines[2] = lines[2][:90]  # the export stopped inside the last line
    path = _write(tmp_path / "tracking.log", lines)
    events, errors, _ = parse(path)
    assert len(events) == 2
    assert [(e.line, e.reason) for e in errors] == [
        (3, "invalid JSON at column 84: Unterminated string starting at "
            "(the line ends at column 90, inside a value: cut short?)")
    ]


def test_a_truncated_gzip_log_names_the_line_its_data_stops_in(tmp_path: Path) -> None:
    lines = _play_lines(3000)
    whole = gzip.compress(b"".join(lines))
    path = tmp_path / "tracking.log-20240110.gz"
    path.write_bytes(whole[: len(whole) // 2])  # a download cut short
    with gzip.open(path, "rb") as fh:  # how much decompresses, the standard library's way
        kept = bytearray()
        with pytest.raises(EOFError):
            while piece := fh.read1(1 << 12):
                kept += piece
    stops_in = kept.count(b"\n") + 1
    assert 1 < stops_in < 3000
    items = []
    with pytest.raises(RecordError) as info:
        for item in EdxImporter().parse(path):
            items.append(item)
    message = f"{path}:{stops_in}: cannot read on from this line: Compressed file ended"
    assert str(info.value).startswith(message)
    assert len(items) == stops_in - 1 and all(isinstance(i, Event) for i in items)


def test_a_gzip_log_corrupt_in_its_middle_is_a_record_error_naming_the_file_not_a_zlib_error(
    tmp_path: Path,
) -> None:
    lines = _play_lines(3000)
    # A second gzip member whose deflate data starts with a reserved block type (RFC 1951 §3.2.3,
    # BTYPE = 11): the standard library raises zlib.error there, not OSError or EOFError.
    damaged = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + b"\x07" + bytes(32)
    path = tmp_path / "tracking.log-20240111.gz"
    path.write_bytes(gzip.compress(b"".join(lines[:1500])) + damaged)
    with gzip.open(path, "rb") as fh, pytest.raises(zlib.error):  # what the standard library raises
        while fh.read1(1 << 12):
            pass
    items = []
    with pytest.raises(RecordError) as info:
        for item in EdxImporter().parse(path):
            items.append(item)
    message = f"{path}:1501: cannot read on from this line: Error -3 while decompressing data"
    assert str(info.value).startswith(message), str(info.value)
    assert len(items) == 1500 and all(isinstance(i, Event) for i in items)  # what came before is kept


@pytest.mark.parametrize(
    "naive",
    [
        datetime(2024, 1, 8, 5, 1, 41, 123978),
        datetime(2024, 1, 8),
        datetime(1, 1, 1),
        datetime(9999, 12, 31, 23, 59, 59, 999999),
        datetime(2024, 11, 3, 1, 30, fold=1),  # fold kept, as replace keeps it
    ],
)
def test_naive_as_utc_is_replace_with_utc(naive: datetime) -> None:
    aware = naive_as_utc(naive)
    expected = naive.replace(tzinfo=UTC)
    assert aware == expected
    assert aware.tzinfo is UTC
    assert aware.fold == expected.fold
    assert repr(aware) == repr(expected)
