"""docs/importers.md §7: every example problem runs on the real samples and gives the documented features."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from anonml.featurize import build_matrix
from anonml.model import FeatureMatrix
from anonml.plugins import Importer, create
from anonml.store import EventStore
from importers.chrome_takeout import ChromeTakeoutImporter
from importers.fit import FitImporter
from importers.gpx import GpxImporter
from importers.meta import FacebookImporter, InstagramImporter
from importers.reddit import RedditImporter
from importers.tcx import TcxImporter
from importers.twitter import TwitterImporter
from importers.whatsapp import WhatsAppImporter

DOCS = Path(__file__).resolve().parents[2] / "docs" / "importers.md"
SAMPLES = Path(__file__).parent / "samples"
FIXTURES = Path(__file__).parent / "fixtures"
_EXAMPLE = re.compile(r"<!-- example: (\w+) -->\n```json\n(.*?)\n```", re.DOTALL)


def _examples() -> dict[str, dict]:
    return {name: json.loads(body) for name, body in _EXAMPLE.findall(DOCS.read_text(encoding="utf-8"))}


def _matrix(
    tmp_path: Path, example: str, instancer: str, files: list[tuple[Path, Importer]]
) -> tuple[FeatureMatrix, EventStore]:
    problem = _examples()[example]
    store = EventStore(f"sqlite:///{tmp_path / 'e.db'}")
    for path, importer in files:
        assert store.import_file(path, importer).inserted > 0
    (user,) = store.users()
    inst = create("instancer", instancer, problem["instancer"])
    feat = create("featurizer", "declarative", problem["featurizer"])
    return build_matrix([store.dataset(user)], inst, feat), store


def test_every_marked_example_is_valid_json_with_both_plugins() -> None:
    examples = _examples()
    assert set(examples) == {"activity", "twitter", "whatsapp", "reddit", "chrome_takeout", "meta"}
    assert all(set(problem) == {"instancer", "featurizer"} for problem in examples.values())


def test_activity_example_reads_gpx_tcx_and_fit_alike(tmp_path: Path) -> None:
    files = [
        (SAMPLES / "gpx" / "around-visnjan-with-car.gpx", GpxImporter()),
        (SAMPLES / "tcx" / "sup_activity_1.tcx", TcxImporter()),
        (SAMPLES / "fit" / "garmin-fenix-5-run.fit", FitImporter()),
    ]
    matrix, store = _matrix(tmp_path, "activity", "per_event", files)
    # one example per activity, labelled by its distance; the three are years apart, so each
    # one's four weeks before it hold nothing (and never the activity itself)
    assert sorted(row.label for row in matrix.rows) == [157.56, 1157.51, 2733.243]  # type: ignore[type-var]
    assert [row.values for row in matrix.rows] == [(0.0, 0.0, 30.0)] * 3
    # the same features over the whole store: the last four weeks are the TCX paddle's
    feat = create("featurizer", "declarative", _examples()["activity"]["featurizer"])
    (user,) = store.users()
    rates = [e.fields["heart_rate"] for e in store.events(user=user, source="tcx", type="track_point")]
    assert feat.featurize(store.dataset(user)) == [
        1.0, 1157.51, pytest.approx(sum(rates) / len(rates))  # type: ignore[arg-type]
    ]


def test_twitter_example_labels_each_tweet_by_its_likes(tmp_path: Path) -> None:
    files = [(SAMPLES / "twitter" / p, TwitterImporter()) for p in ("tweet.js", "account.js")]
    matrix, _ = _matrix(tmp_path, "twitter", "per_event", files)
    rows = sorted(matrix.rows, key=lambda r: r.values)
    assert [(row.values, row.label) for row in rows] == [
        ((0.0, 0.0, 0.0), 0),  # the 2012 retweet: only the account's creation before it
        ((1.0, 1.0, 1.0), 2),  # the 2020 tweet: the retweet (one mention) before it
    ]


def test_whatsapp_example_predicts_a_quiet_chat(tmp_path: Path) -> None:
    importer = WhatsAppImporter({"timezone": "Europe/Zurich", "date_order": "dmy"})
    files = [(SAMPLES / "whatsapp" / "WhatsApp Chat with ShortChat.txt", importer)]
    matrix, _ = _matrix(tmp_path, "whatsapp", "user_window", files)
    (row,) = matrix.rows
    # history: the first 30 days from 5 March 2017 hold one message (no media, one sender);
    # the two months after hold two more, so the chat did not go quiet
    assert (row.values, row.label) == ((1.0, 0.0, 1.0), 0)


def test_reddit_example_labels_each_comment_by_being_a_reply(tmp_path: Path) -> None:
    files = [(FIXTURES / "reddit" / name, RedditImporter()) for name in ("comments.csv", "posts.csv")]
    matrix, _ = _matrix(tmp_path, "reddit", "per_event", files)
    assert sorted((row.values, row.label) for row in matrix.rows) == [
        ((0.0, 1.0, 1.0), False),  # the first comment: only its thread's post before it
        ((1.0, 1.0, 1.0), True),  # the reply under it
        ((2.0, 2.0, 2.0), False),  # on r/pics, after the sunset post
        ((3.0, 2.0, 2.0), False),
    ]


def test_chrome_takeout_example_counts_a_browsing_week(tmp_path: Path) -> None:
    files = [(FIXTURES / "chrome_takeout" / "BrowserHistory.json", ChromeTakeoutImporter())]
    matrix, _ = _matrix(tmp_path, "chrome_takeout", "user_window", files)
    (row,) = matrix.rows
    # three visits, two hosts (the file: URL has none), one typed; no visit the next week
    assert (row.values, row.label) == ((3.0, 2.0, 1.0), 1)


def test_chrome_takeout_example_on_the_real_history(tmp_path: Path) -> None:
    files = [(SAMPLES / "chrome_takeout" / "BrowserHistory.json", ChromeTakeoutImporter())]
    matrix, _ = _matrix(tmp_path, "chrome_takeout", "user_window", files)
    (row,) = matrix.rows
    # the first week from 21 Aug 2018: three visits to one host (two links, a reload), none typed;
    # the next visit is in September, so the week after is empty
    assert (row.values, row.label) == ((3.0, 1.0, 0.0), 1)


def test_meta_example_reads_facebook_and_instagram_messages_alike(tmp_path: Path) -> None:
    inbox = "messages/inbox"
    files: list[tuple[Path, Importer]] = [
        (FIXTURES / "meta/facebook-annlee/your_facebook_activity" / inbox / "bo_1234/message_1.json",
         FacebookImporter({"me": "Ann Lée"})),
        (FIXTURES / "meta/instagram-annlee/your_instagram_activity" / inbox / "bo_5678/message_1.json",
         InstagramImporter({"me": "annlee"})),
    ]
    store = EventStore(f"sqlite:///{tmp_path / 'e.db'}")
    for path, importer in files:
        store.import_file(path, importer, skip_bad=True)  # the Facebook thread has two bad messages
    (user,) = store.users()
    problem = _examples()["meta"]
    matrix = build_matrix(
        [store.dataset(user)],
        create("instancer", "per_event", problem["instancer"]),
        create("featurizer", "declarative", problem["featurizer"]),
    )
    assert [(row.values, row.label) for row in matrix.rows] == [
        ((0.0, 0.0, 0.0), False),  # 2019, Facebook: the unsent message opens the thread
        ((1.0, 1.0, 0.0), False),  # the call
        ((2.0, 2.0, 0.0), True),  # the photo
        ((3.0, 2.0, 0.0), False),  # "Café at 8?"
        ((4.0, 3.0, 1.0), False),  # the reply, after the reaction to "Café"
        ((0.0, 0.0, 0.0), True),  # 2025, Instagram: a shared post
        ((1.0, 0.0, 0.0), False),  # the reply
    ]
