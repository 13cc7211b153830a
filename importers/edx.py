"""``edx``: edX / Open edX tracking logs (one JSON object per line, plain or gzipped).

Format
------
A tracking log (``tracking.log``, rotated as ``tracking.log-20240108.gz``; the
research data packages deliver the same lines) holds one JSON object per line,
one line per event, for any number of users. Fields read here (all others,
such as ``ip``, ``agent``, ``host``, ``referer``, are ignored):

``username`` (string)
    Who caused the event. Blank for a logged-out browser; such lines, and lines
    whose username is ``"anonymous"``, cannot be attributed and are **dropped**
    (edX's own guidance is to ignore them) — except enrolment events: the
    server logs them as ``"anonymous"`` (or blank) while ``event.user_id`` names
    the learner, so when ``context.user_id`` is absent or the same id (the
    learner's own action, not staff enrolling someone) the event goes to the
    username the same file shows for that id. The importer counts dropped lines
    per reason in :attr:`EdxImporter.dropped` (``"blank username"``,
    ``"anonymous username"``, ``"anonymous enrollment of a learner not named in
    this log"``), filled as :meth:`EdxImporter.parse` is consumed.
``event_type`` (string) and ``name`` (string, newer server and mobile events)
    The kind of event. When ``name`` is present and non-blank it supersedes
    ``event_type``. An ``event_type`` that is a URL path (starts with ``/``) is an
    implicit page request logged by the server.
``event_source`` (string)
    ``browser``, ``server``, ``mobile`` or ``task``; kept as a category.
``time`` (string)
    ISO 8601, e.g. ``2024-01-08T09:15:02.123456+00:00``. Older logs write no
    offset (``2014-01-26T00:28:28.388782``); edX documents ``time`` as UTC, so a
    value without an offset is read as UTC (that is edX's published convention,
    not a guess). A value with an offset is converted to UTC.
``event`` (object, JSON-encoded string, or URL-encoded form)
    Type-specific members. Server events usually carry an object; browser
    events usually a JSON-encoded string; browser ``problem_check`` events carry
    the submitted GET parameters as a URL-encoded form string
    (``input_<problem>_2_1=choice_1&input_<problem>_3_1=...``), in some logs
    JSON-quoted once more (``"\\"input_…=…&…\\""``): a JSON string is decoded
    before it is read as a form.
``context.course_id`` (string), ``context.user_id`` (number)
    The course and the numeric learner id, when known.
``page`` (string URL), ``session`` (32-character key; browser and enrolment events)

Sample line (shortened)::

    {"username": "learner7", "event_source": "browser", "event_type": "play_video",
     "time": "2024-01-09T18:02:11.402919+00:00", "session": "5f0c...e1",
     "page": "https://courses.example.org/courses/course-v1:X+Y+Z/courseware/1/2/",
     "context": {"course_id": "course-v1:X+Y+Z", "user_id": 1107, "path": "/event"},
     "event": "{\\"id\\": \\"vid_intro\\", \\"code\\": \\"html5\\", \\"currentTime\\": 12.5}"}

Events produced
---------------
Every event has ``source="edx"``, ``user=<username>``, the UTC ``timestamp`` and
the common fields ``event_source`` (str), ``course_id`` (str), ``user_id``
(int), ``session`` (str) and ``page`` (Text), each only when present. Types
and their extra fields (aliases in brackets map to the same type):

* ``problem_check`` [``save_problem_check``]: server events ``problem_id`` (str),
  ``grade``, ``max_grade`` (float), ``attempts`` (int), ``success`` (bool: true
  for ``"correct"``, false for ``"incorrect"`` and ``"partially-correct"``);
  browser form events ``inputs`` (int, number of ``input_*`` parameters) and
  ``problem_html_id`` (str) when all input names (``input_<html id>_<n>_<m>``)
  share one. Browser checks echo the server's and carry no grade: count
  attempts on events that have ``success``.
* ``load_video``, ``play_video``, ``pause_video``, ``stop_video``, ``seek_video``
  [mobile ``edx.video.loaded|played|paused|stopped|position.changed``]:
  ``video_id`` (str, the event's ``id``), ``code`` (str), ``current_time``
  (float s, ``currentTime`` or ``current_time``); seeks add ``old_time``,
  ``new_time`` (float s) and ``seek_type`` (str).
* ``seq_goto``, ``seq_next``, ``seq_prev`` [``edx.ui.lms.sequence.tab_selected``,
  ``next_selected``, ``previous_selected``]: ``old``, ``new``, ``current_tab``,
  ``target_tab``, ``tab_count`` (int), ``sequence_id`` (str).
* ``page_close``: common fields only.
* ``forum_thread_created``, ``forum_response_created``, ``forum_comment_created``
  (``edx.forum.*.created``): ``post_id``, ``commentable_id``, ``thread_type``,
  ``team_id`` (str), ``anonymous``, ``anonymous_to_peers``, ``truncated`` (bool),
  ``title``, ``body`` (Text); responses and comments add ``thread_id``, comments
  ``response_id``. ``forum_thread_viewed`` (``edx.forum.thread.viewed``):
  ``thread_id``, ``commentable_id`` (str), ``title`` (Text). The other poster's
  username (``target_username``) is not imported.
* ``enrollment_activated``, ``enrollment_deactivated``
  (``edx.course.enrollment.*``): ``mode`` (str); ``course_id``/``user_id`` from
  ``event`` when the context lacks them.
* ``page_view``: an implicit page request; ``path`` (Text) is the requested path.
* Anything else is kept as a generic event whose type is the sanitised name
  (lower case, runs of other characters as ``_``: ``edx.ui.lms.link_clicked`` →
  ``edx_ui_lms_link_clicked``) with the common fields only. Nothing is dropped
  for having an unknown type.

Errors
------
A line that is not JSON, not an object, has no ``time`` / ``event_type``, or
whose known members have the wrong type is yielded as a
:class:`~anonml.errors.RecordError` naming the field (``file:line: reason``).
A file whose first JSON record is not an object with ``event_type`` or
``name`` is not a tracking log at all and raises; lines that are not JSON before
it (a ``#`` comment heading a course log) are bad records like any other, so
``--skip-bad`` reports them and reads on. A file with no JSON line raises.

References
----------
edX Research Guide, "Events in the Tracking Logs": Common Fields; Student
Events (problem interaction, video interaction, navigation, discussion forum,
enrollment events). https://edx.readthedocs.io/projects/devdata/
"""

