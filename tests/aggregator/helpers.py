"""Test-side peers that speak the wire protocol directly (no peer daemon), and problem drafts.

They let a test play honest and dishonest peers against a real aggregator:
sign (or forge), register, answer, request tokens, and build intake deliveries;
the steps of a round a test drives (close registration, the median search, send
every report) and the signed documents unit tests build without a server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import requests

from aggregator.settings import AggregatorSettings
from anonml.crypto import (
    Identity,
    PublicIdentity,
    Redemption,
    RoundRelayKey,
    Token,
    finalize_tokens,
    seal_payload,
)
from anonml.learn import Binning, commit_seed
from anonml.learn.histograms import domain_size
from anonml.model import FeatureKind, FeatureSpec
from anonml.plugins import PluginRef
from anonml.privacy import best_mechanism
from anonml.protocol import (
    Assignment,
    Bins,
    IntakeDelivery,
    MedianAnswer,
    MedianQuery,
    MedianSettings,
    PrivateReport,
    Problem,
    ProblemDraft,
    ProblemStatus,
    Registration,
    Roster,
    RosterEntry,
    Schedule,
    TokenBatchResponse,
    pack_bits,
    report_slot,
    sign_message,
    token_batch_request,
)
from tests.databases import table_rows
from tests.waiting import wait_until

TOKEN = "test-admin-token"
#: The intake grace of the ``long_grace_aggregator`` fixture: far longer than any wait a test allows.
LONG_GRACE_SECONDS = 600.0


def aggregator_settings(root: Path, **overrides: Any) -> AggregatorSettings:
    """Settings of a test aggregator: SQLite and identity under ``root``, the test admin token,
    a fast tick, loopback relays allowed; ``overrides`` change any field."""
    values: dict[str, Any] = {
        "db_url": f"sqlite:///{root / 'aggregator.db'}",
        "identity_file": root / "aggregator-identity.json",
        "admin_token": TOKEN,
        "tick_seconds": 0.05,
        "intake_grace_seconds": 0.5,
        "allow_loopback_http": True,
    }
    return AggregatorSettings(**{**values, **overrides})


#: The columns of the aggregator's ``reports`` table: the report and a random id, nothing that
#: joins a report to a peer, a token or the order of arrival.
REPORT_COLUMNS = ["id", "problem_id", "partition", "subset", "mechanism_json", "bits"]

JSON = {"content-type": "application/json"}
ADMIN = {"Authorization": f"Bearer {TOKEN}", **JSON}


def draft(
    *,
    n_numeric: int = 2,
    pool_fraction: float = 0.0,
    kp: int = 2,
    kh: int = 1,
    min_peers: int = 4,
    epsilon: float = 2.0,
    registration_seconds: float = 60.0,
    report_delay: float = 0.2,
    send_window: float = 4.0,
    release_window: float = 1.0,
    median_step: float = 2.0,
    steps: int = 2,
) -> ProblemDraft:
    """A small problem: ``n_numeric`` numeric features on [0, 10] and one boolean feature."""
    features = [FeatureSpec(name=f"x{i}", low=0.0, high=10.0) for i in range(n_numeric)]
    features.append(FeatureSpec(name="flag", kind=FeatureKind.BOOL))
    return ProblemDraft(
        title="test problem",
        instancer=PluginRef(name="user_window"),
        featurizer=PluginRef(name="mooc_engagement"),
        features=tuple(features),
        epsilon=epsilon,
        kp=kp,
        kh=kh,
        ks=1,
        median=MedianSettings(pool_fraction=pool_fraction, steps=steps),
        schedule=Schedule(
            registration_deadline=datetime.now(UTC) + timedelta(seconds=registration_seconds),
            roster_seconds=0.0,
            median_step_seconds=median_step,
            report_delay_seconds=report_delay,
            send_window_seconds=send_window,
            release_window_seconds=release_window,
        ),
        min_peers=min_peers,
    )


def signed_problem(
    d: ProblemDraft,
    aggregator: Identity,
    *,
    pid: str,
    seed: bytes = bytes(32),
    round_id: int = 1,
    created_at: datetime | None = None,
) -> Problem:
    """``d`` as problem ``pid`` of ``aggregator``, committing to ``seed``, signed (no server involved)."""
    return sign_message(
        Problem(
            id=pid,
            draft=d,
            created_at=created_at if created_at is not None else datetime.now(UTC),
            seed_commitment=commit_seed(seed),
            aggregator=bytes(aggregator.public),
            round_id=round_id,
            signature=bytes(64),
        ),
        aggregator,
    )


def unsigned_roster_entries(
    members: list[Identity], round_id: int, relay_url: str = "http://127.0.0.1:1/relay/x"
) -> tuple[RosterEntry, ...]:
    """Roster entries of ``members`` with real relay certificates for ``round_id`` and zero
    registration signatures (for code that reads no registration)."""
    return tuple(
        RosterEntry(
            identity=bytes(m.public),
            relay_url=relay_url,
            relay_certificate=bytes(m.new_round_relay_key(round_id)[1]),
            registration_signature=bytes(64),
        )
        for m in members
    )


def member_registration(
    member: Identity, problem: Problem, *, relays: bool = True, round_id: int | None = None
) -> Registration:
    """``member``'s own signed registration for ``problem``: relaying (a loopback relay URL and a fresh
    relay certificate for ``round_id``, the problem's round by default) or sender-only (neither)."""
    url = f"http://127.0.0.1:9/relay/{member.public.node_id.hex()}" if relays else None
    rid = problem.round_id if round_id is None else round_id
    cert = bytes(member.new_round_relay_key(rid)[1]) if relays else None
    unsigned = Registration(
        problem_id=problem.id,
        aggregator=problem.aggregator,
        identity=bytes(member.public),
        relay_url=url,
        relay_certificate=cert,
        signature=bytes(64),
    )
    return sign_message(unsigned, member)


