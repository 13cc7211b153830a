"""WhatsApp importer: a real Android export against a strptime reading; US, iOS and German forms; errors."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from anonml.errors import PluginError, RecordError
from anonml.model import Event, Text
from anonml.store import EventStore
from importers.whatsapp import WhatsAppImporter
from tests.importers.helpers import check_store_round_trip, only_events, parse_failure, reject_reasons

SAMPLE = Path(__file__).parent / "samples" / "whatsapp" / "WhatsApp Chat with ShortChat.txt"
FIX = Path(__file__).parent / "fixtures" / "whatsapp"
US = FIX / "WhatsApp Chat with Bo.txt"


def _parse(path: Path, **params: object) -> list[Event | RecordError]:
    return list(WhatsAppImporter(params).parse(path))


def _strptime_reading(path: Path, zone: str) -> list[tuple[datetime, str, str]]:
    """The independent reading: split each 'dd/mm/yyyy, HH:MM - rest' line by hand, join the rest."""
    messages: list[list[str | datetime]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        stamp, dash, rest = line.partition(" - ")
        try:
            local = datetime.strptime(stamp, "%d/%m/%Y, %H:%M")
        except ValueError:
            messages[-1][2] += "\n" + line  # type: ignore[operator]
            continue
        assert dash
        messages.append([local.replace(tzinfo=ZoneInfo(zone)).astimezone(UTC), *rest.partition(": ")[::2]])
    return [(m[0], m[1], m[2]) for m in messages]  # type: ignore[misc]


def test_real_export_matches_a_strptime_reading() -> None:
    events = only_events(_parse(SAMPLE, timezone="Europe/Zurich", date_order="dmy", text=True))
    reference = _strptime_reading(SAMPLE, "Europe/Zurich")
    assert len(events) == len(reference) == 5
    for event, (when, head, body) in zip(events, reference, strict=True):
        assert event.timestamp == when
        if event.type == "system_message":
            assert body == "" and event.fields["text"] == head
        else:
            assert (event.fields["sender"], event.fields["text"]) == (head, body)
            assert event.fields["chat"] == "ShortChat" and event.fields["lines"] == body.count("\n") + 1
    assert [e.type for e in events] == ["system_message"] * 2 + ["message"] * 3
    assert events[0].timestamp == datetime(2017, 3, 5, 23, 45, tzinfo=UTC)  # 00:45 CET
    assert events[-1].fields["text"] == Text("How are you?\n\nIs everything alright?")
    assert events[-1].fields["sender"] == "+410123456789" and events[-1].fields["words"] == 6


def test_text_is_left_out_unless_asked() -> None:
    events = only_events(_parse(SAMPLE, timezone="UTC", date_order="dmy"))
    assert all("text" not in e.fields for e in events if e.type == "message")


def test_ambiguous_dates_and_missing_zone_are_refused_not_guessed() -> None:
    assert parse_failure(WhatsAppImporter({"timezone": "UTC"}), SAMPLE) == (
        f"{SAMPLE}: every date reads both day-first and month-first: "
        "pass params date_order (\"dmy\" or \"mdy\")"
    )
    assert "pass params timezone" in parse_failure(WhatsAppImporter(), SAMPLE)
    with pytest.raises(PluginError, match="timezone"):
        WhatsAppImporter({"timezone": "Mars/Olympus"})


def test_us_android_export_twelve_hour_clock_media_deletion_and_bad_headers() -> None:
    items = _parse(US, timezone="America/New_York", me="Ann Lee")
    assert reject_reasons([i for i in items if isinstance(i, RecordError)], US) == [
        ":7: date 2/30/23, 9:00 read mdy: day is out of range for month",
        ":9: time 13:00 PM: hour 13 on a 12-hour clock",
    ]
    notice, question, reply, media, deleted, fine = (i for i in items if isinstance(i, Event))
    assert notice.type == "system_message" and notice.fields["chat"] == "Bo"
    assert question.timestamp == datetime(2023, 1, 23, 20, 19, tzinfo=UTC)  # 3:19 PM EST
    assert question.fields["from_me"] is True and reply.fields["from_me"] is False
    assert (reply.fields["lines"], reply.fields["words"]) == (2, 5)  # "yes" / "see you at 8"
    assert media.timestamp == datetime(2023, 1, 23, 5, 5, tzinfo=UTC)  # 12:05 AM is five past midnight
    assert media.fields["media"] is True and deleted.fields["deleted"] is True
    assert deleted.timestamp == datetime(2023, 1, 24, 17, 30, tzinfo=UTC)  # 12:30 PM is half past noon
    assert fine.fields["sender"] == "Ann Lee"  # the bad record's continuation line went with it


def test_ios_export_with_dotted_day_first_dates_and_marks() -> None:
    image, greeting, attached = only_events(_parse(FIX / "_chat.txt", timezone="Europe/Berlin", text=True))
    assert image.timestamp == datetime(2023, 1, 23, 14, 19, 8, tzinfo=UTC)  # day-first: 23 is no month
    assert image.fields["sender"] == "Ann Lee" and image.fields["media"] is True
    assert attached.fields["media"] is True
    assert attached.timestamp == datetime(2023, 1, 24, 8, 1, 30, tzinfo=UTC)
    assert greeting.fields["text"] == "Grüße aus Berlin" and "chat" not in greeting.fields


def test_ios_us_export_forms() -> None:
    """The forms of a 2025 US iOS export: a narrow no-break space before PM, "~" before unsaved
    senders, left-to-right marks before the text WhatsApp writes, edit and deletion markers."""
    path = FIX / "ios-us" / "_chat.txt"
    events = only_events(_parse(path, timezone="America/Los_Angeles", text=True))
    assert [e.fields["sender"] for e in events] == ["Residency", "Mo", "Residency", "Mo", "Mo", "Uma", "Mo"]
    assert events[0].timestamp == datetime(2025, 7, 15, 6, 34, 42, tzinfo=UTC)  # 11:34:42 PM PDT
    assert events[2].timestamp == datetime(2025, 11, 5, 8, 46, 1, tzinfo=UTC)  # 12:46:01 AM PST
    assert [e.fields["notice"] for e in events] == [True, True, True, False, True, True, True]
    edited, poll, photo, deleted = events[3:]
    assert edited.fields["edited"] is True and edited.fields["text"] == "Pitch practice at 2pm tomorrow!!"
    assert edited.fields["words"] == 5
    assert poll.fields["lines"] == 4
    assert poll.fields["text"] == "POLL:\nSlot\nOPTION: 2:00 (1 vote)\nOPTION: 2:15 (0 votes)"
    assert photo.fields["media"] is True and deleted.fields["deleted"] is True


def test_a_file_not_starting_with_a_header_is_refused() -> None:
    assert parse_failure(WhatsAppImporter({"timezone": "UTC", "date_order": "dmy"}), FIX / "note.txt") == (
        f"{FIX / 'note.txt'}:1: not a WhatsApp chat export: no date/time header"
    )


def test_detect(tmp_path: Path) -> None:
    imp = WhatsAppImporter()
    assert imp.detect(SAMPLE) == 0.95 and imp.detect(FIX / "_chat.txt") == 0.95 and imp.detect(US) == 0.95
    renamed = tmp_path / "chat.txt"
    renamed.write_bytes(SAMPLE.read_bytes())
    assert imp.detect(renamed) == 0.6
    log = tmp_path / "server.log"
    log.write_bytes(SAMPLE.read_bytes())
    assert imp.detect(log) == 0.0  # not a .txt: never an export
    assert imp.detect(FIX / "note.txt") == 0.0
    assert imp.detect(tmp_path) == 0.0 and imp.detect(tmp_path / "missing.txt") == 0.0


def test_store_round_trip_reimport_rollback_and_skip_bad(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    imp = WhatsAppImporter({"timezone": "America/New_York", "date_order": "mdy"})
    check_store_round_trip(store, imp, SAMPLE, 5, US, r":7: date 2/30/23", (6, 2))