from __future__ import annotations

import io
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import msgspec
import orjson
from pydantic import ValidationError

from anonml.errors import RecordError
from anonml.event_rows import ChunkRows, event_row, parts_row
from anonml.model import Event, Text, canonical_parts
from anonml.plugins import ChunkedImporter, ParsedChunk, RowOwner
from anonml.readers import block_lines, head, json_values
from importers.edx_events import (
    KNOWN_TYPES,
    BadRecord,
    common_fields,
    enrollment,
    event_members,
    event_type_of,
    naive_as_utc,
    read_timestamp,
    sanitize_type,
)

__all__ = ["EdxImporter", "sanitize_type"]

_SOURCE = "edx"
_MAX_USER = 256
_fromisoformat = datetime.fromisoformat
_intern = sys.intern


# --- the typed decode of a well-formed line ----------------------------------------
# Most lines of a log are well formed: for them one schema-aware decode (msgspec) reads only the
# members used here, already typed, and skips the rest (ip, agent, host, context.path, ...)
# without building them. Whatever that decode or the fast path below refuses (not JSON, a member of
# another type, a blank or anonymous user, a time with an offset, a bad member) is read again by the
# reference path (orjson objects, the readers above), which decides it as it always has: the same
# event, or the same RecordError message. An integer outside 64 bits is refused here because
# orjson, the reference decoder, reads it as a float. One difference is left: a number past the
# float range (1e400) in a member not read here makes orjson refuse the whole line, so the
# reference reads it with json.loads, which keeps an integer past 64 bits in `event` an int where
# this path (orjson on the `event` member alone) gives a float, as it does for every other line.
_Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


