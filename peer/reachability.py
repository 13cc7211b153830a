"""Whether this host's relay can be reached from outside: asked of the aggregator before registering a relay.

A peer that did not choose to be sender-only still may not be reachable: a
laptop behind a home router or campus NAT opens connections and accepts none.
Registered as a relay, it would be on other members' routes that all fail
there. So before its identities register relays with an aggregator, the host
asks that aggregator to connect to its relay URL (issue 27;
``POST /reachability``, :mod:`aggregator.routes.reachability`):

1. it draws a challenge and a secret answer (32 random bytes each) and tells
   its relay to expect the challenge (:class:`ProbeChallenges`; the relay
   serves ``GET /relay/{node}/reachability/{challenge}`` with the answer, once,
   for :data:`CHALLENGE_SECONDS`);
2. it sends a :class:`~anonml.protocol.ReachabilityRequest` signed by one of
   its identities for that identity's relay URL;
3. *reachable* only when the aggregator hands back the very answer — which
   left the relay only over the aggregator's connection, so an aggregator cannot
   claim a relay reachable that is not. *Unreachable*, with the aggregator's
   reason, otherwise (said twice, :data:`CONFIRM_SECONDS` apart): then the
   policy decides (``unreachable``): register sender-only (the default) or
   refuse the problem with the reason.

An aggregator may lie "unreachable" to take relaying away from honest peers;
that only makes fewer members relay, which every peer's relay floors measure
on the roster it is shown (``min_relays``, ``max_hostile_route``:
``docs/threat-model.md``, "Relays"). What it learns — that this URL does not
answer from where it stands — is that the peer is behind NAT, and nothing
else. An aggregator without the route (HTTP 404) or one that cannot be asked
(unreachable itself, or busy past :data:`ASK_SECONDS`) leaves the policy's
choice as it was, with the reason said: the check cannot tell.

The identities of one host share its relay base, so one check per aggregator
stands for all of them; it is kept :data:`CHECK_TTL_SECONDS` (a laptop moves
between networks).
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass

from anonml.errors import AnonMLError
from anonml.protocol import ReachabilityRequest, sign_message
from peer.client import AggregatorClient, HTTPRefusal, with_retries
from peer.participant import PeerNode

__all__ = [
    "ASK_SECONDS",
    "CHALLENGE_SECONDS",
    "CONFIRM_SECONDS",
    "CHECK_TTL_SECONDS",
    "ProbeChallenges",
    "Reachability",
    "check_reachability",
]

#: Seconds the relay waits for the aggregator's probe of one challenge.
CHALLENGE_SECONDS = 60.0
#: Seconds the host keeps asking an aggregator that is unreachable or busy before it gives up.
ASK_SECONDS = 30.0
#: Seconds between a first "unreachable" and the probe that confirms it (:func:`check_reachability`).
CONFIRM_SECONDS = 2.0
#: Seconds one aggregator's verdict stands for the host before it asks again.
CHECK_TTL_SECONDS = 600.0


@dataclass(frozen=True)
class Reachability:
    """One check's verdict: ``reachable`` (None: the check could not tell) and why."""

    relay_url: str
    reachable: bool | None
    reason: str
    checked_at: float

    @property
    def word(self) -> str:
        """``reachable``, ``unreachable`` or ``not checked`` (the check could not tell)."""
        return {True: "reachable", False: "unreachable", None: "not checked"}[self.reachable]

    @property
    def unreachable(self) -> bool:
        """The aggregator could not reach the relay (a verdict, not "could not tell")."""
        return self.reachable is False


