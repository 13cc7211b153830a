"""One identity's answer to the median query that names it: binary randomised response at the
proposal's median ε, recorded in the ledger before it is sent (docs/protocol.md, "Medians"); a host
sends its identities' answers to a step together (:func:`send_together`)."""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from anonml.crypto import (
    CryptoError,
)
from anonml.errors import AnonMLError
from anonml.privacy import BinaryRandomizedResponse
from anonml.protocol import (
    MAX_BATCH_ITEMS,
    MedianAnswer,
    MedianQuery,
    sign_message,
    verify_message,
)
from anonml.randomness import resolve_rng
from peer import participation_store
from peer.answer_delivery import deliver_answer
from peer.client import AggregatorClient, HTTPRefusal, transient, with_retries
from peer.features import invalid_features
from peer.participation import Participation
from peer.phases import (
    Aborted,
    ParticipationPhase,
)

P = ParticipationPhase
log = logging.getLogger("anonml.peer")


@dataclass(frozen=True)
class SignedAnswer:
    """An answer whose release is recorded, signed, to be sent until ``until`` (the step's deadline)."""

    participation: Participation
    message: MedianAnswer
    until: float

    @property
    def what(self) -> str:
        return f"median answer (feature {self.message.feature}, step {self.message.step})"

    def own_request(self) -> object:
        """``POST …/medians/answers`` with this answer alone."""
        return self.participation.client.answer(self.message)

    def deliver(self, send: Callable[[], object] | None = None) -> None:
        """:func:`~peer.answer_delivery.deliver_answer` through ``send`` (default: its own request)."""
        deliver_answer(
            self.participation,
            send or self.own_request,
            until=self.until,
            what=self.what,
            counter="median answers",
            deadline="the step's",
        )


def asks(p: Participation, query: MedianQuery) -> bool:
    """Whether ``query`` names this identity and it has not answered yet (once per problem)."""
    roster = p.facts(p.roster, "the checked roster")
    return p.phase == P.CONFIRMED and roster.view.index_of[bytes(p.node.identity.public)] in query.members


def answer(p: Participation, query: MedianQuery) -> bool:
    """Answer ``query`` if it names this identity (once per problem), in its own request; True if
    answered (:func:`sign_answer`, then :meth:`SignedAnswer.deliver`)."""
    if not asks(p, query):
        return False  # answered already (or past the medians)
    signed = sign_answer(p, query)
    if signed is not None:
        signed.deliver()
    return True


def sign_answer(p: Participation, query: MedianQuery) -> SignedAnswer | None:
    """If ``query`` :func:`asks` this identity: check it, persist the move, record the release and
    sign the bit. None when it does not ask, or when nothing may be sent (the shortfall noted).
    Raises :class:`Aborted` on a query no honest aggregator sends."""
    if not asks(p, query):
        return None
    roster = p.facts(p.roster, "the checked roster")
    draft = p.problem.draft
    try:
        verify_message(query, bytes(p.problem.aggregator))
    except CryptoError as exc:
        raise Aborted(f"median query is not signed by the aggregator: {exc}") from None
    if roster.assignment.role != "median":
        raise Aborted("asked a median query, but the plan puts this identity in a report partition")
    if query.feature not in draft.numeric_features:
        raise Aborted(f"median query names feature {query.feature}, which is not numeric")
    if not math.isclose(query.epsilon, draft.median_epsilon, rel_tol=1e-12):
        raise Aborted(f"median query asks ε={query.epsilon}, the proposal promised {draft.median_epsilon}")
    # Persisted before the release is recorded and sent: a restart never answers twice. Whatever
    # fails from here on (the state DB or the ledger on a full disk, the aggregator past the step's
    # deadline) costs this answer, and says so: the participation ends partial with the reason.
    what = f"median answer (feature {query.feature}, step {query.step})"
    try:
        p._move(P.ANSWERED)
    except Exception as exc:  # e.g. a full disk: nothing recorded, so nothing may be sent
        p.phase = P.ANSWERED  # never answered twice in this process either
        _short(p, f"{what} not sent: its phase could not be saved: {exc}")
        return None
    rr = BinaryRandomizedResponse(draft.median_epsilon)
    try:
        p.node.ledger.record(
            peer=p.node.fingerprint,
            problem=p.problem.id,
            round=0,
            attributes=[draft.features[query.feature].name],
            mechanism=rr,
            pool="median",
        )
    except Exception as exc:  # not recorded: not released
        _short(p, f"{what} not sent: the release could not be recorded: {exc}")
        return None
    gen = resolve_rng(p.node.rng)
    truth = median_truth(p, query, gen)
    bit = bool(rr.perturb(np.asarray([truth]), gen)[0])
    answer = sign_message(
        MedianAnswer(
            problem_id=p.problem.id,
            feature=query.feature,
            step=query.step,
            identity=bytes(p.node.identity.public),
            bit=bit,
            signature=bytes(64),
        ),
        p.node.identity,
    )
    # The release is recorded: sent until the step's own deadline (the aggregator waits
    # median_step_seconds for it).
    return SignedAnswer(p, answer, time.time() + p.problem.draft.schedule.median_step_seconds)