# gc=False on every struct here: they hold only strings, numbers and each other, never a cycle, so
# the cycle collector need not track the ones made for every line.
class _LineContext(msgspec.Struct, gc=False):
    course_id: str | None = None
    user_id: _Int64 | None = None


class _Line(msgspec.Struct, gc=False):
    username: str | None = None
    name: str | None = None
    event_type: str | None = None
    event_source: str | None = None
    time: str | None = None
    session: str | None = None
    page: str | None = None
    context: _LineContext | None = None
    # Kept raw, decoded by orjson only for a type whose members are read: the members are then
    # exactly the objects the reference path reads (msgspec reads an integer past 64 bits as an int).
    event: msgspec.Raw = msgspec.Raw()


_decode_line = msgspec.json.Decoder(_Line).decode
_NOT_DECODED = (msgspec.DecodeError, msgspec.ValidationError)


# --- the typed decode of the commonest types' members --------------------------------
# Video, navigation, page_close and forum-view events (three lines in five) have their `event`
# members decoded straight into a struct of the types the extractor (importers.edx_events) takes
# as they are: a string, a float or int, a 64-bit integer, null. What such a struct refuses (a
# number written as a string, an id written as a number, NaN) is read by the generic member read
# after it, which converts or refuses it as the extractor does. The put functions set the fields
# the extractor sets, in its order, skipping what it skips (null, "").


class _VideoMembers(msgspec.Struct, gc=False):
    id: str | None = None
    code: str | None = None
    currentTime: float | None | msgspec.UnsetType = msgspec.UNSET  # noqa: N815 (edX's name)
    current_time: float | None = None


class _SeekMembers(_VideoMembers):
    old_time: float | None = None
    new_time: float | None = None
    type: str | None = None


class _SequenceMembers(msgspec.Struct, gc=False):
    old: _Int64 | None = None
    new: _Int64 | None = None
    current_tab: _Int64 | None = None
    target_tab: _Int64 | None = None
    tab_count: _Int64 | None = None
    id: str | None = None


class _ThreadViewMembers(msgspec.Struct, gc=False):
    id: str | None = None
    commentable_id: str | None = None
    title: str | None = None


class _NoMembers(msgspec.Struct, gc=False):
    """page_close: no member is read, but `event` must still be an object (or absent, null, blank)."""


def _finite(value: float) -> bool:
    return value - value == 0.0  # false for inf and nan


def _put_video(fields: dict, ev: _VideoMembers) -> bool:
    """:func:`~importers.edx_events._video`; False for a non-finite time (which it refuses)."""
    if ev.id:
        fields["video_id"] = ev.id
    if ev.code:
        fields["code"] = ev.code
    time = ev.current_time if ev.currentTime is msgspec.UNSET else ev.currentTime
    if time is not None:
        if not _finite(time):
            return False
        fields["current_time"] = time
    return True


def _put_seek(fields: dict, ev: _SeekMembers) -> bool:
    """:func:`~importers.edx_events._seek`."""
    if not _put_video(fields, ev):
        return False
    for key, value in (("old_time", ev.old_time), ("new_time", ev.new_time)):
        if value is not None:
            if not _finite(value):
                return False
            fields[key] = value
    if ev.type:
        fields["seek_type"] = ev.type
    return True


def _put_sequence(fields: dict, ev: _SequenceMembers) -> bool:
    """:func:`~importers.edx_events._sequence`."""
    for key, value in (("old", ev.old), ("new", ev.new), ("current_tab", ev.current_tab),
                       ("target_tab", ev.target_tab), ("tab_count", ev.tab_count)):
        if value is not None:
            fields[key] = value
    if ev.id:
        fields["sequence_id"] = ev.id
    return True