class ProbeChallenges:
    """The challenges this host's relay waits for: challenge → (node id, answer, until when).

    Thread-safe: the relay's HTTP route answers while the host's worker waits for the aggregator.
    An answer is given once (the first connection that presents the challenge takes it).
    """

    def __init__(self) -> None:
        self._pending: dict[bytes, tuple[bytes, bytes, float]] = {}
        self._lock = threading.Lock()

    def expect(self, node_id: bytes) -> tuple[bytes, bytes]:
        """A fresh ``(challenge, answer)`` the relay of ``node_id`` answers for :data:`CHALLENGE_SECONDS`."""
        challenge, answer = secrets.token_bytes(32), secrets.token_bytes(32)
        now = time.monotonic()
        with self._lock:
            self._pending = {c: v for c, v in self._pending.items() if v[2] > now}  # drop the expired
            self._pending[challenge] = (node_id, answer, now + CHALLENGE_SECONDS)
        return challenge, answer

    def answer(self, node_id: bytes, challenge: bytes) -> bytes | None:
        """The answer to ``challenge`` for ``node_id`` (taken: asked again, None); None if not expected."""
        with self._lock:
            pending = self._pending.get(challenge)
            if pending is None or pending[0] != node_id or pending[2] <= time.monotonic():
                return None
            del self._pending[challenge]
            return pending[1]

    def forget(self, challenge: bytes) -> None:
        with self._lock:
            self._pending.pop(challenge, None)


def check_reachability(
    node: PeerNode,
    relay_url: str,
    aggregator: bytes,
    client: AggregatorClient,
    challenges: ProbeChallenges,
    *,
    ask_seconds: float = ASK_SECONDS,
    confirm_seconds: float = CONFIRM_SECONDS,
) -> Reachability:
    """Ask the aggregator at ``client`` (identity ``aggregator``) to reach ``relay_url``, the relay URL
    of ``node`` on this host (module docstring); the verdict, never an exception for a failed ask.

    *Unreachable* is asked once more ``confirm_seconds`` later and stands only if said twice: a
    host's worker starts with its server's startup, before the server listens (uvicorn runs the
    app's startup first), so the first probe may meet a socket not listening yet.
    """
    verdict = _ask(node, relay_url, aggregator, client, challenges, ask_seconds)
    if verdict.unreachable:
        time.sleep(confirm_seconds)
        verdict = _ask(node, relay_url, aggregator, client, challenges, ask_seconds)
    return verdict


def _ask(
    node: PeerNode,
    relay_url: str,
    aggregator: bytes,
    client: AggregatorClient,
    challenges: ProbeChallenges,
    ask_seconds: float,
) -> Reachability:
    """One probe of :func:`check_reachability`."""
    challenge, answer = challenges.expect(node.node_id)

    def verdict(reachable: bool | None, reason: str) -> Reachability:
        return Reachability(relay_url, reachable, reason, time.time())

    try:
        request = sign_message(
            ReachabilityRequest(
                aggregator=aggregator,
                identity=bytes(node.identity.public),
                relay_url=relay_url,
                challenge=challenge,
                issued_at=time.time(),
                signature=bytes(64),
            ),
            node.identity,
        )
        result = with_retries(lambda: client.reachability(request), until=time.time() + ask_seconds)
    except HTTPRefusal as exc:
        if exc.status == 404:
            return verdict(None, "the aggregator offers no reachability check (HTTP 404)")
        return verdict(None, f"the aggregator did not check: {exc}")
    except AnonMLError as exc:  # unreachable itself, busy past ask_seconds, a malformed answer
        return verdict(None, f"the aggregator could not be asked: {exc}")
    finally:
        challenges.forget(challenge)
    if result.relay_url != relay_url:
        return verdict(None, "the aggregator answered about another relay URL")
    if not result.reachable:
        return verdict(False, result.reason or "the aggregator gave no reason")
    if result.answer is None:  # its validator pairs an answer with reachable: a broken message
        return verdict(None, "the aggregator said reachable without the challenge's answer")
    if not hmac.compare_digest(bytes(result.answer), answer):
        # something answered at that URL, but not this relay (or the aggregator made the answer up)
        return verdict(False, "the aggregator's probe brought back an answer this relay never gave")
    return verdict(True, "the aggregator reached this relay and brought back its answer")