def roster_entry(registration: Registration, **changes: Any) -> RosterEntry:
    """The roster entry of ``registration`` as the aggregator lists it; ``changes`` forge fields."""
    fields = {
        "identity": registration.identity,
        "relay_url": registration.relay_url,
        "relay_certificate": registration.relay_certificate,
        "registration_signature": registration.signature,
    } | changes
    return RosterEntry(**fields)


def roster_document(
    pid: str, entries: tuple[RosterEntry, ...], *, signer: Identity | None = None, **fields: Any
) -> Roster:
    """The roster of problem ``pid`` listing ``entries``, signed by ``signer`` or with a zero
    signature for code that reads none (no server involved).

    ``fields`` set the others: round 1, zero seed and token key, no median pool unless given,
    the signer as the aggregator it names.
    """
    values = {
        "round_id": 1,
        "seed": bytes(32),
        "token_key": bytes(32),
        "median_pool_size": 0,
        "aggregator": bytes(signer.public) if signer is not None else bytes(64),
    } | fields
    roster = Roster(problem_id=pid, entries=entries, signature=bytes(64), **values)
    return roster if signer is None else sign_message(roster, signer)


def bins_document(
    pid: str,
    edges: tuple[tuple[float, ...], ...],
    *,
    t_s: float = 0.0,
    delta: float = 1.0,
    t_r: float = 2.0,
    signer: Identity | None = None,
) -> Bins:
    """The bins of problem ``pid`` (one slot per peer, the report round at ``t_s``, ``t_s + delta``,
    ``t_r``), signed by ``signer`` or with a zero signature (no server involved)."""
    bins = Bins(
        problem_id=pid, edges=edges, t_s=t_s, delta=delta, t_r=t_r, slots_per_peer=1, signature=bytes(64)
    )
    return bins if signer is None else sign_message(bins, signer)


def propose(url: str, d: ProblemDraft) -> Problem:
    response = requests.post(f"{url}/problems", data=d.model_dump_json(), headers=ADMIN, timeout=30)
    assert response.status_code == 201, response.text
    problem = Problem.model_validate_json(response.content)
    PROPOSED[problem.id] = problem
    return problem


