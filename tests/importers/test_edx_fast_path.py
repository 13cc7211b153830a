"""The edX importer's typed fast path (msgspec decode, ``_fast_parts``) against its reference path.

Every line the fast path accepts must give exactly what the reference path (orjson objects read by
``_learner`` and ``_parts``) gives, and every line it refuses must reach the reference path, which
names the same file, line and reason. The reference is the same importer with ``_fast_parts``
refusing every line.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

import importers.edx as edx
from anonml.datasets.mooc import simulate_students
from anonml.errors import RecordError
from anonml.plugins import RowOwner
from anonml.readers import iter_line_chunks
from anonml.store import EventStore
from importers.edx import EdxImporter

FIXTURES = Path(__file__).parent / "fixtures" / "edx"
BASE = {
    "username": "ada", "event_source": "browser", "event_type": "play_video",
    "time": "2024-01-09T10:00:00.123456+00:00", "ip": "192.0.2.1", "agent": "fixture",
    "page": "https://courses.example.org/courses/c/courseware/w1/u1/", "session": "0123456789abcdef",
    "context": {"course_id": "course-v1:X+Y+Z", "org_id": "X", "user_id": 41, "path": "/event"},
    "event": json.dumps({"id": "vid_a", "code": "html5", "currentTime": 12.5}),
}
SERVER_CHECK = {
    **BASE, "event_source": "server", "event_type": "problem_check",
    "event": {"problem_id": "p1", "grade": 1, "max_grade": 2, "attempts": 1, "success": "incorrect"},
}
ENROLLED = {
    **BASE, "username": "anonymous", "event_source": "server",
    "event_type": "edx.course.enrollment.activated", "context": {"course_id": "course-v1:X+Y+Z"},
    "event": {"user_id": 41, "mode": "audit"},
}


def _with(base: dict, **change: object) -> str:
    return json.dumps({**base, **change})


def _raw(base: dict, key: str, literal: str) -> str:
    """``base`` as JSON with member ``key`` written as the literal ``literal`` (not JSON-encodable
    from Python: NaN, 1e400, a duplicate key)."""
    return json.dumps({**base, key: "@@"}).replace('"@@"', literal)


HOSTILE: list[str] = [
    json.dumps(BASE),
    json.dumps(SERVER_CHECK),
    # bad timestamps, and the forms only the reference reader accepts
    _with(BASE, time="yesterday"), _with(BASE, time=5), _with(BASE, time=None), _with(BASE, time=""),
    _with(BASE, time=" 2024-01-08T00:00:00Z "), _with(BASE, time="2024-01-08T00:00:00z"),
    _with(BASE, time="2024-01-08T00:00:00Z"), _with(BASE, time="2024-01-08T01:00:00+02:00"),
    _with(BASE, time="2024-01-08T00:00:00"), _with(BASE, time="2024-01-08 00:00:00.5+00:00"),
    _with(BASE, time="2024-01-08"), _with(BASE, time="2024-13-08T00:00:00"),
    json.dumps({k: v for k, v in BASE.items() if k != "time"}),
    # missing, blank, anonymous, odd or wrongly typed usernames
    json.dumps({k: v for k, v in BASE.items() if k != "username"}),
    _with(BASE, username=""), _with(BASE, username="   "), _with(BASE, username=None),
    _with(BASE, username="ANONYMOUS"), _with(BASE, username=" anonymous "), _with(BASE, username=7),
    _with(BASE, username=["ada"]), _with(BASE, username="x" * 257), _with(BASE, username=" " + "x" * 256),
    _with(BASE, username="Léa"), _with(BASE, username="b\ud800"), _with(BASE, username="  bob  "),
    # wrong types of the common members
    _with(BASE, context="course"), _with(BASE, context=None), _with(BASE, context={"course_id": 5}),
    _with(BASE, context={"course_id": ""}), _with(BASE, context={"user_id": "41"}),
    _with(BASE, context={"user_id": "4.5"}), _with(BASE, context={"user_id": True}),
    _with(BASE, context={"user_id": 41.0}), _with(BASE, context={"user_id": 2**63}),
    _with(BASE, context={"user_id": 2**70 + 1}), _with(BASE, context={"user_id": -(2**63) - 1}),
    _with(BASE, context={"user_id": ""}), _with(BASE, context={"user_id": None}),
    _with(BASE, event_source=3), _with(BASE, event_source=""), _with(BASE, session=["s"]),
    _with(BASE, page=5), _with(BASE, page="$t:not a tag"), _with(BASE, page="x\ud800"),
    _with(BASE, event_source="$browser"),
    # types and names
    _with(BASE, event_type=None), _with(BASE, event_type=""), _with(BASE, event_type=4),
    _with(BASE, name=4), _with(BASE, name="  ", event_type=" seq_goto "),
    _with(BASE, name="edx.video.played"),
    _with(BASE, event_type="x" * 300), _with(BASE, event_type="/courses/x/ünï/"), _with(BASE, event_type="/"),
    _with(BASE, event_type="Some.Thing!"), _with(BASE, event_type="édition"),
    # members of the event
    _with(BASE, event=None), _with(BASE, event=""), _with(BASE, event=5), _with(BASE, event=[1]),
    _with(BASE, event="{not json"), _with(BASE, event='"\\"id=1\\""'), _with(BASE, event={"id": ["v"]}),
    _with(BASE, event={"id": "v", "currentTime": "NaN"}), _with(BASE, event={"id": "v", "currentTime": "7"}),
    _with(BASE, event={"id": 12, "currentTime": True}), _with(BASE, event={"id": "v\ud800"}),
    _with(BASE, event=json.dumps({"id": "v", "currentTime": 1}) + " "),
    _raw(BASE, "event", '{"id": "v", "currentTime": 1e400}'),
    _raw(BASE, "event", '{"id": "v", "currentTime": NaN}'), _raw(BASE, "event", f'{{"id": {2**70 + 1}}}'),
    _raw(BASE, "event", '{"id": "a", "id": "b"}'),
    _with(SERVER_CHECK, event={"success": "maybe"}), _with(SERVER_CHECK, event={"grade": "x"}),
    _with(SERVER_CHECK, event={"attempts": 1.5}), _with(SERVER_CHECK, event="input_p_2_1=a&input_p_3_1=b"),
    _with(SERVER_CHECK, event="no form here"), _with(SERVER_CHECK, event={"problem_id": 2**70 + 1}),
    _with(BASE, event_type="seq_goto", event={"old": "3", "new": 2.0, "tab_count": 2**64}),
    _with(BASE, event_type="edx.forum.thread.created", event={"id": "t", "anonymous": "TRUE", "body": "é"}),
    _with(BASE, event_type="edx.forum.response.created", event={"discussion": {"id": 5}, "body": 7}),
    # members the typed member decode (video, seek, navigation, page_close, forum view) reads, or
    # leaves to the generic read: nulls, blanks, numbers as strings, ids as numbers, odd shapes
    _with(BASE, event={"id": "v", "currentTime": None, "current_time": 3}),
    _with(BASE, event={"id": "", "code": None, "current_time": 3}), _with(BASE, event={"currentTime": 2**70}),
    _with(BASE, event=json.dumps({"id": "v", "currentTime": -0.0, "code": "$x"})),
    _with(BASE, event="  " + json.dumps({"id": "ünï", "code": "\u2028"}) + "  "), _with(BASE, event="null"),
    _with(BASE, event=json.dumps(json.dumps({"id": "v"}))), _with(BASE, event="   "),
    _with(BASE, event="[1]"),
    _with(BASE, event_type="seek_video", event={"id": "v", "old_time": 1, "new_time": "2", "type": "x"}),
    _with(BASE, event_type="seek_video", event={"old_time": 1.5, "new_time": None, "type": 3}),
    _with(BASE, event_type="seek_video", event=json.dumps({"old_time": 1.5, "new_time": 2.5, "type": ""})),
    _with(BASE, event_type="seq_next", event={"old": 1, "new": 2, "current_tab": None, "id": "s"}),
    _with(BASE, event_type="seq_prev", event={"old": 2**63, "new": -(2**63), "id": 5}),
    _with(BASE, event_type="seq_prev", event={"old": True, "new": ""}),
    _with(BASE, event_type="page_close", event=5), _with(BASE, event_type="page_close", event="text"),
    _with(BASE, event_type="page_close", event={"anything": [1]}),
    _with(BASE, event_type="page_close", event=""),
    _with(BASE, event_type="edx.forum.thread.viewed",
          event={"id": "t", "title": "$t: é", "commentable_id": 5}),
    _with(BASE, event_type="edx.forum.thread.viewed", event={"id": "t", "title": 7}),
    _with(BASE, event_type="edx.forum.thread.viewed", event={"id": "t", "title": "", "commentable_id": "c"}),
    _with(SERVER_CHECK, event="input_a%2Bb_2_1=x&input_a%2Bb_3_1=%ZZ&&input_c+d_2_1&=v&input_%C3%A9_2_1=1"),
    _with(SERVER_CHECK, event="input_p%ff_2_1=1"), _with(SERVER_CHECK, event="&&&"),
    _with(SERVER_CHECK, event=json.dumps("input_q_2_1=choice_1&input_q_3_1[]=c")),
    # enrolments logged without a username (deferred to the end) and named ones
    json.dumps(ENROLLED), _with(ENROLLED, username=""), _with(ENROLLED, context={"user_id": 99}),
    _with(ENROLLED, event={"user_id": 1234, "mode": "verified"}), _with(ENROLLED, username="ada"),
    # JSON the typed decode and orjson read differently, or not at all
    _raw(BASE, "username", '"a", "username": "ada2"'), _raw(BASE, "ip", "1e400"), _raw(BASE, "ip", "NaN"),
    _raw(BASE, "ip", '"\\ud800"'), _raw(BASE, "agent", "[1, {}]"), _raw(BASE, "ip", str(2**70)),
    "{not json", '{"username": "ada",', "[1, 2]", "5", '"a string"', "null", "# a comment", "",
    "   ", json.dumps(BASE) + " trailing", "\ufeff" + json.dumps(BASE), json.dumps(BASE).replace(" ", "\t"),
]


def _hostile_log(path: Path) -> Path:
    path.write_text("\n".join(HOSTILE) + "\n", encoding="utf-8")
    return path


def _course_log(path: Path) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for student in simulate_students(6, weeks=3, seed=5):
            for line in student.lines:
                fh.write(json.dumps(line) + "\n")
    return path


def _logs(tmp_path: Path) -> list[Path]:
    return [_hostile_log(tmp_path / "hostile.log"), _course_log(tmp_path / "tracking.log"),
            *sorted(FIXTURES.iterdir())]


def _parse(path: Path) -> tuple[list[str], str | None, dict]:
    """Every item of a parse (events by content and id, errors by text), the error that ended it,
    the drops."""
    importer, items = EdxImporter(), []
    try:
        for item in importer.parse(path):
            event = str(item) if isinstance(item, RecordError) else f"{item.model_dump_json()} {item.id}"
            items.append(event)
    except RecordError as exc:
        return items, str(exc), dict(importer.dropped)
    return items, None, dict(importer.dropped)


def _chunk_rows(path: Path, user: str | None) -> list[tuple]:
    """What :meth:`EdxImporter.parse_chunk_rows` hands the writer, chunk by chunk (7 lines each)."""
    importer, out, opened, owner = EdxImporter(), [], False, RowOwner(user, "me", 3)
    importer.start_chunks(path)
    try:
        for first, lines in iter_line_chunks(path, 7):
            chunk = importer.parse_chunk_rows(path, lines, first, opened=opened, owner=owner)
            out.append((chunk.rows, [str(e) for e in chunk.errors], sorted(chunk.users),
                        str(chunk.fatal), chunk.opened, chunk.state))
            if chunk.fatal is not None:
                break
            importer.merge_chunk(path, chunk.state)
            opened = chunk.opened
    except RecordError as exc:
        out.append(str(exc))
    return out


def _store(path: Path, db: Path, user: str | None) -> tuple:
    """A ``--skip-bad`` import's counts, errors and stored rows, and the strict import's error."""
    store = EventStore(f"sqlite:///{db}")
    try:
        store.import_file(path, EdxImporter(), user=user, workers=1)
        strict = None
    except RecordError as exc:
        strict = str(exc)
    try:
        report = store.import_file(path, EdxImporter(), user=user, workers=1, skip_bad=True)
        counts = (report.accepted, report.inserted, report.duplicate, report.rejected, report.user,
                  report.users, [str(e) for e in report.errors])
    except RecordError as exc:  # a file that is not a tracking log fails with skip_bad too
        counts = (str(exc),)
    store.close()
    with sqlite3.connect(db) as con:
        rows = con.execute("select user_id, id, source, type, ts_us, fields from events order by rowid")
        rows = rows.fetchall()
    return strict, counts, rows


def _everything(paths: list[Path], tmp: Path, tag: str) -> list:
    return [
        (_parse(path), _chunk_rows(path, None), _chunk_rows(path, "override"),
         _store(path, tmp / f"{tag}-{k}.db", None), _store(path, tmp / f"{tag}-{k}-u.db", "someone"))
        for k, path in enumerate(paths)
    ]


def test_the_fast_path_gives_exactly_what_the_reference_path_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events, ids, rows, errors (file, line, reason), drops, deferred enrolments, users, and the
    --skip-bad counts, on the fixtures, a simulated course log and a log of hostile lines."""
    paths = _logs(tmp_path)
    taken = refused = 0
    real = edx._fast_parts

    def counting(line, names):
        nonlocal taken, refused
        parts = real(line, names)
        taken, refused = taken + (parts is not None), refused + (parts is None)
        return parts

    monkeypatch.setattr(edx, "_fast_parts", counting)
    fast = _everything(paths, tmp_path, "fast")
    assert taken > 1000 and refused > 50, (taken, refused)  # both paths were exercised
    monkeypatch.setattr(edx, "_fast_parts", lambda line, names: None)
    assert _everything(paths, tmp_path, "reference") == fast


