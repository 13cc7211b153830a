"""WhatsApp chat export (``WhatsApp Chat with <name>.txt``, iOS ``_chat.txt``): messages, locale date forms.

Format
------
"Export chat" writes one message per header line, continued on the
following lines when the message has several. The header's form depends on
the phone's platform and locale:

* Android: ``<date>, <time> - <sender>: <text>`` (``06/03/2017, 00:45 - Ann: hi``,
  ``1/23/23, 3:19 PM - Ann: hi``, ``23.01.23, 15:19 - Ann: hi``);
* iOS: ``[<date>, <time>] <sender>: <text>`` with seconds
  (``[23/01/2023, 15:19:08] Ann: hi``, ``[1/23/23, 3:19:08 PM] Ann: hi``),
  sometimes preceded by a left-to-right mark (U+200E).

``<date>`` is day, month and year in the locale's order, separated by
``/``, ``.`` or ``-``, with a 2- or 4-digit year (or year first:
``2023-01-23``); ``<time>`` is 24-hour, or 12-hour with ``AM``/``PM``
(``am``, ``a. m.``; a narrow no-break space may precede it). A header
without ``<sender>: `` is a system message (``You created group "X"``,
``Messages and calls are end-to-end encrypted…``). Any other line continues
the message above it.

Day/month order
---------------
``Params.date_order`` (``dmy``, ``mdy`` or ``ymd``) says it. By default
(``auto``) the file decides: a first number above 12 anywhere means
``dmy``, a second above 12 means ``mdy``, a 4-digit first number means
``ymd``; a file whose every date reads both ways is refused with the hint to
pass ``date_order`` — never guessed.

Timestamps and timezones
------------------------
Export times are the phone's local wall-clock time, with no offset. The
``timezone`` param (an IANA name) is required; without it the file is
refused. A wall time that a daylight-saving change repeats takes the first
(earlier) of its two instants.

Events
------
``message``: ``sender`` (category, as the export names them: a contact name
or a phone number; iOS's ``~`` before a sender the exporter has not saved is
dropped), ``chat`` (category: the name in
``WhatsApp Chat with <name>.txt``, when the file is so named), ``chars``,
``words``, ``lines`` (int), ``media`` (bool: an omitted or attached file,
English exports' ``<Media omitted>``, ``image omitted``, ``<attached: …>``,
``(file attached)``), ``deleted`` (bool: ``This message was deleted`` /
``You deleted this message``), ``edited`` (bool: the body ends ``<This
message was edited>``, which is not counted), ``notice`` (bool: iOS marks
with a left-to-right mark text WhatsApp itself wrote in the sender's name —
attachments, deletions, polls, calls, and the system notices iOS attributes
to the group, such as ``Neha added you``), ``from_me`` (bool, when ``Params.me`` names
the exporting person), and ``text`` (text) only when ``Params.text`` is true:
message bodies are not stored by default.

``system_message``: ``chat`` and ``text`` (text; system lines carry no
private content of their own).

Errors
------
A header line whose date or time does not exist (``31/02/2020``, ``25:10``)
is yielded as ``RecordError(path, line, reason)``, and the lines continuing
it are skipped with it. A file whose first non-blank line is not a header
raises ``RecordError``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from anonml.errors import RecordError
from anonml.model import Event, Text
from anonml.plugins import Importer, PluginParams
from anonml.readers import TimeZoneName, head, iter_line_chunks, resolve_timezone

__all__ = ["WhatsAppImporter", "HEADER"]

#: One message header, Android (``… - ``) or iOS (``[…] ``) form.
HEADER = re.compile(
    r"^[\u200e\u200f]?(?P<open>\[)?"
    r"(?P<date>\d{1,4}(?P<sep>[./-])\d{1,2}(?P=sep)\d{1,4})\.?,?\s"
    r"(?P<time>\d{1,2}[:.]\d{2}(?:[:.]\d{2})?)"
    r"(?:[\s\u202f\u00a0]?(?P<ampm>[AaPp]\.?\s?[Mm]\.?))?"
    r"(?(open)\]\s|\s[-\u2013]\s)"
    r"(?P<rest>.*)$"
)
_CHAT_NAME = re.compile(r"^WhatsApp Chat (?:with|-) (?P<name>.+)\.txt$", re.IGNORECASE)
_MEDIA = re.compile(
    r"^(?:<Media omitted>|(?:image|video|audio|sticker|GIF|document) omitted|<attached: .*>)$"
    r"|\(file attached\)$",
    re.IGNORECASE,
)
_DELETED = ("this message was deleted", "you deleted this message")
_EDITED = "<This message was edited>"
_MARKS = "\u200e\u200f"
# A sender the exporter has not saved: "~" and a (narrow no-break) space before the name.
_UNSAVED = re.compile(r"^~[\s\u202f\u00a0]*")


@dataclass(slots=True)
class _Pending:
    """A message read so far: its header and the lines continuing it."""

    line: int
    when: datetime
    rest: str
    more: list[str] = field(default_factory=list)


def _date_parts(text: str) -> tuple[int, int, int]:
    a, b, c = (int(part) for part in re.split(r"[./-]", text))
    return a, b, c


class WhatsAppImporter(Importer):
    """Messages of a WhatsApp chat export. See the module docstring."""

    name: ClassVar[str] = "whatsapp"
    version: ClassVar[str] = "1.0"
    description: ClassVar[str] = "WhatsApp chat export .txt (Android and iOS, any day/month order, 12/24 h)"
    patterns: ClassVar[tuple[str, ...]] = ("WhatsApp Chat with *.txt", "_chat.txt")

    class Params(PluginParams):
        """Options of the WhatsApp importer."""

        timezone: TimeZoneName | None = Field(
            default=None, description="IANA zone of the phone that exported the chat (required)"
        )
        date_order: Literal["auto", "dmy", "mdy", "ymd"] = Field(
            default="auto", description="order of day, month and year in the dates (auto: from the file)"
        )
        me: str | None = Field(
            default=None, max_length=200, description="the exporter's name as the chat shows it (from_me)"
        )
        text: bool = Field(default=False, description="also store each message's text")

    def detect(self, path: Path) -> float:
        """0.95 for a header first line in a file named like an export, 0.6 in another ``.txt``, else 0."""
        if path.suffix.lower() != ".txt":
            return 0.0  # exports are always .txt; a log of another kind may start with a date too
        first = next((line for line in head(path).splitlines() if line.strip()), "")
        if HEADER.match(first) is None:
            return 0.0
        named = path.name == "_chat.txt" or _CHAT_NAME.match(path.name) is not None
        return 0.95 if named else 0.6

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        if self.params.timezone is None:
            raise RecordError(
                path, None, "a WhatsApp export has local times without an offset: pass params timezone "
                "(the phone's IANA zone, e.g. {\"timezone\": \"Europe/Berlin\"})"
            )
        zone = resolve_timezone(self.params.timezone)
        order = self.params.date_order if self.params.date_order != "auto" else self._date_order(path)
        chat_match = _CHAT_NAME.match(path.name)
        chat = chat_match.group("name") if chat_match else None
        pending: _Pending | None = None
        seen_header = False
        for first_line, lines in iter_line_chunks(path):
            for number, raw in enumerate(lines, first_line):
                line = raw.rstrip("\r\n")
                match = HEADER.match(line)
                if match is None:
                    if pending is not None:
                        pending.more.append(line)
                    elif not seen_header and line.strip():
                        raise RecordError(path, number, "not a WhatsApp chat export: no date/time header")
                    continue  # a line continuing a bad record, or a blank line before the first header
                seen_header = True
                if pending is not None:
                    yield self._event(pending, chat)
                    pending = None
                try:
                    when = self._when(match, order, zone)
                except ValueError as exc:
                    yield RecordError(path, number, str(exc))
                    continue
                pending = _Pending(number, when, match.group("rest"))
        if pending is not None:
            yield self._event(pending, chat)
        if not seen_header:
            raise RecordError(path, None, "not a WhatsApp chat export: no message")

    def _date_order(self, path: Path) -> str:
        """The order all the file's dates can be read in; refuses a file that reads both ways."""
        day_first = month_first = False
        for _first, lines in iter_line_chunks(path):
            for line in lines:
                match = HEADER.match(line)
                if match is None:
                    continue
                if len(match.group("date").split(match.group("sep"))[0]) == 4:
                    return "ymd"
                a, b, _c = _date_parts(match.group("date"))
                day_first |= a > 12
                month_first |= b > 12
        if day_first != month_first:
            return "dmy" if day_first else "mdy"
        if day_first:
            raise RecordError(path, None, "dates read neither day- nor month-first; pass params date_order")
        raise RecordError(
            path, None, "every date reads both day-first and month-first: pass params date_order "
            "(\"dmy\" or \"mdy\")"
        )

    def _when(self, match: re.Match[str], order: str, zone: tzinfo) -> datetime:
        raw_date, raw_time = match.group("date"), match.group("time")
        a, b, c = _date_parts(raw_date)
        year, month, day = {"dmy": (c, b, a), "mdy": (c, a, b), "ymd": (a, b, c)}[order]
        if year < 100:
            year += 2000
        numbers = [int(n) for n in re.split(r"[:.]", raw_time)]
        hour, minute, second = numbers[0], numbers[1], numbers[2] if len(numbers) > 2 else 0
        ampm = match.group("ampm")
        if ampm is not None:
            pm = ampm[0] in "Pp"
            if hour > 12 or (hour == 0 and pm):
                raise ValueError(f"time {raw_time} {ampm}: hour {hour} on a 12-hour clock")
            hour = hour % 12 + (12 if pm else 0)
        try:
            local = datetime(year, month, day, hour, minute, second)
        except ValueError as exc:
            raise ValueError(f"date {raw_date}, {raw_time} read {order}: {exc}") from None
        return local.replace(tzinfo=zone).astimezone(UTC)

    def _event(self, pending: _Pending, chat: str | None) -> Event:
        sender, sep, first = pending.rest.partition(": ")
        fields: dict[str, object] = {}
        if chat is not None:
            fields["chat"] = chat
        if not sep:  # no "sender: ": a system line
            fields["text"] = Text("\n".join([pending.rest, *pending.more]).strip(_MARKS))
            return Event(source=self.name, type="system_message", timestamp=pending.when, fields=fields)
        sender = _UNSAVED.sub("", sender.strip(_MARKS).strip())
        notice = first.startswith("\u200e")
        body = "\n".join([first.lstrip(_MARKS), *pending.more])
        edited = body.rstrip().endswith(_EDITED)
        if edited:
            body = body.rstrip()[: -len(_EDITED)].rstrip(" \u200e")
        fields["sender"] = sender
        fields["notice"] = notice
        fields["edited"] = edited
        fields["chars"] = len(body)
        fields["words"] = len(body.split())
        fields["lines"] = 1 + len(pending.more)
        fields["media"] = _MEDIA.search(body.strip()) is not None
        fields["deleted"] = body.strip().rstrip(".").lower() in _DELETED
        if self.params.me is not None:
            fields["from_me"] = sender == self.params.me
        if self.params.text:
            fields["text"] = Text(body)
        return Event(source=self.name, type="message", timestamp=pending.when, fields=fields)
