"""Facebook and Instagram "Download your information" JSON: messages, posts, comments, likes and reactions.

Format
------
Meta's export (JSON format chosen) is a tree of JSON files. Read here:

* Messenger and Instagram messages, ``.../messages/inbox/<thread>/message_1.json``
  (``message_2.json``… for long threads)::

      {"participants": [{"name": "Ann Lee"}, {"name": "Bo"}],
       "messages": [{"sender_name": "Ann Lee", "timestamp_ms": 1565582588971,
                     "content": "Caf\\u00c3\\u00a9 at 8?", "photos": [{"uri": "..."}],
                     "reactions": [{"reaction": "\\u00f0\\u009f\\u0098\\u0086", "actor": "Bo"}],
                     "type": "Generic"}],
       "title": "Ann Lee", "is_still_participant": true, "thread_type": "Regular",
       "thread_path": "inbox/annlee_1234"}

* Facebook posts, ``your_posts_1.json`` (also ``your_posts__check_ins__photos_and_videos_1.json``):
  an array of ``{"timestamp": 1457387286, "data": [{"post": "text"}],
  "attachments": [...], "title": "Ann Lee updated her status."}``;
* Facebook comments, ``comments.json``: ``{"comments_v2": [{"timestamp": ...,
  "data": [{"comment": {"timestamp", "comment", "author"}}], "title": ...}]}``;
* Facebook likes and reactions, ``likes_and_reactions_1.json``: an array of
  ``{"timestamp": ..., "data": [{"reaction": {"reaction": "LIKE", "actor": ...}}], "title": ...}``;
* Instagram likes, ``liked_posts.json`` / ``liked_comments.json``:
  ``{"likes_media_likes": [{"title": "<account>", "string_list_data": [{"href": ...,
  "value": "\\u00f0\\u009f\\u0091\\u008d", "timestamp": 1751717736}]}]}`` (``likes_comment_likes``).

Which platform a file is from comes from the export's folder names: ``facebook-<user>…`` or
``your_facebook_activity`` for Facebook; ``instagram-<user>-<date>-<id>``, ``your_instagram_activity``
or (exports before 2023) ``<username>_<YYYYMMDD>`` for Instagram. The threads' own folders (named
after people) are not read for it. A message file under no such folder is Messenger's.

Every string is *mojibake*: Meta writes each UTF-8 byte as its own
``\\u00XX`` escape, so ``é`` arrives as ``Ã©``. :func:`fix_mojibake` turns
the code points back into bytes and decodes them as UTF-8; a string that is
not of that form (an ASCII one, real non-Latin text) is kept as it is.

Each file's top-level array is streamed (:func:`anonml.json_stream.iter_json_items`),
so a thread of tens of thousands of messages is read one message at a time.

Timestamps and timezones
------------------------
``timestamp_ms`` is milliseconds and ``timestamp`` seconds since 1970-01-01
UTC; a time outside 2004–2100 (before Facebook; a wrong unit) is refused.

Events
------
The event source says the platform: ``facebook`` or ``instagram`` (the
importer's name).

``message``: ``group`` (bool: more than two participants), ``from_me``
(bool, when ``Params.me`` names you), ``kind`` (category: ``type``
lower-cased, e.g. ``generic``, ``share``, ``call``), ``chars``, ``words``
(int: of the content), ``media`` (bool: photos, videos, audio, gifs, files, a
sticker or a share), ``reactions`` (int), ``unsent`` (bool), ``call_s`` (int:
``call_duration``, calls only).

``post`` / ``comment``: ``chars``, ``words``; posts also ``attachments``
(int).

``reaction`` (Facebook): ``reaction`` (category, lower-cased: ``like``,
``love``, ``haha``…). ``like`` (Instagram): ``target`` (category: ``post``
or ``comment``).

With ``Params.text`` true, ``text`` (the content, post or comment, decoded)
is stored too; it is not by default. Names of other people (senders,
participants, thread titles, the accounts liked) are never stored.

Errors
------
A record without its time, or with a bad one, is yielded as
``RecordError(path, line, reason, record="messages[12]")`` with the line it
starts on. A JSON file that is none of the above raises ``RecordError``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from anonml.errors import RecordError
from anonml.json_stream import iter_json_items
from anonml.model import Event, Text
from anonml.plugins import Importer, PluginParams
from anonml.readers import head

__all__ = ["FacebookImporter", "InstagramImporter", "fix_mojibake"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EARLIEST = datetime(2004, 1, 1, tzinfo=UTC)
_LATEST = datetime(2100, 1, 1, tzinfo=UTC)
_MESSAGE_FILE = re.compile(r"^message_\d+\.json$")
_POSTS_FILE = re.compile(r"^your_posts(?:__check_ins__photos_and_videos)?_\d+\.json$")
_REACTIONS_FILE = re.compile(r"^likes_and_reactions(?:_\d+)?\.json$")
# Instagram's export folder before 2023, "<username>_<YYYYMMDD>" (e.g. ``callumflack_20220731``): it
# names no platform, and its messages look like Messenger's.
_INSTAGRAM_ROOT = re.compile(r"^[a-z0-9._]{1,30}_(?:19|20)\d{6}$")
_MEDIA_KEYS = ("photos", "videos", "audio_files", "gifs", "files", "sticker", "share")
_INSTAGRAM_LIKES = {"likes_media_likes": "post", "likes_comment_likes": "comment"}
# The member holding a file kind's records (None: the top-level array itself).
_MEMBER = {"messages": "messages", "comments": "comments_v2", "posts": None, "reactions": None}


def fix_mojibake(text: str) -> str:
    """Undo Meta's escaping of each UTF-8 byte as a code point (``"Ã©"`` → ``"é"``); else ``text``."""
    try:
        return text.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return text