def _put_thread_view(fields: dict, ev: _ThreadViewMembers) -> bool:
    """:func:`~importers.edx_events._forum_viewed`."""
    if ev.id:
        fields["thread_id"] = ev.id
    if ev.commentable_id:
        fields["commentable_id"] = ev.commentable_id
    if ev.title:
        fields["title"] = Text(ev.title)
    return True


def _put_nothing(fields: dict, ev: _NoMembers) -> bool:
    """:func:`~importers.edx_events._nothing`."""
    return True


_Put = Callable[[dict, Any], bool]
_TYPED = (
    (("load_video", "play_video", "pause_video", "stop_video"), _VideoMembers, _put_video),
    (("seek_video",), _SeekMembers, _put_seek),
    (("seq_goto", "seq_next", "seq_prev"), _SequenceMembers, _put_sequence),
    (("forum_thread_viewed",), _ThreadViewMembers, _put_thread_view),
    (("page_close",), _NoMembers, _put_nothing),
)
# our type (KNOWN_TYPES) -> (decode of its members, put of their fields)
_TYPED_MEMBERS: dict[str, tuple[Callable[[Any], Any], _Put]] = {
    type_: (msgspec.json.Decoder(struct).decode, put) for types, struct, put in _TYPED for type_ in types
}
_decode_str = msgspec.json.Decoder(str).decode


def _typed_members(raw: bytes, decode: Callable[[Any], Any]) -> Any:
    """The members of a line's raw ``event`` as ``decode`` types them, as
    :func:`~importers.edx_events.event_members` reads them (an object, or a JSON string holding
    one; absent, null or a blank string: no members, None); raises what ``decode`` raises, or
    ValueError for a shape left to the generic read."""
    first = raw[:1]
    if first == b"{":
        return decode(raw)
    if first == b'"':
        text = _decode_str(raw).strip()
        if not text:
            return None
        if text[0] == "{":
            return decode(text)
    elif not raw or raw == b"null":
        return None
    raise ValueError("left to the generic read")


def _fast_parts(line: _Line, names: dict[int, str]) -> tuple[str, str, datetime, dict] | None:
    """``(learner, type, time, fields)`` of a typed line the reference path (:meth:`EdxImporter._learner`,
    :func:`_parts`) accepts as they are, or None: the reference path decides the line.

    None for a line that is not attributed to a plain ASCII username (blank, ``"anonymous"``, too
    long, or another alphabet: the reference path drops, defers or checks it), has no type or
    time, a time with an offset other than UTC or in a form ``fromisoformat`` does not read, or a
    type's members that are not what the extractor reads (its ``BadRecord``). An accepted learner
    is remembered under the line's ``context.user_id`` in ``names``, as :meth:`EdxImporter._learner`
    remembers it.
    """
    user = line.username
    if user is None:
        return None
    user = user.strip()
    if not user or len(user) > _MAX_USER or not user.isascii():
        return None
    if len(user) == 9 and user.lower() == "anonymous":
        return None
    context = line.context
    if context is not None and context.user_id is not None:
        names.setdefault(context.user_id, user)
    raw_type = line.name
    raw_type = raw_type.strip() if raw_type is not None else ""
    if not raw_type:
        raw_type = line.event_type
        raw_type = raw_type.strip() if raw_type is not None else ""
        if not raw_type:
            return None
    if line.time is None:
        return None
    try:
        timestamp = _fromisoformat(line.time)
    except ValueError:
        return None
    if timestamp.tzinfo is None:
        timestamp = naive_as_utc(timestamp)  # edX writes UTC (see read_timestamp)
    elif timestamp.tzinfo is not UTC:
        return None
    fields: dict = {}  # what common_fields makes, its type checks done by the decode
    if line.event_source:
        fields["event_source"] = line.event_source
    if context is not None:
        if context.course_id:
            fields["course_id"] = context.course_id
        if context.user_id is not None:
            fields["user_id"] = context.user_id
    if line.session:
        fields["session"] = line.session
    if line.page:
        fields["page"] = Text(line.page)
    known = KNOWN_TYPES.get(raw_type)
    if known is not None:
        type_, extract = known
        raw = bytes(line.event)
        typed = _TYPED_MEMBERS.get(type_)
        if typed is not None:
            try:
                members = _typed_members(raw, typed[0])
            except (*_NOT_DECODED, ValueError):
                typed = None  # the generic read below decides
            else:
                if members is not None and not typed[1](fields, members):
                    return None
        if typed is None:
            try:
                extract(fields, event_members(orjson.loads(raw) if raw else None, type_))
            except (orjson.JSONDecodeError, BadRecord):
                return None
    elif raw_type[0] == "/":
        type_ = "page_view"
        fields["path"] = Text(raw_type)
    else:
        type_ = sanitize_type(raw_type)
    return user, type_, timestamp, fields


