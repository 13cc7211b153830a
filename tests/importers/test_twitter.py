"""Twitter/X archive importer: a real tweet.js and account.js against json.loads; bad and other files."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path

from anonml.errors import RecordError
from anonml.model import Event, Text
from anonml.store import EventStore
from importers.twitter import TwitterImporter, client_name
from tests.importers.helpers import check_store_round_trip, only_events, parse_failure, reject_reasons

SAMPLES = Path(__file__).parent / "samples" / "twitter"
FIX = Path(__file__).parent / "fixtures" / "twitter"


def _parse(path: Path) -> list[Event | RecordError]:
    return list(TwitterImporter().parse(path))


def _script_array(path: Path) -> list[dict]:
    """The independent reading: cut the assignment at its first '=' and hand the rest to json.loads."""
    return json.loads(path.read_text(encoding="utf-8").partition("=")[2].strip().rstrip(";"))


def test_real_tweets_match_a_plain_json_parse() -> None:
    events = only_events(_parse(SAMPLES / "tweet.js"))
    tweets = [item["tweet"] for item in _script_array(SAMPLES / "tweet.js")]
    assert len(events) == len(tweets) == 2
    for event, tweet in zip(events, tweets, strict=True):
        assert event.type == "tweet"
        assert event.timestamp == parsedate_to_datetime(tweet["created_at"]).astimezone(UTC)
        assert event.fields["tweet_id"] == tweet["id_str"] and event.fields["text"] == tweet["full_text"]
        assert event.fields["favorites"] == int(tweet["favorite_count"])
        assert event.fields["mentions"] == len(tweet["entities"]["user_mentions"])
        assert event.fields["lang"] == tweet["lang"]
    retweet, own = events
    assert retweet.timestamp == datetime(2012, 10, 7, 7, 39, 51, tzinfo=UTC)
    assert (retweet.fields["retweet"], own.fields["retweet"]) == (True, False)
    assert (retweet.fields["client"], own.fields["client"]) == ("Twitter for iPhone", "Twitter Web App")
    assert own.fields["text"] == Text(tweets[1]["full_text"]) and isinstance(own.fields["text"], Text)


def test_real_account_gives_its_creation_and_no_address() -> None:
    (event,) = only_events(_parse(SAMPLES / "account.js"))
    account = _script_array(SAMPLES / "account.js")[0]["account"]
    assert event.type == "account_created" and event.fields == {"created_via": account["createdVia"]}
    assert event.timestamp == datetime(2009, 4, 24, 19, 18, 20, tzinfo=UTC)
    assert account["email"] not in repr(event) and account["username"] not in repr(event)


def test_deleted_tweets_bad_elements_and_unwrapped_tweets() -> None:
    path = FIX / "deleted-tweets.js"
    items = _parse(path)
    first, last = (i for i in items if isinstance(i, Event))
    assert first.fields["deleted"] is True and first.fields["reply"] is True
    assert first.fields["deleted_at"] == datetime(2023, 9, 9, 8, 30, tzinfo=UTC)  # Twitter's own form
    assert (first.fields["hashtags"], first.fields["urls"], first.fields["media"]) == (1, 1, 0)
    assert last.fields["text"] == "an unwrapped, older tweet"
    assert last.timestamp == datetime(2023, 9, 8, 11, 0, tzinfo=UTC)  # "+0200" honoured
    assert reject_reasons([i for i in items if isinstance(i, RecordError)], path) == [
        ":16 [$[1]]: created_at: '2023-09-08 11:00:00' is neither like 'Sat Jun 27 16:34:46 +0000 2020' "
        "nor ISO 8601 with an offset",
        ":23 [$[2]]: missing field 'created_at'",
        ":29 [$[3]]: favorite_count: 'many' is not a whole number",
        ":37 [$[4]]: expected an object, got str",
    ]


def test_real_direct_messages_match_json_loads_in_the_parse_and_the_store(tmp_path: Path) -> None:
    """A real 2026 ``direct-messages.js``: 17 messages in 10 conversations, 13 of them sent."""
    path = SAMPLES / "direct-messages.js"
    me = "1964312974236991488"  # the archive's own account id (its account.js says so)
    expected = [
        (datetime.fromisoformat(m["createdAt"]), m["senderId"] == me, len(m["text"]), len(m["text"].split()),
         len(m["urls"]), bool(m["mediaUrls"]), len(m["reactions"]), m["text"])
        for conversation in _script_array(path)
        for m in (item["messageCreate"] for item in conversation["dmConversation"]["messages"])
    ]
    importer = TwitterImporter({"account_id": me, "text": True})
    assert importer.detect(path) == 0.95
    events = only_events(list(importer.parse(path)))

    def reading(e: Event) -> tuple[object, ...]:
        f = e.fields
        return (e.timestamp, f["sent"], f["chars"], f["words"], f["urls"], f["media"], f["reactions"],
                str(f["text"]))

    assert [reading(e) for e in events] == expected and len(expected) == 17
    assert [r[1] for r in expected].count(True) == 13 and {e.fields["group"] for e in events} == {False}
    assert all(e.type == "direct_message" for e in events)
    # without params: no text, no direction, and never an id of either party
    plain = only_events(list(TwitterImporter().parse(path)))
    assert all("text" not in e.fields and "sent" not in e.fields for e in plain)
    assert me not in repr(plain) and "2846154391" not in repr(plain)
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    assert store.import_file(path, importer).inserted == 17
    assert store.import_file(path, importer).inserted == 0
    assert sorted(reading(e) for e in store.events(source="twitter")) == sorted(expected)


def test_direct_messages_one_per_message_create() -> None:
    path = FIX / "direct-messages.js"
    items = list(TwitterImporter({"account_id": "1111", "text": True}).parse(path))
    hello, reply, photo = (i for i in items if isinstance(i, Event))
    assert hello.type == "direct_message"
    assert hello.timestamp == datetime(2024, 1, 25, 19, 33, 24, 183000, tzinfo=UTC)
    assert (hello.fields["sent"], reply.fields["sent"]) == (True, False)
    assert hello.fields["text"] == "hey, are you coming tonight?" and hello.fields["words"] == 5
    assert reply.fields["reactions"] == 1 and reply.fields["group"] is False
    assert photo.fields["media"] is True and photo.fields["urls"] == 1
    assert reject_reasons([i for i in items if isinstance(i, RecordError)], path) == [
        ":2 [$[0].messages[3]]: missing field 'createdAt'",
        ":49 [$[1]]: expected {'dmConversation': {'messages': [...]}}",
    ]
    plain = only_events(list(TwitterImporter().parse(FIX / "direct-messages-group.js")))
    (welcome,) = plain  # the join is no message
    assert welcome.fields["group"] is True
    assert "sent" not in welcome.fields and "text" not in welcome.fields
    assert all("1111" not in repr(e.fields) and "2222" not in repr(e.fields) for e in plain)


def test_other_archive_files_and_broken_scripts_are_refused(tmp_path: Path) -> None:
    assert parse_failure(TwitterImporter(), FIX / "like.js") == (
        f"{FIX / 'like.js'}:1: not a Twitter archive file this importer reads: YTD.like.part0"
    )
    assert parse_failure(TwitterImporter(), FIX / "truncated-tweets.js") == (
        f"{FIX / 'truncated-tweets.js'}:13: invalid JSON: Invalid control character at"  # the cut string
    )
    plain = tmp_path / "tweets.json"
    plain.write_text(json.dumps(_script_array(SAMPLES / "tweet.js")))
    assert parse_failure(TwitterImporter(), plain) == (
        f"{plain}:1: not a script of the form 'window.NAME = [...]'"
    )


def test_client_name() -> None:
    source = '<a href="http://tapbots.com/tweetbot" rel="nofollow">Tweetbot for iΟS</a>'
    assert client_name(source) == "Tweetbot for iΟS"
    assert client_name("web") == "web"


def test_detect(tmp_path: Path) -> None:
    imp = TwitterImporter()
    assert imp.detect(SAMPLES / "tweet.js") == 0.95 and imp.detect(SAMPLES / "account.js") == 0.95
    assert imp.detect(FIX / "deleted-tweets.js") == 0.95
    renamed = tmp_path / "backup.txt"
    renamed.write_bytes((SAMPLES / "tweet.js").read_bytes())
    assert imp.detect(renamed) == 0.9
    assert imp.detect(FIX / "like.js") == 0.0
    assert imp.detect(tmp_path) == 0.0 and imp.detect(tmp_path / "tweets.js") == 0.0


def test_store_round_trip_reimport_rollback_and_skip_bad(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    check_store_round_trip(
        store, TwitterImporter(), SAMPLES / "tweet.js", 2, FIX / "deleted-tweets.js", r":16 \[\$\[1\]\]",
        (2, 4),
    )
