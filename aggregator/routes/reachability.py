"""``POST /reachability``: connect to a peer's relay URL from outside, so it learns whether it can relay.

A peer that means to relay but sits behind NAT (a laptop at home, a phone on
campus Wi-Fi) can open connections and accepts none: registered as a relay,
every route through it would fail. Before it registers a relay it asks the
aggregator — which it reaches anyway, and which must reach nothing of it — to
try (issue 27; DESIGN §7, amended by §10: the aggregator is an adversary):

- the :class:`~anonml.protocol.ReachabilityRequest` names this aggregator's
  identity (422 otherwise), is signed by the identity whose relay URL it is
  (403), that URL has the one relay form and ends with the signer's node id
  (:func:`~anonml.protocol.check_own_relay_url`, as at registration; 422), and
  it was issued within :data:`~anonml.protocol.REACHABILITY_SKEW_SECONDS` of
  now (422): a captured request cannot be replayed to probe later;
- the aggregator then makes one ``GET {relay_url}/reachability/{challenge}``
  through :func:`anonml.outbound.fetch` — done within :data:`PROBE_SECONDS`,
  its answer at most :data:`ANSWER_CAP` bytes, only to global addresses (and
  loopback or a declared test network in test mode), certificates verified as
  for every outbound request — and returns the relay's
  :class:`~anonml.protocol.ReachabilityAnswer` or why there is none, as a
  :class:`~anonml.protocol.ReachabilityResult`;
- at most :data:`PROBE_CONCURRENCY` probes run at once; another waits for none
  and gets 503 with ``Retry-After`` (a probe holds a worker thread up to
  :data:`PROBE_SECONDS`: they must not take the threads registration needs).

What the aggregator learns is whether that URL answers from where it stands —
for a peer behind NAT, that it is behind NAT. Nothing is stored: the request is
answered and forgotten, and nothing of it reaches a roster. Anyone with a key
can ask for a probe of a URL naming that key's node id: the path is fixed, the
host must be global, and the result says only whether a relay answered the
challenge, so the route is no more use for scanning than a TCP connect.
"""

from __future__ import annotations

import logging
import threading
import time

from fastapi import APIRouter, HTTPException

from aggregator.deps import StateDep
from anonml.addresses import connect_check
from anonml.crypto import CryptoError, PublicIdentity
from anonml.outbound import OutboundError, fetch
from anonml.protocol import (
    REACHABILITY_SKEW_SECONDS,
    ReachabilityAnswer,
    ReachabilityRequest,
    ReachabilityResult,
    check_own_relay_url,
    verify_message,
)

__all__ = ["router", "PROBE_SECONDS", "PROBE_CONCURRENCY", "ANSWER_CAP", "probe_relay"]

router = APIRouter(tags=["reachability"])
log = logging.getLogger("anonml.aggregator")

#: Seconds one probe may take in all (name lookup, connect, TLS handshake, the answer).
PROBE_SECONDS = 5.0
#: Probes running at once in one aggregator process.
PROBE_CONCURRENCY = 4
#: Bytes a relay's answer may have (a ReachabilityAnswer is about 60).
ANSWER_CAP = 1024
#: Seconds a peer is told to wait when every probe slot is taken.
BUSY_RETRY_SECONDS = 5

_slots = threading.BoundedSemaphore(PROBE_CONCURRENCY)


@router.post("/reachability", response_model=ReachabilityResult)
def reachability(request: ReachabilityRequest, state: StateDep) -> ReachabilityResult:
    """Connect to the signer's relay URL; whether its relay answered the challenge (module docstring)."""
    if bytes(request.aggregator) != state.public_identity:
        raise HTTPException(422, "the request names another aggregator identity than this one's")
    try:
        identity = PublicIdentity.from_bytes(request.identity)
        verify_message(request, identity)
    except CryptoError as exc:
        raise HTTPException(403, f"reachability request signature rejected: {exc}") from None
    allow_loopback = state.settings.allow_loopback_http
    try:
        check_own_relay_url(request.relay_url, identity.node_id, allow_loopback_http=allow_loopback)
    except ValueError as exc:
        raise HTTPException(422, f"relay URL: {exc}") from None
    age = time.time() - request.issued_at
    if abs(age) > REACHABILITY_SKEW_SECONDS:
        raise HTTPException(
            422,
            f"the request was issued {age:+.0f} s from now; more than {REACHABILITY_SKEW_SECONDS:.0f} s "
            "either way is refused (check this machine's clock)",
        )
    if not _slots.acquire(blocking=False):
        raise HTTPException(
            503, "every reachability probe slot is taken: try again shortly",
            headers={"Retry-After": str(BUSY_RETRY_SECONDS)},
        )
    try:
        return probe_relay(request.relay_url, bytes(request.challenge), allow_loopback=allow_loopback)
    finally:
        _slots.release()


def probe_relay(relay_url: str, challenge: bytes, *, allow_loopback: bool) -> ReachabilityResult:
    """One ``GET {relay_url}/reachability/{challenge hex}``: the answer it got, or why it got none."""

    def unreachable(reason: str) -> ReachabilityResult:
        return ReachabilityResult(relay_url=relay_url, reachable=False, reason=reason[:500])

    try:
        reply = fetch(
            "GET",
            f"{relay_url}/reachability/{challenge.hex()}",
            deadline=PROBE_SECONDS,
            max_bytes=ANSWER_CAP,
            address_check=connect_check(allow_loopback=allow_loopback),
        )
    except OutboundError as exc:
        return unreachable(f"no connection from the aggregator: {exc}")
    if reply.status != 200:
        return unreachable(f"the relay answered HTTP {reply.status}, not the challenge's answer")
    try:
        answer = ReachabilityAnswer.model_validate_json(reply.body)
    except ValueError:
        return unreachable("the relay's answer is not a reachability answer")
    return ReachabilityResult(relay_url=relay_url, reachable=True, answer=answer.answer)