@dataclass(slots=True)
class _ChunkState:
    """What one chunk carries to the next: learner names, deferred enrolments, counts."""

    names: dict[int, str] = field(default_factory=dict)
    unattributed: list[tuple[int, dict]] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)
    unreadable: bool = False
    opened: bool = False


class EdxImporter(ChunkedImporter):
    """edX tracking logs → typed engagement events (see the module docstring).

    Attributes
    ----------
    dropped : collections.Counter
        Lines skipped because they cannot be attributed to a learner, by reason
        (``"blank username"``, ``"anonymous username"``). Reset when a
        :meth:`parse` iteration starts and complete once it is exhausted.

    Examples
    --------
    >>> importer = EdxImporter()
    >>> importer.name, importer.version
    ('edx', '1.0')
    """

    name = "edx"
    version = "1.0"
    description = "edX / Open edX tracking logs (JSON lines, plain or .gz)"
    patterns = ("tracking.log", "tracking.log-*.gz", "*.log", "*.log.gz", "*.jsonl")

    def __init__(self, params: Any = None) -> None:
        super().__init__(params)
        self.dropped: Counter[str] = Counter()
        self._names: dict[int, str] = {}
        self._unattributed: list[tuple[int, dict]] = []
        self._unreadable = self._opened = False


    # --- detection ---------------------------------------------------------

    def detect(self, path: Path) -> float:
        """High when the first JSON line is an object with edX's common fields.

        Lines before it that do not open an object (a ``#`` comment, a banner)
        are passed over, as :meth:`parse` passes over them, at a small cost in
        confidence. Reads at most 16 KiB (edX lines with a mobile ``context``
        run to a few KiB).
        """
        path = Path(path)
        text = head(path, 16384)
        bonus = 0.05 if path.name.startswith("tracking.log") else 0.0
        lines = text.split("\n")
        complete = len(lines) - 1  # the last piece may be cut by the head's size
        skipped = 0
        for index, line in enumerate(lines):
            stripped = line.strip()
            if not stripped:
                continue
            if not stripped.startswith("{"):
                skipped += 1
                continue
            try:
                obj = json.loads(stripped)
            except json.JSONDecodeError:
                if index < complete:
                    return 0.0  # a complete line opening an object that is not JSON (pretty-printed JSON)
                # The line is longer than the head: judge by its keys.
                keys = ('"event_type"', '"time"', '"event_source"')
                score = 0.7 if all(k in stripped for k in keys) else 0.0
                return score + bonus - 0.05 * min(skipped, 2) if score else 0.0
            if not isinstance(obj, dict) or not ("event_type" in obj or "name" in obj):
                return 0.0
            if "time" not in obj:
                return 0.3
            score = 0.95 if "username" in obj and "event_source" in obj else 0.85
            return min(1.0, score + bonus) - 0.05 * min(skipped, 2)
        return 0.0

    # --- parsing -----------------------------------------------------------
    # parse() comes from ChunkedImporter: parse_chunk over runs of lines (in
    # worker processes for a large log, see anonml.parallel_import), the
    # chunks' learner names merged in file order, then finish_chunks for the
    # enrolment events logged without a username.

    def start_chunks(self, path: Path) -> None:
        self.dropped = Counter()
        self._names = {}  # context.user_id -> username, from attributed lines
        self._unattributed = []
        self._unreadable = self._opened = False

    def parse_chunk(
        self, path: Path, lines: list[str | RecordError], first_line: int, *, opened: bool
    ) -> ParsedChunk:
        """The chunk's attributable events, bad lines as RecordError values.

        The first line of the file that *is* JSON decides whether this is a
        tracking log (``opened`` says an earlier chunk held it): unreadable
        lines before it (a ``#`` comment) are bad records like any other.
        Enrolment events the server logged without a username are kept in the
        chunk's state for :meth:`finish_chunks`.
        """
        items, fatal, opened, state = self._parse_lines(
            path, lines, first_line, opened, self._to_event, _fast_event
        )
        return ParsedChunk(items, fatal=fatal, opened=opened, state=state)  # type: ignore[arg-type]

    def parse_block_rows(
        self, path: Path, block: bytes, first_line: int, *, opened: bool, owner: RowOwner
    ) -> ChunkRows:
        """:meth:`parse_chunk_rows` of an undecoded block: when the block is valid UTF-8 (the
        common case: checked whole, at C speed), its lines stay bytes, which the typed decode
        reads directly and the reference path decodes one by one; otherwise the block is read
        by :func:`~anonml.readers.block_lines`, which names the line holding the bad byte.
        Both give the lines :func:`~anonml.readers.block_lines` gives.
        """
        try:
            if not block.isascii():
                block.decode("utf-8")  # only to check: msgspec does not check members it skips
        except UnicodeDecodeError:
            lines: list = block_lines(path, block, first_line)
        else:
            lines = _split_block(block)
        return self.parse_chunk_rows(path, lines, first_line, opened=opened, owner=owner)

    def parse_chunk_rows(
        self,
        path: Path,
        lines: list[str | RecordError] | list[bytes],
        first_line: int,
        *,
        opened: bool,
        owner: RowOwner,
    ) -> ChunkRows:
        """:meth:`parse_chunk`'s events as rows, made from each line's parts without the event
        (what :meth:`Event.make` would check and copy): the same rows, errors and state.
        ``lines`` may also be undecoded lines known to be UTF-8 (:meth:`parse_block_rows`).

        Parts that :meth:`Event.make` would hand to pydantic's validation go through it here
        too, so a refused value is the same ``invalid event`` error.
        """
        users: set[str] = set()
        user, import_id = owner.user, owner.import_id

        def to_row(obj: dict, learner: str) -> tuple:
            type_, timestamp, fields = _parts(obj)
            who = user or _intern(learner)  # the line's learner is the event's own user
            if canonical_parts(_SOURCE, type_, timestamp, fields, learner):
                row = parts_row(who, _SOURCE, type_, timestamp, fields, import_id)
            else:
                event = Event(source=_SOURCE, type=type_, timestamp=timestamp, fields=fields, user=learner)
                row = event_row(event, who, import_id)
            users.add(who)
            return row

        def fast_row(learner: str, type_: str, timestamp: datetime, fields: dict) -> tuple | None:
            # _fast_parts gives an ASCII learner and type, a UTC time and values of the exact
            # types canonical_parts accepts, finite floats; what is left to it is text that UTF-8
            # cannot encode (a lone surrogate from an event string), which content_id's encoding
            # meets: the reference path then refuses it as validation does.
            # Interned, a learner's name is one object in every row of theirs: marshal sends it
            # once per block, and the writer unmarshals one string, not one per row (0.13 us a row).
            who = user or _intern(learner)
            try:
                row = parts_row(who, _SOURCE, type_, timestamp, fields, import_id)
            except UnicodeEncodeError:
                return None
            users.add(who)
            return row

        items, fatal, opened, state = self._parse_lines(path, lines, first_line, opened, to_row, fast_row)
        errors = [item for item in items if isinstance(item, RecordError)]
        rows = [item for item in items if not isinstance(item, RecordError)] if errors else items
        return ChunkRows(rows, errors, users, fatal=fatal, opened=opened, state=state)  # type: ignore[arg-type]

    def _parse_lines(
        self,
        path: Path,
        lines: list[str | RecordError] | list[bytes],
        first_line: int,
        opened: bool,
        convert: Callable[[dict, str], Any],
        fast: Callable[[str, str, datetime, dict], Any],
    ) -> tuple[list[Any], RecordError | None, bool, _ChunkState]:
        """``convert(line object, learner)`` of every attributable line (an event or a row) and
        the bad lines' RecordError values, in line order; the fatal error that ends the file, if
        any; whether the format is established; the chunk's state (see :meth:`parse_chunk`).

        Once the format is established, a line goes first through the typed decode
        (:func:`_fast_parts`) and ``fast(learner, type, time, fields)``, which gives what
        ``convert`` would or None; a line either refuses is read by the reference path below.
        """
        state = _ChunkState()
        items: list[Any] = []
        append, learner_of, names = items.append, self._learner, state.names
        for number, line in enumerate(lines, first_line):
            if opened and not isinstance(line, RecordError):
                try:
                    line_parts = _fast_parts(_decode_line(line), names)
                except _NOT_DECODED:
                    line_parts = None
                if line_parts is not None and (item := fast(*line_parts)) is not None:
                    append(item)
                    continue
            if type(line) is bytes:  # from parse_block_rows, which checked that it is UTF-8
                line = line.decode("utf-8")
            for lineno, obj in json_values(path, (line,), number):  # this one line, as it always was read
                if not opened or type(obj) is not dict:  # the uncommon cases, one check for the common one
                    if isinstance(obj, RecordError):
                        state.unreadable = True
                        append(obj)
                        continue
                    if not opened:
                        opened = True
                        if not (isinstance(obj, dict) and ("event_type" in obj or "name" in obj)):
                            fatal = RecordError(
                                path,
                                lineno,
                                "not an edX tracking log: the first JSON record is not an object "
                                "with 'event_type' or 'name'",
                            )
                            return items, fatal, True, state
                    if not isinstance(obj, dict):
                        append(RecordError(path, lineno, f"expected a JSON object, got {type(obj).__name__}"))
                        continue
                try:
                    learner = learner_of(obj, state)
                except BadRecord as exc:
                    append(RecordError(path, lineno, str(exc)))
                    continue
                if learner is None:
                    if self._enrollment_learner_id(obj) is not None:
                        state.unattributed.append((lineno, obj))
                    continue
                append(_or_error(path, lineno, convert, obj, learner))
        state.opened = opened
        return items, None, opened, state

    def merge_chunk(self, path: Path, state: _ChunkState) -> None:
        for uid, name in state.names.items():
            self._names.setdefault(uid, name)  # the first line naming the id wins, as in file order
        self._unattributed.extend(state.unattributed)
        self.dropped.update(state.dropped)
        self._unreadable |= state.unreadable
        self._opened |= state.opened

    def finish_chunks(self, path: Path) -> Iterator[Event | RecordError]:
        """Enrolment events logged without a username, attributed through the learner id
        (see :meth:`_learner`), last."""
        if self._unreadable and not self._opened:
            raise RecordError(path, None, "not an edX tracking log: no line is a JSON object")
        for lineno, obj in self._unattributed:
            learner = self._names.get(self._enrollment_learner_id(obj))  # type: ignore[arg-type]
            if learner is None:
                self.dropped["anonymous enrollment of a learner not named in this log"] += 1
                continue
            yield _or_error(path, lineno, self._to_event, obj, learner)

    def _learner(self, obj: dict, state: _ChunkState) -> str | None:
        """Who the line is about, or None (counted in :attr:`dropped`, or deferred).

        A named user is remembered under the line's ``context.user_id`` so that
        enrolment events the server logged as ``"anonymous"`` can be attributed
        later in the same file.
        """
        user = obj.get("username")
        if type(user) is not str:
            if user is not None:
                raise BadRecord(f"field 'username': expected a string, got {user!r}")
            user = ""
        user = user.strip()
        # A string whose lower case is "anonymous" has nine characters.
        if not user or (len(user) == 9 and user.lower() == "anonymous"):
            if self._enrollment_learner_id(obj) is None:  # not deferred: dropped
                state.dropped["blank username" if not user else "anonymous username"] += 1
            return None
        if len(user) > _MAX_USER:
            raise BadRecord(f"field 'username': longer than {_MAX_USER} characters")
        context = obj.get("context")
        if type(context) is dict:
            uid = context.get("user_id")
            if type(uid) is int:  # not a bool
                state.names.setdefault(uid, user)
        return user

    @staticmethod
    def _enrollment_learner_id(obj: dict) -> int | None:
        """The learner of an enrolment event whose context says it is that learner.

        The server logs enrolment events with ``username`` blank or
        ``"anonymous"`` while ``event.user_id`` names the learner. The id is
        taken only when ``context.user_id`` is absent or the same id: when
        staff enrol someone, the context names the staff member instead, and
        the event is not the learner's own action.
        """
        name = obj.get("name")
        raw_type = name if isinstance(name, str) and name.strip() else obj.get("event_type")
        known = KNOWN_TYPES.get(raw_type.strip()) if isinstance(raw_type, str) else None
        if known is None or known[1] is not enrollment:
            return None
        event = obj.get("event")
        context = obj.get("context")
        uid = event.get("user_id") if isinstance(event, dict) else None
        if not isinstance(uid, int) or isinstance(uid, bool):
            return None
        who = context.get("user_id") if isinstance(context, dict) else None
        return uid if who in (None, "", uid) else None

    @staticmethod
    def _to_event(obj: dict, user: str) -> Event:
        # The readers give every field its exact type, so this is Event(...) without re-validating.
        return Event.make(_SOURCE, *_parts(obj), user)


