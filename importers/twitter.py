"""Twitter/X archive: ``data/tweets.js`` (and ``tweet.js``, its parts, ``deleted-tweets.js``), ``account.js``.

Format
------
"Download an archive of your data" gives a zip whose ``data/`` folder holds
one JavaScript file per data type, each a single assignment of a JSON array
to a global (``window.YTD.<type>.part<N>``)::

    window.YTD.tweets.part0 = [
      {
        "tweet" : {
          "id_str" : "1276916896974110721",
          "created_at" : "Sat Jun 27 16:34:46 +0000 2020",
          "full_text" : "I just found @syncthing and ...",
          "lang" : "en",
          "source" : "<a href=\\"https://mobile.twitter.com\\" rel=\\"nofollow\\">Twitter Web App</a>",
          "favorite_count" : "2", "retweet_count" : "0",
          "in_reply_to_status_id_str" : "...",
          "entities" : {"hashtags" : [ ], "user_mentions" : [ {...} ], "urls" : [ ], "media" : [ ]}
        }
      }
    ]

Archives before 2022 name the file ``tweet.js`` and the global
``YTD.tweet.part0``; some put the tweet objects in the array without the
``{"tweet": ...}`` wrapper. Large archives split into ``tweets-part1.js``…
(``YTD.tweets.part1``). ``deleted-tweets.js`` (``YTD.deleted_tweets``) has
the same objects plus ``deleted_at``. ``account.js`` (``YTD.account``) holds
one ``{"account": {"createdAt", "createdVia", ...}}``.

Timestamps and timezones
------------------------
``created_at`` is Twitter's ``%a %b %d %H:%M:%S %z %Y`` with an explicit
``+0000``; ``deleted_at`` and ``createdAt`` are ISO 8601 with ``Z``.

Events
------
``tweet`` at ``created_at``: ``tweet_id`` and ``text`` (text), ``lang``
(category), ``client`` (category: the link text of ``source``, e.g.
``Twitter for iPhone``), ``retweet`` (bool: the text starts ``RT @``),
``reply`` (bool: ``in_reply_to_status_id_str`` is set), ``favorites``,
``retweets`` (int), ``hashtags``, ``mentions``, ``urls``, ``media`` (int:
entity counts); from ``deleted-tweets.js`` also ``deleted`` (true) and
``deleted_at`` (datetime).

``account_created`` at ``createdAt``: ``created_via`` (category). The e-mail
address, user name and display name are never stored.

Other archive files (likes, which carry no time; direct messages; ads) are
not this importer's.

Errors
------
An unreadable element is yielded as ``RecordError(path, line, reason,
record="$[12]")`` with the line it starts on. A file that is not a
``window.YTD.<type>.partN = [...]`` script of a type above raises
``RecordError``; invalid JSON raises it with its line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from anonml.errors import RecordError
from anonml.json_stream import iter_assigned_array
from anonml.model import Event, Text
from anonml.plugins import Importer
from anonml.readers import head, parse_timestamp

__all__ = ["TwitterImporter", "client_name"]

_HEAD = re.compile(r"^\s*window\.YTD\.(tweets?|deleted_tweets|account)\.part\d+\s*=\s*\[")
_GLOBAL = re.compile(r"^YTD\.(tweets?|deleted_tweets|account)\.part\d+$")
_NAMES = re.compile(r"^(?:tweets?(?:-part\d+)?|deleted-tweets(?:-part\d+)?|account)\.js$", re.IGNORECASE)
_LINK_TEXT = re.compile(r">([^<]*)</a>\s*$")
_ENTITIES = (("hashtags", "hashtags"), ("user_mentions", "mentions"), ("urls", "urls"), ("media", "media"))


def client_name(source: str) -> str:
    """The app a tweet was sent from: the text of ``<a href=...>Twitter for iPhone</a>``, else ``source``."""
    match = _LINK_TEXT.search(source)
    return (match.group(1) if match else source).strip()


def _count(raw: object, name: str) -> int:
    try:
        value = int(str(raw))
    except ValueError:
        raise ValueError(f"{name}: {raw!r} is not a whole number") from None
    if value < 0:
        raise ValueError(f"{name}: {raw!r} is negative")
    return value


def _created_at(raw: object) -> datetime:
    try:
        return parse_timestamp(str(raw), fmt="%a %b %d %H:%M:%S %z %Y")
    except ValueError:
        raise ValueError(f"created_at: {raw!r} is not like 'Sat Jun 27 16:34:46 +0000 2020'") from None


def _iso(raw: object, name: str) -> datetime:
    try:
        return parse_timestamp(str(raw))
    except ValueError:
        raise ValueError(f"{name}: {raw!r} is not an ISO 8601 time with an offset") from None


class TwitterImporter(Importer):
    """Tweets, deleted tweets and the account's creation of a Twitter/X archive. See the module docstring."""

    name: ClassVar[str] = "twitter"
    version: ClassVar[str] = "1.0"
    description: ClassVar[str] = "Twitter/X archive: tweets.js (tweet.js, parts, deleted tweets), account.js"
    patterns: ClassVar[tuple[str, ...]] = (
        "tweets.js", "tweet.js", "tweets-part*.js", "deleted-tweets.js", "account.js"
    )

    def detect(self, path: Path) -> float:
        """0.95 for an archive file name whose head assigns ``window.YTD.<type>``, 0.9 under another name."""
        if _HEAD.match(head(path, 256)) is None:
            return 0.0
        return 0.95 if _NAMES.match(path.name) else 0.9

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        kind: str | None = None
        for name, index, line, value in iter_assigned_array(path):
            if kind is None:
                match = _GLOBAL.match(name)
                if match is None:
                    raise RecordError(path, 1, f"not a Twitter archive file of tweets or the account: {name}")
                kind = match.group(1)
            try:
                if not isinstance(value, dict):
                    raise ValueError(f"expected an object, got {type(value).__name__}")
                if kind == "account":
                    event = self._account(value)
                else:
                    event = self._tweet(value, deleted=kind == "deleted_tweets")
            except KeyError as exc:
                yield RecordError(path, line, f"missing field {exc}", record=f"$[{index}]")
                continue
            except (ValueError, TypeError) as exc:
                yield RecordError(path, line, str(exc), record=f"$[{index}]")
                continue
            yield event

    def _tweet(self, value: dict[str, Any], *, deleted: bool) -> Event:
        tweet = value.get("tweet", value)
        if not isinstance(tweet, dict):
            raise ValueError(f"tweet: expected an object, got {type(tweet).__name__}")
        text = str(tweet["full_text"] if "full_text" in tweet else tweet["text"])
        fields: dict[str, object] = {
            "tweet_id": Text(str(tweet["id_str"])),
            "text": Text(text),
            "retweet": text.startswith("RT @"),
            "reply": bool(tweet.get("in_reply_to_status_id_str")),
            "favorites": _count(tweet.get("favorite_count", 0), "favorite_count"),
            "retweets": _count(tweet.get("retweet_count", 0), "retweet_count"),
        }
        if tweet.get("lang"):
            fields["lang"] = str(tweet["lang"])
        if tweet.get("source"):
            fields["client"] = client_name(str(tweet["source"]))
        entities = tweet.get("entities") or {}
        if not isinstance(entities, dict):
            raise ValueError("entities: expected an object")
        for key, name in _ENTITIES:
            items = entities.get(key) or []
            if not isinstance(items, list):
                raise ValueError(f"entities.{key}: expected an array")
            fields[name] = len(items)
        if deleted:
            fields["deleted"] = True
            if tweet.get("deleted_at"):
                fields["deleted_at"] = _iso(tweet["deleted_at"], "deleted_at")
        when = _created_at(tweet["created_at"])
        return Event(source=self.name, type="tweet", timestamp=when, fields=fields)

    def _account(self, value: dict[str, Any]) -> Event:
        account = value["account"]
        if not isinstance(account, dict):
            raise ValueError("account: expected an object")
        fields: dict[str, object] = {}
        if account.get("createdVia"):
            fields["created_via"] = str(account["createdVia"])
        when = _iso(account["createdAt"], "createdAt")
        return Event(source=self.name, type="account_created", timestamp=when, fields=fields)