def status(url: str, pid: str) -> ProblemStatus:
    return ProblemStatus.model_validate_json(requests.get(f"{url}/problems/{pid}/status", timeout=30).content)


def wait_phase(url: str, pid: str, phases: tuple[str, ...], timeout: float = 120.0) -> ProblemStatus:
    """``pid``'s status once its phase is one of ``phases`` (fails saying where it is instead).

    A deadline, never a wait: generous (at load ~24 one registration took over 30 s to close).
    """
    seen: list[ProblemStatus] = []

    def reached() -> ProblemStatus | None:
        seen[:] = [status(url, pid)]
        return seen[0] if seen[0].phase in phases else None

    return wait_until(reached, timeout, lambda: f"{phases}: still in {seen[0].phase}: {seen[0].message}")


def register_and_close(
    url: str, problem: Problem, n: int = 4, phases: tuple[str, ...] = (), timeout: float = 120.0
) -> list[WirePeer]:
    """``n`` fresh peers registered for ``problem`` (each 201), registration closed (200).

    With ``phases``, waits until the problem reaches one of them (:func:`wait_phase`).
    """
    peers = [WirePeer() for _ in range(n)]
    for p in peers:
        assert p.register(url, problem).status_code == 201
    close_registration(url, problem.id)
    if phases:
        wait_phase(url, problem.id, phases, timeout)
    return peers


def close_registration(url: str, pid: str, timeout: float = 30.0, *, or_deadline: bool = False) -> None:
    """Close ``pid``'s registration as the admin (200): the roster is formed from who registered.

    ``or_deadline``: for a test that waited for its registrations longer than the draft's
    registration window, the deadline may have closed it first on a loaded machine; then the
    answer is 409 and the problem has left registration. Any other answer fails here, with its
    body, instead of as a later timeout.
    """
    response = requests.post(f"{url}/problems/{pid}/close", headers=ADMIN, timeout=timeout)
    if or_deadline and response.status_code == 409:
        assert status(url, pid).phase != "registration", response.text
        return
    assert response.status_code == 200, response.text


def median_round(
    url: str, *, median_step: float, quorum: float | None = None, roster_seconds: float = 0.0
) -> tuple[Problem, list[WirePeer]]:
    """A problem in ``medians`` and its 20 registered peers in roster order (:func:`in_roster_order`).

    One numeric feature, half of the peers in the median pool: two search steps of 5 peers
    each, a step lasting at most ``median_step`` seconds (or until ``quorum`` of its group answered),
    the first also the ``roster_seconds`` (both raised to the round's floors).
    """
    d = draft(
        n_numeric=1, kp=1, pool_fraction=0.5, min_peers=4, epsilon=4.0, steps=2, median_step=median_step
    )
    d = d.model_copy(update={"schedule": d.schedule.model_copy(update={"roster_seconds": roster_seconds})})
    if quorum is not None:
        d = d.model_copy(update={"median": d.median.model_copy(update={"quorum": quorum})})
    problem = propose(url, d)
    peers = register_and_close(url, problem, 20, ("medians",))
    return problem, in_roster_order(url, problem.id, peers)


def in_roster_order(url: str, pid: str, peers: list[WirePeer]) -> list[WirePeer]:
    """``peers`` as the published roster orders them: item ``i`` is the member index ``i`` of a query."""
    by_key = {p.public: p for p in peers}
    return [by_key[bytes(e.identity)] for e in roster_of(url, pid).entries]


def median_queries(url: str, pid: str, *, asked: bool = False) -> list[MedianQuery]:
    """The median queries open now (``asked``: every one asked so far, closed ones too)."""
    response = requests.get(f"{url}/problems/{pid}/medians{'/asked' if asked else ''}", timeout=30)
    assert response.status_code == 200, response.text
    return [MedianQuery.model_validate(q) for q in response.json()]


def wait_median_query(url: str, pid: str, step: int, timeout: float = 60.0) -> MedianQuery:
    """The open query of search ``step``, once the aggregator has asked it."""
    found = wait_until(lambda: [q for q in median_queries(url, pid) if q.step == step], timeout,
                       lambda: f"an open query for step {step}: {status(url, pid)}")
    return found[0]


