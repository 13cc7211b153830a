"""mbox importer: metadata only, thread roots, zones, bad messages, store round trip."""

from __future__ import annotations

import gzip
import mailbox
from datetime import UTC, datetime
from email.utils import getaddresses, parseaddr, parsedate_to_datetime
from pathlib import Path

import pytest

from anonml.errors import PluginError, RecordError
from anonml.model import Event
from anonml.store import EventStore
from importers.mbox import MboxImporter, keyed_hash
from tests.importers.helpers import check_store_round_trip, parse_failure, reject_reasons

FIX = Path(__file__).parent / "fixtures" / "mbox"
GMAIL = Path(__file__).parent / "samples" / "mbox" / "small.gmail.mbox"


def _events(path: Path, **params: object) -> list[Event | RecordError]:
    return list(MboxImporter(params or None).parse(path))


def _message_bytes(data: bytes, start_marker: bytes, end_marker: bytes | None) -> int:
    """Size of a message as stored: after its From_ line, before the separating blank line."""
    begin = data.index(start_marker)
    begin = data.index(b"\n", begin) + 1
    end = len(data) - 1 if end_marker is None else data.index(end_marker, begin) + 1
    return end - begin


def _independent(path: Path) -> list[tuple[object, ...]]:
    """The standard library's reading: mailbox.mbox, parsedate_to_datetime, and the From_ line's
    own date (strptime, with its offset) for a message without a Date header."""
    rows = []
    for msg in mailbox.mbox(str(path), create=False):
        if msg["Date"] is not None:
            when, from_line = parsedate_to_datetime(msg["Date"]).astimezone(UTC), None
        else:
            stamp = " ".join(msg.get_from().split()[1:])
            when, from_line = datetime.strptime(stamp, "%a %b %d %H:%M:%S %z %Y").astimezone(UTC), True
        sender = parseaddr(str(msg["From"] or ""))[1]
        raw_labels = msg["X-Gmail-Labels"]
        labels = None if raw_labels is None else {x.strip() for x in str(raw_labels).split(",")}
        recipients = [str(v) for v in msg.get_all("To", []) + msg.get_all("Cc", [])]
        rows.append((
            when, from_line, sender.rsplit("@", 1)[1].lower(),
            sum(1 for _n, a in getaddresses(recipients) if a),
            msg["In-Reply-To"] is not None or msg["References"] is not None,
            msg.get_content_type(), None if labels is None else "Unread" in labels,
        ))
    return rows


def _reading(e: Event) -> tuple[object, ...]:
    f = e.fields
    return (e.timestamp, f.get("date_from_separator"), f["sender_domain"], f["recipient_count"],
            f["is_reply"], f["content_type"], f.get("is_unread"))


def test_a_real_gmail_takeout_mbox_matches_the_standard_library(tmp_path: Path) -> None:
    """Gmail's From_ lines, X-GM-THRID / X-Gmail-Labels, two mailing-list mails of 2008, MIME parts, and
    chats without a Date header, timed by their From_ line (``... +0000 2016``)."""
    expected = _independent(GMAIL)
    importer = MboxImporter({"hash_key": "k"})
    assert importer.detect(GMAIL) == 0.95
    events = _events(GMAIL, hash_key="k")
    assert all(isinstance(e, Event) for e in events), events
    assert [_reading(e) for e in events] == expected and len(expected) == 6  # type: ignore[arg-type]
    timed_by_separator = [e for e in events if isinstance(e, Event) and "date_from_separator" in e.fields]
    assert [e.timestamp for e in timed_by_separator] == [
        datetime(2016, 3, 23, 1, 57, tzinfo=UTC), datetime(2021, 7, 20, 0, 22, 49, tzinfo=UTC),
        datetime(2021, 7, 20, 0, 22, 49, tzinfo=UTC),
    ]
    assert all(e.fields["date_zone_known"] is True for e in timed_by_separator)
    assert "Zend_Form" not in repr(events) and "example.net>" not in repr(events)  # no subject, no address
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    assert store.import_file(GMAIL, importer).inserted == 6
    assert store.import_file(GMAIL, importer).inserted == 0
    assert sorted(map(_reading, store.events(source="mbox")), key=repr) == sorted(expected, key=repr)