def _instant(raw: object, unit_ms: bool, name: str) -> datetime:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ValueError(f"{name}: {raw!r} is not a whole number")
    when = _EPOCH + (timedelta(milliseconds=raw) if unit_ms else timedelta(seconds=raw))
    if not _EARLIEST <= when < _LATEST:
        raise ValueError(f"{name}: {raw} is {when:%Y-%m-%d}, outside 2004-2100 (a wrong unit?)")
    return when


def _words(fields: dict[str, object], text: str) -> None:
    fields["chars"] = len(text)
    fields["words"] = len(text.split())


@dataclass(frozen=True, slots=True)
class _Kind:
    """What a file holds, from its name and head."""

    name: str  # messages, posts, comments, reactions, instagram_likes
    confidence: float


def _path_platform(path: Path) -> str | None:
    """The platform the export's own folder names say, else None.

    Only the folders above ``messages`` count: below it are the threads' folders, named after
    people (a deleted Instagram account is ``instagramuser_<id>``, a deleted Facebook one
    ``facebookuser_<id>``), which say nothing about the export they sit in.
    """
    parts = [p.lower() for p in path.parts[:-1]]
    if "messages" in parts:
        parts = parts[: len(parts) - parts[::-1].index("messages")]
    if any("instagram" in p for p in parts):
        return "instagram"
    if any("facebook" in p or "messenger" in p for p in parts):
        return "facebook"
    if any(_INSTAGRAM_ROOT.match(p) for p in parts):
        return "instagram"
    return None


def _kind(path: Path) -> _Kind | None:
    text = head(path, 2048).lstrip()
    name = path.name.lower()
    if text.startswith("{"):
        if '"participants"' in text and ('"messages"' in text or _MESSAGE_FILE.match(name)):
            return _Kind("messages", 0.95 if _MESSAGE_FILE.match(name) else 0.9)
        if '"comments_v2"' in text:
            return _Kind("comments", 0.95)
        if any(f'"{key}"' in text for key in _INSTAGRAM_LIKES):
            return _Kind("instagram_likes", 0.95)
    elif text.startswith("[") and '"timestamp"' in text:
        if _POSTS_FILE.match(name):
            return _Kind("posts", 0.9)
        if _REACTIONS_FILE.match(name) and '"reaction"' in text:
            return _Kind("reactions", 0.9)
    return None


