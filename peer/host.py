"""One process hosting one or many peer identities, each with its own keys, store and ledger.

A real peer runs one identity (:func:`peer.app.create_daemon`); a simulation
runs hundreds in one process. Either way there is one relay
(:class:`~peer.relay.RelayService`, routing by node id), one dispatcher for
timed sends, one :class:`~peer.db.PeerDB`, and one worker that polls the
aggregators on behalf of every identity. Identities never share secrets:
each :class:`~peer.participant.PeerNode` signs, blinds, perturbs and records
its releases on its own.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from anonml.errors import AnonMLError
from anonml.protocol import AdmissionCredential, PeerStatus, Problem, RosterWitness
from peer.client import AggregatorClient
from peer.db import PeerDB
from peer.discovery import AggregatorBackoff, discover
from peer.dispatch import Dispatcher, Lanes
from peer.narration import news
from peer.participant import Participant, PeerNode
from peer.phases import TERMINAL
from peer.policy import Decision, PeerPolicy, evaluate_problem, load_plugins
from peer.reachability import CHECK_TTL_SECONDS, ProbeChallenges, Reachability, check_reachability
from peer.records import committed_epsilon
from peer.relay import RelayService
from peer.worker import ProblemSession, Worker

__all__ = ["PeerHost"]

log = logging.getLogger("anonml.peer")


class PeerHost:
    """The identities of this process and everything they share (module docstring).

    Parameters
    ----------
    nodes : list of PeerNode
    db : PeerDB
    policy : PeerPolicy
        Its ``lifetime_epsilon_cap`` is stored in each identity's ledger here, which then
        refuses any release past it (:meth:`~anonml.privacy.PrivacyLedger.set_lifetime_cap`):
        the cap holds whether the host comes from ``anonml peer start``,
        :func:`peer.app.create_daemon`, :func:`peer.app.create_app` or a test.
    aggregators : list of str
        Aggregator base URLs to poll.
    relay_base : str, optional
        Base URL of this process's relay (set once the server is listening).
    roster_comparisons : int
        Members each identity compares the roster fingerprint with.
    credentials : sequence of AdmissionCredential
        Admission credentials of the hosted identities (each picks its own).
    poll_seconds : float
    workers : int
        Threads for per-identity steps and for timed sends.
    rng : numpy Generator, optional
        Relay release times (None: OS CSPRNG).
    notify : callable, optional
        Told, in one line of plain text each, what the identities do: joined,
        refused and why, registered, answered, reported, stopped and why,
        model downloaded (``anonml peer start`` prints them on stderr). Text
        in them may come from the aggregator: the sink must escape it.
    """

    def __init__(
        self,
        nodes: list[PeerNode],
        db: PeerDB,
        policy: PeerPolicy,
        aggregators: list[str],
        *,
        relay_base: str | None = None,
        roster_comparisons: int = 2,
        credentials: Sequence[AdmissionCredential] = (),
        poll_seconds: float = 1.0,
        workers: int = 8,
        rng: np.random.Generator | None = None,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self.nodes = {node.node_id: node for node in nodes}
        for node in nodes:  # the ledger refuses any release past it, however this host was built
            node.ledger.set_lifetime_cap(node.fingerprint, policy.lifetime_epsilon_cap)
        self.notify = notify
        self._told: dict[tuple[str, str], str] = {}
        self.db = db
        self.policy = policy
        self.aggregators = list(aggregators)
        self.relay_base = relay_base
        self.roster_comparisons = roster_comparisons
        self.credentials = tuple(credentials)
        self.poll_seconds = poll_seconds
        self.dispatcher = Dispatcher(workers=max(4, workers * 2))
        self.relay = RelayService(
            self.dispatcher, rng, allow_loopback_http=policy.allow_loopback_http, db=db
        )
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="peer-step")
        self.lanes = Lanes(workers=max(4, workers * 2), name="peer-lane")
        self.sessions: dict[str, ProblemSession] = {}
        self.worker = Worker(self)
        self._witnesses: dict[tuple[bytes, str], RosterWitness] = {}
        self._lock = threading.Lock()
        # decide() and the pick-up of manual accepts, one at a time: a decide() from another thread
        # (a test, an embedding program) must not race the worker into a second participation.
        self._deciding = threading.Lock()
        self.counters: Counter[str] = Counter()
        self._backoff = AggregatorBackoff(poll_seconds)
        self.challenges = ProbeChallenges()  # the aggregators' probes of this host's relay URL
        self.reachability: dict[str, Reachability] = {}  # aggregator URL -> its latest verdict

    def sole_node(self) -> PeerNode:
        """The one identity of a person's own daemon (:func:`peer.app.create_daemon`); error if several."""
        if len(self.nodes) != 1:
            raise AnonMLError(f"this host runs {len(self.nodes)} identities, not one person's")
        return next(iter(self.nodes.values()))

    def count(self, what: str, n: int = 1) -> None:
        with self._lock:
            self.counters[what] += n

    # -- witnesses ----------------------------------------------------------------
    def publish_witness(self, node_id: bytes, witness: RosterWitness) -> None:
        with self._lock:
            self._witnesses[(node_id, witness.problem_id)] = witness

    def witness(self, node_id: bytes, problem_id: str) -> RosterWitness | None:
        with self._lock:
            return self._witnesses.get((node_id, problem_id))

    def _participant_settings(self) -> dict[str, Any]:
        """What every Participant of this host takes from its settings and policy."""
        return {
            "roster_comparisons": self.roster_comparisons,
            "credentials": self.credentials,
        }

    # -- proposals and decisions --------------------------------------------------
    def committed(self, node: PeerNode) -> float:
        """ε this identity agreed to or spent, over every problem (:func:`committed_epsilon`)."""
        return committed_epsilon(self.db, node.ledger, node.fingerprint)

    def decide(self, problem: Problem, *, manual: bool = False) -> dict[str, Decision]:
        """Apply the policy for every identity; accepted ones start participating.

        Plugins are loaded once and shared; each identity then checks its own
        lifetime budget (in parallel). Its example is computed only after its
        registration is sent (:meth:`~peer.participant.Participant.prepare`), so
        when it registers does not depend on its data. Whether an identity joins
        depends on the policy only, never on its example: one whose example
        cannot be computed joins and sends stand-ins.
        """
        with self._deciding:
            return self._decide(problem, manual)

    def _decide(self, problem: Problem, manual: bool) -> dict[str, Decision]:
        row = self.db.proposal(problem.id)
        if row is None:
            raise AnonMLError(f"problem {problem.id} has not been seen by this peer")
        client = AggregatorClient(row.aggregator_url)
        try:
            plugins = load_plugins(problem)
        except AnonMLError:
            plugins = None  # evaluate_problem gives each identity the reason
        relay_lock = threading.Lock()
        relay_choice: list[tuple[PeerPolicy, str | None]] = []

        def relay_policy() -> tuple[PeerPolicy, str | None]:
            """:meth:`_relay_policy`, asked once, and only if some identity would take part."""
            with relay_lock:
                if not relay_choice:
                    relay_choice.append(self._relay_policy(problem, client))
                return relay_choice[0]

        def one(node: PeerNode) -> tuple[PeerNode, Decision, Participant | None] | None:
            previous = self.db.decision(problem.id, node.fingerprint)
            if previous is not None and previous.verdict == "accept":
                return None  # already taking part
            if previous is not None and previous.verdict == "refuse" and not manual:
                return None  # refused before; only the user can change that
            decision = evaluate_problem(
                problem, self.policy, self.committed(node), manual=manual, plugins=plugins
            )
            policy = self.policy
            if decision.verdict != "refuse":
                policy, unreachable = relay_policy()
                if unreachable is not None:
                    decision = Decision("refuse", unreachable)
            participant = None
            if decision.accept:  # on the policy alone: prepare() never refuses (stand-ins instead)
                participant = self._participant(node, problem, client, policy)
                participant.prepare(plugins)
            self.db.decide(
                problem.id, node.fingerprint, decision.verdict, decision.reason, problem.draft.epsilon
            )
            if participant is not None:
                participant.save()
            return node, decision, participant

        decisions: dict[str, Decision] = {}
        accepted: list[Participant] = []
        for result in self.pool.map(one, list(self.nodes.values())):
            if result is None:
                continue
            node, decision, participant = result
            decisions[node.fingerprint] = decision
            what = {"accept": "joined", "refuse": "refused", "ask": "asks you about"}[decision.verdict]
            if decision.accept and participant is not None and participant.relays != self.policy.relay:
                what += " sender-only (its relay cannot be reached from the aggregator)"
            self._tell(node, problem, f"{what} “{problem.draft.title}” (ε = {problem.draft.epsilon:g})"
                       + ("" if decision.accept else f": {decision.reason}"))
            if participant is not None:
                accepted.append(participant)
        if accepted:
            self._join(problem, client, accepted)
        return decisions

    def _relay_policy(self, problem: Problem, client: AggregatorClient) -> tuple[PeerPolicy, str | None]:
        """The policy this host's identities join ``problem`` under, and why they refuse it (else None).

        A host that relays and checks its reachability (``check_reachability``)
        asks the problem's aggregator whether its relay URL can be reached
        (:mod:`peer.reachability`; one verdict per aggregator for
        :data:`~peer.reachability.CHECK_TTL_SECONDS`). Found unreachable, its
        identities join sender-only (``relay = False``) or, when the policy says
        ``unreachable = "refuse"`` or the host is an always-on relay, refuse
        with the aggregator's reason. Any other verdict leaves the policy as it is.
        """
        policy = self.policy
        if not (policy.relay and policy.check_reachability and self.relay_base):
            return policy, None
        verdict = self.reachability.get(client.base_url)
        if verdict is None or time.time() - verdict.checked_at > CHECK_TTL_SECONDS:
            node = next(iter(self.nodes.values()))
            relay_url = f"{self.relay_base.rstrip('/')}/relay/{node.node_id.hex()}"
            verdict = check_reachability(node, relay_url, bytes(problem.aggregator), client, self.challenges)
            if verdict.reachable is not None:  # "could not tell" is asked again next time
                self.reachability[client.base_url] = verdict
            level = logging.WARNING if verdict.reachable is not True else logging.INFO
            log.log(level, "relay %s seen from %s: %s (%s)", relay_url, client.base_url, verdict.word,
                    verdict.reason)
            self.count(f"reachability checks: {verdict.word}")
        if not verdict.unreachable:
            return policy, None
        why = f"this peer's relay {verdict.relay_url} cannot be reached from the aggregator: {verdict.reason}"
        if policy.relay_only:
            return policy, f"{why}; an always-on relay that nobody reaches cannot take part"
        if policy.unreachable == "refuse":
            return policy, f"{why}; the policy refuses rather than register sender-only"
        log.warning("%s: its identities register sender-only (%s)", problem.id, why)
        return policy.model_copy(update={"relay": False}), None

    def _participant(
        self, node: PeerNode, problem: Problem, client: AggregatorClient, policy: PeerPolicy | None = None
    ) -> Participant:
        return Participant(
            node,
            problem,
            client,
            self.relay,
            self.relay_base or "",
            policy=policy or self.policy,
            db=self.db,
            **self._participant_settings(),
        )

    def _join(self, problem: Problem, client: AggregatorClient, participants: list[Participant]) -> None:
        with self._lock:
            session = self.sessions.get(problem.id)
            if session is None:
                self.sessions[problem.id] = ProblemSession(self, problem, client, participants)
            else:
                session.participants.extend(participants)

    def discover(self) -> list[Problem]:
        """Record proposals open for registration at every aggregator; return the new ones."""
        return discover(self.db, self.aggregators, self._backoff, self.count, self.policy.aggregator_keys)

    def poll_once(self, wait: float | None = None) -> None:
        """One worker iteration: discover, decide (policy or user), step every session.

        Each aggregator's discovery and each problem's step run in a lane of
        their own (:class:`~peer.dispatch.Lanes`), so one aggregator that
        never answers holds up only its own lane. ``wait`` bounds how long
        this call waits for the lanes it started (discovery first, then the
        steps); None waits for all of them (what a direct caller expects).
        """
        end = None if wait is None else time.monotonic() + wait

        def left() -> float | None:
            return None if end is None else max(0.0, end - time.monotonic())

        self.lanes.wait(
            [self.lanes.start(f"aggregator {url}", functools.partial(self._discover_at, url))
             for url in self.aggregators if self._backoff.due(url)],
            left(),
        )  # fmt: skip
        self._pick_up_manual_accepts()
        steps = [
            self.lanes.start(f"problem {session.problem.id}", functools.partial(self._step, session))
            for session in list(self.sessions.values())
            if not session.finished and session.due()
        ]
        self.lanes.wait(steps, left())

    def _discover_at(self, url: str) -> None:
        """Discovery at one aggregator and the decisions on what it proposes (one lane)."""
        for problem in discover(self.db, [url], self._backoff, self.count, self.policy.aggregator_keys):
            self.decide(problem)

    def _step(self, session: ProblemSession) -> None:
        """One step of one problem's session (one lane)."""
        try:
            session.step()
        except AnonMLError as exc:  # unreachable (backed off, with jitter) or refusing: next poll
            self.count("poll errors")
            session.failed(exc)
        else:
            session.answered()
        self._narrate(session)

    # -- telling the person -------------------------------------------------------
    def _tell(self, node: PeerNode, problem: Problem, text: str) -> None:
        if self.notify is None:
            return
        who = f"[{node.fingerprint[:8]}] " if len(self.nodes) > 1 else ""
        self.notify(f"{who}{problem.id}: {text}")

    def _narrate(self, session: ProblemSession) -> None:
        """Tell each change of an identity's participation status, once (:func:`peer.narration.news`)."""
        if self.notify is not None:
            for node, text in news(session.problem, session.participants, self._told):
                self._tell(node, session.problem, text)

    def _pick_up_manual_accepts(self) -> None:
        """Start participations the user accepted with ``anonml peer accept`` (same state DB).

        One query per poll, returning only the accepts with no participation
        yet (:meth:`~peer.db.PeerDB.unstarted_accepts`): a poll of a host with
        thousands of identities in a long round costs neither a query nor a
        row per identity, only when something is left to start a look at each
        session's members.
        """
        with self._deciding:
            self._pick_up(self.db.unstarted_accepts())

    def _pick_up(self, accepted: dict[str, set[str]]) -> None:
        if not accepted:
            return
        members = {
            pid: {id(p.node) for p in session.participants} for pid, session in list(self.sessions.items())
        }
        for node in self.nodes.values():
            for problem_id in sorted(accepted.get(node.fingerprint, ())):
                if id(node) in members.get(problem_id, ()):
                    continue
                if self.db.participation(problem_id, node.fingerprint) is not None:
                    continue
                row = self.db.proposal(problem_id)
                if row is None:
                    continue
                problem = Problem.model_validate_json(row.problem_json)
                client = AggregatorClient(row.aggregator_url)
                policy, unreachable = self._relay_policy(problem, client)  # one check per aggregator
                if unreachable is not None:
                    self.db.decide(problem_id, node.fingerprint, "refuse", unreachable, problem.draft.epsilon)
                    self._tell(node, problem, f"refused “{problem.draft.title}”: {unreachable}")
                    continue
                participant = self._participant(node, problem, client, policy)
                participant.prepare()
                participant.save()
                self._join(problem, client, [participant])

    # -- status -------------------------------------------------------------------
    def status(self) -> PeerStatus:
        problems = {}
        for pid, session in self.sessions.items():
            states = Counter(str(p.phase) for p in session.participants)
            problems[pid] = dict(states)
        with self._lock:
            relay = dict(self.relay.counters) | {f"host {k}": v for k, v in self.counters.items()}
        return PeerStatus(identities=len(self.nodes), problems=problems, relay=relay)

    # -- restart ------------------------------------------------------------------------
    def resume(self) -> int:
        """Take up what an earlier run of this host left in its state DB; participations resumed.

        For every hosted identity: its relay's held packets are scheduled at
        their release times (:meth:`~peer.relay.RelayService.resume_held`);
        every participation not ended is rebuilt from its phase and facts
        (:meth:`~peer.participant.Participant.resume`), its unsent packets
        scheduled while the send window is open, and its problem stepped again
        by the worker (roster re-checked, round key back in the relay when the
        bins are fetched, model downloaded). A participation that ended but
        whose round key is still stored is taken up too: it relays for the
        others until ``t_r``. Nothing already recorded in the ledger is
        released again.
        """
        resumed = 0
        stated, holding = self.db.resumable()  # a fresh host of 10,000 identities: two queries, no more
        for node in self.nodes.values():
            if node.node_id.hex() in holding:
                self.relay.resume_held(node.node_id, node.vault)
            if node.fingerprint not in stated:
                continue
            for row in self.db.states(node.fingerprint):
                proposal = self.db.proposal(row.problem_id)
                if proposal is None or self._participates(node, row.problem_id):
                    continue
                problem = Problem.model_validate_json(proposal.problem_json)
                live_key = self.db.round_key(node.fingerprint, problem.round_id) is not None
                if row.phase in TERMINAL and not live_key:
                    continue
                client = AggregatorClient(proposal.aggregator_url)
                participant = self._participant(node, problem, client)
                if row.phase not in TERMINAL:
                    participant.prepare()
                pending = participant.resume(row)
                self._join(problem, client, [participant])
                self.sessions[problem.id].schedule(participant, pending)
                resumed += 1
        self.count("participations resumed", resumed)
        return resumed

    def _participates(self, node: PeerNode, problem_id: str) -> bool:
        session = self.sessions.get(problem_id)
        return session is not None and any(p.node is node for p in session.participants)

    def start(self) -> None:
        self.resume()
        self.worker.start()

    def close(self) -> None:
        self.worker.stop()
        self.lanes.close()
        self.dispatcher.close()
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.relay.keep_alive.close()
