"""A participation's packets to their first hops (:class:`FirstHopSender`): each at its time inside
the send window, re-routed at once around a first hop that fails while the window is open, retried
with backoff when no other route is left, and counted when given up (docs/protocol.md, "Windows")."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from anonml.outbound import OutboundError, RefusedAddress
from peer.client import HTTPRefusal, retry_wait
from peer.dispatch import Dispatcher
from peer.host_watch import RelayHostWatch
from peer.relay import REFUSED_ADDRESS, retriable, retry_delay

if TYPE_CHECKING:
    from peer.participant import Participant

__all__ = ["FirstHopSender", "SendingHost", "send_retry_at", "LAST_TRY_SECONDS", "ROSTER_WAIT_SECONDS"]

log = logging.getLogger("anonml.peer")

#: Seconds between looks, for a resumed participation's packet, at whether its roster is re-checked.
ROSTER_WAIT_SECONDS = 0.25


class SendingHost(Protocol):
    """What sending needs from the process hosting the session (:class:`peer.host.PeerHost`)."""

    dispatcher: Dispatcher

    def count(self, what: str, n: int = 1) -> None: ...


class FirstHopSender:
    """Sends a session's packets on its host's dispatcher, counted by the host; ``relay_hosts``
    learns of the first hops found dead."""

    def __init__(self, host: SendingHost, relay_hosts: RelayHostWatch) -> None:
        self.host = host
        self.relay_hosts = relay_hosts

    def schedule(self, p: Participant, packets: Iterable[tuple[int, float, str, bytes]]) -> None:
        """Send each ``(slot, time, first hop, packet)`` at its time, while the send window is open."""
        end = p.window_end if p.window_end is not None else 0.0
        for slot, when, url, packet in packets:
            if when >= end or time.time() >= end:
                self.host.count("packets not sent: window closed")
                log.warning("packet of %s not sent: the send window closed", p.node.fingerprint[:12])
                continue
            self.host.dispatcher.at(
                when, lambda p=p, s=slot, url=url, packet=packet: self.send(p, s, url, packet)
            )

    def send(self, p: Participant, slot: int, url: str, packet: bytes, attempt: int = 0) -> None:
        """Send one packet to its first hop; on a failure that may pass, re-routed at once while the
        send window is open, or retried with backoff when no other route is left.

        A first hop that is down, over its quota, answers 5xx or has a refused address is avoided: the
        slot gets a new route and a new packet (:meth:`Participant.reroute`), so
        one dead or exhausted relay cannot cost the report. A participation resumed after a restart
        signs its posts with the roster's relay keys, so its packets wait (polled every 0.25 s, within
        the window) until the worker's next step has re-checked the roster.
        """
        end = p.window_end if p.window_end is not None else 0.0
        if p.roster is None:
            if time.time() + ROSTER_WAIT_SECONDS < end:
                self.host.dispatcher.at(
                    time.time() + ROSTER_WAIT_SECONDS, lambda: self.send(p, slot, url, packet, attempt)
                )
                return
            self.host.count("packets not sent: roster not re-checked in the window")
            log.warning("packet of %s not sent: its roster was not re-checked in the send window",
                        p.node.fingerprint[:12])
            return
        if p.crosses_failed(slot) and time.time() < end:  # a relay of its route died since it was built
            rerouted = p.reroute(slot, None)
            if rerouted is not None:
                self.host.count("packets rerouted around a dead relay host")
                url, packet = rerouted
        try:
            p.send(slot, url, packet)
        except Exception as exc:  # the first hop is down or refused: re-routed or retried, then counted
            if isinstance(exc, OutboundError) and not isinstance(exc, RefusedAddress):
                self.relay_hosts.dead(url)
            status = exc.status if isinstance(exc, HTTPRefusal) else None
            # A first hop whose address is refused is avoided too, though never tried again.
            if (retriable(status) or status == REFUSED_ADDRESS) and time.time() < end:
                rerouted = p.reroute(slot, url)
                if rerouted is not None:
                    self.host.count("packets rerouted")
                    new_url, new_packet = rerouted
                    self.host.dispatcher.at(
                        time.time(), lambda: self.send(p, slot, new_url, new_packet, attempt + 1)
                    )
                    return
            retry = send_retry_at(time.time(), end, attempt, exc)
            if retriable(status) and retry is not None:
                self.host.count("packets retried")
                self.host.dispatcher.at(retry, lambda: self.send(p, slot, url, packet, attempt + 1))
                return
            self.host.count("packets not sent")
            log.warning("packet of %s to %s not sent: %s", p.node.fingerprint[:12], url, exc)
            return
        self.host.count("packets sent")



#: The least time left in the send window worth one more try at an overloaded first hop.
LAST_TRY_SECONDS = 0.5


def send_retry_at(now: float, end: float, attempt: int, exc: BaseException) -> float | None:
    """When to send a packet again after ``exc`` at ``now``, inside a send window ending at ``end``;
    None when no try fits.

    :func:`~peer.relay.retry_delay`, or for a first hop that shed the post and said when to come
    back (``Retry-After``) :func:`~peer.client.retry_wait`. When that would pass the window's end,
    one more try halfway to it instead of giving the packet up (its queue may have drained; each
    such try halves what is left, so at most ``log2((end − now) / LAST_TRY_SECONDS)`` of them): a
    relay that shed a copy two seconds before the end answered "try again in 2 s", and a
    redundant copy was counted not sent (CI: 191 of 192 sent).
    """
    after = exc.retry_after if isinstance(exc, HTTPRefusal) else None
    retry = now + (retry_delay(attempt) if after is None else retry_wait(attempt, exc))
    if retry < end:
        return retry
    if after is not None and end - now > LAST_TRY_SECONDS:
        return now + (end - now) / 2
    return None
