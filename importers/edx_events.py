"""What one edX tracking-log event means: its type, time and fields (the mapping of
:mod:`importers.edx`'s docstring), read from the line's JSON object by the reference path.

:data:`KNOWN_TYPES` maps each ``name`` / ``event_type`` the logs use to our type and the
extractor of its members; :func:`common_fields` reads the members every event shares;
a member of the wrong shape raises :class:`BadRecord` naming it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from anonml.model import Text
from anonml.readers import parse_json, parse_timestamp

__all__ = [
    "BadRecord",
    "KNOWN_TYPES",
    "common_fields",
    "enrollment",
    "event_members",
    "event_type_of",
    "naive_as_utc",
    "read_timestamp",
    "sanitize_type",
]

_MAX_TYPE = 256
_NOT_TYPE_CHARS = re.compile(r"[^a-z0-9]+")
# Browser problem_check parameters are named input_<problem html id>_<response>_<input>,
# with "[]" appended for checkbox groups.
_INPUT_NAME = re.compile(r"^input_(.+)_\d+_\d+(?:\[\])?$")
# Where the parameter names of a URL-encoded form are kept among the event members; the NUL
# prefix cannot collide with a JSON member name edX writes.
_FORM_KEY = "\x00form"
_fromisoformat = datetime.fromisoformat
_combine = datetime.combine
# `success` of a graded check; partial credit counts as not a success.
_SUCCESS = {"correct": True, "incorrect": False, "partially-correct": False}


class BadRecord(ValueError):
    """A record's field has the wrong shape; the message names the field."""


def sanitize_type(name: str) -> str:
    """A snake_case event type from a free-form event name (``"unknown"`` if nothing is left).

    Lower-cases, turns every run of characters outside ``[a-z0-9]`` into one
    underscore, strips underscores at the ends and truncates to 256 characters.
    """
    cleaned = _NOT_TYPE_CHARS.sub("_", name.lower()).strip("_")[:_MAX_TYPE].rstrip("_")
    return cleaned or "unknown"


