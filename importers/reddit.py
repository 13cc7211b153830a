"""Reddit data export ("Request your data"): ``comments.csv``, ``posts.csv``, ``messages.csv``.

Format
------
A zip of CSV files with a header line; the three read here are::

    comments.csv  id,permalink,date,ip,subreddit,gildings,link,parent,body,media
    posts.csv     id,permalink,date,ip,subreddit,gildings,title,url,body
    messages.csv  id,permalink,thread_id,date,ip,from,to,subject,body

(``messages_archive.csv`` has the messages' header too; older comment files
lack ``media``, newer ones add ``gildings_silver``, ``gildings_supergold``.)
Bodies are Markdown and span lines inside quotes. The other files (votes,
saves, subscriptions) carry no time and are not read.

Timestamps and timezones
------------------------
``date`` is ``YYYY-MM-DD HH:MM:SS UTC``; an ISO 8601 value with an offset is
accepted too, one without either is refused.

Events
------
``comment``: ``subreddit`` (category), ``reply`` (bool: ``parent`` is set),
``chars``, ``words`` (int: of the body), ``gildings`` (int), ``media``
(bool: the ``media`` cell is set), ``removed`` (bool: the body is
``[deleted]`` or ``[removed]``).

``post``: ``subreddit``, ``self_post`` (bool: no ``url``, or the url is the
post itself), ``domain`` (text: host of a link post's url), ``chars``,
``words`` (of the body), ``gildings``, ``removed``.

``message``: ``sent`` (bool, when ``Params.username`` is given: ``from`` is
that user), ``chars``, ``words``.

With ``Params.text`` true, ``text`` (the body) and a post's ``title`` (both
text) are stored too; they are not by default. ``ip``, ``permalink``, ids and
the other party of a message are never stored.

Errors
------
A row with a bad date or count is yielded as ``RecordError(path, line,
reason)`` naming the line its record starts on; a row of another width than
the header likewise. A file whose header is none of the three raises
``RecordError``; a malformed quote or a non-UTF-8 byte raises it at its line.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlsplit

from pydantic import Field

from anonml.errors import RecordError
from anonml.model import Event, Text
from anonml.plugins import Importer, PluginParams
from anonml.readers import csv_rows, head, open_checked, parse_timestamp

__all__ = ["RedditImporter"]

# kind -> (event type, columns that identify the file)
_KINDS = {
    "comment": ("id", "permalink", "date", "subreddit", "link", "parent", "body"),
    "post": ("id", "permalink", "date", "subreddit", "title", "url", "body"),
    "message": ("id", "permalink", "thread_id", "date", "from", "to", "body"),
}
_NAMES = {"comments.csv": "comment", "posts.csv": "post", "messages.csv": "message",
          "messages_archive.csv": "message"}
_REMOVED = {"[deleted]", "[removed]"}


def _kind(columns: list[str]) -> str | None:
    return next((kind for kind, needed in _KINDS.items() if all(c in columns for c in needed)), None)


def _date(raw: str) -> datetime:
    text = raw.strip()
    try:
        if text.endswith(" UTC"):
            return parse_timestamp(text[:-4] + "+00:00")
        return parse_timestamp(text)
    except ValueError:
        raise ValueError(f"date: {raw!r} is not 'YYYY-MM-DD HH:MM:SS UTC'") from None


def _count(raw: str, column: str) -> int:
    text = raw.strip() or "0"
    if not text.isdigit():
        raise ValueError(f"{column}: {raw!r} is not a count")
    return int(text)


class RedditImporter(Importer):
    """Comments, posts and messages of a Reddit data export. See the module docstring."""

    name: ClassVar[str] = "reddit"
    version: ClassVar[str] = "1.0"
    description: ClassVar[str] = "Reddit data export: comments.csv, posts.csv, messages.csv"
    patterns: ClassVar[tuple[str, ...]] = tuple(_NAMES)

    class Params(PluginParams):
        """Options of the Reddit importer."""

        username: str | None = Field(
            default=None, min_length=1, max_length=64, description="your user name (sets a message's 'sent')"
        )
        text: bool = Field(default=False, description="also store bodies and post titles")

    def detect(self, path: Path) -> float:
        """0.95 for an export file name with its header, 0.9 for the header alone."""
        first = head(path, 1024).split("\n", 1)[0].strip()
        kind = _kind([c.strip() for c in first.split(",")])
        if kind is None:
            return 0.0
        return 0.95 if _NAMES.get(path.name.lower()) == kind else 0.9

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        with open_checked(path, encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            try:
                header = [c.strip() for c in next(reader, [])]
            except (csv.Error, UnicodeDecodeError) as exc:
                raise RecordError(path, 1, f"unreadable CSV header: {exc}") from None
            kind = _kind(header)
            if kind is None:
                raise RecordError(
                    path, 1, f"not a Reddit comments, posts or messages CSV: header {header}"
                )
            for item in csv_rows(reader, path, len(header)):
                if isinstance(item, RecordError):
                    yield item
                    continue
                line, cells = item
                row = dict(zip(header, cells, strict=True))
                try:
                    yield self._event(kind, row)
                except ValueError as exc:
                    yield RecordError(path, line, str(exc))

    def _event(self, kind: str, row: dict[str, str]) -> Event:
        when = _date(row["date"])
        body = row.get("body", "")
        fields: dict[str, object] = {"chars": len(body), "words": len(body.split())}
        if kind != "message":
            subreddit = row["subreddit"].strip()
            if not subreddit:
                raise ValueError("subreddit: empty")
            fields["subreddit"] = subreddit
            fields["gildings"] = _count(row.get("gildings", ""), "gildings")
            fields["removed"] = body.strip() in _REMOVED
        if kind == "comment":
            fields["reply"] = bool(row["parent"].strip())
            if "media" in row:
                fields["media"] = bool(row["media"].strip())
        elif kind == "post":
            url = row["url"].strip()
            permalink = row["permalink"].strip()
            host = urlsplit(url).hostname if url else None
            fields["self_post"] = not url or (bool(permalink) and permalink.rstrip("/") in url)
            if host and not fields["self_post"]:
                fields["domain"] = Text(host)
            if self.params.text:
                fields["title"] = Text(row["title"])
        elif self.params.username is not None:
            fields["sent"] = row["from"].strip().lower() == self.params.username.lower()
        if self.params.text:
            fields["text"] = Text(body)
        return Event(source=self.name, type=kind, timestamp=when, fields=fields)
