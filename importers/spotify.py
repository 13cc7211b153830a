"""Spotify listening history: the account-data ``StreamingHistory*.json`` and the extended history.

Format
------
Spotify's "Download your data" gives two different histories, both JSON
arrays of plays:

*Account data* (last year): ``StreamingHistory0.json``, ``StreamingHistory1.json``
(since 2023 ``StreamingHistory_music_0.json`` and ``StreamingHistory_podcast_0.json``)::

    [{"endTime": "2020-01-01 12:00", "artistName": "Artist", "trackName": "Song",
      "msPlayed": 215000},
     {"endTime": "2020-01-01 12:30", "podcastName": "Show", "episodeName": "Ep. 1",
      "msPlayed": 1200000}]

*Extended streaming history* (whole account lifetime): ``endsong_0.json``
(before 2023), ``Streaming_History_Audio_2019-2021_0.json`` and
``Streaming_History_Video_2021-2023.json`` (since)::

    [{"ts": "2019-03-15T14:07:47Z", "username": "...", "platform": "Android OS 9 API 28 (...)",
      "ms_played": 172000, "conn_country": "DE", "ip_addr_decrypted": "...",
      "user_agent_decrypted": "...", "master_metadata_track_name": "Song",
      "master_metadata_album_artist_name": "Artist",
      "master_metadata_album_album_name": "Album",
      "spotify_track_uri": "spotify:track:...", "episode_name": null,
      "episode_show_name": null, "spotify_episode_uri": null,
      "reason_start": "clickrow", "reason_end": "trackdone", "shuffle": false,
      "skipped": null, "offline": false, "offline_timestamp": 1552658867,
      "incognito_mode": false}]

Timestamps and timezones
------------------------
Both times mark the END of the play and are UTC: ``endTime`` is
``YYYY-MM-DD HH:MM`` (minute resolution, UTC per Spotify's data-download
guide), ``ts`` is ISO 8601 with ``Z``. The event timestamp is that end time
(the start is not end − ``ms_played``: pauses are not recorded).

Events
------
type ``track_play`` (a track), ``episode_play`` (a podcast episode or video),
``audiobook_play``, or ``unknown_play`` (an extended-history play whose
metadata Spotify left empty, e.g. a local file). Fields:

``history`` (category)
    ``account`` or ``extended``: the two histories overlap, so a featurizer
    using both must pick one per period.
``ms_played`` (int)
``artist``, ``track``, ``album``, ``show``, ``episode``, ``audiobook``,
``chapter`` (text)
    From ``artistName``/``master_metadata_album_artist_name``,
    ``trackName``/``master_metadata_track_name``,
    ``master_metadata_album_album_name``, ``podcastName``/``episode_show_name``,
    ``episodeName``/``episode_name``, ``audiobook_title``,
    ``audiobook_chapter_title``.
``track_uri``, ``episode_uri``, ``audiobook_uri``, ``chapter_uri`` (text)
``platform`` (category)
    The family of the free-form ``platform`` string: ``android``, ``ios``,
    ``windows``, ``macos``, ``linux``, ``web``, ``cast``, ``sonos``,
    ``playstation``, ``xbox``, ``tv``, ``amazon``, ``partner`` or ``other``
    (the raw string names a device model and OS build).
``country`` (category), ``reason_start``, ``reason_end`` (categories)
``shuffle``, ``skipped``, ``offline``, ``incognito`` (bool; ``null`` omitted)

Never stored: ``username`` (the store's user is the person), ``ip_addr*``,
``user_agent_decrypted`` and ``offline_timestamp``.

Errors
------
An unreadable play is yielded as ``RecordError(path, None, reason,
record="$[12]")``; a file that is not a JSON array raises ``RecordError``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from anonml.errors import RecordError
from anonml.model import Event, Text
from anonml.plugins import Importer
from anonml.readers import head, load_json, parse_timestamp

__all__ = ["SpotifyImporter", "platform_family"]

_ACCOUNT_NAME = re.compile(r"^streaminghistory(?:_music|_podcast)?_?\d*\.json$", re.IGNORECASE)
_EXTENDED_NAME = re.compile(
    r"^(?:endsong_\d+|endvideo_\d+|streaming_history_(?:audio|video)_[\w-]*)\.json$", re.IGNORECASE
)
_PLATFORMS = (  # first match wins: "web_player windows 10" is the web player
    ("web", ("web_player", "webplayer", "web player")),
    ("android", ("android",)),
    ("ios", ("ios", "iphone", "ipad")),
    ("windows", ("windows",)),
    ("macos", ("os x", "osx", "macos")),
    ("linux", ("linux",)),
    ("cast", ("cast",)),
    ("sonos", ("sonos",)),
    ("playstation", ("playstation", "ps4", "ps5")),
    ("xbox", ("xbox",)),
    ("tv", ("tv", "tizen", "webos", "roku")),
    ("amazon", ("alexa", "amazon", "echo")),
    ("partner", ("partner",)),
)
_EXTENDED_TEXT = {
    "master_metadata_track_name": "track",
    "master_metadata_album_artist_name": "artist",
    "master_metadata_album_album_name": "album",
    "spotify_track_uri": "track_uri",
    "episode_name": "episode",
    "episode_show_name": "show",
    "spotify_episode_uri": "episode_uri",
    "audiobook_title": "audiobook",
    "audiobook_chapter_title": "chapter",
    "audiobook_uri": "audiobook_uri",
    "audiobook_chapter_uri": "chapter_uri",
}
_EXTENDED_CATEGORIES = {
    "conn_country": "country",
    "reason_start": "reason_start",
    "reason_end": "reason_end",
}
_EXTENDED_BOOLS = {
    "shuffle": "shuffle",
    "skipped": "skipped",
    "offline": "offline",
    "incognito_mode": "incognito",
}


def platform_family(raw: str) -> str:
    """The platform family of Spotify's free-form ``platform`` string (see module docstring)."""
    text = raw.lower()
    for family, needles in _PLATFORMS:
        if any(needle in text for needle in needles):
            return family
    return "other"