# --- typed member readers (each raises BadRecord naming the field) ---------------


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise BadRecord(f"field {where!r}: expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise BadRecord(f"field {where!r}: expected a number, got {value!r}") from None
    else:
        raise BadRecord(f"field {where!r}: expected a number, got {value!r}")
    if not math.isfinite(number):
        raise BadRecord(f"field {where!r}: {value!r} is not a finite number")
    return number


def _integer(value: Any, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    number = _number(value, where)
    if not number.is_integer():
        raise BadRecord(f"field {where!r}: expected an integer, got {value!r}")
    return int(number)


def _boolean(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise BadRecord(f"field {where!r}: expected true or false, got {value!r}")


# The readers below take the common value (a finite float, an int, a non-empty string) as it is,
# and only another one through the checks that may refuse it, whose message names the member:
# what the checks return for the common value, without building that message for every line.


def _put_number(fields: dict, key: str, ev: dict, member: str) -> None:
    value = ev.get(member)
    if type(value) is float and math.isfinite(value):
        fields[key] = value
    elif value is not None and value != "":
        fields[key] = _number(value, f"event.{member}")


def _put_int(fields: dict, key: str, ev: dict, member: str) -> None:
    value = ev.get(member)
    if type(value) is int:  # not a bool
        fields[key] = value
    elif value is not None and value != "":
        fields[key] = _integer(value, f"event.{member}")


def _put_bool(fields: dict, key: str, ev: dict, member: str) -> None:
    value = ev.get(member)
    if value is not None:
        fields[key] = _boolean(value, f"event.{member}")


def _put_str(fields: dict, key: str, ev: dict, member: str) -> None:
    value = ev.get(member)
    if type(value) is str:
        if value:
            fields[key] = value
        return
    if value is None or value == "":
        return
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise BadRecord(f"field 'event.{member}': expected a string, got {value!r}")
    fields[key] = str(value)


def _put_text(fields: dict, key: str, ev: dict, member: str) -> None:
    value = ev.get(member)
    if value is None or value == "":
        return
    if not isinstance(value, str):
        raise BadRecord(f"field 'event.{member}': expected a string, got {value!r}")
    fields[key] = Text(value)


def _nested_id(fields: dict, key: str, ev: dict, member: str) -> None:
    inner = ev.get(member)
    if inner is None:
        return
    if not isinstance(inner, dict):
        raise BadRecord(f"field 'event.{member}': expected an object, got {inner!r}")
    _put_str(fields, key, inner, "id")


# --- per-type extractors ---------------------------------------------------------


def _problem_check(fields: dict, ev: dict) -> None:
    form = ev.get(_FORM_KEY)
    if form is not None:
        inputs = {k for k in form if k.startswith("input_")}
        fields["inputs"] = len(inputs)
        problems = {m.group(1) for m in map(_INPUT_NAME.match, inputs) if m is not None}
        if len(problems) == 1:
            # The HTML id of the problem, not the server's usage key: named apart on purpose.
            fields["problem_html_id"] = problems.pop()
        return
    _put_str(fields, "problem_id", ev, "problem_id")
    _put_number(fields, "grade", ev, "grade")
    _put_number(fields, "max_grade", ev, "max_grade")
    _put_int(fields, "attempts", ev, "attempts")
    success = ev.get("success")
    if success is not None:
        if isinstance(success, bool):
            fields["success"] = success
        elif isinstance(success, str) and success in _SUCCESS:
            fields["success"] = _SUCCESS[success]
        else:
            raise BadRecord(f"field 'event.success': expected 'correct' or 'incorrect', got {success!r}")


def _video(fields: dict, ev: dict) -> None:
    _put_str(fields, "video_id", ev, "id")
    _put_str(fields, "code", ev, "code")
    if "currentTime" in ev:
        _put_number(fields, "current_time", ev, "currentTime")
    else:
        _put_number(fields, "current_time", ev, "current_time")


def _seek(fields: dict, ev: dict) -> None:
    _video(fields, ev)
    _put_number(fields, "old_time", ev, "old_time")
    _put_number(fields, "new_time", ev, "new_time")
    _put_str(fields, "seek_type", ev, "type")


def _sequence(fields: dict, ev: dict) -> None:
    for member in ("old", "new", "current_tab", "target_tab", "tab_count"):
        _put_int(fields, member, ev, member)
    _put_str(fields, "sequence_id", ev, "id")


def _nothing(fields: dict, ev: dict) -> None:
    return None


def _forum_created(fields: dict, ev: dict) -> None:
    _put_str(fields, "post_id", ev, "id")
    _put_str(fields, "commentable_id", ev, "commentable_id")
    _put_str(fields, "thread_type", ev, "thread_type")
    _put_str(fields, "team_id", ev, "team_id")
    _put_bool(fields, "anonymous", ev, "anonymous")
    _put_bool(fields, "anonymous_to_peers", ev, "anonymous_to_peers")
    _put_bool(fields, "truncated", ev, "truncated")
    _put_text(fields, "title", ev, "title")
    _put_text(fields, "body", ev, "body")
    _nested_id(fields, "thread_id", ev, "discussion")
    _nested_id(fields, "response_id", ev, "response")


def _forum_viewed(fields: dict, ev: dict) -> None:
    _put_str(fields, "thread_id", ev, "id")
    _put_str(fields, "commentable_id", ev, "commentable_id")
    _put_text(fields, "title", ev, "title")


def enrollment(fields: dict, ev: dict) -> None:
    _put_str(fields, "mode", ev, "mode")
    if "course_id" not in fields:
        _put_str(fields, "course_id", ev, "course_id")
    if "user_id" not in fields:
        _put_int(fields, "user_id", ev, "user_id")


_Extractor = Callable[[dict, dict], None]

# (our type, extractor, every name or event_type the logs use for it).
_TYPES: tuple[tuple[str, _Extractor, str, str] | tuple[str, _Extractor, str], ...] = (
    ("problem_check", _problem_check, "problem_check", "save_problem_check"),
    ("load_video", _video, "load_video", "edx.video.loaded"),
    ("play_video", _video, "play_video", "edx.video.played"),
    ("pause_video", _video, "pause_video", "edx.video.paused"),
    ("stop_video", _video, "stop_video", "edx.video.stopped"),
    ("seek_video", _seek, "seek_video", "edx.video.position.changed"),
    ("seq_goto", _sequence, "seq_goto", "edx.ui.lms.sequence.tab_selected"),
    ("seq_next", _sequence, "seq_next", "edx.ui.lms.sequence.next_selected"),
    ("seq_prev", _sequence, "seq_prev", "edx.ui.lms.sequence.previous_selected"),
    ("page_close", _nothing, "page_close"),
    ("forum_thread_created", _forum_created, "edx.forum.thread.created"),
    ("forum_response_created", _forum_created, "edx.forum.response.created"),
    ("forum_comment_created", _forum_created, "edx.forum.comment.created"),
    ("forum_thread_viewed", _forum_viewed, "edx.forum.thread.viewed"),
    ("enrollment_activated", enrollment, "edx.course.enrollment.activated"),
    ("enrollment_deactivated", enrollment, "edx.course.enrollment.deactivated"),
)
# name or event_type -> (our type, extractor)
KNOWN_TYPES: dict[str, tuple[str, _Extractor]] = {
    name: (ours, extract) for ours, extract, *names in _TYPES for name in names
}


def event_members(raw: Any, kind: str) -> dict:
    """The ``event`` members as a dict, whatever shape the line used."""
    if isinstance(raw, dict):
        return raw
    if raw is None:
        return {}
    if isinstance(raw, str):
        text = raw.strip()
        if not text:
            return {}
        if text[0] == '"':
            # A JSON-encoded string inside the string (browser problem_check forms
            # are logged this way): decode it once, then read what it holds.
            try:
                decoded = parse_json(text)
            except json.JSONDecodeError as exc:
                raise BadRecord(f"field 'event': invalid JSON string: {exc.msg}") from None
            if isinstance(decoded, str) and not decoded.lstrip().startswith('"'):
                return event_members(decoded, kind)
        elif text[0] == "{":
            try:
                decoded = parse_json(text)
            except json.JSONDecodeError as exc:
                raise BadRecord(f"field 'event': invalid JSON string: {exc.msg}") from None
            if isinstance(decoded, dict):
                return decoded
        elif kind == "problem_check":
            names = _form_names(text)
            if names:
                return {_FORM_KEY: names}
            raise BadRecord(f"field 'event': not a URL-encoded form: {_clip(text)!r}")
    raise BadRecord(f"field 'event': expected an object for {kind}, got {_clip(repr(raw))}")


def _form_names(text: str) -> list[str]:
    """The parameter names of a URL-encoded form, as ``urllib.parse.parse_qsl(text,
    keep_blank_values=True)`` reads them (each non-empty ``&``-separated piece up to its first ``=``,
    ``+`` as a space, then percent-decoded as UTF-8 with replacement), without decoding the values,
    which nothing reads.
    """
    names = [piece.partition("=")[0].replace("+", " ") for piece in text.split("&") if piece]
    return names if "%" not in text else [unquote(name) for name in names]


def _clip(text: str, size: int = 60) -> str:
    return text if len(text) <= size else text[: size - 1] + "…"


def event_type_of(obj: dict) -> str:
    """The line's ``name`` when it is a non-blank string, else its ``event_type``; stripped."""
    name = obj.get("name")
    if isinstance(name, str) and (stripped := name.strip()):
        return stripped
    raw_type = obj.get("event_type")
    if isinstance(raw_type, str) and (stripped := raw_type.strip()):
        return stripped
    raise BadRecord("missing field 'event_type' (and no 'name')")


def naive_as_utc(naive: datetime) -> datetime:
    """``naive.replace(tzinfo=UTC)``: the same instant, read as UTC, fold and all.

    Built with ``datetime.combine`` from the naive value and its ``time()``
    (which keeps ``fold``): a sixth of the cost of ``replace``, whose keyword
    parsing took 0.8 us of a line's parse (edX writes many times without an offset).
    """
    return _combine(naive, naive.time(), UTC)


def read_timestamp(obj: dict) -> datetime:
    value = obj.get("time")
    if type(value) is str:
        try:
            parsed = _fromisoformat(value)
        except ValueError:
            pass
        else:
            # What the general path below returns for these too: a UTC value as it is, one
            # without an offset (older logs write none) read as UTC.
            if parsed.tzinfo is UTC:
                return parsed
            if parsed.tzinfo is None:
                return naive_as_utc(parsed)
    if value is None:
        raise BadRecord("missing field 'time'")
    if not isinstance(value, str):
        raise BadRecord(f"field 'time': expected a string, got {value!r}")
    try:
        # edX documents `time` as UTC, so a value without an offset is UTC by that
        # convention; values with an offset are converted.
        return parse_timestamp(value, assume_tz=UTC)
    except ValueError:
        raise BadRecord(f"field 'time': not an ISO 8601 timestamp: {_clip(value)!r}") from None


def common_fields(obj: dict) -> dict:
    fields: dict = {}
    source = obj.get("event_source")
    if isinstance(source, str) and source:
        fields["event_source"] = source
    context = obj.get("context")
    if context is not None:
        if not isinstance(context, dict):
            raise BadRecord(f"field 'context': expected an object, got {_clip(repr(context))}")
        course = context.get("course_id")
        if course:
            if not isinstance(course, str):
                raise BadRecord(f"field 'context.course_id': expected a string, got {course!r}")
            fields["course_id"] = course
        uid = context.get("user_id")
        if uid is not None and uid != "":
            fields["user_id"] = _integer(uid, "context.user_id")
    session = obj.get("session")
    if isinstance(session, str) and session:
        fields["session"] = session
    page = obj.get("page")
    if isinstance(page, str) and page:
        fields["page"] = Text(page)
    return fields
