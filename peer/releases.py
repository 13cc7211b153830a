"""What a relay sends on: each accepted packet released at its time, batched per destination,
retried until its deadline, counted (docs/protocol.md, "Relays").

:class:`Releases` is the sending half of :class:`peer.relay.RelayService`: a packet it accepted is
held (sealed in the state DB when the round has a vault) and scheduled at a uniform time of its
release stage (:meth:`Releases._release_at`); what falls due for one destination leaves in one
request (:meth:`Releases._due`); each answer is settled — taken, retried with backoff, or lost
(:meth:`Releases._settle`).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
from pydantic import ValidationError

from anonml.addresses import connect_check
from anonml.crypto import (
    WindowSchedule,
    release_time,
)
from anonml.errors import ProtocolError
from anonml.outbound import AddressCheck, KeepAlive, OutboundError, RefusedAddress, post
from anonml.protocol import (
    MAX_BATCH_ITEMS,
    BatchResults,
    check_relay_address,
)
from peer.client import backoff_delay
from peer.db import PeerDB
from peer.dispatch import Dispatcher
from peer.relayauth import (
    RELAY_POST_TYPE,
    relay_node_of,
    seal_post,
)
from peer.vault import Vault

if TYPE_CHECKING:
    from peer.relay_round import RelayRound

__all__ = [
    "Releases",
    "retry_delay",
    "retriable",
    "already_processed",
    "REFUSED_ADDRESS",
    "ALREADY_PROCESSED",
    "BATCH_REPLY_CAP",
]


def retry_delay(attempt: int) -> float:
    """Seconds before retry ``attempt + 1`` of a release: ``min(2, 0.25 · 2^attempt)``."""
    return min(2.0, 0.25 * 2.0**attempt)


#: The status a sender gives itself for a packet it will not send because the relay's host is not
#: a global address (421 Misdirected Request, RFC 9110 §15.5.20; never on the wire): final, not
#: retried (:func:`retriable`).
REFUSED_ADDRESS = 421


#: The status a relay gives itself for a release its next hop or the intake answered "already processed"
#: (a replayed packet, a token already redeemed: 409 with that detail) — 208 Already Reported
#: (RFC 5842 §7.1; never on the wire): the copy an earlier try sent arrived, so it counts as taken.
ALREADY_PROCESSED = 208


#: What the 409 of a copy that arrived before says: a relay's replay refusal, the intake's spent token.
_ALREADY = ("already processed", "already redeemed")


def already_processed(status: int | None, detail: str) -> bool:
    """Whether an answer says this very packet or report was taken before (a replay, a spent token)."""
    return status == 409 and any(phrase in detail for phrase in _ALREADY)


def _status_of(status: int, detail: str) -> int:
    return ALREADY_PROCESSED if already_processed(status, detail) else status


def retriable(status: int | None) -> bool:
    """Whether a failed send may pass if tried again: unreachable (None), 5xx, 404 or 429."""
    return status is None or status >= 500 or status in (404, 429)


#: Bytes of a batch answer a relay reads: one short result per item, and room for details.
BATCH_REPLY_CAP = MAX_BATCH_ITEMS * 256 + 1024


@dataclass(frozen=True)
class _Release:
    """One packet due to leave: where to, what, until when, its held row, and the tries so far."""

    url: str
    data: bytes
    content_type: str
    what: str  # "forwarded" (to a next hop) or "delivered" (to the intake)
    deadline: float
    held: int | None = None
    attempt: int = 0
    poster: tuple[bytes, int] | None = None  # (node id, round) whose key authenticates a forwarded post


@dataclass(frozen=True)
class _Answer:
    """What one request of releases got back: a status per release (None: no answer) and the
    answer's Retry-After in seconds (None: it gave none)."""

    statuses: list[int | None]
    retry_after: float | None = None