def test_a_from_line_with_an_offset_times_a_message_without_date_and_one_without_never_does(
    tmp_path: Path,
) -> None:
    mbox = tmp_path / "chats.mbox"
    mbox.write_text(
        "From 1@xxx Wed Mar 23 01:57:00 +0530 2016\nFrom: a@example.org\n\nchat\n\n"
        "From 2@xxx Wed Mar 23 01:57:00 2016\nFrom: a@example.org\n\nchat\n",
        encoding="ascii",
    )
    timed, untimed = _events(mbox)
    assert isinstance(timed, Event) and timed.timestamp == datetime(2016, 3, 22, 20, 27, tzinfo=UTC)
    assert timed.fields["date_from_separator"] is True
    assert str(untimed) == f"{mbox}:6: message has no Date header, and its From_ line states no UTC offset"


def test_basic_mailbox_gives_one_metadata_event_per_message() -> None:
    events = _events(FIX / "basic.mbox")
    assert len(events) == 3 and all(isinstance(e, Event) for e in events)
    first, second, third = events
    assert first.type == "message" and first.source == "mbox"
    assert first.timestamp == datetime(2020, 1, 2, 9, 30, tzinfo=UTC)  # 10:30 +0100
    assert first.fields["sender_domain"] == "example.org"
    assert first.fields["recipient_count"] == 3  # two To (one quoted with a comma) + one Cc
    assert first.fields["is_reply"] is False
    assert first.fields["subject_length"] == len("Lunch?")
    assert first.fields["content_type"] == "text/plain"
    assert first.fields["has_attachments"] is False
    assert second.fields["subject_length"] == len("Réponse : Lunch?")  # RFC 2047 decoded
    assert second.fields["is_reply"] is True
    assert second.fields["recipient_count"] == 1
    # group syntax counts 0, the two Bcc addresses count
    assert third.fields["recipient_count"] == 2
    assert third.fields["content_type"] == "multipart/mixed"
    # menu.pdf has Content-Disposition: attachment; logo.png only a name= (no disposition)
    assert third.fields["attachment_count"] == 2 and third.fields["has_attachments"] is True


def test_size_is_the_stored_message_without_separator_lines() -> None:
    data = (FIX / "basic.mbox").read_bytes()
    sizes = [e.fields["size_bytes"] for e in _events(FIX / "basic.mbox")]
    assert sizes == [
        _message_bytes(data, b"From alice@", b"\n\nFrom bob@"),
        _message_bytes(data, b"From bob@", b"\n\nFrom carol@"),
        _message_bytes(data, b"From carol@", None),
    ]


def test_thread_id_is_the_keyed_hash_of_the_references_root() -> None:
    events = _events(FIX / "basic.mbox")
    root = keyed_hash("root-1@example.org", "", "anonml-thread")
    assert [e.fields["thread_id"] for e in events] == [root, root, root]
    assert events[0].fields["sender_hash"] == keyed_hash("alice@example.org", "", "anonml-addr")
    keyed = _events(FIX / "basic.mbox", hash_key="s3cret")
    assert keyed[0].fields["thread_id"] == keyed_hash("root-1@example.org", "s3cret", "anonml-thread")
    assert keyed[0].fields["thread_id"] != root
    assert keyed[0].fields["sender_hash"] != events[0].fields["sender_hash"]


def test_no_body_subject_or_address_reaches_an_event() -> None:
    for name in ("basic.mbox", "gmail.mbox", "crlf.mbox"):
        for event in _events(FIX / name):
            for value in event.fields.values():
                text = str(value).lower()
                assert "@" not in text
                assert "lunch" not in text and "menu" not in text and "hello" not in text


def test_minus_zero_zone_is_read_as_utc_and_flagged() -> None:
    events = _events(FIX / "basic.mbox")
    assert events[1].timestamp == datetime(2020, 1, 2, 11, 0, tzinfo=UTC)
    assert events[1].fields["date_zone_known"] is False
    assert events[0].fields["date_zone_known"] is True


def test_gmail_labels_become_known_flags_only() -> None:
    sent, spam = _events(FIX / "gmail.mbox")
    assert (sent.fields["is_sent"], sent.fields["is_unread"], sent.fields["is_spam"]) == (
        True,
        False,
        False,
    )
    assert (spam.fields["is_spam"], spam.fields["is_unread"], spam.fields["is_trash"]) == (
        True,
        True,
        False,
    )
    assert "My secret project" not in str(sent.fields)
    assert "is_sent" not in _events(FIX / "basic.mbox")[0].fields


