"""Spotify importer: account and extended histories, dropped identifiers, bad plays, store."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from anonml.errors import RecordError
from anonml.model import Event, Text
from anonml.store import EventStore
from importers.spotify import SpotifyImporter, platform_family
from tests.importers.helpers import (
    check_store_round_trip,
    only_events,
    parse_failure,
    reject_reasons,
    rejects,
)

FIX = Path(__file__).parent / "fixtures" / "spotify"
REAL = Path(__file__).parent / "samples" / "spotify" / "StreamingHistory0.json"


def _parse(path: Path) -> list[Event | RecordError]:
    return list(SpotifyImporter().parse(path))


def _events(path: Path) -> list[Event]:
    return only_events(_parse(path))


def test_a_real_account_history_matches_json_load_in_the_parse_and_the_store(tmp_path: Path) -> None:
    """The first 2,000 plays of a real ``StreamingHistory0.json`` (Feb-Apr 2019), read by json.load alone."""
    plays = json.loads(REAL.read_text(encoding="utf-8"))
    expected = [
        (datetime.strptime(p["endTime"], "%Y-%m-%d %H:%M").replace(tzinfo=UTC), "track_play", "account",
         p["msPlayed"], p["artistName"], p["trackName"])
        for p in plays
    ]

    def reading(e: Event) -> tuple[object, ...]:
        f = e.fields
        return (e.timestamp, e.type, f["history"], f["ms_played"], str(f["artist"]), str(f["track"]))

    assert SpotifyImporter().detect(REAL) == 0.95
    events = _events(REAL)
    assert [reading(e) for e in events] == expected and len(expected) == 2000
    assert min(r[3] for r in expected) < 1000 < max(r[3] for r in expected)  # skips and whole plays alike
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    assert store.import_file(REAL, SpotifyImporter()).inserted == 2000
    assert store.import_file(REAL, SpotifyImporter()).inserted == 0
    assert sorted(reading(e) for e in store.events(source="spotify")) == sorted(expected)  # type: ignore[type-var]


def test_account_history_tracks() -> None:
    plays = _events(FIX / "StreamingHistory0.json")
    assert [p.type for p in plays] == ["track_play"] * 3
    assert plays[1].timestamp == datetime(2020, 1, 1, 12, 4, tzinfo=UTC)
    assert plays[1].fields == {
        "history": "account",
        "ms_played": 305133,
        "artist": Text("Björk"),
        "track": Text("Jóga"),
    }
    assert isinstance(plays[1].fields["track"], Text)  # titles are free text, not categories
    assert plays[2].fields["ms_played"] == 0


def test_account_history_podcasts() -> None:
    (play,) = _events(FIX / "StreamingHistory_podcast_0.json")
    assert play.type == "episode_play"
    assert play.fields == {
        "history": "account",
        "ms_played": 1800000,
        "show": Text("Morning Show"),
        "episode": Text("Episode 12: Rivers"),
    }


def test_extended_history_before_2023() -> None:
    track, episode, unknown = _events(FIX / "endsong_0.json")
    assert track.type == "track_play"
    assert track.timestamp == datetime(2019, 3, 15, 14, 7, 47, tzinfo=UTC)
    assert track.fields == {
        "history": "extended",
        "ms_played": 172000,
        "track": Text("Feeling Good"),
        "artist": Text("Nina Simone"),
        "album": Text("I Put A Spell On You"),
        "track_uri": Text("spotify:track:0000000000000000000001"),
        "country": "DE",
        "reason_start": "clickrow",
        "reason_end": "trackdone",
        "shuffle": False,
        "offline": False,
        "incognito": False,
        "platform": "android",
    }  # skipped: null is omitted
    assert episode.type == "episode_play" and episode.fields["platform"] == "web"
    assert episode.fields["skipped"] is True and episode.fields["incognito"] is True
    assert unknown.type == "unknown_play" and unknown.fields["platform"] == "ios"


def test_identifiers_are_never_stored() -> None:
    for name in ("endsong_0.json", "Streaming_History_Audio_2023-2024_0.json"):
        for play in _events(FIX / name):
            text = str(play.fields)
            assert "someone123" not in text
            assert "203.0.113.7" not in text and "192.0.2.44" not in text
            assert "offline_timestamp" not in play.fields


def test_extended_history_since_2023_with_audiobook_and_video() -> None:
    track, book = _events(FIX / "Streaming_History_Audio_2023-2024_0.json")
    assert track.fields["platform"] == "macos" and track.fields["skipped"] is True
    assert book.type == "audiobook_play"
    assert book.fields["audiobook"] == "A Long Book" and book.fields["chapter"] == "Chapter 1"
    assert book.fields["chapter_uri"] == "spotify:episode:0000000000000000000005"
    (video,) = _events(FIX / "Streaming_History_Video_2021-2023.json")
    assert video.type == "episode_play" and video.fields["platform"] == "sonos"


@pytest.mark.parametrize(
    ("raw", "family"),
    [
        ("Android OS 9 API 28 (samsung, SM-G960F)", "android"),
        ("iOS 12.1.4 (iPhone10,6)", "ios"),
        ("Windows 10 (10.0.17134; x64)", "windows"),
        ("OS X 10.14.3 [x86 8]", "macos"),
        ("web_player windows 10;chrome 73.0.3683.86;desktop", "web"),
        ("Partner sonos_s14 Sonos Play:1", "sonos"),
        ("Partner google cast_tv", "cast"),
        ("something new", "other"),
    ],
)
def test_platform_family(raw: str, family: str) -> None:
    assert platform_family(raw) == family


def test_bad_plays_are_yielded_with_their_json_path() -> None:
    items = _parse(FIX / "StreamingHistory9.json")
    assert [i.fields["track"] for i in items if isinstance(i, Event)] == ["B", "C"]
    assert reject_reasons(rejects(items), FIX / "StreamingHistory9.json") == [
        " [$[1]]: endTime: '03/01/2020 10:05' is not 'YYYY-MM-DD HH:MM'",
        " [$[2]]: missing field 'msPlayed'",
        " [$[3]]: msPlayed: -5 is negative",
        " [$[4]]: expected an object, got list",
        " [$[5]]: shuffle: 'yes' is not true/false",
        " [$[6]]: neither 'endTime' nor 'ts': not a Spotify play",
    ]


def test_not_an_array_raises_and_empty_is_fine() -> None:
    assert parse_failure(SpotifyImporter(), FIX / "StreamingHistory5.json") == (
        f"{FIX / 'StreamingHistory5.json'}: not a Spotify streaming history: expected a JSON array"
    )
    assert _parse(FIX / "StreamingHistory2.json") == []


def test_detect(tmp_path: Path) -> None:
    imp = SpotifyImporter()
    for name in (
        "StreamingHistory0.json",
        "StreamingHistory_podcast_0.json",
        "endsong_0.json",
        "Streaming_History_Audio_2023-2024_0.json",
        "Streaming_History_Video_2021-2023.json",
    ):
        assert imp.detect(FIX / name) == 0.95, name
    renamed = tmp_path / "history.json"
    renamed.write_bytes((FIX / "endsong_0.json").read_bytes())
    assert imp.detect(renamed) == 0.85
    assert imp.detect(FIX / "StreamingHistory2.json") == 0.4  # name only, empty array
    assert imp.detect(FIX / "StreamingHistory5.json") == 0.0


def test_store_round_trip_reimport_rollback_and_skip_bad(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    imp = SpotifyImporter()
    good, bad = FIX / "endsong_0.json", FIX / "StreamingHistory9.json"
    check_store_round_trip(store, imp, good, 3, bad, r"\[\$\[1\]\]: endTime", (2, 6))
    assert store.count(type="track_play") == 3