def _ms(value: object, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key}: {value!r} is not a number of milliseconds")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{key}: {value!r} is not a whole number of milliseconds")
    if value < 0:
        raise ValueError(f"{key}: {value!r} is negative")
    return int(value)


def _present(item: dict[str, Any], key: str) -> bool:
    value = item.get(key)
    return value is not None and value != ""


class SpotifyImporter(Importer):
    """Spotify plays from the account-data and the extended streaming history.

    See the module docstring for both formats, every field and the timezone rule.
    """

    name: ClassVar[str] = "spotify"
    version: ClassVar[str] = "1.0"
    description: ClassVar[str] = "Spotify streaming history (account data and extended history)"
    patterns: ClassVar[tuple[str, ...]] = (
        "StreamingHistory*.json",
        "endsong_*.json",
        "Streaming_History_Audio_*.json",
        "Streaming_History_Video_*.json",
    )

    def detect(self, path: Path) -> float:
        """0.95 for a history file name with matching keys, 0.85 for the keys alone."""
        text = head(path)
        if not text.lstrip().startswith("["):
            return 0.0
        account = '"endTime"' in text and '"msPlayed"' in text
        extended = '"ts"' in text and '"ms_played"' in text
        named = bool(_ACCOUNT_NAME.match(path.name) or _EXTENDED_NAME.match(path.name))
        if account or extended:
            return 0.95 if named else 0.85
        return 0.4 if named else 0.0

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        items = load_json(path)
        if not isinstance(items, list):
            raise RecordError(path, None, "not a Spotify streaming history: expected a JSON array")
        for index, item in enumerate(items):
            try:
                if not isinstance(item, dict):
                    raise ValueError(f"expected an object, got {type(item).__name__}")
                if "ts" in item:
                    event = self._extended(item)
                elif "endTime" in item:
                    event = self._account(item)
                else:
                    raise ValueError("neither 'endTime' nor 'ts': not a Spotify play")
            except (KeyError, ValueError, TypeError) as exc:
                reason = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
                yield RecordError(path, None, reason, record=f"$[{index}]")
                continue
            yield event

    def _account(self, item: dict[str, Any]) -> Event:
        raw = item["endTime"]
        try:
            when = datetime.strptime(str(raw), "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
        except ValueError:
            raise ValueError(f"endTime: {raw!r} is not 'YYYY-MM-DD HH:MM'") from None
        fields: dict[str, object] = {
            "history": "account",
            "ms_played": _ms(item["msPlayed"], "msPlayed"),
        }
        if _present(item, "podcastName") or _present(item, "episodeName"):
            kind = "episode_play"
            pairs = (("podcastName", "show"), ("episodeName", "episode"))
        else:
            kind = "track_play"
            pairs = (("artistName", "artist"), ("trackName", "track"))
        for key, name in pairs:
            if _present(item, key):
                fields[name] = Text(str(item[key]))
        return Event(source=self.name, type=kind, timestamp=when, fields=fields)

    def _extended(self, item: dict[str, Any]) -> Event:
        raw = item["ts"]
        try:
            when = parse_timestamp(str(raw))
        except ValueError:
            raise ValueError(f"ts: {raw!r} is not an ISO 8601 UTC time") from None
        fields: dict[str, object] = {
            "history": "extended",
            "ms_played": _ms(item["ms_played"], "ms_played"),
        }
        for key, name in _EXTENDED_TEXT.items():
            if _present(item, key):
                fields[name] = Text(str(item[key]))
        for key, name in _EXTENDED_CATEGORIES.items():
            if _present(item, key):
                fields[name] = str(item[key])
        for key, name in _EXTENDED_BOOLS.items():
            value = item.get(key)
            if value is None:
                continue
            if not isinstance(value, bool):
                raise ValueError(f"{key}: {value!r} is not true/false")
            fields[name] = value
        if _present(item, "platform"):
            fields["platform"] = platform_family(str(item["platform"]))
        if "track" in fields or "track_uri" in fields:
            kind = "track_play"
        elif "episode" in fields or "episode_uri" in fields:
            kind = "episode_play"
        elif any(k in fields for k in ("audiobook", "audiobook_uri", "chapter", "chapter_uri")):
            kind = "audiobook_play"
        else:
            kind = "unknown_play"
        return Event(source=self.name, type=kind, timestamp=when, fields=fields)