def test_crlf_mailbox() -> None:
    events = _events(FIX / "crlf.mbox")
    assert [e.timestamp.hour for e in events] == [10, 11]  # type: ignore[union-attr]
    data = (FIX / "crlf.mbox").read_bytes()
    assert events[0].fields["size_bytes"] == _message_bytes(data, b"From a@", b"\r\n\r\nFrom b@") + 1


def test_bad_dates_are_yielded_with_the_from_line() -> None:
    items = _events(FIX / "missing_date.mbox")
    assert reject_reasons(items, FIX / "missing_date.mbox", events=1) == [
        ":10: message has no Date header, and its From_ line states no UTC offset",
        ":18: Date header 'sometime next week' is not an RFC 5322 date",
    ]


def test_a_file_that_is_not_mbox_raises() -> None:
    assert parse_failure(MboxImporter(), FIX / "not_mbox.mbox") == (
        f"{FIX / 'not_mbox.mbox'}:1: not an mbox file: expected a 'From ' line, "
        "found 'Date: Sat, 1 Feb 2020 10:00:00 +0000'"
    )


def test_empty_mailbox_has_no_events() -> None:
    assert _events(FIX / "empty.mbox") == []


def test_gzipped_mailbox_reads_like_the_plain_one(tmp_path: Path) -> None:
    packed = tmp_path / "basic.mbox.gz"
    packed.write_bytes(gzip.compress((FIX / "basic.mbox").read_bytes()))
    assert _events(packed) == _events(FIX / "basic.mbox")


def test_oversized_message_is_a_bad_record_and_the_rest_is_read(tmp_path: Path) -> None:
    big = tmp_path / "big.mbox"
    body = b"x" * 70 + b"\n"
    big.write_bytes(
        b"From a@x Sat Feb  1 10:00:00 2020\nDate: Sat, 1 Feb 2020 10:00:00 +0000\n\n"
        + body * 40
        + b"\nFrom b@x Sat Feb  1 11:00:00 2020\nDate: Sat, 1 Feb 2020 11:00:00 +0000\n\nsmall\n"
    )
    items = _events(big, max_message_bytes=1024)
    assert str(items[0]) == f"{big}:1: message is larger than max_message_bytes=1024"
    second = b"Date: Sat, 1 Feb 2020 11:00:00 +0000\n\nsmall\n"
    assert isinstance(items[1], Event) and items[1].fields["size_bytes"] == len(second)


def test_detect_scores_mailboxes_high_and_other_files_low() -> None:
    imp = MboxImporter()
    assert imp.detect(FIX / "basic.mbox") == 0.95
    assert imp.detect(FIX / "gmail.mbox") == 0.95
    assert imp.detect(FIX / "not_mbox.mbox") == 0.0
    assert imp.detect(FIX / "empty.mbox") < 0.5
    assert imp.detect(FIX) == 0.0


def test_leading_blank_lines_are_detected_as_parse_reads_them(tmp_path: Path) -> None:
    imp = MboxImporter()
    path = FIX / "leading_blank.mbox"
    assert imp.detect(path) == 0.95  # detect and parse agree on what precedes the first From_ line
    events = _events(path)
    assert [type(e) for e in events] == [Event] * 3
    plain = [e.fields for e in _events(FIX / "basic.mbox")]
    assert [e.fields for e in events] == plain
    indented = tmp_path / "indented.mbox"
    indented.write_bytes(b" " + (FIX / "basic.mbox").read_bytes())
    assert imp.detect(indented) == 0.0  # parse refuses a From_ line that is not at column 0


def test_hash_key_longer_than_blake2b_key_is_refused() -> None:
    with pytest.raises(PluginError, match="hash_key"):
        MboxImporter({"hash_key": "é" * 40})


def test_store_round_trip_reimport_rollback_and_skip_bad(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    imp = MboxImporter()
    # The bad file's good first message is rolled back with the bad ones, then kept by skip_bad.
    first, again, report = check_store_round_trip(
        store, imp, FIX / "basic.mbox", 3, FIX / "missing_date.mbox", "message has no Date header", (1, 2)
    )
    assert first.accepted == 3 and again.duplicate == 3
    assert [e.line for e in report.errors] == [10, 18]
    assert store.count(source="mbox") == 4