def post(url: str, body, headers: dict | None = None) -> requests.Response:
    data = body if isinstance(body, bytes | str) else body.model_dump_json()
    return requests.post(url, data=data, headers=headers or JSON, timeout=30)


@dataclass
class WirePeer:
    """A peer played by the test: its identity and what it got from the aggregator."""

    identity: Identity = field(default_factory=Identity.generate)
    key: RoundRelayKey | None = None
    index: int | None = None
    assignment: Assignment | None = None

    @property
    def public(self) -> bytes:
        return bytes(self.identity.public)

    def registration(
        self,
        problem: Problem,
        relay_url: str | None = None,
        signer: Identity | None = None,
        round_id: int | None = None,
    ) -> Registration:
        self.key, cert = self.identity.new_round_relay_key(problem.round_id if round_id is None else round_id)
        unsigned = Registration(
            problem_id=problem.id,
            aggregator=problem.aggregator,
            identity=self.public,
            relay_url=relay_url or f"http://127.0.0.1:9/relay/{self.identity.public.node_id.hex()}",
            relay_certificate=bytes(cert),
            signature=bytes(64),
        )
        return sign_message(unsigned, signer or self.identity)

    def register(self, url: str, problem: Problem) -> requests.Response:
        return post(f"{url}/problems/{problem.id}/registrations", self.registration(problem))

    def token_batch(
        self, problem: Problem, roster: Roster, slots: list[bytes], signer: Identity | None = None
    ):
        return token_batch_request(problem.id, self.identity, bytes(roster.token_key), slots, signer=signer)

    def tokens(self, url: str, problem: Problem, roster: Roster, slots: list[bytes]) -> list[Token]:
        batch, pending = self.token_batch(problem, roster, slots)
        response = post(f"{url}/problems/{problem.id}/tokens", batch)
        assert response.status_code == 200, response.text
        answer = TokenBatchResponse.model_validate_json(response.content)
        return finalize_tokens(pending, answer.wire())

    def answer(
        self, problem: Problem, feature: int, step: int, bit: bool, signer: Identity | None = None
    ) -> MedianAnswer:
        unsigned = MedianAnswer(
            problem_id=problem.id,
            feature=feature,
            step=step,
            identity=self.public,
            bit=bit,
            signature=bytes(64),
        )
        return sign_message(unsigned, signer or self.identity)


def roster_of(url: str, pid: str) -> Roster:
    response = requests.get(f"{url}/problems/{pid}/roster", timeout=30)
    assert response.status_code == 200, response.text
    return Roster.model_validate_json(response.content)


def bins_of(url: str, pid: str) -> Bins:
    response = requests.get(f"{url}/problems/{pid}/bins", timeout=30)
    assert response.status_code == 200, response.text
    return Bins.model_validate_json(response.content)


def assignment_of(url: str, pid: str, peer: WirePeer) -> Assignment:
    fingerprint = peer.identity.fingerprint.hex()
    response = requests.get(f"{url}/problems/{pid}/assignments/{fingerprint}", timeout=30)
    assert response.status_code == 200, response.text
    return Assignment.model_validate_json(response.content)


def report_for(
    problem: Problem,
    bins: Bins,
    assignment: Assignment,
    value: np.ndarray,
    label: int,
    subset: int = 0,
    rng: np.random.Generator | None = None,
) -> PrivateReport:
    """An honest report of ``value`` (raw features) for the assignment's ``subset``."""
    d = problem.draft
    binning = Binning.from_published(d.features, bins.edges)
    features = assignment.subsets[subset]
    shape = tuple(binning.n_bins[f] for f in features)
    codes = binning.transform(np.asarray(value, dtype=float)[None, :])[0]
    index = 0
    for f, size in zip(features, shape, strict=True):
        index = index * size + int(codes[f])
    index = index * 2 + int(label)
    mechanism = best_mechanism(d.report_epsilon, domain_size(shape), 10)
    bits = mechanism.perturb(np.asarray([index]), rng)[0]
    return PrivateReport(
        problem_id=problem.id,
        partition=assignment.index,
        subset=subset,
        mechanism=mechanism.descriptor(),
        bits=pack_bits(bits),
    )


