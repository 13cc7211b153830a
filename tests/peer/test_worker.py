"""The peer's worker on its own (:mod:`peer.worker`): what a problem's session does in each phase the
aggregator reports, how it backs off an aggregator that does not answer, and the polling loop's
backoff and stop — against a stand-in for the aggregator (:class:`FakeAggregator`), no server.

The identities are real :class:`~peer.participant.Participant` s of a real (not started)
:class:`~peer.host.PeerHost` on a state DB file: they sign their own registrations and move through
the participation machine (:mod:`peer.phases`) as in a daemon; only the aggregator's answers are
scripted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from anonml.crypto import Identity
from anonml.errors import AnonMLError
from anonml.outbound import OutboundError
from anonml.phases import ProblemPhase
from anonml.privacy import PrivacyLedger
from anonml.protocol import (
    BatchResults,
    ItemResult,
    Problem,
    ProblemStatus,
    Registration,
    RegistrationReceipt,
    Roster,
    verify_message,
)
from anonml.store import EventStore
from peer import median_answer, worker
from peer.client import AggregatorClient, HTTPRefusal
from peer.db import PeerDB
from peer.host import PeerHost
from peer.participant import Participant, PeerNode
from peer.phases import ParticipationPhase
from peer.policy import PeerPolicy
from peer.worker import ProblemSession, Worker
from tests.aggregator.helpers import draft, signed_problem
from tests.waiting import wait_until

P = ParticipationPhase
URL = "http://aggregator.test"
#: An answer scripted for one identity's registration: an item of a batch, or what its own request raises.
Answer = ItemResult | Exception | None


@dataclass
class FakeAggregator:
    """The calls a session makes to :class:`~peer.client.AggregatorClient`, answered from a script.

    ``down``: what every call raises (the aggregator unreachable or refusing), else the phase and
    message of ``status``; registrations are answered per identity (``answers``, keyed by its public
    identity: an :class:`ItemResult` in a batch, an exception raised by its own request).
    """

    phase: ProblemPhase = ProblemPhase.REGISTRATION
    message: str = ""
    down: Exception | None = None
    batch_route: bool = True
    answers: dict[bytes, Answer] = field(default_factory=dict)
    queries: list[Any] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    sent: list[Registration] = field(default_factory=list)

    def _call(self, what: str) -> None:
        self.calls.append(what)
        if self.down is not None:
            raise self.down

    def status(self, problem_id: str) -> ProblemStatus:
        self._call("status")
        return ProblemStatus(
            id=problem_id, title="test problem", phase=self.phase, registered=0, roster_size=0,
            median_answers=0, tokens_issued=0, reports_accepted=0, rejects={}, model_available=False,
            message=self.message,
        )

    def register_batch(self, problem_id: str, registrations: list[Registration]) -> BatchResults:
        self._call("register_batch")
        if not self.batch_route:
            raise HTTPRefusal(f"{URL}/problems/{problem_id}/registrations/batch", 404, "Not Found")
        self.sent.extend(registrations)
        results = []
        for registration in registrations:
            answer = self.answers.get(bytes(registration.identity))
            results.append(answer if isinstance(answer, ItemResult) else ItemResult(status=201))
        return BatchResults(results=tuple(results))

    def register(self, registration: Registration) -> RegistrationReceipt:
        self._call("register")
        self.sent.append(registration)
        answer = self.answers.get(bytes(registration.identity))
        if isinstance(answer, Exception):
            raise answer
        return RegistrationReceipt(problem_id=registration.problem_id, fingerprint="f", registered=1)

    def roster(self, problem_id: str) -> Roster:
        self._call("roster")
        raise OutboundError(f"{URL}: the roster is not scripted")

    def medians(self, problem_id: str) -> list[Any]:
        self._call("medians")
        return self.queries


@dataclass
class Round:
    """A host of ``n`` identities that accepted one problem, and its session over a fake aggregator."""

    host: PeerHost
    problem: Problem
    aggregator: FakeAggregator
    session: ProblemSession

    @property
    def participants(self) -> list[Participant]:
        return self.session.participants

    def saved_phase(self, p: Participant) -> str | None:
        row = self.host.db.participation(self.problem.id, p.node.fingerprint)
        return None if row is None else row.phase


@pytest.fixture
def make_round(tmp_path: Path) -> Iterator[Callable[[int], Round]]:
    hosts: list[PeerHost] = []

    def make(n: int) -> Round:
        nodes = [
            PeerNode(Identity.generate(np.random.default_rng(i)), EventStore("sqlite://"),
                     PrivacyLedger("sqlite://"), user=f"u{i}", rng=np.random.default_rng(i))
            for i in range(n)
        ]
        host = PeerHost(
            nodes, PeerDB(f"sqlite:///{tmp_path / f'peer{len(hosts)}.db'}"), PeerPolicy.for_simulation(), [],
            relay_base="http://127.0.0.1:8765", poll_seconds=0.5, workers=2,
        )
        hosts.append(host)
        problem = signed_problem(draft(), Identity.generate(), pid=f"p-worker-{len(hosts)}")
        aggregator = FakeAggregator()
        client = cast(AggregatorClient, aggregator)
        participants = [
            Participant(node, problem, client, host.relay, host.relay_base or "", policy=host.policy,
                        db=host.db)
            for node in nodes
        ]
        return Round(host, problem, aggregator, ProblemSession(host, problem, client, participants))

    yield make
    for host in hosts:
        host.close()
        host.db.close()


def test_in_registration_each_identity_is_registered_or_aborted_by_its_own_batch_result(make_round):
    r = make_round(4)
    first, resent, again, refused = r.participants
    earlier = resent.registration()  # signed at an earlier poll whose batch got no answer
    r.aggregator.answers = {
        bytes(resent.node.identity.public): ItemResult(status=409, detail="already registered"),
        bytes(again.node.identity.public): ItemResult(status=409, detail="already registered"),
        bytes(refused.node.identity.public): ItemResult(status=403, detail="not admitted"),
    }
    r.session.step()
    assert r.aggregator.calls == ["status", "register_batch"]  # one request for the four
    assert [p.phase for p in r.participants] == [P.REGISTERED, P.REGISTERED, P.ABORTED, P.ABORTED]
    # Only an identity that sent this very registration before may take "already registered" as stored.
    assert again.reason == "aggregator refused: already registered (HTTP 409)"
    assert refused.reason == "aggregator refused: not admitted (HTTP 403)"
    assert [r.saved_phase(p) for p in r.participants] == ["registered", "registered", "aborted", "aborted"]
    # Each registration is its identity's own, signed by it; the resent one is the same document.
    for p, sent in zip(r.participants, r.aggregator.sent, strict=True):
        assert bytes(sent.identity) == bytes(p.node.identity.public) and sent.problem_id == r.problem.id
        verify_message(sent, p.node.identity.public)
    assert r.aggregator.sent[1] == earlier
    assert r.host.counters["registrations sent in batches"] == 4 and not r.session.finished
    r.session.step()  # registered: nothing more to send while registration is open
    assert r.aggregator.calls == ["status", "register_batch", "status"]


def test_without_the_batch_route_each_identity_registers_alone_and_only_a_refusal_aborts(make_round):
    r = make_round(3)
    taken, unanswered, refused = r.participants
    r.aggregator.batch_route = False
    r.aggregator.answers = {
        bytes(unanswered.node.identity.public): HTTPRefusal(URL, 503, "busy"),  # not now: tried again
        bytes(refused.node.identity.public): HTTPRefusal(URL, 403, "registration closed"),
    }
    r.session.step()
    assert sorted(r.aggregator.calls) == ["register", "register", "register", "register_batch", "status"]
    assert [p.phase for p in r.participants] == [P.REGISTERED, P.ACCEPTED, P.ABORTED]
    assert refused.reason == "aggregator refused: registration closed (HTTP 403)"
    assert r.host.counters["aggregator calls retried"] == 1
    first = next(s for s in r.aggregator.sent if bytes(s.identity) == bytes(unanswered.node.identity.public))
    del r.aggregator.answers[bytes(unanswered.node.identity.public)]
    r.session.step()  # the next poll: it is sent again, the same document, and taken
    assert unanswered.phase == P.REGISTERED and r.aggregator.sent[-1] == first
    assert r.saved_phase(unanswered) == "registered"


def test_a_bug_in_a_step_is_raised_not_taken_for_the_aggregator_s_refusal(make_round):
    r = make_round(2)
    r.aggregator.batch_route = False
    r.aggregator.answers = {bytes(r.participants[0].node.identity.public): ValueError("a bug")}
    with pytest.raises(ValueError, match="a bug"):
        r.session.step()
    assert r.participants[0].phase == P.ACCEPTED and r.participants[0].reason == ""  # not aborted for it


def test_a_failed_problem_fails_whoever_still_takes_part_and_ends_the_session(make_round):
    r = make_round(2)
    live, stopped = r.participants
    stopped.abort("declined earlier")
    r.aggregator.phase, r.aggregator.message = ProblemPhase.FAILED, "too few peers registered"
    r.host.sessions[r.problem.id] = r.session
    r.host.poll_once()
    assert live.phase == P.FAILED and live.reason == "the problem failed: too few peers registered"
    assert stopped.phase == P.ABORTED and stopped.reason == "declined earlier"  # an end stays as it was
    assert r.saved_phase(live) == "failed" and r.session.finished
    asked = len(r.aggregator.calls)
    r.host.poll_once()  # a finished session is not stepped again
    assert len(r.aggregator.calls) == asked == 1


def test_an_identity_still_accepted_when_registration_closed_is_aborted(make_round):
    r = make_round(2)
    early, late = r.participants
    early.registered()
    r.aggregator.phase = ProblemPhase.WITNESSING
    with pytest.raises(OutboundError):  # then the roster: this fake's aggregator does not answer it
        r.session.step()
    assert late.phase == P.ABORTED and late.reason == "registration closed before this identity registered"
    assert early.phase == P.REGISTERED  # it waits for the roster
    assert r.aggregator.calls == ["status", "roster"]


def script_median_poll(
    r: Round, monkeypatch: pytest.MonkeyPatch, pool: set[int], named: set[int] | None = None,
    late: frozenset[int] = frozenset(),
) -> list[tuple[str, int]]:
    """Script a medians-phase poll of ``r`` (identities by index): ``pool`` is the median pool, an
    open question names ``named`` (default: the pool). Each compares fingerprints (a ``late`` one's
    first comparison cannot finish: members it drew have not checked the roster) and answers once,
    as the real ones do; nothing is sent (the delivery is :mod:`peer.median_answer`'s, tested apart).
    Returns the list of ``("compare" | "answer", index)`` events the session's steps fill."""
    events: list[tuple[str, int]] = []
    index = {id(p): i for i, p in enumerate(r.participants)}
    named = pool if named is None else named

    def compare(p: Participant, hosted: frozenset[int] = frozenset()) -> bool:
        i = index[id(p)]
        events.append(("compare", i))
        if i in late and events.count(("compare", i)) == 1:
            return False
        p.phase = P.CONFIRMED
        return True

    def answer(p: Participant, q: object) -> None:
        if p.phase == P.CONFIRMED:
            events.append(("answer", index[id(p)]))
            p.phase = P.ANSWERED

    monkeypatch.setattr(Participant, "in_median_pool", property(lambda p: index[id(p)] in pool))
    monkeypatch.setattr(Participant, "compare_fingerprints", compare)
    monkeypatch.setattr(Participant, "sign_answer", answer)
    monkeypatch.setattr(Participant, "prepare_round", lambda p: None)
    monkeypatch.setattr(median_answer, "named_in", lambda p, queries: bool(queries) and index[id(p)] in named)
    for p in r.participants:
        p.phase = P.ROSTER_CHECKED
    r.session.view = cast(Any, object())  # the roster was checked at an earlier poll
    monkeypatch.setattr(r.session, "_hosted_members", lambda: frozenset())
    r.aggregator.phase = ProblemPhase.MEDIANS
    r.aggregator.queries = [object()]
    return events


def test_in_the_medians_the_named_compare_and_answer_before_the_others_compare(make_round, monkeypatch):
    """A median step waits for its whole group, so in a poll the median pool, and anyone else a question
    names (who must abort), compares fingerprints and answers before the others' comparisons begin."""
    r = make_round(6)
    events = script_median_poll(r, monkeypatch, pool={0, 1}, named={0, 1, 5})
    r.session.step()
    first = {0, 1, 5}
    assert sorted(i for what, i in events if what == "answer") == [0, 1, 5]
    last_answer = max(k for k, (what, _) in enumerate(events) if what == "answer")
    assert {i for what, i in events[:last_answer] if what == "compare"} == first
    assert sorted(i for what, i in events[last_answer:] if what == "compare") == [2, 3, 4]
    assert [what for what, _ in events].count("compare") == 6  # one comparison each, in one poll



def test_before_the_round_the_others_compare_a_bounded_number_a_poll_those_asked_least_first(
    make_round, monkeypatch
):
    """While the median questions are to come, a poll compares the pool and at most
    COMPARISONS_PER_POLL others (so it stays short); one whose comparison could not finish waits
    behind those not yet asked; once the round opens, everyone left compares in one poll."""
    r = make_round(7)
    pool = {id(p) for p in r.participants[:2]}
    stuck = r.participants[2]  # its drawn members cannot answer yet
    events: list[int] = []
    index = {id(p): i for i, p in enumerate(r.participants)}

    def compare(p: Participant, hosted: frozenset[int] = frozenset()) -> bool:
        events.append(index[id(p)])
        p.comparisons.asked.add(len(events))
        if p is not stuck:
            p.phase = P.CONFIRMED
        return p is not stuck

    monkeypatch.setattr(worker, "COMPARISONS_PER_POLL", 2)
    monkeypatch.setattr(Participant, "in_median_pool", property(lambda p: id(p) in pool))
    monkeypatch.setattr(Participant, "compare_fingerprints", compare)
    monkeypatch.setattr(Participant, "prepare_round", lambda p: None)
    for p in r.participants:
        p.phase = P.ROSTER_CHECKED
    r.session.view = cast(Any, object())
    monkeypatch.setattr(r.session, "_hosted_members", lambda: frozenset())
    r.aggregator.phase = ProblemPhase.WITNESSING
    r.session.step()
    assert events == [0, 1, 2, 3]
    events.clear()
    r.aggregator.phase = ProblemPhase.MEDIANS
    r.session.step()
    assert events == [4, 5]  # not yet asked before the one that was
    events.clear()
    r.session.step()
    assert events == [6, 2]
    monkeypatch.setattr(r.session, "_report_round", lambda phase: None)
    r.aggregator.phase = ProblemPhase.REPORTING
    events.clear()
    r.session.step()
    assert events == [2]
    assert [p.phase for p in r.participants].count(P.CONFIRMED) == 6


def test_a_question_opened_during_a_poll_is_answered_between_two_chunks_of_its_bounded_work(
    make_round, monkeypatch
):
    """In the medians phase the others' comparisons go QUESTION_CHECK_EVERY at a time and, while a pool
    member is unasked, the host looks for new questions between chunks: a step opened mid-poll is
    answered after one chunk, not at the next poll; once the pool has answered, the rest go at once."""
    r = make_round(8)
    events = script_median_poll(r, monkeypatch, pool={0, 1})
    looks: list[int] = []

    def medians(problem_id: str) -> list[Any]:
        looks.append(len(events))
        return [] if len(looks) == 1 else [object()]  # the next step opens after the poll began

    monkeypatch.setattr(r.aggregator, "medians", medians)
    monkeypatch.setattr(worker, "COMPARISONS_PER_POLL", 4)
    monkeypatch.setattr(worker, "QUESTION_CHECK_EVERY", 2)
    r.session.step()
    assert events == [
        ("compare", 0), ("compare", 1),  # the pool first; no question open yet
        ("compare", 2), ("compare", 3),  # one chunk of the others
        ("answer", 0), ("answer", 1),    # the question opened meanwhile, answered in this poll
        ("compare", 4), ("compare", 5),  # the pool has answered: the rest without looking again
    ]
    assert len(looks) == 2


def test_a_named_member_whose_comparison_could_not_finish_tries_again_between_chunks(make_round, monkeypatch):
    """A pool member named by an open question whose first comparison could not finish (members it
    drew on other hosts had not checked the roster) compares again after the next chunk and answers
    in the same poll: the step waits for it."""
    r = make_round(6)
    events = script_median_poll(r, monkeypatch, pool={0, 1}, late=frozenset({0}))
    monkeypatch.setattr(worker, "COMPARISONS_PER_POLL", 4)
    monkeypatch.setattr(worker, "QUESTION_CHECK_EVERY", 2)
    r.session.step()
    assert events == [
        ("compare", 0), ("compare", 1), ("answer", 1),  # 0's comparison could not finish
        ("compare", 2), ("compare", 3),                  # one chunk of the others
        ("compare", 0), ("answer", 0),                   # named and unconfirmed: again, and answers
        ("compare", 4), ("compare", 5),
    ]



def test_a_look_for_questions_that_gets_no_answer_leaves_the_questions_not_the_work(make_round, monkeypatch):
    """Looking between chunks is best effort: when the aggregator does not answer it, the poll's
    comparisons still all go (in one go), and the questions wait for the next poll."""
    r = make_round(8)
    events = script_median_poll(r, monkeypatch, pool={0, 1}, late=frozenset({0}))
    looks: list[int] = []

    def medians(problem_id: str) -> list[Any]:
        looks.append(len(events))
        if len(looks) > 1:
            raise OutboundError(f"{URL}: connection reset")
        return [object()]

    monkeypatch.setattr(r.aggregator, "medians", medians)
    monkeypatch.setattr(worker, "COMPARISONS_PER_POLL", 6)
    monkeypatch.setattr(worker, "QUESTION_CHECK_EVERY", 2)
    r.session.step()
    assert events == [
        ("compare", 0), ("compare", 1), ("answer", 1),
        ("compare", 2), ("compare", 3),                                  # a chunk, then no answer
        ("compare", 4), ("compare", 5), ("compare", 6), ("compare", 7),  # the rest all the same
    ]
    assert looks[:2] == [0, 5]  # at the poll's start, then after the first chunk
    assert not r.session.failures  # the poll itself succeeded


def test_an_aggregator_that_does_not_answer_is_asked_again_after_a_backoff_and_a_refusal_at_the_next_poll(
    make_round, caplog
):
    r = make_round(1)
    r.host.sessions[r.problem.id] = r.session
    caplog.set_level(logging.INFO, logger="anonml.peer")
    # Overloaded, asking for 30 s: not asked again before then, whatever the poll rate.
    r.aggregator.down = HTTPRefusal(URL, 503, "overloaded", retry_after=30.0)
    before = time.monotonic()
    r.host.poll_once()
    assert r.session.next_try >= before + 30.0 and not r.session.due()
    assert r.session.failures == 1 and "overloaded" in r.session.last_error
    r.host.poll_once()
    assert r.aggregator.calls == ["status"]  # backing off: the second poll did not step it
    # Unreachable: jittered backoff, uniform on [0, min(4, 0.25 · 2^attempt)] (peer.client.backoff_delay).
    r.aggregator.down = OutboundError(f"{URL}: ConnectionRefusedError")
    for attempt in (1, 2, 3):
        before = time.monotonic()
        r.host._step(r.session)  # the poll's step of this session, whether or not it is due
        assert before <= r.session.next_try <= time.monotonic() + min(4.0, 0.25 * 2**attempt)
        assert r.session.failures == attempt + 1
    assert r.host.counters["poll errors"] == r.host.counters["aggregator calls retried"] == 4
    said = [rec.getMessage() for rec in caplog.records if "did not answer" in rec.getMessage()]
    assert len(said) == 1  # a streak is logged once
    # A refusal is an answer: no backoff, tried again at the next poll, not counted as a retry.
    r.aggregator.down = HTTPRefusal(URL, 409, "no such phase")
    r.session.failures, r.session.next_try = 0, 0.0
    r.host._step(r.session)
    assert r.session.failures == 0 and r.session.due() and r.host.counters["aggregator calls retried"] == 4
    assert r.host.counters["poll errors"] == 5
    # It answers again: the streak ends, the participation goes on where it was.
    r.session.failures = 3
    r.aggregator.down = None
    r.host._step(r.session)
    assert r.session.failures == 0 and r.participants[0].phase == P.REGISTERED
    assert any("answers again after 3 failed steps" in rec.getMessage() for rec in caplog.records)


# -- the polling loop --------------------------------------------------------------------------


@dataclass
class PollingHost:
    """What the loop asks of its host: ``poll_once``, whose outcomes are scripted (None: it went well)."""

    outcomes: list[Exception | None]
    poll_seconds: float = 0.5
    waits: list[float | None] = field(default_factory=list)
    polled: threading.Event = field(default_factory=threading.Event)

    def poll_once(self, wait: float | None = None) -> None:
        self.waits.append(wait)
        self.polled.set()
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if outcome is not None:
            raise outcome


class ScriptedStop:
    """The loop's stop event, set after ``polls`` waits; each wait's timeout recorded, none slept."""

    def __init__(self, polls: int) -> None:
        self.polls = polls
        self.timeouts: list[float] = []

    def is_set(self) -> bool:
        return len(self.timeouts) >= self.polls

    def wait(self, timeout: float) -> bool:
        self.timeouts.append(timeout)
        return self.is_set()

    def set(self) -> None:
        self.polls = 0


def test_the_loop_backs_off_doubling_after_failed_polls_and_polls_at_its_rate_after_an_answer(caplog):
    """poll · 2^failures, at most 30 s (peer.discovery.poll_backoff); any poll that goes well resets it;
    a bug's traceback is logged once per streak; neither an unreachable aggregator nor a bug ends it."""
    outcomes: list[Exception | None] = [
        OutboundError(f"{URL}: ConnectionRefusedError"), HTTPRefusal(URL, 503, "busy"), AnonMLError("no"),
        None, RuntimeError("a bug"), RuntimeError("the same bug"), None,
        *[OutboundError(f"{URL}: down")] * 8,
    ]
    host = PollingHost(list(outcomes))
    worker = Worker(cast(Any, host))
    stop = ScriptedStop(len(outcomes))
    worker._stop = cast(threading.Event, stop)
    caplog.set_level(logging.WARNING, logger="anonml.peer")
    worker._loop()
    assert stop.timeouts == [1.0, 2.0, 4.0, 0.5, 1.0, 2.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert host.waits == [0.5] * len(outcomes)  # each poll waits at most one poll period for its lanes
    tracebacks = [rec for rec in caplog.records if rec.exc_info is not None]
    assert len(tracebacks) == 1 and "a bug" in str(tracebacks[0].exc_info[1])
    assert any("poll failed (3 in a row)" in rec.getMessage() for rec in caplog.records)


def test_stop_ends_the_loop_without_waiting_for_the_next_poll():
    host = PollingHost([], poll_seconds=3600.0)  # the next poll is an hour away
    worker = Worker(cast(Any, host))
    worker.start()
    wait_until(host.polled.is_set, 30, "the worker's first poll")
    worker.stop()
    assert worker._thread is not None and not worker._thread.is_alive()
    assert host.waits == [3600.0]  # it polled once, then stopped inside the hour's wait


def test_a_worker_stopped_before_it_starts_never_polls():
    """Stopping is final (a host closed before it served): a later start ends at once."""
    host = PollingHost([])
    worker = Worker(cast(Any, host))
    worker.stop()  # nothing running yet: returns at once
    worker.start()
    assert worker._thread is not None
    worker._thread.join(30)
    assert not worker._thread.is_alive() and host.waits == []


def test_a_shed_packet_is_tried_again_inside_the_send_window_never_after_it():
    from peer.first_hop import LAST_TRY_SECONDS, send_retry_at

    shed = HTTPRefusal("http://relay", 503, "overloaded; try again in 2 s", retry_after=2.0)
    # Time enough: it waits what the relay asked (and some jitter), never less.
    at = send_retry_at(100.0, 110.0, 0, shed)
    assert at is not None and 102.0 <= at < 110.0
    # Two seconds would pass the window's end: a last try halfway to it rather than giving up.
    assert send_retry_at(100.0, 101.5, 0, shed) == pytest.approx(100.75)
    tries, now = 0, 100.0
    while (at := send_retry_at(now, 101.5, tries, shed)) is not None:  # shed every time
        assert now < at < 101.5
        now, tries = at, tries + 1
    assert 101.5 - now <= LAST_TRY_SECONDS and tries <= 2  # halving stops: a bounded number of tries
    # A first hop that is down (no Retry-After) keeps its backoff; past the end it is given up.
    down = OutboundError("http://relay: connection refused")
    assert send_retry_at(100.0, 110.0, 0, down) == pytest.approx(100.25)
    assert send_retry_at(100.0, 100.2, 0, down) is None