def test_the_hostile_log_keeps_its_error_messages_and_skip_bad_counts(tmp_path: Path) -> None:
    """Spot checks that the comparison above compares something: named errors at their lines,
    the lines only the reference reader accepts imported, and --skip-bad counting each refusal."""
    path = _hostile_log(tmp_path / "hostile.log")
    items, fatal, dropped = _parse(path)
    assert fatal is None
    errors = [item for item in items if item.startswith(str(path))]
    line = {text: number for number, text in enumerate(HOSTILE, 1)}
    time, user, context = (line[_with(BASE, time="yesterday")], line[_with(BASE, username=7)],
                           line[_with(BASE, context="course")])
    assert f"{path}:{time}: field 'time': not an ISO 8601 timestamp: 'yesterday'" in errors
    assert f"{path}:{user}: field 'username': expected a string, got 7" in errors
    assert f"{path}:{context}: field 'context': expected an object, got 'course'" in errors
    assert f"{path}:{line['[1, 2]']}: expected a JSON object, got list" in errors
    assert any(e.startswith(f"{path}:{line['{not json']}: invalid JSON at column") for e in errors)
    assert dropped == {"blank username": 4, "anonymous username": 3,
                       "anonymous enrollment of a learner not named in this log": 1}
    store = EventStore(f"sqlite:///{tmp_path / 'hostile.db'}")
    report = store.import_file(path, EdxImporter(), skip_bad=True, workers=1)
    assert report.rejected == len(errors) == len(report.errors)
    assert report.accepted == len(items) - len(errors)
    # NaN in an ignored member: the reference reader (json.loads) takes the line, so it is imported.
    nan_line = line[_raw(BASE, "ip", "NaN")]
    assert not any(e.startswith(f"{path}:{nan_line}:") for e in errors)
    store.close()


