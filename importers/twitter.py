"""Twitter/X archive: ``data/tweets.js`` (``tweet.js``, parts, deleted), direct messages, ``account.js``.

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
one ``{"account": {"createdAt", "createdVia", ...}}``. ``direct-messages.js``
(``YTD.direct_messages``; group chats ``direct-messages-group.js``,
``YTD.direct_messages_group``) holds conversations::

    {"dmConversation": {"conversationId": "2815014648-1964312974236991488",
      "messages": [{"messageCreate": {"senderId": "1964312974236991488", "recipientId": "2815014648",
        "text": "hey", "createdAt": "2026-01-25T19:33:24.183Z", "mediaUrls": [ ], "urls": [ ],
        "reactions": [ ], "editHistory": [ ], "id": "2015508318568001704"}},
       {"joinConversation": {...}}]}}

Timestamps and timezones
------------------------
``created_at`` and ``deleted_at`` are Twitter's ``%a %b %d %H:%M:%S %z
%Y`` with an explicit ``+0000``; ``createdAt`` is ISO 8601 with ``Z``. Each
is read in either form.

Events
------
``tweet`` at ``created_at``: ``tweet_id`` and ``text`` (text), ``lang``
(category), ``client`` (category: the link text of ``source``, e.g.
``Twitter for iPhone``), ``retweet`` (bool: the text starts ``RT @``),
``reply`` (bool: ``in_reply_to_status_id_str`` is set), ``favorites``,
``retweets`` (int), ``hashtags``, ``mentions``, ``urls``, ``media`` (int:
entity counts); from ``deleted-tweets.js`` also ``deleted`` (true) and
``deleted_at`` (datetime).

``direct_message`` at ``createdAt`` (one per ``messageCreate``; joins, leaves
and renames are not messages): ``group`` (bool: a group chat), ``chars``,
``words``, ``media`` (bool), ``urls``, ``reactions`` (int), ``sent`` (bool,
when ``Params.account_id`` is your id), and ``text`` (text) only with
``Params.text``: message bodies are not stored by default. Sender and
recipient ids are never stored.

``account_created`` at ``createdAt``: ``created_via`` (category). The e-mail
address, user name and display name are never stored.

Other archive files (likes, which carry no time; ads) are not this
importer's.

Errors
------
An unreadable element is yielded as ``RecordError(path, line, reason,
record="$[12]")`` with the line it starts on; an unreadable direct message
as ``record="$[3].messages[7]"`` with its conversation's line. A file that is not a
``window.YTD.<type>.partN = [...]`` script of a type above raises
``RecordError``; invalid JSON raises it with its line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from anonml.errors import RecordError
from anonml.json_stream import iter_assigned_array
from anonml.model import Event, Text
from anonml.plugins import Importer, PluginParams
from anonml.readers import head, parse_timestamp

__all__ = ["TwitterImporter", "client_name"]

_KINDS = r"(tweets?|deleted_tweets|account|direct_messages(?:_group)?)"
_HEAD = re.compile(rf"^\s*window\.YTD\.{_KINDS}\.part\d+\s*=\s*\[")
_GLOBAL = re.compile(rf"^YTD\.{_KINDS}\.part\d+$")
_NAMES = re.compile(
    r"^(?:tweets?|deleted-tweets|account|direct-messages(?:-group)?)(?:-part\d+)?\.js$", re.IGNORECASE
)
_TWITTER_TIME = "%a %b %d %H:%M:%S %z %Y"
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


def _twitter_time(raw: object, name: str) -> datetime:
    """Twitter's ``Sat Jun 27 16:34:46 +0000 2020``, or an ISO 8601 time with an offset."""
    try:
        return parse_timestamp(str(raw), fmt=_TWITTER_TIME)
    except ValueError:
        pass
    try:
        return parse_timestamp(str(raw))
    except ValueError:
        raise ValueError(
            f"{name}: {raw!r} is neither like 'Sat Jun 27 16:34:46 +0000 2020' nor ISO 8601 with an offset"
        ) from None


class TwitterImporter(Importer):
    """Tweets, deleted tweets and the account's creation of a Twitter/X archive. See the module docstring."""

    name: ClassVar[str] = "twitter"
    version: ClassVar[str] = "1.0"
    description: ClassVar[str] = "Twitter/X archive: tweets, deleted tweets, direct messages, account"
    patterns: ClassVar[tuple[str, ...]] = (
        "tweets.js", "tweet.js", "tweets-part*.js", "deleted-tweets.js", "direct-messages*.js", "account.js"
    )

    class Params(PluginParams):
        """Options of the Twitter importer."""

        account_id: str | None = Field(
            default=None, pattern=r"^\d{1,20}$", description="your account id (account.js): sets 'sent'"
        )
        text: bool = Field(default=False, description="also store direct messages' text (tweets' always is)")

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
                    raise RecordError(path, 1, f"not a Twitter archive file this importer reads: {name}")
                kind = match.group(1)
            if kind.startswith("direct_messages"):
                yield from self._conversation(path, index, line, value, group=kind.endswith("_group"))
                continue
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
                fields["deleted_at"] = _twitter_time(tweet["deleted_at"], "deleted_at")
        when = _twitter_time(tweet["created_at"], "created_at")
        return Event(source=self.name, type="tweet", timestamp=when, fields=fields)

    def _conversation(
        self, path: Path, index: int, line: int, value: object, *, group: bool
    ) -> Iterator[Event | RecordError]:
        """The messages of one ``dmConversation``; joins, leaves and renames are not messages."""
        record = f"$[{index}]"
        conversation = value.get("dmConversation") if isinstance(value, dict) else None
        if not isinstance(conversation, dict) or not isinstance(conversation.get("messages"), list):
            yield RecordError(path, line, "expected {'dmConversation': {'messages': [...]}}", record=record)
            return
        for position, item in enumerate(conversation["messages"]):
            where = f"{record}.messages[{position}]"
            if not isinstance(item, dict):
                yield RecordError(path, line, f"expected an object, got {type(item).__name__}", record=where)
                continue
            if "messageCreate" not in item:
                continue
            try:
                yield self._direct_message(item["messageCreate"], group=group)
            except KeyError as exc:
                yield RecordError(path, line, f"missing field {exc}", record=where)
            except (ValueError, TypeError) as exc:
                yield RecordError(path, line, str(exc), record=where)

    def _direct_message(self, message: object, *, group: bool) -> Event:
        if not isinstance(message, dict):
            raise ValueError("messageCreate: expected an object")
        when = _twitter_time(message["createdAt"], "createdAt")
        text = str(message.get("text") or "")
        fields: dict[str, object] = {
            "group": group,
            "chars": len(text),
            "words": len(text.split()),
            "media": bool(message.get("mediaUrls")),
            "urls": len(message.get("urls") or []),
            "reactions": len(message.get("reactions") or []),
        }
        if self.params.account_id is not None:
            fields["sent"] = str(message["senderId"]) == self.params.account_id
        if self.params.text:
            fields["text"] = Text(text)
        return Event(source=self.name, type="direct_message", timestamp=when, fields=fields)

    def _account(self, value: dict[str, Any]) -> Event:
        account = value["account"]
        if not isinstance(account, dict):
            raise ValueError("account: expected an object")
        fields: dict[str, object] = {}
        if account.get("createdVia"):
            fields["created_via"] = str(account["createdVia"])
        when = _twitter_time(account["createdAt"], "createdAt")
        return Event(source=self.name, type="account_created", timestamp=when, fields=fields)