def _split_block(block: bytes) -> list[bytes]:
    """The lines of a block, with their ends, as text mode with ``newline=""`` cuts them (at
    ``\r\n``, ``\r`` and ``\n``): ``block.splitlines(keepends=True)``.

    With no ``\r`` in the block (the common case) only ``\n`` ends lines, and ``BytesIO.readlines``
    finds each with memchr where ``splitlines`` tests every byte (4x faster, 3% of a line's parse).
    """
    if b"\r" in block:
        return block.splitlines(keepends=True)
    return io.BytesIO(block).readlines()


def _parts(obj: dict) -> tuple[str, datetime, dict]:
    """The event type, time and fields of one line (raises BadRecord naming a wrong field)."""
    raw_type = event_type_of(obj)
    timestamp = read_timestamp(obj)
    fields = common_fields(obj)
    known = KNOWN_TYPES.get(raw_type)
    if known is not None:
        type_, extract = known
        extract(fields, event_members(obj.get("event"), type_))
    elif raw_type.startswith("/"):
        type_ = "page_view"
        fields["path"] = Text(raw_type)
    else:
        type_ = sanitize_type(raw_type)
    return type_, timestamp, fields


def _fast_event(learner: str, type_: str, timestamp: datetime, fields: dict) -> Event | None:
    """The event of :func:`_fast_parts`'s parts, or None when validation refuses them (the
    reference path then makes the same ``invalid event`` error)."""
    try:
        return Event.make(_SOURCE, type_, timestamp, fields, learner)
    except ValidationError:
        return None


def _or_error(path: Path, lineno: int, convert: Callable[[dict, str], Any], obj: dict, learner: str) -> Any:
    """``convert(obj, learner)`` (the line's event or row), or the RecordError naming what is wrong."""
    try:
        return convert(obj, learner)
    except BadRecord as exc:
        return RecordError(path, lineno, str(exc))
    except ValidationError as exc:
        return RecordError(path, lineno, f"invalid event: {_first_error(exc)}")


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "event"
    return f"{where}: {err['msg']}"