@pytest.mark.parametrize("ends", [("\n", "\r\n", "\r"), ("\n",)])
@pytest.mark.parametrize("bad_byte", [False, True])
@pytest.mark.parametrize("user", [None, "override"])
def test_undecoded_blocks_give_what_decoded_lines_give(
    tmp_path: Path, bad_byte: bool, user: str | None, ends: tuple[str, ...]
) -> None:
    """EdxImporter.parse_block_rows (lines kept as bytes for the typed decode) against the default
    (block_lines, then parse_chunk_rows), with \\r\\n, \\r and \\n line ends or \\n alone (cut
    another way), blank lines, text that is not ASCII, and a byte that is not UTF-8 (in a member
    the typed decode skips)."""
    from anonml.plugins import ChunkedImporter

    text = "".join(line + ends[k % len(ends)] for k, line in enumerate(HOSTILE))
    block = text.encode("utf-8")
    if bad_byte:  # 0xff, and a surrogate encoded as UTF-8 would encode it (which UTF-8 forbids)
        for bad in (b"\xff", b"\xed\xa0\x80"):
            block += json.dumps(BASE).replace('"fixture"', '"fix@ture"').encode().replace(b"@", bad) + b"\n"
            block += json.dumps({**BASE, "time": "2024-01-09T11:00:00+00:00"}).encode() + b"\n"
    path = tmp_path / "tracking.log"
    path.write_bytes(block)
    owner = RowOwner(user, "me", 7)
    made = EdxImporter().parse_block_rows(path, block, 1, opened=False, owner=owner)
    expected = ChunkedImporter.parse_block_rows(EdxImporter(), path, block, 1, opened=False, owner=owner)
    assert made.rows == expected.rows and len(made.rows) > 40
    assert [str(e) for e in made.errors] == [str(e) for e in expected.errors]
    assert (made.users, made.fatal, made.opened, made.state) == (
        expected.users, expected.fatal, expected.opened, expected.state)
    not_utf8 = [str(e) for e in made.errors if "not UTF-8" in str(e)]
    assert len(not_utf8) == (2 if bad_byte else 0), not_utf8


@pytest.mark.parametrize("form", [
    "input_p_2_1=choice_1&input_p_3_1=x", "input_a%2Bb_2_1=x&input_a%2Bb_3_1=%ZZ&&input_c+d_2_1&=v",
    "input_%C3%A9_2_1=1&input_%ff_2_1=2", "&&&", "", "a=1;input_x_2_1=2", "=&=", "input_x_2_1[]=a=b",
])
def test_form_names_are_the_names_parse_qsl_reads(form: str) -> None:
    """The browser problem_check form is read for its parameter names only: exactly parse_qsl's."""
    from urllib.parse import parse_qsl

    from importers.edx_events import _form_names

    assert _form_names(form) == [name for name, _ in parse_qsl(form, keep_blank_values=True)]
