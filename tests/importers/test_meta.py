"""Facebook and Instagram importers: messages, posts, comments, likes against json.load with a byte-wise
mojibake decoding; bad records; which of the two claims a file; store.

No redistributable real "Download your information" export was found, so the fixtures are
hand-written to the documented format, their strings escaped byte by byte as Meta escapes them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from anonml.errors import RecordError
from anonml.model import Event, Text
from anonml.store import EventStore
from importers.meta import FacebookImporter, InstagramImporter, fix_mojibake
from tests.importers.helpers import only_events, parse_failure, reject_reasons

FIX = Path(__file__).parent / "fixtures" / "meta"
FB = FIX / "facebook-annlee" / "your_facebook_activity"
IG = FIX / "instagram-annlee" / "your_instagram_activity"
MESSAGES = FB / "messages" / "inbox" / "bo_1234" / "message_1.json"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _bytewise(text: str) -> str:
    """The independent decoding: every code point is one byte of UTF-8."""
    return bytes(ord(c) for c in text).decode("utf-8")


def test_messages_match_a_json_load_with_bytewise_decoding() -> None:
    items = list(FacebookImporter({"text": True, "me": "Ann Lée"}).parse(MESSAGES))
    events = [i for i in items if isinstance(i, Event)]
    raw = json.loads(MESSAGES.read_text(encoding="ascii"))["messages"]
    good = [m for m in raw if isinstance(m.get("timestamp_ms"), int) and m["timestamp_ms"] > 10**12]
    assert len(events) == len(good) == 5
    for event, message in zip(events, good, strict=True):
        assert event.source == "facebook" and event.type == "message"
        assert event.timestamp == EPOCH + timedelta(milliseconds=message["timestamp_ms"])
        assert event.fields.get("text", "") == _bytewise(message.get("content", ""))
        assert event.fields["from_me"] is (_bytewise(message["sender_name"]) == "Ann Lée")
        assert event.fields["group"] is False
    reply, cafe, photo, call, unsent = events
    assert cafe.fields["text"] == Text("Café at 8?") and cafe.fields["reactions"] == 1
    assert reply.fields["text"] == "Parfait 😆" and reply.fields["chars"] == 9
    assert photo.fields["media"] is True and photo.fields["words"] == 0
    assert (call.fields["kind"], call.fields["call_s"]) == ("call", 95)
    assert unsent.fields["unsent"] is True
    assert all("sender" not in e.fields for e in events)  # names of people are never stored
    assert "Bo" not in repr([e.fields for e in events])
    assert reject_reasons([i for i in items if isinstance(i, RecordError)], MESSAGES) == [
        ":51 [messages[4]]: timestamp_ms: 1565582300 is 1970-01-19, outside 2004-2100 (a wrong unit?)",
        ":57 [messages[5]]: missing field 'timestamp_ms'",
    ]


def test_text_is_left_out_unless_asked() -> None:
    events = [i for i in FacebookImporter().parse(MESSAGES) if isinstance(i, Event)]
    assert all("text" not in e.fields and "from_me" not in e.fields for e in events)


def test_posts_comments_and_reactions() -> None:
    posts = FB / "posts" / "your_posts_1.json"
    items = list(FacebookImporter({"text": True}).parse(posts))
    status, link = (i for i in items if isinstance(i, Event))
    assert status.timestamp == datetime(2016, 3, 7, 21, 48, 6, tzinfo=UTC)
    assert status.fields == {"attachments": 1, "chars": 21, "words": 4, "text": Text("Første dag på jobben!")}
    assert link.fields == {"attachments": 1, "chars": 0, "words": 0}
    assert reject_reasons([i for i in items if isinstance(i, RecordError)], posts) == [
        ":38 [$[2]]: missing field 'timestamp'"
    ]
    (comment,) = only_events(list(FacebookImporter().parse(FB / "comments_and_reactions" / "comments.json")))
    assert comment.type == "comment" and comment.fields == {"chars": 4, "words": 1}
    reactions = FB / "comments_and_reactions" / "likes_and_reactions_1.json"
    items = list(FacebookImporter().parse(reactions))
    assert [i.fields["reaction"] for i in items if isinstance(i, Event)] == ["like", "haha"]
    assert reject_reasons([i for i in items if isinstance(i, RecordError)], reactions) == [
        ":26 [$[2]]: no data[].reaction.reaction"
    ]


def test_instagram_likes_and_group_messages() -> None:
    likes = only_events(list(InstagramImporter().parse(IG / "likes" / "liked_posts.json")))
    raw = json.loads((IG / "likes" / "liked_posts.json").read_text(encoding="ascii"))["likes_media_likes"]
    assert [e.timestamp for e in likes] == [
        EPOCH + timedelta(seconds=entry["string_list_data"][0]["timestamp"]) for entry in raw
    ]
    assert all(e.source == "instagram" and e.fields == {"target": "post"} for e in likes)
    group = IG / "messages" / "inbox" / "bo_5678" / "message_1.json"
    share, text = only_events(list(InstagramImporter({"text": True}).parse(group)))
    assert share.fields["group"] is True and share.fields["media"] is True
    assert text.fields["text"] == "Mañana 🙌"


@pytest.mark.parametrize(
    ("text", "fixed"),
    [
        ("CafÃ©", "Café"),
        ("ð\x9f\x98\x86", "😆"),  # four escaped bytes, one emoji
        ("plain", "plain"),
        ("日本", "日本"),  # real non-Latin text: not byte-escaped, kept
        ("é", "é"),  # one Latin-1 character that is no UTF-8 sequence: kept
    ],
)
def test_fix_mojibake_only_undoes_the_byte_escaping(text: str, fixed: str) -> None:
    assert fix_mojibake(text) == fixed


def test_each_platform_claims_its_own_files() -> None:
    fb, ig = FacebookImporter(), InstagramImporter()
    assert (fb.detect(MESSAGES), ig.detect(MESSAGES)) == (0.95, 0.0)
    ig_messages = IG / "messages" / "inbox" / "bo_5678" / "message_1.json"
    assert (fb.detect(ig_messages), ig.detect(ig_messages)) == (0.0, 0.95)
    liked = IG / "likes" / "liked_posts.json"
    assert (fb.detect(liked), ig.detect(liked)) == (0.0, 0.95)
    assert fb.detect(FB / "posts" / "your_posts_1.json") == 0.9
    chrome = Path(__file__).parent / "fixtures" / "chrome_takeout" / "BrowserHistory.json"
    assert (fb.detect(chrome), ig.detect(chrome)) == (0.0, 0.0)


@pytest.mark.parametrize(
    ("tree", "owner"),
    [
        # real 2022 Instagram exports name their folder "<username>_<YYYYMMDD>": no platform in it
        ("callumflack_20220731/messages/inbox/kevin_fdcfwkqk4w", "instagram"),
        ("callumflack_20220731/messages/message_requests/facebookuser_pnbqg2rqug", "instagram"),
        # a deleted account's thread folder names the other platform: the export's folder decides
        ("facebook-beangrensberg9/messages/message_requests/instagramuser_7pv50rqj9g", "facebook"),
        ("instagram-ann-2025-07-01-Ab12/your_instagram_activity/messages/inbox/facebookuser_x1", "instagram"),
        ("downloads/messages/inbox/instagramuser_7pv50rqj9g", "facebook"),  # no export folder: Messenger
    ],
)
def test_the_export_folder_not_a_thread_folder_says_the_platform(
    tmp_path: Path, tree: str, owner: str
) -> None:
    thread = tmp_path / tree
    thread.mkdir(parents=True)
    (thread / "message_1.json").write_bytes(MESSAGES.read_bytes())
    fb, ig = FacebookImporter(), InstagramImporter()
    path = thread / "message_1.json"
    scores = {"facebook": fb.detect(path), "instagram": ig.detect(path)}
    assert scores == {name: 0.95 if name == owner else 0.0 for name in scores}
    if owner == "instagram":  # the same export's likes go to Instagram too
        liked = tmp_path / tree.split("/")[0] / "likes" / "liked_posts.json"
        liked.parent.mkdir(parents=True)
        liked.write_bytes((IG / "likes" / "liked_posts.json").read_bytes())
        assert (fb.detect(liked), ig.detect(liked)) == (0.0, 0.95)


def test_other_json_is_refused(tmp_path: Path) -> None:
    chrome = Path(__file__).parent / "fixtures" / "chrome_takeout" / "BrowserHistory.json"
    assert parse_failure(FacebookImporter(), chrome) == (
        f"{chrome}: not a Facebook or Instagram 'Download your information' JSON file"
    )
    odd = tmp_path / "message_1.json"
    odd.write_text('{"participants": [{"name": "A"}],\n "messages": {"sender_name": "A"}}\n')
    assert parse_failure(FacebookImporter(), odd) == f"{odd}:2: 'messages' is not an array of records"


def test_store_reimport_rollback_and_skip_bad(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    with pytest.raises(RecordError, match=r"messages\[4\]"):
        store.import_file(MESSAGES, FacebookImporter())
    assert store.count() == 0
    report = store.import_file(MESSAGES, FacebookImporter(), skip_bad=True)
    assert (report.inserted, report.rejected) == (5, 2)
    assert store.import_file(MESSAGES, FacebookImporter(), skip_bad=True).inserted == 0
