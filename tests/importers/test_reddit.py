"""Reddit export importer: comments, posts and messages against csv.DictReader; bad rows; store.

No redistributable real Reddit export was found, so the fixtures are hand-written to the documented
headers (confirmed by several independent parsers' descriptions of real exports).
"""

from __future__ import annotations

import csv
from datetime import UTC, datetime
from pathlib import Path

from anonml.errors import RecordError
from anonml.model import Event, Text
from anonml.store import EventStore
from importers.reddit import RedditImporter
from tests.importers.helpers import check_store_round_trip, only_events, parse_failure, reject_reasons

FIX = Path(__file__).parent / "fixtures" / "reddit"


def _parse(path: Path, **params: object) -> list[Event | RecordError]:
    return list(RedditImporter(params or None).parse(path))


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def test_comments_match_a_dict_reader() -> None:
    events = only_events(_parse(FIX / "comments.csv", text=True))
    rows = _rows(FIX / "comments.csv")
    assert len(events) == len(rows) == 4
    for event, row in zip(events, rows, strict=True):
        assert event.type == "comment"
        assert event.timestamp == datetime.strptime(row["date"], "%Y-%m-%d %H:%M:%S UTC").replace(tzinfo=UTC)
        assert (event.fields["subreddit"], event.fields["text"]) == (row["subreddit"], row["body"])
        assert event.fields["reply"] is bool(row["parent"]) and event.fields["media"] is bool(row["media"])
        assert "ip" not in event.fields
        assert not row["ip"] or row["ip"] not in repr(event.fields)
    assert events[1].fields["text"] == Text("Two points:\n\n1. the docs\n2. the *tests*")
    assert events[1].fields["words"] == 8 and events[1].fields["gildings"] == 1
    assert events[2].fields["removed"] is True


def test_bodies_and_titles_are_left_out_unless_asked() -> None:
    events = only_events(_parse(FIX / "posts.csv"))
    assert all("text" not in e.fields and "title" not in e.fields for e in events)


def test_posts_self_and_link() -> None:
    self_post, link = only_events(_parse(FIX / "posts.csv", text=True))
    assert self_post.fields["self_post"] is True and "domain" not in self_post.fields
    assert self_post.fields["title"] == "New release, out now"
    assert self_post.fields["text"] == "See the changelog.\nIt is long."
    assert link.fields["self_post"] is False and link.fields["domain"] == "i.redd.it"
    assert link.timestamp == datetime(2023, 1, 31, 19, 0, tzinfo=UTC)


def test_messages_sent_by_the_named_user() -> None:
    received, sent = only_events(_parse(FIX / "messages.csv", username="Me_Myself"))
    assert (received.fields["sent"], sent.fields["sent"]) == (False, True)
    assert "someone_else" not in repr(received) and "hello" not in repr(received)
    assert all("sent" not in e.fields for e in only_events(_parse(FIX / "messages.csv")))


def test_bad_rows_name_the_line_their_record_starts_on() -> None:
    path = FIX / "bad" / "comments.csv"
    items = _parse(path)
    assert reject_reasons([i for i in items if isinstance(i, RecordError)], path) == [
        ":3: date: '15/01/2023 12:34' is not 'YYYY-MM-DD HH:MM:SS UTC'",
        ":4: gildings: 'lots' is not a count",
        ":6: row has 6 cells, header has 10",
        ":7: date: '2023-01-15 12:42:00' is not 'YYYY-MM-DD HH:MM:SS UTC'",  # no zone: never guessed
        ":8: subreddit: empty",
    ]
    last = [i for i in items if isinstance(i, Event)][-1]
    assert last.timestamp == datetime(2023, 1, 15, 11, 44, tzinfo=UTC)  # "+01:00" honoured


def test_other_reddit_files_are_refused() -> None:
    assert parse_failure(RedditImporter(), FIX / "post_votes.csv") == (
        f"{FIX / 'post_votes.csv'}:1: not a Reddit comments, posts or messages CSV: "
        "header ['id', 'permalink', 'direction']"
    )


def test_detect(tmp_path: Path) -> None:
    imp = RedditImporter()
    assert [imp.detect(FIX / f) for f in ("comments.csv", "posts.csv", "messages.csv")] == [0.95] * 3
    renamed = tmp_path / "comments.csv"
    renamed.write_bytes((FIX / "posts.csv").read_bytes())
    assert imp.detect(renamed) == 0.9  # a posts header under the comments name
    assert imp.detect(FIX / "post_votes.csv") == 0.0
    assert imp.detect(tmp_path) == 0.0 and imp.detect(tmp_path / "missing.csv") == 0.0


def test_store_round_trip_reimport_rollback_and_skip_bad(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    _, _, report = check_store_round_trip(
        store, RedditImporter(), FIX / "comments.csv", 4, FIX / "bad" / "comments.csv", r":3: date", (2, 5)
    )
    assert [e.line for e in report.errors] == [3, 4, 6, 7, 8]