def send_together(client: AggregatorClient, signed: Sequence[SignedAnswer]) -> dict[int, Callable[[], None]]:
    """Send ``signed`` (one problem's) in :data:`~anonml.protocol.MAX_BATCH_ITEMS` answers a request.

    Returns, keyed by ``id`` of each participation, what is left to do for it: nothing after a 201,
    else :meth:`SignedAnswer.deliver` with what its own request would have met, so each answer
    ends as :func:`~peer.answer_delivery.deliver_answer` says (replayed, not counted, not delivered
    before the deadline, or refused). An item that met a transient status, and every item of a
    batch the aggregator refused as a whole (no batch route: 404, 405), goes in its own request.
    """
    left: dict[int, Callable[[], None]] = {}
    for start in range(0, len(signed), MAX_BATCH_ITEMS):
        chunk = signed[start : start + MAX_BATCH_ITEMS]
        for s, send in zip(chunk, _send_chunk(client, chunk), strict=True):
            left[id(s.participation)] = _nothing if send is None else functools.partial(s.deliver, send)
    return left


def _send_chunk(client: AggregatorClient, chunk: Sequence[SignedAnswer]) -> list[Callable[[], object] | None]:
    """One batch request (retried until the earliest deadline): per item None when stored, else the
    ``send`` its :meth:`SignedAnswer.deliver` is to use."""
    problem_id = chunk[0].message.problem_id
    relay = chunk[0].participation.relay

    def retried(exc: BaseException) -> None:
        relay.count("median answers retried", len(chunk))

    try:
        results = with_retries(
            functools.partial(client.answer_batch, problem_id, [s.message for s in chunk]),
            until=min(s.until for s in chunk),
            on_retry=retried,
        )
    except AnonMLError as exc:
        if transient(exc):  # no answer before the deadline: each is "not delivered"
            return [_raiser(exc)] * len(chunk)
        return [s.own_request for s in chunk]  # no batch route, or refused as a whole
    url = f"{client.base_url}/problems/{problem_id}/medians/answers"
    sends: list[Callable[[], object] | None] = []
    for s, result in zip(chunk, results.results, strict=True):
        if result.status == 201:
            sends.append(None)
            continue
        refusal = HTTPRefusal(url, result.status, result.detail)
        # A "not now" for this item: its own request, retried; else the answer it got.
        sends.append(s.own_request if transient(refusal) else _raiser(refusal))
    return sends


def _raiser(exc: BaseException) -> Callable[[], object]:
    def send() -> object:
        raise exc

    return send


def _nothing() -> None:
    """Nothing left to do: the answer was stored."""


def naming(p: Participation, queries: Sequence[MedianQuery]) -> list[MedianQuery]:
    """The ``queries`` that ask this identity (none before its roster is checked)."""
    if p.roster is None:
        return []
    me = p.roster.view.index_of.get(bytes(p.node.identity.public))
    return [] if me is None else [q for q in queries if me in q.members]


def named_in(p: Participation, queries: Sequence[MedianQuery]) -> bool:
    """Does one of ``queries`` ask this identity (known once its roster is checked)."""
    return bool(naming(p, queries))


def may_have_missed(p: Participation) -> bool:
    """In the median pool with nothing noted against it: only the queries asked can tell whether
    it missed one (:func:`note_unanswered`)."""
    return p.in_median_pool and not p.shortfall


def note_unanswered(p: Participation, asked: Sequence[MedianQuery]) -> None:
    """A median-pool identity named by a query the search asked (``asked``: open and closed ones,
    their signatures checked) that released no answer for it, and has nothing else noted against
    it, says so: it ends ``partial`` with the query named, never ``done`` as if it had done its
    part. Its host was not ready while the query was open (a slow or loaded host, an unreachable
    aggregator). An identity named by no query was not asked — its search stopped early — and
    is not short of anything."""
    named = naming(p, asked) if may_have_missed(p) else []
    if not named:
        return
    releases = p.node.ledger.releases(peer=p.node.fingerprint, problem=p.problem.id)
    if any(r.pool == "median" for r in releases):
        return  # answered: what became of the answer is noted where it was sent
    q = named[0]
    _short(p, f"median answer (feature {q.feature}, step {q.step}) not sent: the query closed before "
              "this identity's host was ready to answer it")


def _short(p: Participation, why: str) -> None:
    """Note a part of its own this identity could not do (logged; saved when the state DB can)."""
    log.warning("identity %s in %s: %s", p.node.fingerprint[:12], p.problem.id, why)
    p.shortfall.append(why)
    p.reason = "; ".join(p.shortfall)
    try:
        participation_store.save(p)
    except Exception as exc:  # a full disk: kept in memory, saved with the next move
        log.warning("identity %s: its state could not be saved now: %s", p.node.fingerprint[:12], exc)


def median_truth(p: Participation, query: MedianQuery, gen: np.random.Generator) -> bool:
    """Is this identity's value above the threshold; a uniform bit when it cannot say."""
    p.compute_example()
    try:
        if p.example is None:
            raise AnonMLError("no example")
        bad = invalid_features(p.example.x, p.problem.draft.features).get(query.feature)
        if bad is not None:
            raise AnonMLError(bad)
        return bool(p.example.x[query.feature] > query.threshold)
    except Exception as exc:  # whatever fails, a uniform bit through the same response
        p._standin(f"median answer: {exc}")
        return bool(gen.integers(2))