class Releases:
    """The release side of a relay service: hold, schedule, send and settle accepted packets.

    A base of :class:`peer.relay.RelayService`, whose state it shares (the attributes below).
    """

    dispatcher: Dispatcher
    db: PeerDB | None
    rng: np.random.Generator | None
    allow_loopback_http: bool
    keep_alive: KeepAlive
    _rounds: dict[tuple[bytes, int], RelayRound]
    _lock: threading.Lock
    _outbound: dict[tuple[str, str, tuple[bytes, int] | None], list[_Release]]
    _sending: set[tuple[str, str, tuple[bytes, int] | None]]
    count: Callable[..., None]
    _post_key: Callable[[RelayRound, bytes, bytes], bytes | None]

    def _release_at(self, round_: RelayRound, now: float) -> float:
        """A uniform time in this packet's release stage (docs/protocol.md, "Release times")."""
        schedule = round_.schedule
        start, end = schedule.t_s + schedule.delta, round_.release_end()
        if end <= start:
            start, end = schedule.release_window
        length = (end - start) / max(1, round_.stages)
        if now < start:
            lo, hi = start, start + length
        else:
            stage = int((now - start) // length)
            if stage + 1 < round_.stages:
                lo, hi = start + (stage + 1) * length, start + (stage + 2) * length
            else:
                lo, hi = now, end
        try:
            window = WindowSchedule(schedule.t_s, lo - schedule.t_s, hi)
        except ProtocolError:  # past the last stage: pass it on at once
            return now
        return release_time(window, self.rng)

    def _keep(
        self,
        accepted: list[tuple[RelayRound, float, _Release]],
        tags: list[tuple[str, int, bytes]],
        admitted: Counter[tuple[bytes, int]],
        poster: bytes | None = None,
    ) -> None:
        """Store the batch's replay tags, held packets (sealed, when the round has a vault) and its
        count under each node's cap (and ``poster``'s quota) in one transaction, then schedule each
        release at its time."""
        if self.db is not None and (accepted or tags or admitted):
            sealed = [(r, when, rel) for r, when, rel in accepted if r.vault is not None]
            rows = [
                (
                    r.node_id.hex(),
                    r.round_id,
                    when,
                    rel.deadline,
                    rel.url,
                    rel.content_type,
                    rel.what,
                    r.vault.seal(rel.data),
                )  # fmt: skip
                for r, when, rel in sealed
                if r.vault is not None
            ]
            counts = {(node.hex(), round_id): n for (node, round_id), n in admitted.items()}
            quotas = (
                {}
                if poster is None
                else {(node.hex(), round_id, poster.hex()): n for (node, round_id), n in admitted.items()}
            )
            held = self.db.hold_many(rows, tags, counts, quotas)
            ids = dict(zip((id(rel) for _, _, rel in sealed), held, strict=True))
            accepted = [(r, when, replace(rel, held=ids.get(id(rel)))) for r, when, rel in accepted]
        for _, when, release in accepted:
            self.dispatcher.at(when, lambda rel=release: self._due(rel))
        if accepted:
            self.count("held", len(accepted))

    def resume_held(self, node_id: bytes, vault: Vault) -> int:
        """After a restart: schedule the packets ``node_id`` held at their release times; how many.

        Those whose round ended meanwhile are counted ``"held lost at restart"``
        and dropped.
        """
        if self.db is None:
            return 0
        resumed, expired = 0, []
        for row in self.db.held(node_id.hex()):
            if row.deadline <= time.time():
                expired.append(row.id)
                self.count("held lost at restart")
                continue
            poster = (node_id, row.round_id) if row.content_type == RELAY_POST_TYPE else None
            data = vault.open(row.sealed)
            release = _Release(row.url, data, row.content_type, row.what, row.deadline, row.id, poster=poster)
            self.dispatcher.at(row.release_at, lambda rel=release: self._due(rel))
            resumed += 1
        self.db.unhold_many(expired)
        self.count("held resumed", resumed)
        return resumed

    # -- releases ---------------------------------------------------------------------
    def _due(self, release: _Release) -> None:
        """``release`` is due: queue it for its destination, and send that queue unless a send is under way.

        One request at a time per destination: what falls due while one is in
        flight leaves together in the next (at most
        :data:`~anonml.protocol.MAX_BATCH_ITEMS` per request), so no packet
        waits past its release time for more than the request before it, and
        under load one request carries many packets.
        """
        # One request carries one poster's packets: its authenticator covers them all.
        target = (release.url, release.content_type, release.poster)
        with self._lock:
            self._outbound.setdefault(target, []).append(release)
            if target in self._sending:
                return
            self._sending.add(target)
        try:
            while True:
                with self._lock:
                    queue = self._outbound.get(target)
                    if not queue:
                        self._outbound.pop(target, None)
                        self._sending.discard(target)
                        return
                    batch = queue[:MAX_BATCH_ITEMS]
                    del queue[:MAX_BATCH_ITEMS]
                self._settle(batch, self._post(release.url, release.content_type, batch, release.poster))
        except BaseException:
            with self._lock:
                self._sending.discard(target)
            raise

    def _post(
        self, url: str, content_type: str, batch: list[_Release], poster: tuple[bytes, int] | None = None
    ) -> _Answer:
        """Send ``batch`` to ``url``: one packet as one request, more to the batch route; a status each
        (None: no answer; :data:`REFUSED_ADDRESS`: a next hop whose host is not a global address) and
        the answer's Retry-After. ``poster``: the (node, round) whose key authenticates the post.

        A next hop's host is checked before, and its address again as the
        connection is made (:mod:`anonml.outbound`: a name rebound meanwhile
        reaches nothing internal)."""
        check = None
        if content_type in ("application/octet-stream", RELAY_POST_TYPE):  # a next hop: a member's relay URL
            try:
                check_relay_address(url, allow_loopback_http=self.allow_loopback_http)
            except ValueError:
                self.count("route refused: relay address", len(batch))
                return _Answer([REFUSED_ADDRESS] * len(batch))
            check = connect_check(allow_loopback=self.allow_loopback_http)
        try:
            return self._post_checked(url, content_type, batch, poster, check)
        except RefusedAddress:
            self.count("route refused: relay address", len(batch))
            return _Answer([REFUSED_ADDRESS] * len(batch))

    def _post_checked(
        self,
        url: str,
        content_type: str,
        batch: list[_Release],
        poster: tuple[bytes, int] | None,
        check: AddressCheck | None,
    ) -> _Answer:
        """:meth:`_post` once the host passed; :class:`RefusedAddress` when its address does not."""
        if poster is not None:
            return self._post_authenticated(url, batch, poster, check)
        if len(batch) == 1:
            body = batch[0].data
        elif content_type == "application/json":  # intake deliveries: an IntakeBatch of the ready JSON
            body = b'{"deliveries":[' + b",".join(r.data for r in batch) + b"]}"
        else:  # onion packets, back to back
            body = b"".join(r.data for r in batch)
        return self._send(url, body, content_type, len(batch), check)

    def _send(self, url: str, body: bytes, content_type: str, n: int, check: AddressCheck | None) -> _Answer:
        """One request carrying ``n`` releases: to ``url`` for one, to ``url/batch`` for more; a status
        each (None: no answer) and the answer's Retry-After. :class:`RefusedAddress` passes through."""
        single = n == 1
        try:
            reply = post(
                url if single else f"{url}/batch",
                body,
                content_type,
                max_bytes=4096 if single else BATCH_REPLY_CAP,
                keep_alive=self.keep_alive,
                address_check=check,
            )
        except RefusedAddress:
            raise
        except OutboundError:
            return _Answer([None] * n)
        if single:
            return _Answer([_status_of(reply.status, reply.text[:300])], reply.retry_after)
        if reply.status != 200:
            return _Answer([reply.status] * n, reply.retry_after)
        return _Answer(self._batch_statuses(reply.body, n))

    def _post_authenticated(
        self, url: str, batch: list[_Release], poster: tuple[bytes, int], check: AddressCheck | None
    ) -> _Answer:
        """Forward ``batch`` to the next hop at ``url`` in one post authenticated as ``poster``
        (:mod:`peer.relayauth`): to ``url`` for one packet, to ``url/batch`` for more.

        Without the round open here (closed, or not reopened yet after a
        restart) or the next hop's key in its roster, nothing is sent and the
        batch counts as unanswered (retried until its deadline).
        """
        node_id, round_id = poster
        with self._lock:
            round_ = self._rounds.get(poster)
        try:
            next_hop = relay_node_of(url)
        except ValueError:
            next_hop = b""
        public = None if round_ is None or round_.members is None else round_.members.get(next_hop)
        key = None if round_ is None or public is None else self._post_key(round_, next_hop, public)
        if key is None:
            self.count("forward not authenticated")
            return _Answer([None] * len(batch))
        body = seal_post(key, round_id, next_hop, node_id, [r.data for r in batch])
        return self._send(url, body, RELAY_POST_TYPE, len(batch), check)

    def _batch_statuses(self, body: bytes, n: int) -> list[int | None]:
        """The per-item statuses of a batch answer; None each when it is not an answer for ``n`` items."""
        try:
            results = BatchResults.model_validate_json(body).results
        except ValidationError:
            results = ()
        if len(results) != n:  # not an answer for this batch: as if none came
            self.count("batch answer malformed")
            return [None] * n
        return [_status_of(r.status, r.detail) for r in results]

    def _settle(self, batch: list[_Release], answer: _Answer) -> None:
        """Count what was taken; retry what may pass with backoff until its deadline; drop the rest.

        A 409 "already processed" (:data:`ALREADY_PROCESSED`: a replay after a retry whose first copy
        arrived, a token already redeemed) counts as taken: the copy is there. Unreachable, 5xx, 404
        (a next hop that restarted and has not reloaded
        its round yet) and 429 are retried after ``min(2, 0.25 · 2^attempt)``
        seconds — or, when the answer carried ``Retry-After`` (an overloaded next hop or intake,
        :class:`anonml.serving.AdmissionGate`; a full disk), that long plus jittered backoff
        (:func:`peer.client.retry_wait`) — while that is before the deadline; any other refusal
        is final.
        What is finally not delivered is counted ``"<what> lost"``. The held
        rows of everything taken or lost are deleted in one transaction.
        """
        done: list[int] = []
        for release, status in zip(batch, answer.statuses, strict=True):
            what = release.what
            if status is not None and status < 300:  # ALREADY_PROCESSED too: an earlier copy arrived
                self.count(what)
                if release.attempt:
                    self.count(f"{what} after retry")
                if status == ALREADY_PROCESSED:
                    self.count(f"{what} (already processed)")
            else:
                wait = (
                    retry_delay(release.attempt)
                    if answer.retry_after is None
                    else answer.retry_after + backoff_delay(release.attempt)
                )
                when = time.time() + wait
                if retriable(status) and when < release.deadline:
                    self.count(f"{what} retried")
                    again = replace(release, attempt=release.attempt + 1)
                    self.dispatcher.at(when, lambda rel=again: self._due(rel))
                    continue
                self.count(f"{what} failed" if status is None else f"{what} refused ({status})")
                self.count(f"{what} lost")
            if release.held is not None:
                done.append(release.held)
        if self.db is not None:
            self.db.unhold_many(done)