class FacebookImporter(Importer):
    """Facebook's (and Messenger's) "Download your information" JSON. See the module docstring."""

    name: ClassVar[str] = "facebook"
    version: ClassVar[str] = "1.0"
    description: ClassVar[str] = "Facebook 'Download your information' JSON: messages, posts, comments, likes"
    patterns: ClassVar[tuple[str, ...]] = (
        "message_*.json", "your_posts_*.json", "comments.json", "likes_and_reactions_*.json"
    )
    platform: ClassVar[str] = "facebook"

    class Params(PluginParams):
        """Options of the Facebook and Instagram importers."""

        me: str | None = Field(
            default=None, min_length=1, max_length=200, description="your name as the export shows it"
        )
        text: bool = Field(default=False, description="also store message, post and comment text")

    def detect(self, path: Path) -> float:
        """The file kind's score (0.9–0.95) when its folder is not the other platform's, else 0."""
        kind = _kind(path)
        if kind is None:
            return 0.0
        where = _path_platform(path)
        if where is not None and where != self.platform:
            return 0.0
        if where is None and self.platform == "facebook" and kind.name == "instagram_likes":
            return 0.0
        if where is None and self.platform == "instagram" and kind.name != "instagram_likes":
            return 0.0  # a message file outside any export folder: Messenger's, unless told
        return kind.confidence

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        kind = _kind(path)
        if kind is None:
            raise RecordError(path, None, "not a Facebook or Instagram 'Download your information' JSON file")
        participants: list[Any] = []
        for key, index, line, value in iter_json_items(path):
            if kind.name == "messages" and key == "participants":
                participants.append(value)
                continue
            wanted = key in _INSTAGRAM_LIKES if kind.name == "instagram_likes" else key == _MEMBER[kind.name]
            if not wanted:
                continue
            if index is None:
                raise RecordError(path, line, f"{key!r} is not an array of records")
            record = f"{key}[{index}]" if key is not None else f"$[{index}]"
            try:
                if not isinstance(value, dict):
                    raise ValueError(f"expected an object, got {type(value).__name__}")
                # a record's events are built whole first: a bad entry refuses the record, not half of it
                events = list(self._events(kind.name, key, value, group=len(participants) > 2))
            except KeyError as exc:
                yield RecordError(path, line, f"missing field {exc}", record=record)
            except (ValueError, TypeError) as exc:
                yield RecordError(path, line, str(exc), record=record)
            else:
                yield from events

    def _events(self, kind: str, key: str | None, item: dict[str, Any], *, group: bool) -> Iterator[Event]:
        fields: dict[str, object] = {}
        if kind == "messages":
            when = _instant(item["timestamp_ms"], True, "timestamp_ms")
            content = fix_mojibake(str(item.get("content") or ""))
            fields["group"] = group
            if self.params.me is not None:
                fields["from_me"] = fix_mojibake(str(item.get("sender_name", ""))) == self.params.me
            if item.get("type"):
                fields["kind"] = str(item["type"]).lower()
            _words(fields, content)
            fields["media"] = any(item.get(k) for k in _MEDIA_KEYS)
            fields["reactions"] = len(item.get("reactions") or [])
            fields["unsent"] = bool(item.get("is_unsent", False))
            if "call_duration" in item:
                fields["call_s"] = int(item["call_duration"])
            self._text(fields, content)
            yield Event(source=self.name, type="message", timestamp=when, fields=fields)
        elif kind == "instagram_likes":
            for entry in item.get("string_list_data") or []:
                like = dict(fields, target=_INSTAGRAM_LIKES[key or ""])
                when = _instant(entry["timestamp"], False, "timestamp")
                yield Event(source=self.name, type="like", timestamp=when, fields=like)
        else:
            when = _instant(item["timestamp"], False, "timestamp")
            data = [d for d in item.get("data") or [] if isinstance(d, dict)]
            if kind == "reactions":
                reaction = next((d["reaction"] for d in data if "reaction" in d), None)
                if not isinstance(reaction, dict) or not reaction.get("reaction"):
                    raise ValueError("no data[].reaction.reaction")
                fields["reaction"] = fix_mojibake(str(reaction["reaction"])).lower()
                yield Event(source=self.name, type="reaction", timestamp=when, fields=fields)
                return
            if kind == "comments":
                comment = next((d["comment"] for d in data if "comment" in d), {})
                text = fix_mojibake(str(comment.get("comment") or "")) if isinstance(comment, dict) else ""
                event_type = "comment"
            else:
                text = fix_mojibake(str(next((d["post"] for d in data if "post" in d), "")))
                fields["attachments"] = len(item.get("attachments") or [])
                event_type = "post"
            _words(fields, text)
            self._text(fields, text)
            yield Event(source=self.name, type=event_type, timestamp=when, fields=fields)

    def _text(self, fields: dict[str, object], text: str) -> None:
        if self.params.text and text:
            fields["text"] = Text(text)


class InstagramImporter(FacebookImporter):
    """Instagram's "Download your information" JSON: messages and likes. See the module docstring."""

    name: ClassVar[str] = "instagram"
    version: ClassVar[str] = "1.0"
    description: ClassVar[str] = "Instagram 'Download your information' JSON: messages, likes"
    patterns: ClassVar[tuple[str, ...]] = ("message_*.json", "liked_posts.json", "liked_comments.json")
    platform: ClassVar[str] = "instagram"
