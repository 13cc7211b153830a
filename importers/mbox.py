"""Mail metadata from an mbox file: when, from which domain, to how many, in which thread.

Format
------
An mbox file (RFC 4155; Gmail's Takeout ``All mail Including Spam and
Trash.mbox``, Thunderbird's folder files, ``mutt`` mailboxes) is a sequence of
RFC 5322 messages, each introduced by a separator line that starts with
``From `` (the "From_ line", e.g. ``From 1699999@xxx Wed Jan 01 12:00:00 +0000
2020``). A blank line before a separator belongs to the separator. Like the
standard library's :class:`mailbox.mbox`, every line starting with ``From `` is
a separator (writers quote body lines as ``>From ``). A gzipped mbox is read
transparently. Sample::

    From alice@example.org Thu Jan  2 09:30:00 2020
    Date: Thu, 02 Jan 2020 10:30:00 +0100
    From: Alice <alice@example.org>
    To: bob@example.com, carol@example.net
    Subject: Lunch?
    Message-ID: <1@example.org>

    (body: never read into an event)

Events
------
One event of type ``message`` per message; **metadata only**. No body, no
subject text, no full address is ever stored: addresses appear as their domain
or as a keyed hash.

``timestamp``
    The ``Date`` header (RFC 5322 §3.3) converted to UTC. A message without
    one (Gmail's Takeout stores chats that way) takes the time of its From_
    line when that line states its UTC offset, as Gmail's does
    (``From 1529555944956622147@xxx Wed Mar 23 01:57:00 +0000 2016``); a From_
    line without an offset is a local time of unknown zone and is never used.
``date_from_separator`` (bool)
    Present, and true, only on a message timed by its From_ line.
``date_zone_known`` (bool)
    False when the Date carried ``-0000``, no zone, or an unknown zone name:
    RFC 5322 §3.3 and §4.3 say such a time is to be read as UTC "with no
    information about the local zone", so it is taken as UTC and flagged.
``sender_domain`` (category)
    Lower-cased domain of the ``From`` address (omitted if it has none).
``sender_hash`` (category)
    ``BLAKE2b-64(hash_key, lower-cased From address)`` in hex: lets features
    count distinct correspondents. With the default empty ``hash_key`` it is a
    plain hash, which a dictionary of addresses can reverse: set a secret key
    (and keep it: a different key gives different hashes and event ids).
``recipient_count`` (int)
    Number of addresses in all ``To``, ``Cc`` and ``Bcc`` headers (group
    syntax such as ``undisclosed-recipients:;`` counts 0).
``thread_id`` (category)
    Keyed hash of the thread root: the first message id in ``References``
    (RFC 5322 §3.6.4: the parent's references followed by the parent), else
    ``In-Reply-To``, else the message's own ``Message-ID``; omitted when the
    message has none of them.
``is_reply`` (bool)
    ``In-Reply-To`` or ``References`` present (the subject's "Re:" is ignored).
``subject_length`` (int)
    Characters of the RFC 2047-decoded subject (0 when absent).
``size_bytes`` (int)
    Bytes of the message as stored in the mbox (headers and body, without the
    From_ line and the separating blank line).
``content_type`` (category)
    The top-level MIME type (``multipart/mixed``; ``text/plain`` by default).
``has_attachments`` (bool), ``attachment_count`` (int)
    Leaf MIME parts with ``Content-Disposition: attachment``, or with a file
    name and no disposition.
``is_sent``, ``is_unread``, ``is_spam``, ``is_trash`` (bool)
    Only for Gmail exports, from the ``X-Gmail-Labels`` header (labels
    ``Sent``, ``Unread``, ``Spam``, ``Trash``); other labels are user-named
    and are not stored.

Errors
------
A file whose first non-blank line is not a From_ line raises ``RecordError``.
A message without a readable ``Date`` (and no offset on its From_ line) or
larger than ``max_message_bytes`` is yielded as
``RecordError(path, line_of_its_From_line, reason)``.

Memory is bounded by one message (at most ``max_message_bytes``), not by the
mailbox: the file is read line by line and each message alone is parsed by
the standard library's :class:`email.parser.BytesParser`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from email.header import decode_header, make_header
from email.message import Message
from email.parser import BytesParser
from email.policy import compat32
from email.utils import getaddresses, parseaddr, parsedate_to_datetime
from pathlib import Path
from typing import IO, ClassVar

from pydantic import Field, field_validator

from anonml.errors import RecordError
from anonml.model import Event
from anonml.plugins import Importer, PluginParams
from anonml.readers import READ_ERRORS, head, open_bytes, open_checked

__all__ = ["MboxImporter", "keyed_hash"]

_SEPARATOR = b"From "
_BLANK = (b"\n", b"\r\n")
_HEADER_LINE = re.compile(
    r"^(date|from|to|subject|message-id|received|return-path|delivered-to|x-gm-thrid):",
    re.IGNORECASE | re.MULTILINE,
)
# What parse accepts before the first From_ line: blank lines only.
_LEADING_BLANKS = re.compile(r"^(?:[ \t]*\r?\n)*")
_MSG_ID = re.compile(r"<([^<>\s]+)>")
# A From_ line's date with its UTC offset, as Gmail writes it: "Wed Mar 23 01:57:00 +0000 2016".
_SEPARATOR_DATE = re.compile(
    r"^From \S+\s+(\w{3}\s+\w{3}\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}\s+[+-]\d{4}\s+\d{4})\s*$"
)
_GMAIL_FLAGS = {"Sent": "is_sent", "Unread": "is_unread", "Spam": "is_spam", "Trash": "is_trash"}


def keyed_hash(value: str, key: str, purpose: str) -> str:
    """16 hex digits of BLAKE2b-64 keyed by ``key``, personalised by ``purpose``.

    The personalisation (RFC 7693 §2.8 "salt and personalization") keeps an
    address hash and a thread hash of the same string unrelated.
    """
    return hashlib.blake2b(
        value.encode("utf-8", "surrogateescape"),
        digest_size=8,
        key=key.encode("utf-8"),
        person=purpose.encode("ascii")[:16],
    ).hexdigest()


class MboxImporter(Importer):
    """Mail metadata (date, sender domain, recipient count, thread, size) from an mbox.

    See the module docstring for the format, every field and the timezone rule.
    """

    name: ClassVar[str] = "mbox"
    version: ClassVar[str] = "1.1"  # 1.1: a message without Date is timed by its From_ line's offset date
    description: ClassVar[str] = "mbox mail archives: message metadata only, never bodies"
    patterns: ClassVar[tuple[str, ...]] = ("*.mbox", "*.mbox.gz", "mbox")

    class Params(PluginParams):
        """Options of the mbox importer."""

        hash_key: str = Field(
            default="",
            max_length=64,
            description="secret BLAKE2b key for sender and thread hashes (<= 64 UTF-8 bytes)",
        )
        max_message_bytes: int = Field(
            default=64 * 2**20,
            ge=1024,
            le=2**32,
            description="a larger message is reported as a bad record (bounds memory)",
        )

        @field_validator("hash_key")
        @classmethod
        def _key_fits_blake2b(cls, value: str) -> str:
            if len(value.encode("utf-8")) > 64:
                raise ValueError("hash_key must be at most 64 bytes in UTF-8 (BLAKE2b key size)")
            return value

    def detect(self, path: Path) -> float:
        """0.95 for a From_ line followed by mail headers in a ``*.mbox`` file, 0.85 without the name."""
        text = head(path)
        if not text:
            return 0.3 if path.is_file() and path.name.lower().endswith((".mbox", ".mbox.gz")) else 0.0
        text = text[_LEADING_BLANKS.match(text).end():]  # parse skips blank lines before it too
        if not text.startswith("From ") or not _HEADER_LINE.search(text):
            return 0.0
        return 0.95 if path.name.lower().endswith((".mbox", ".mbox.gz")) else 0.85

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        with open_checked(path, open_bytes) as fh:
            try:
                for start_line, separator, size, message in self._messages(path, fh):
                    if message is None:
                        yield RecordError(
                            path,
                            start_line,
                            f"message is larger than max_message_bytes={self.params.max_message_bytes}",
                        )
                        continue
                    yield self._event(path, start_line, separator, size, message)
            except READ_ERRORS as exc:
                raise RecordError(path, None, f"cannot read: {exc}") from None

    def _messages(self, path: Path, fh: IO[bytes]) -> Iterator[tuple[int, bytes, int, Message | None]]:
        """``(line of the From_ line, the From_ line, stored size, parsed message or None if too large)``."""
        limit = self.params.max_message_bytes
        lines: list[bytes] | None = None  # None until the first From_ line
        start = size = 0
        separator = b""
        too_large = False
        last = b""
        for lineno, line in enumerate(fh, 1):
            if line.startswith(_SEPARATOR):
                if lines is not None:
                    yield _finish(start, separator, lines, size, last, too_large)
                lines, start, size, too_large, last = [], lineno, 0, False, b""
                separator = line
                continue
            if lines is None:
                if line.strip():
                    shown = line[:40].decode("utf-8", "replace").rstrip()
                    raise RecordError(
                        path, lineno, f"not an mbox file: expected a 'From ' line, found {shown!r}"
                    )
                continue
            size += len(line)
            last = line
            if size > limit:
                if not too_large:  # drop what was kept: memory stays bounded by the limit
                    lines.clear()
                too_large = True
            elif not too_large:
                lines.append(line)
        if lines is not None:
            yield _finish(start, separator, lines, size, last, too_large)

    def _event(self, path: Path, line: int, separator: bytes, size: int, msg: Message) -> Event | RecordError:
        raw_date = msg.get("Date")
        from_separator = raw_date is None
        if raw_date is None:
            when = _separator_time(separator)
            if when is None:
                reason = "message has no Date header, and its From_ line states no UTC offset"
                return RecordError(path, line, reason)
        else:
            raw_date = str(raw_date).strip()
            try:
                when = parsedate_to_datetime(raw_date)
            except (ValueError, TypeError, IndexError):
                return RecordError(path, line, f"Date header {raw_date[:60]!r} is not an RFC 5322 date")
        zone_known = when.tzinfo is not None
        if not zone_known:  # RFC 5322 §3.3/§4.3: -0000 or an unknown zone means UTC, zone unknown
            when = when.replace(tzinfo=UTC)
        key = self.params.hash_key
        fields: dict[str, object] = {
            "date_zone_known": zone_known,
            "recipient_count": _recipient_count(msg),
            "is_reply": msg.get("In-Reply-To") is not None or msg.get("References") is not None,
            "subject_length": _subject_length(msg.get("Subject")),
            "size_bytes": size,
            "content_type": msg.get_content_type(),
        }
        sender = parseaddr(str(msg.get("From", "")))[1].strip()
        if "@" in sender:
            fields["sender_domain"] = sender.rsplit("@", 1)[1].strip().lower()
            fields["sender_hash"] = keyed_hash(sender.lower(), key, "anonml-addr")
        root = _thread_root(msg)
        if root is not None:
            fields["thread_id"] = keyed_hash(root, key, "anonml-thread")
        attachments = _attachment_count(msg)
        fields["attachment_count"] = attachments
        fields["has_attachments"] = attachments > 0
        if from_separator:
            fields["date_from_separator"] = True
        labels = msg.get("X-Gmail-Labels")
        if labels is not None:
            present = {label.strip() for label in str(labels).split(",")}
            for label, flag in _GMAIL_FLAGS.items():
                fields[flag] = label in present
        return Event(source=self.name, type="message", timestamp=when, fields=fields)


def _finish(
    start: int, separator: bytes, lines: list[bytes], size: int, last: bytes, too_large: bool
) -> tuple[int, bytes, int, Message | None]:
    if too_large:
        return start, separator, size, None
    if last in _BLANK:  # the blank line before the next From_ line is the separator's
        lines.pop()
        size -= len(last)
    return start, separator, size, BytesParser(policy=compat32).parsebytes(b"".join(lines))


def _separator_time(separator: bytes) -> datetime | None:
    """The From_ line's time in UTC when the line states its offset (Gmail's form), else None."""
    match = _SEPARATOR_DATE.match(separator.decode("ascii", "replace"))
    if match is None:
        return None
    try:
        return datetime.strptime(" ".join(match[1].split()), "%a %b %d %H:%M:%S %z %Y").astimezone(UTC)
    except ValueError:  # a day or month name strptime does not know, or an impossible date
        return None


def _recipient_count(msg: Message) -> int:
    values = [str(v) for h in ("To", "Cc", "Bcc") for v in msg.get_all(h, [])]
    return sum(1 for _name, addr in getaddresses(values) if addr.strip())


def _subject_length(raw: object) -> int:
    if raw is None:
        return 0
    text = str(raw)
    try:
        return len(str(make_header(decode_header(text))))
    except (LookupError, UnicodeError, ValueError):  # unknown charset or bad encoded word
        return len(text)


def _thread_root(msg: Message) -> str | None:
    for header in ("References", "In-Reply-To", "Message-ID"):
        raw = msg.get(header)
        if raw is None:
            continue
        text = str(raw)
        ids = _MSG_ID.findall(text)
        if ids:
            return ids[0]
        tokens = text.split()
        if tokens:  # a non-conforming id without angle brackets
            return tokens[0]
    return None


def _attachment_count(msg: Message) -> int:
    count = 0
    for part in msg.walk():
        if part.is_multipart():
            continue
        disposition = part.get_content_disposition()
        if disposition == "attachment" or (disposition is None and part.get_filename()):
            count += 1
    return count