#: Every problem :func:`propose` published, by id: :func:`delivery` seals to its aggregator.
PROPOSED: dict[str, Problem] = {}


def sealed_delivery(
    problem: Problem, redemption: Redemption | None, report: bytes | None, *, round_id: int | None = None
) -> IntakeDelivery:
    """What an exit relay forwards for ``problem``: ``(redemption, report)`` (cover when None) sealed
    to the X25519 half of the Problem's aggregator identity, as a packet's last hop peels it out."""
    rid = problem.round_id if round_id is None else round_id
    key = PublicIdentity.from_bytes(bytes(problem.aggregator)).relay_key
    return IntakeDelivery(version=2, round_id=rid, sealed=seal_payload(key, rid, redemption, report))


def delivery(token: Token, report: PrivateReport, problem: Problem | None = None) -> IntakeDelivery:
    """``report`` redeeming ``token``, sealed for ``problem`` (default: the problem the report names)."""
    data = report.to_bytes()
    return sealed_delivery(problem or PROPOSED[report.problem_id], token.redeem(data), data)


def slots(problem: Problem, partition: int = 0) -> list[bytes]:
    return [report_slot(problem.id, partition, k) for k in range(problem.draft.kh)]


def random_deliveries(
    problem: Problem,
    bins: Bins,
    assignment: Assignment,
    tokens: list[Token],
    i: int,
    rng: np.random.Generator,
) -> list[IntakeDelivery]:
    """One delivery per token (its subset = its place): peer ``i``'s honest report of a random point.

    The numeric features (all but the last, :func:`draft`'s boolean) are uniform on [0, 10]; the
    boolean feature and the label are ``i % 2``.
    """
    deliveries = []
    numeric = len(problem.draft.features) - 1
    for subset, token in enumerate(tokens):
        x = np.array([*rng.uniform(0, 10, numeric), i % 2])
        deliveries.append(delivery(token, report_for(problem, bins, assignment, x, i % 2, subset, rng)))
    return deliveries


def send_reports(url: str, problem: Problem, peers: list[WirePeer], rng: np.random.Generator) -> int:
    """Every slot's report of each of ``peers`` (:func:`random_deliveries`) through ``url``'s intake,
    after fetching its assignment and tokens; how many the intake accepted (201)."""
    roster, bins = roster_of(url, problem.id), bins_of(url, problem.id)
    accepted = 0
    for i, peer in enumerate(peers):
        peer.assignment = assignment_of(url, problem.id, peer)
        tokens = peer.tokens(url, problem, roster, slots(problem, peer.assignment.index))
        for d in random_deliveries(problem, bins, peer.assignment, tokens, i, rng):
            accepted += post(f"{url}/intake", d).status_code == 201
    return accepted


@dataclass
class OpenRound:
    """A problem whose registration a test closed, with its roster, bins and test-side peers."""

    url: str
    problem: Problem
    roster: Roster
    bins: Bins | None  # None while the medians still run
    peers: list[WirePeer]
    db_url: str

    @classmethod
    def open(cls, aggregator: Any, d: ProblemDraft, n: int, phase: str = "reporting") -> OpenRound:
        """Propose ``d`` on the running ``aggregator``, register ``n`` peers, close, wait for ``phase``.

        In ``reporting`` every peer's assignment is fetched and the bins are read.
        """
        url = aggregator.url
        problem = propose(url, d)
        peers = register_and_close(url, problem, n, (phase,))
        bins = None
        if phase == "reporting":
            for p in peers:
                p.assignment = assignment_of(url, problem.id, p)
            bins = bins_of(url, problem.id)
        return cls(url, problem, roster_of(url, problem.id), bins, peers, aggregator.settings.db_url)

    def rows(self, sql: str) -> list[tuple]:
        return table_rows(self.db_url, sql)
