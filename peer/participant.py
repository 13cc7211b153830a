"""One identity's side of one problem: register, check, answer, report, predict.

The steps, each checked before anything is released (DESIGN §7; the
aggregator is treated as an adversary):

1. **Register** with a fresh round relay key certified by the identity and its
   relay URL — or, for a sender-only peer (policy ``relay = False``: it accepts
   no inbound connection), with neither; its routes, median answer, reports and
   model then go over outbound connections only. The
   local example is computed only afterwards (:meth:`Participant.compute_example`,
   in the background), so when the registration leaves does not depend on the
   person's data.
2. **Roster**: the peer's anonymity floors
   (:func:`peer.policy.check_roster_floors`: roster size, smallest
   partition, enough relaying members for ``hops`` distinct relays, the
   chance of a route hostile end to end), the common
   checks of :class:`~peer.roster.RosterView`, then its own entry
   (identity, relay URL, certificate as registered), the seed against
   the commitment published with the proposal, and the aggregator's
   signed :class:`~anonml.protocol.Assignment` re-derived with
   :func:`anonml.learn.partition.verify_assignment` with the beacon of the
   witnesses' cosignatures on its own roster transcript
   (:func:`peer.transcript.verify_bundle`: every declared witness, and
   ``witness_threshold`` trusted ones, co-signed exactly this transcript). It
   then publishes a signed :class:`~anonml.protocol.RosterWitness` through
   its relay and compares the fingerprint with ``roster_comparisons`` other
   relaying members through theirs (a sender-only identity publishes none
   and asks relaying members only): any mismatch aborts (the aggregator showed peers
   different rosters, e.g. different token keys).
3. **Median pool**: answers the one signed query that names it, by binary
   randomised response with the proposal's median ε, recorded in its
   :class:`~anonml.privacy.PrivacyLedger` before it is sent.
4. **Tokens and routes**, as soon as the roster is confirmed: a report peer
   takes one token per slot (one signed batch; the DLEQ proofs are checked
   against the pinned token key), and every peer picks its routes and checks
   their relay certificates.
5. **Report round** (signed bins, co-signed like the roster: a peer shown
   other bins, another schedule or another Problem copy than the witnesses
   saw stops here): bins its own example with the published edges; a report peer perturbs each of its k_h
   reports with the least-error mechanism at ε/k_h (all k_h recorded in the
   ledger at once, before anything is sent, refused past the cap) and wraps
   each with its token in an onion packet over ``hops`` distinct other
   members chosen uniformly — ``r`` packets per report, one per route, the
   routes of a report pairwise disjoint (redundant delivery:
   :func:`~anonml.protocol.route_count` routes, identical report bytes and
   one token, so the intake keeps one copy). A median peer builds ``r·k_h``
   cover packets the same way. Every peer sends exactly ``r·slots_per_peer``
   packets at independent uniform times in ``(t_s, t_s + δ)``.
6. **Model**: downloads the signed model, checks the signature with the pinned
   key, and predicts for itself.

Failures of the aggregator's promises abort the participation with a
reason (stored in :class:`~peer.db.PeerDB`); nothing is released after an abort.

State. A participation is always in one :class:`~peer.phases.ParticipationPhase`
and holds one record per phase it passed (:mod:`peer.phases`); every move goes
through :meth:`Participant._move`, which refuses an illegal one and persists
the phase and its facts (secrets sealed, :mod:`peer.vault`) before the new
phase releases anything. A peer killed at any point and restarted
(:meth:`Participant.resume`) therefore never releases twice: a median answer is
marked ``answered`` before it is recorded and sent, and reports are recorded in
the ledger before they are built (a rebuild after a crash is refused by the
ledger's cap); the packets built are kept, and those not yet sent go when
their time comes if the send window is still open.
Failures on the peer's own data never do: a report or median answer that
cannot be computed is replaced by a stand-in (a uniform value through the same
mechanism, recorded like any release), so an identity that joined always
sends exactly its slot count; why is logged locally only.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any, Generic, TypeVar, overload

import nacl.utils
import numpy as np

from anonml.addresses import connect_check
from anonml.crypto import (
    CryptoError,
    Hop,
    Identity,
    PublicIdentity,
    Redemption,
    RelayKeyCertificate,
    RoundRelayKey,
    SphinxRelay,
    Token,
    WindowSchedule,
    build_cover_packet,
    build_packet,
    send_time,
)
from anonml.errors import AnonMLError, BudgetExceeded, ProtocolError
from anonml.learn import AnonMLClassifier, PeerAssignment, roster_plan, verify_assignment
from anonml.outbound import RefusedAddress, post
from anonml.plugins import Featurizer, Instancer
from anonml.privacy import BinaryRandomizedResponse, PrivacyLedger
from anonml.protocol import (
    AdmissionCredential,
    Assignment,
    Bins,
    CosignatureBundle,
    MedianAnswer,
    MedianQuery,
    ModelDocument,
    Problem,
    Registration,
    ReportReceipts,
    RosterWitness,
    check_relay_address,
    check_relay_url,
    route_count,
    sign_message,
    transcript_hash,
    verify_message,
)
from anonml.randomness import resolve_rng
from anonml.store import EventStore
from peer.client import AggregatorClient, HTTPRefusal, fetch_witness, transient, with_retries
from peer.db import ParticipationRow, PeerDB
from peer.features import LocalExample, invalid_features, local_example, predict_example
from peer.phases import (
    TERMINAL,
    IllegalTransition,
    Outcome,
    ParticipationPhase,
    Preparation,
    RelayKeys,
    RosterFacts,
    check_transition,
)
from peer.policy import PeerPolicy, check_roster_floors
from peer.relay import REFUSED_ADDRESS, RelayRound, RelayService, StoredReplayCache, already_processed
from peer.relayauth import (
    RELAY_POST_TYPE,
    identity_post_key,
    member_quota,
    post_key,
    relay_node_of,
    seal_post,
)
from peer.reports import choose_path, choose_routes, fetch_tokens, make_reports
from peer.roster import RosterView
from peer.transcript import credential_for, verify_bundle
from peer.vault import Vault

__all__ = ["PeerNode", "Participant", "Aborted"]

P = ParticipationPhase
T = TypeVar("T")

#: Phases in which a confirmed roster lets the identity take part in the round.
READY = frozenset({P.CONFIRMED, P.ANSWERED, P.RELAYING})

log = logging.getLogger("anonml.peer")


class Aborted(AnonMLError):
    """This identity stopped taking part in a problem; the message says why."""


@dataclass
class PeerNode:
    """One identity hosted by this process, with its own event store and ledger."""

    identity: Identity
    store: EventStore
    ledger: PrivacyLedger
    user: str | None = None
    rng: np.random.Generator | None = None

    @property
    def fingerprint(self) -> str:
        return self.identity.fingerprint.hex()

    @property
    def node_id(self) -> bytes:
        return self.identity.public.node_id

    @cached_property
    def vault(self) -> Vault:
        """This identity's secrets at rest (:mod:`peer.vault`)."""
        return Vault(self.identity)

    def new_round_relay_key(self, round_id: int) -> tuple[bytes, RoundRelayKey, RelayKeyCertificate]:
        """A fresh round relay key, its certificate, and its secret sealed for the state DB.

        The secret comes from the OS CSPRNG even in a seeded simulation (``rng`` drives only
        simulated choices): whoever knew the seed could otherwise peel every onion layer.
        """
        secret = nacl.utils.random(32)
        key = RoundRelayKey(round_id, secret)
        return self.vault.seal(secret), key, self.identity.certify_relay_key(round_id, key.public_key)


@dataclass
class Comparisons:
    """Progress of the fingerprint comparison (roster_checked → confirmed): members asked, agreeing."""

    confirmed: set[int] = field(default_factory=set)
    asked: set[int] = field(default_factory=set)


class _RecordField(Generic[T]):
    """A read-only attribute of a :class:`Participant`: one field of one of its phase records.

    ``name = _RecordField[V]("record", "field")`` reads ``self.record.field`` — of
    type ``V`` — or None while ``self.record`` is None (the phase that makes it has
    not come); ``field`` defaults to the attribute's own name.
    """

    def __init__(self, record: str, field_name: str | None = None) -> None:
        self.record = record
        self.field_name = field_name

    def __set_name__(self, owner: type, name: str) -> None:
        if self.field_name is None:
            self.field_name = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> _RecordField[T]: ...

    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> T | None: ...

    def __get__(self, obj: object | None, objtype: type | None = None) -> _RecordField[T] | T | None:
        if obj is None:
            return self
        record = getattr(obj, self.record)
        return None if record is None else getattr(record, self.field_name)  # type: ignore[arg-type]

    def __set__(self, obj: object, value: object) -> None:
        raise AttributeError(f"{self.field_name} is read from the {self.record} record; set the record")


@dataclass
class Participant:
    """One :class:`PeerNode` in one problem: its phase and the records of the phases it passed.

    See the module docstring for the steps and :mod:`peer.phases` for the
    machine. ``example`` is None when this identity sends stand-ins.
    """

    node: PeerNode
    problem: Problem
    client: AggregatorClient
    relay: RelayService
    relay_base: str
    roster_comparisons: int = 2
    policy: PeerPolicy = field(default_factory=PeerPolicy)
    credentials: tuple[AdmissionCredential, ...] = ()
    db: PeerDB | None = None
    phase: ParticipationPhase = P.ACCEPTED
    reason: str = ""
    example: LocalExample | None = None
    standins: list[str] = field(default_factory=list)
    #: What of its own part this identity could not do (a median answer not sent, not delivered or
    #: not counted); non-empty: the participation ends ``partial`` with these as its reason.
    shortfall: list[str] = field(default_factory=list)
    # Set by the worker when this identity's roster check came after the aggregator left the medians.
    medians_missed: bool = False
    keys: RelayKeys | None = None
    roster: RosterFacts | None = None
    comparisons: Comparisons = field(default_factory=Comparisons)
    preparation: Preparation | None = None
    bins: Bins | None = None  # the round's bins, once the witnesses' cosignatures on them held
    window_end: float | None = None  # t_s + δ of the round this identity built packets for
    sent: int = 0
    outcome: Outcome | None = None
    _resumed_fingerprint: str | None = None  # a restart re-checks the roster against this one
    _resumed_group: int | None = None  # report_group as saved before a restart
    _registration: Registration | None = None  # signed once: a resend is the same document
    # What each slot carries (redemption, report; None: cover), kept in memory to rebuild a packet
    # over another route (reroute); not after a restart, when the stored packet is retried as it is.
    _payloads: list[tuple[Redemption, bytes] | None] | None = field(default=None, repr=False)
    _avoid: set[bytes] = field(default_factory=set, repr=False)  # relays that failed this round
    _sent_slots: set[int] = field(default_factory=set, repr=False)  # packets that reached their first hop
    _resent: set[int] = field(default_factory=set, repr=False)  # sent packets copied around a dead relay
    _copy_of: dict[int, int] = field(default_factory=dict, repr=False)  # packet -> report slot, for extras
    _reroute_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _plugins: tuple[Instancer, Featurizer, list[int]] | None = None  # loaded once per host, for the example
    _example_pending: bool = False  # prepare() ran and compute_example has not yet
    _example_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _round_open: bool = False  # a sender-only identity took the bins (it opens no relay round)

    # -- the machine -------------------------------------------------------------------
    @property
    def status(self) -> ParticipationPhase:
        """The phase (a ``str``: ``"done"``, ``"aborted"``, …)."""
        return self.phase

    @property
    def active(self) -> bool:
        return self.phase not in TERMINAL

    def _move(self, new: ParticipationPhase, reason: str | None = None) -> None:
        """Go to ``new`` if :data:`~peer.phases.TRANSITIONS` allows it, and persist it.

        A move that cannot be saved (a full disk) is undone in memory too and the error raised, so
        the step that made it is taken again once the state DB writes (a participation that looked
        moved but was not would skip that step for good); only an end (aborted, failed, …) stays,
        since stopping is safe unsaved: it is saved with the next write that succeeds."""
        before = self.phase, self.reason
        self.phase = check_transition(self.phase, new)
        if reason is not None:
            self.reason = reason
        try:
            self.save()
        except Exception:
            if new not in TERMINAL:
                self.phase, self.reason = before
            raise

    def abort(self, reason: str) -> None:
        """Stop taking part (nothing of this identity's own is released after this)."""
        if self.active:
            self._move(P.ABORTED, reason)

    def fail(self, reason: str) -> None:
        """The problem failed at the aggregator."""
        if self.active:
            self._move(P.FAILED, reason)
            if self.db is not None and self.keys is not None and not self.relaying:
                self.db.forget_round_key(self.node.fingerprint, self.problem.round_id)

    def facts(self, record: T | None, what: str) -> T:
        """``record`` if this participation holds it; :class:`IllegalTransition` naming the phase if not."""
        if record is None:
            raise IllegalTransition(f"{what} is not known in phase {self.phase}")
        return record

    # -- read-only views of the records (None until the phase that makes the record) -----------
    relay_key = _RecordField[RoundRelayKey]("keys", "key")
    view = _RecordField[RosterView]("roster")
    assignment = _RecordField[PeerAssignment]("roster")
    witness = _RecordField[RosterWitness]("roster")
    paths = _RecordField[tuple[tuple[Hop, ...], ...]]("preparation")
    tokens = _RecordField[tuple[Token, ...]]("preparation")
    lost = _RecordField[int]("outcome")
    prediction = _RecordField[float]("outcome")

    @property
    def built(self) -> bool:
        """This identity built (and recorded) its packets for the round."""
        return self.window_end is not None

    @property
    def relays(self) -> bool:
        """This identity offers a relay (its policy); False: sender-only."""
        return self.policy.relay

    @property
    def relaying(self) -> bool:
        """The report round is open for this identity: its relay round (a sender-only one: the bins taken)."""
        if not self.relays:
            return self._round_open
        return self.relay.has_round(self.node.node_id, self.problem.round_id)

    @cached_property
    def guard_nodes(self) -> frozenset[bytes]:
        """Node ids of the relays this identity's policy trusts for the first hop."""
        return frozenset(PublicIdentity.from_bytes(bytes.fromhex(g)).node_id for g in self.policy.guards)

    @property
    def report_group(self) -> int | None:
        """Reports each of this identity's reports is shuffled among, from the roster it checked.

        ``⌊(members − median pool) / k_p⌋``, the smallest report partition of
        the signed roster (what :func:`peer.records.shuffle_bounds` reads from the
        saved facts); None before the roster.
        """
        if self.roster is None:
            return self._resumed_group
        roster = self.roster.view.roster
        return (len(roster.entries) - roster.median_pool_size) // self.problem.draft.kp

    @property
    def relay_url(self) -> str | None:
        """Where others reach this identity's relay; None for a sender-only identity."""
        if not self.relays:
            return None
        return f"{self.relay_base}/relay/{self.node.node_id.hex()}"

    # -- persistence ----------------------------------------------------------------------
    def save(self, model_json: str | None = None) -> None:
        """Write the phase and the facts a restart needs (no-op without a state DB)."""
        if self.db is None:
            return
        fingerprint = self.roster.view.fingerprint if self.roster is not None else self._resumed_fingerprint
        facts: dict[str, Any] = {
            "reason": self.reason,
            "standins": self.standins,
            "shortfall": self.shortfall,
            "confirmed": sorted(self.comparisons.confirmed),
            "asked": sorted(self.comparisons.asked),
            "roster_fingerprint": fingerprint,
            "report_group": self.report_group,
            "window_end": self.window_end,
            "sent": self.sent,
            "paths": None
            if self.paths is None
            else [[[h.node_id.hex(), h.public_key.hex(), h.delay_ms] for h in path] for path in self.paths],
            "lost": self.lost,
            "prediction": self.prediction,
            # sender-only may have been detected (peer.reachability) under a policy that relays
            "relays": self.relays,
        }
        sealed = None
        if self.tokens is not None and self.phase not in TERMINAL:  # spent secrets go with the round
            plain = json.dumps(
                [[t.key_id.hex(), t.slot.hex(), t.nonce.hex(), t.output.hex()] for t in self.tokens]
            )
            sealed = self.node.vault.seal(plain.encode())
        elif self.tokens is not None:  # the digests of the nonces stay countable: keep only those
            facts["token_nonces"] = [t.nonce.hex() for t in self.tokens]
        self.db.save_participation(
            self.problem.id,
            self.node.fingerprint,
            self.phase,
            json.dumps(facts),
            sealed,
            reason=self.reason,
            fingerprint=fingerprint,
            model_json=model_json,
        )
        if self.phase in TERMINAL:
            self.db.clear_outbox(self.problem.id, self.node.fingerprint)

    def resume(self, row: ParticipationRow) -> list[tuple[int, float, str, bytes]]:
        """Take up the persisted participation ``row`` after a restart; the packets still to send.

        Restores the phase, the round relay key (if the round has not closed),
        routes and tokens; the roster facts are re-derived from the roster the
        aggregator serves and must have the persisted fingerprint
        (:meth:`restore_roster`). Returns ``(slot, send time, first hop,
        packet)`` of each built packet not sent yet.
        """
        facts = json.loads(row.facts_json)
        if facts.get("relays") is False and self.policy.relay:  # it registered sender-only: it stays so
            self.policy = self.policy.model_copy(update={"relay": False})
        self.phase = ParticipationPhase(row.phase)
        self.reason = facts.get("reason", "")
        self.standins = list(facts.get("standins", []))
        self.shortfall = list(facts.get("shortfall", []))
        self.comparisons = Comparisons(set(facts.get("confirmed", [])), set(facts.get("asked", [])))
        self._resumed_fingerprint = facts.get("roster_fingerprint")
        self._resumed_group = facts.get("report_group")
        self.window_end = facts.get("window_end")
        self.sent = int(facts.get("sent", 0))
        vault = self.node.vault
        if self.db is not None:
            key_row = self.db.round_key(self.node.fingerprint, self.problem.round_id)
            if key_row is not None:
                key = RoundRelayKey(self.problem.round_id, vault.open(key_row.sealed_key))
                self.keys = RelayKeys(key, RelayKeyCertificate.from_bytes(key_row.certificate))
        tokens = None
        if row.sealed_tokens is not None:
            tokens = tuple(
                Token(*(bytes.fromhex(x) for x in t)) for t in json.loads(vault.open(row.sealed_tokens))
            )
        if facts.get("paths") is not None:
            paths = tuple(
                tuple(Hop(bytes.fromhex(n), bytes.fromhex(k), int(d)) for n, k, d in path)
                for path in facts["paths"]
            )
            self.preparation = Preparation(paths, tokens)
        if self.phase in TERMINAL:
            self.outcome = Outcome(facts.get("lost"), facts.get("prediction"))
            return []
        pending = []
        if self.db is not None and self.window_end is not None:
            for out in self.db.outbox(self.problem.id, self.node.fingerprint):
                if not out.sent:
                    pending.append((out.slot, out.send_at, out.url, vault.open(out.sealed_packet)))
            if self.phase == P.RELAYING:  # killed between storing its packets and the move
                self._move(P.REPORTING)
        return pending

    @property
    def needs_roster(self) -> bool:
        """Resumed past the roster check, whose facts a restart re-derives (:meth:`restore_roster`)."""
        return self.roster is None and self._resumed_fingerprint is not None and self.active

    # -- 0. the local example ----------------------------------------------------------
    def prepare(self, plugins: tuple[Instancer, Featurizer, list[int]] | None = None) -> None:
        """Cap this problem's ε in the ledger at the agreed value; keep ``plugins`` for the example.

        Reads nothing of the person's data: the example is computed after the
        registration is sent (:meth:`compute_example`), so when the
        registration leaves never depends on the size or content of the
        event store (computing it first delayed the registration 12-17 ms for
        100-185 events against 0.3 ms for an empty store: correlation 0.74
        with the store's size over 40 users).
        """
        self.node.ledger.set_cap(self.problem.id, self.problem.draft.epsilon, peer=self.node.fingerprint)
        self._plugins = plugins
        self._example_pending = True

    def compute_example(self) -> None:
        """Compute the local example :meth:`prepare` left pending, once; called after the registration
        is sent, and by every step that uses the example (median answer, reports, prediction) in case
        it has not run yet. Without a pending example (one given to the constructor): nothing.

        Never refuses: when the example cannot be computed (no example in the
        store, a plugin failing on this person's events, …) the identity takes
        part all the same and sends stand-ins (:meth:`_reports`, :meth:`answer`),
        logging why locally only — refusing would tell the aggregator the
        outcome of a condition it chose.
        """
        with self._example_lock:  # the background computation and a step that needs it now
            if not self._example_pending:
                return
            if self.policy.relay_only:  # `anonml relay serve`: no data, never reads a store
                self.example = None
                self._standin("relay-only member: it holds no data")
                self._example_pending = False
                return
            try:
                self.example = local_example(
                    self.problem,
                    self.node.store,
                    self.node.user,
                    self.node.rng,
                    self._plugins,
                    sources=self.policy.offered_sources,
                )
            except Exception as exc:  # whatever fails, this identity sends stand-ins instead
                self.example = None
                self._standin(f"no example: {exc}")
            self._example_pending = False

    def _standin(self, why: str) -> None:
        """Note locally (the peer's log and its own state DB, never the aggregator) why a stand-in goes."""
        log.info("identity %s sends a stand-in in %s: %s", self.node.fingerprint[:12], self.problem.id, why)
        self.standins.append(why)

    # -- 1. registration ---------------------------------------------------------------
    def register(self) -> None:
        """Register alone (``POST …/registrations``): :meth:`registration`, sent, then :meth:`registered`."""
        self.client.register(self.registration())
        self.registered()

    def registered(self) -> None:
        """The aggregator stored this identity's registration (accepted → registered)."""
        self._move(P.REGISTERED)

    @property
    def registration_sent(self) -> bool:
        """Whether this identity signed its registration already (it may have reached the aggregator)."""
        return self._registration is not None

    def registration(self) -> Registration:
        """This identity's signed registration with a fresh round relay key, kept (sealed) first —
        or, sender-only, with no relay URL and no relay key (its signature covers their absence).

        What :meth:`register` sends alone and a host of many identities sends in
        batches (:meth:`~peer.client.AggregatorClient.register_batch`). Made
        once: asked again (a batch that got no answer is sent again) it is the
        same document with the same relay key, so what the aggregator may have
        stored from the first attempt is what the roster check expects.
        """
        if self._registration is not None:
            return self._registration
        url = self.relay_url
        try:  # the form every member checks: refuse here rather than be refused by all of them
            if url is not None:
                check_relay_url(url, allow_loopback_http=self.relay.allow_loopback_http)
        except ValueError as exc:
            raise Aborted(f"this peer's own relay URL cannot be registered: {exc}") from None
        me = bytes(self.node.identity.public)
        credential = None
        if self.problem.draft.admission.mode == "credentials":
            credential = credential_for(self.credentials, self.problem, me, now=datetime.now(UTC))
            if credential is None:
                raise Aborted("this problem admits by credentials and this identity holds no valid one")
        certificate = None
        if url is not None:
            sealed, key, cert = self.node.new_round_relay_key(self.problem.round_id)
            if self.db is not None:  # kept (sealed) before the aggregator may list it: a restart relays
                self.db.save_round_key(
                    self.node.fingerprint, self.problem.round_id, self.problem.id, sealed, bytes(cert)
                )
            self.keys = RelayKeys(key, cert)
            certificate = bytes(cert)
        self._registration = sign_message(
            Registration(
                problem_id=self.problem.id,
                aggregator=self.problem.aggregator,
                identity=me,
                relay_url=url,
                relay_certificate=certificate,
                credential=credential,
                signature=bytes(64),
            ),
            self.node.identity,
        )
        return self._registration

    # -- 2. roster, assignment, witnesses ------------------------------------------------
    def _verify_bundle(self, bundle: CosignatureBundle, stage: str, transcript: bytes) -> bytes:
        try:
            return verify_bundle(
                bundle,
                problem=self.problem,
                stage=stage,
                transcript=transcript,
                trusted=tuple(self.policy.witnesses),
                threshold=self.policy.witness_threshold,
            )
        except ProtocolError as exc:
            raise Aborted(f"{stage} not witnessed: {exc}") from None

    def check_roster(
        self, view: RosterView, bundle: CosignatureBundle, notice: Assignment | None = None
    ) -> None:
        """Relay URLs, floors, witness cosignatures, own entry, seed commitment, assignment; then
        publish the signed witness (registered → roster_checked).

        ``notice``: this identity's signed assignment when its host fetched many in one
        request (:meth:`~peer.client.AggregatorClient.assignments`); None: fetched here.
        It is checked the same either way.
        """
        self.roster = self._verified_roster(view, bundle, notice)
        self._move(P.ROSTER_CHECKED)

    def restore_roster(
        self, view: RosterView, bundle: CosignatureBundle, notice: Assignment | None = None
    ) -> None:
        """After a restart: the same checks, and the roster must be the one checked before."""
        facts = self._verified_roster(view, bundle, notice)
        if facts.view.fingerprint != self._resumed_fingerprint:
            raise Aborted("after a restart the aggregator serves a roster other than the one checked before")
        self.roster = facts

    def _verified_roster(
        self, view: RosterView, bundle: CosignatureBundle, notice: Assignment | None = None
    ) -> RosterFacts:
        self.check_relay_urls(view)
        guarded = any(view.node_ids[i] in self.guard_nodes for i in view.relay_capable)
        try:
            check_roster_floors(
                self.problem, len(view.keys), view.roster.median_pool_size, self.policy,
                relays=len(view.relay_capable), me_relays=self.relays, guarded=guarded,
            )  # fmt: skip
        except AnonMLError as exc:
            raise Aborted(f"refused before releasing anything: {exc}") from None
        certificate = None
        if self.relays:
            certificate = bytes(self.facts(self.keys, "this identity's round relay key").certificate)
        transcript = view.memo(
            ("transcript", "roster", self.problem.id),
            lambda: transcript_hash("roster", self.problem, view.roster),
        )
        beacon = self._verify_bundle(bundle, "roster", transcript)
        me = bytes(self.node.identity.public)
        index = view.index_of.get(me)
        if index is None:
            raise Aborted("this identity is not on the roster it registered for")
        entry = view.roster.entries[index]
        listed = None if entry.relay_certificate is None else bytes(entry.relay_certificate)
        if entry.relay_url != self.relay_url or listed != certificate:
            raise Aborted("the roster lists a different relay URL or key for this identity")
        draft = self.problem.draft
        if notice is None:
            notice = self.client.assignment(self.problem.id, self.node.fingerprint)
        try:
            verify_message(notice, bytes(self.problem.aggregator))
        except CryptoError as exc:
            raise Aborted(f"assignment is not signed by the aggregator: {exc}") from None
        if bytes(notice.identity) != me or notice.problem_id != self.problem.id:
            raise Aborted("the assignment is for another identity or problem")
        claimed = PeerAssignment(notice.role, notice.index, tuple(tuple(s) for s in notice.subsets))
        try:
            plan = view.memo(("plan", beacon), lambda: roster_plan(draft, view.roster, beacon))
            assignment = verify_assignment(
                claimed, plan, commitment=bytes(self.problem.seed_commitment), peer_keys=view.keys, my_key=me
            )
        except (ProtocolError, ValueError) as exc:
            raise Aborted(f"partition plan check failed: {exc}") from None
        witness = sign_message(
            RosterWitness(
                problem_id=self.problem.id, identity=me, fingerprint=view.fingerprint, signature=bytes(64)
            ),
            self.node.identity,
        )
        return RosterFacts(view, assignment, beacon, witness)

    def check_relay_urls(self, view: RosterView) -> None:
        """Every member's relay URL has the one relay form and names its own node, or abort.

        Runs before this identity fetches anything from any member (witnesses,
        packets): a roster that makes peers request other URLs is the
        aggregator's doing (it checks the form at registration).
        The same for every identity of this process: checked once per roster.
        """
        loopback = self.relay.allow_loopback_http
        refusal = view.memo(("relay urls", loopback), lambda: _relay_url_refusal(view, loopback))
        if refusal is not None:
            raise Aborted(refusal)

    def compare_fingerprints(self) -> bool:
        """Ask other members' relays for their fingerprint; True once enough agree (→ confirmed).

        Raises :class:`Aborted` on any mismatch. Members that cannot answer yet
        (not processed the roster, unreachable) are asked again later.
        """
        view = self.facts(self.roster, "the checked roster").view
        me = view.index_of[bytes(self.node.identity.public)]
        # Only members that relay can be asked (a sender-only one accepts no connection).
        need = min(self.roster_comparisons, sum(1 for i in view.relay_capable if i != me))
        done = self.comparisons
        if len(done.confirmed) < need:
            gen = resolve_rng(self.node.rng)
            for i in _pick_members(gen, view.relay_capable, need - len(done.confirmed), me, done):
                done.asked.add(i)
                entry = view.roster.entries[i]
                assert entry.relay_url is not None  # relay_capable lists only members with one
                try:  # what its name resolves to now, just before connecting: global addresses only
                    check_relay_address(entry.relay_url, allow_loopback_http=self.relay.allow_loopback_http)
                except ValueError:
                    self.relay.count("roster witness refused: relay address")
                    continue
                try:
                    witness = fetch_witness(
                        entry.relay_url, self.problem.id, allow_loopback=self.relay.allow_loopback_http
                    )
                except RefusedAddress:
                    self.relay.count("roster witness refused: relay address")
                    continue
                except ProtocolError:
                    continue  # not ready or unreachable: ask again next time
                try:
                    verify_message(witness, bytes(entry.identity))
                except CryptoError:
                    continue
                if bytes(witness.identity) != bytes(entry.identity) or witness.problem_id != self.problem.id:
                    continue
                if witness.fingerprint != view.fingerprint:
                    raise Aborted(
                        f"roster fingerprint differs from roster member {i}'s "
                        f"({witness.fingerprint[:16]}… vs "
                        f"{view.fingerprint[:16]}…): the aggregator shows peers different rosters"
                    )
                done.confirmed.add(i)
        if len(done.confirmed) < need:
            return False
        if self.phase == P.ROSTER_CHECKED:
            self._move(P.CONFIRMED)
            if self.relaying:  # the round opened while the comparisons went on
                self._into_round()
        return True

    def _into_round(self) -> None:
        """confirmed | answered → relaying. A median-pool identity whose roster check was done only
        after the median steps closed (:attr:`medians_missed`: a full disk, a slow host) says so —
        it ends ``partial`` with the reason, never ``done`` as if it had done its part."""
        roster = self.roster
        if (self.phase == P.CONFIRMED and self.medians_missed and roster is not None
                and roster.assignment.role == "median"):
            self._short("median answer not sent: the median steps had closed when this identity's roster "
                        "check was done")
        self._move(P.RELAYING)

    # -- 3. median answer ---------------------------------------------------------------
    def named_in(self, queries: Sequence[MedianQuery]) -> bool:
        """Does one of ``queries`` ask this identity (known once its roster is checked)."""
        if self.roster is None:
            return False
        me = self.roster.view.index_of.get(bytes(self.node.identity.public))
        return me is not None and any(me in q.members for q in queries)

    def answer(self, query: MedianQuery) -> bool:
        """Answer ``query`` if it names this identity (once per problem); True if answered."""
        roster = self.facts(self.roster, "the checked roster")
        me = roster.view.index_of[bytes(self.node.identity.public)]
        if self.phase != P.CONFIRMED or me not in query.members:
            return False  # answered already (or past the medians)
        draft = self.problem.draft
        try:
            verify_message(query, bytes(self.problem.aggregator))
        except CryptoError as exc:
            raise Aborted(f"median query is not signed by the aggregator: {exc}") from None
        if roster.assignment.role != "median":
            raise Aborted("asked a median query, but the plan puts this identity in a report partition")
        if query.feature not in draft.numeric_features:
            raise Aborted(f"median query names feature {query.feature}, which is not numeric")
        if not math.isclose(query.epsilon, draft.median_epsilon, rel_tol=1e-12):
            raise Aborted(
                f"median query asks ε={query.epsilon}, the proposal promised {draft.median_epsilon}"
            )
        # Persisted before the release is recorded and sent: a restart never answers twice. Whatever
        # fails from here on (the state DB or the ledger on a full disk, the aggregator past the step's
        # deadline) costs this answer, and says so: the participation ends partial with the reason.
        what = f"median answer (feature {query.feature}, step {query.step})"
        try:
            self._move(P.ANSWERED)
        except Exception as exc:  # e.g. a full disk: nothing recorded, so nothing may be sent
            self.phase = P.ANSWERED  # never answered twice in this process either
            self._short(f"{what} not sent: its phase could not be saved: {exc}")
            return True
        rr = BinaryRandomizedResponse(draft.median_epsilon)
        try:
            self.node.ledger.record(
                peer=self.node.fingerprint,
                problem=self.problem.id,
                round=0,
                attributes=[draft.features[query.feature].name],
                mechanism=rr,
                pool="median",
            )
        except Exception as exc:  # not recorded: not released
            self._short(f"{what} not sent: the release could not be recorded: {exc}")
            return True
        gen = resolve_rng(self.node.rng)
        truth = self._median_truth(query, gen)
        bit = bool(rr.perturb(np.asarray([truth]), gen)[0])
        answer = sign_message(
            MedianAnswer(
                problem_id=self.problem.id,
                feature=query.feature,
                step=query.step,
                identity=bytes(self.node.identity.public),
                bit=bit,
                signature=bytes(64),
            ),
            self.node.identity,
        )
        # The release is recorded: the same signed answer is sent again while the aggregator does not
        # answer, until the step's own deadline (the aggregator waits median_step_seconds for it).
        until = time.time() + self.problem.draft.schedule.median_step_seconds
        try:
            with_retries(lambda: self.client.answer(answer), until=until,
                         on_retry=lambda exc: self.relay.count("median answers retried"))
        except HTTPRefusal as exc:
            if exc.status == 409 and "already answered" in exc.detail:
                # A retry whose first copy arrived: delivered and counted.
                self.relay.count("median answers delivered (replayed)")
            elif transient(exc):
                self._short(f"{what} not delivered before the step's deadline: {exc}")
            elif exc.status == 409:
                # The search moved on before this answer arrived: it is not counted, the
                # release stays recorded (conservative), and the peer goes on (cover packets).
                self._short(f"{what} not counted: {exc.detail}")
            else:
                raise
        except ProtocolError as exc:
            if not transient(exc):
                raise
            self._short(f"{what} not delivered before the step's deadline: {exc}")
        return True

    def _short(self, why: str) -> None:
        """Note a part of its own this identity could not do (logged; saved when the state DB can)."""
        log.warning("identity %s in %s: %s", self.node.fingerprint[:12], self.problem.id, why)
        self.shortfall.append(why)
        self.reason = "; ".join(self.shortfall)
        try:
            self.save()
        except Exception as exc:  # a full disk: kept in memory, saved with the next move
            log.warning("identity %s: its state could not be saved now: %s", self.node.fingerprint[:12], exc)

    def _median_truth(self, query: MedianQuery, gen: np.random.Generator) -> bool:
        """Is this identity's value above the threshold; a uniform bit when it cannot say."""
        self.compute_example()
        try:
            if self.example is None:
                raise AnonMLError("no example")
            bad = invalid_features(self.example.x, self.problem.draft.features).get(query.feature)
            if bad is not None:
                raise AnonMLError(bad)
            return bool(self.example.x[query.feature] > query.threshold)
        except Exception as exc:  # whatever fails, a uniform bit through the same response
            self._standin(f"median answer: {exc}")
            return bool(gen.integers(2))

    # -- 4. report round ----------------------------------------------------------------
    def open_round(self, bins: Bins, view: RosterView | None = None) -> None:
        """Check the signed bins and start relaying for this round (before anyone sends).

        An identity that stopped taking part still relays for the others — it
        releases nothing of its own by doing so — using ``view`` (the host's
        verified roster) if it never got to check one itself. A sender-only
        identity opens no relay round: it checks the bins and moves on.
        """
        view = self.roster.view if self.roster is not None else view
        if view is None or (self.keys is None and self.relays) or self.relaying:
            return
        draft = self.problem.draft
        # The same check for every identity of this process: once per signed bins document
        # (keyed by all of it, signature included, so other bins are checked anew).
        refusal = view.memo(
            ("bins signature", bins.model_dump_json()), lambda: _bins_refusal(bins, self.problem)
        )
        if refusal is not None:
            raise Aborted(refusal)
        if bins.slots_per_peer != draft.kh or len(bins.edges) != len(draft.features):
            raise Aborted("bins do not match the proposal (slot count or feature count)")
        if not self.relays:
            self._round_open = True
            if self.phase in (P.CONFIRMED, P.ANSWERED):
                self._into_round()
            return
        assert self.keys is not None
        schedule = WindowSchedule(bins.t_s, bins.delta, bins.t_r)
        relays = len(view.relay_capable)
        hops = min(draft.hops, relays - 1)
        # Every member sends r packets per slot (redundant delivery), each counted in the quotas.
        quota = member_quota(draft.kh * self.route_count(view), hops, len(view.keys), relays)
        replays = (
            None if self.db is None else StoredReplayCache(self.db, self.node.node_id, self.problem.round_id)
        )
        self.relay.open_round(
            RelayRound(
                node_id=self.node.node_id,
                round_id=self.problem.round_id,
                relay=SphinxRelay(self.keys.key, replays),
                schedule=schedule,
                routes=view.routes,
                destination=_node_id(bytes(self.problem.aggregator)),
                intake_url=self.client.intake_url,
                stages=hops,
                # Each member spends only its own quota (peer.relayauth); the node's total is their sum.
                # Every member posts (a sender-only one its first hops); only relaying ones are posted to.
                members=view.poster_keys(),
                quota=quota,
                max_packets=quota * (len(view.keys) - 1),
                vault=self.node.vault,
                owner=self.node.fingerprint,
                grace=bins.grace,
            )
        )
        if self.phase in (P.CONFIRMED, P.ANSWERED):
            self._into_round()

    def check_bins(self, bins: Bins, bundle: CosignatureBundle) -> None:
        """The witnesses co-signed this peer's own bins transcript (Problem, Roster, Bins, schedule).

        Nothing of this identity's own is sent for the round before this passed.
        """
        roster = self.facts(self.roster, "the checked roster")
        try:
            verify_message(bins, bytes(self.problem.aggregator))
        except CryptoError as exc:
            raise Aborted(f"bins are not signed by the aggregator: {exc}") from None
        view = roster.view
        transcript = view.memo(
            ("transcript", "bins", self.problem.id, bytes(bins.signature)),
            lambda: transcript_hash("bins", self.problem, view.roster, bins),
        )
        self._verify_bundle(bundle, "bins", transcript)
        self.bins = bins

    def build_packets(self) -> list[tuple[float, str, bytes]]:
        """This identity's packets for the round (relaying → reporting), kept sealed in the state DB.

        Returns ``(send time, first hop URL, packet)`` for exactly
        ``r · slots_per_peer`` packets (``r`` = :meth:`route_count`: packet
        ``j`` is copy ``j mod r`` of slot ``j // r``, each copy over its own
        route, a report's copies identical inside); the caller schedules them.
        """
        roster = self.facts(self.roster, "the checked roster")
        if self.phase != P.RELAYING:
            raise IllegalTransition(f"packets are built while relaying, not in phase {self.phase}")
        if self.bins is None:
            raise Aborted("the bins were not co-signed by the witnesses; nothing is sent")
        bins = self.bins
        schedule = WindowSchedule(bins.t_s, bins.delta, bins.t_r)
        if time.time() >= bins.t_s + bins.delta:
            raise Aborted("the bins arrived after the send window closed")
        payloads: list[tuple[Redemption, bytes] | None]
        copies = self.route_count(roster.view)
        if roster.assignment.role == "report":
            payloads = [payload for payload in self._reports(bins, roster) for _ in range(copies)]
        else:  # cover multiplied the same way: the packet count says nothing of the role
            payloads = [None] * (bins.slots_per_peer * copies)
        packets = []
        preparation = self.prepare_round()
        for payload, path in zip(payloads, preparation.paths, strict=True):
            first = roster.view.routes[path[0].node_id]
            packets.append((send_time(schedule, self.node.rng), first, self._packet(payload, path)))
        self._payloads = payloads
        self.window_end = bins.t_s + bins.delta
        if self.db is not None:
            vault = self.node.vault
            self.db.save_outbox(
                self.problem.id, self.node.fingerprint, [(w, u, vault.seal(p)) for w, u, p in packets]
            )
        self._move(P.REPORTING)
        return packets

    def _packet(self, payload: tuple[Redemption, bytes] | None, path: tuple[Hop, ...]) -> bytes:
        """The onion packet of one slot over ``path``: its report, or cover (``payload`` None).

        Onion keys from the OS CSPRNG, never from the simulation's seeded rng.
        """
        # Reports and cover are sealed to the X25519 half of the aggregator identity the signed Problem
        # names — a document inside the bins transcript the witnesses co-signed (check_bins), so every
        # peer seals to the same key and none to one shown only to it.
        aggregator = PublicIdentity.from_bytes(bytes(self.problem.aggregator))
        round_id, destination, intake_key = self.problem.round_id, aggregator.node_id, aggregator.relay_key
        if payload is None:
            return build_cover_packet(
                list(path), round_id=round_id, destination=destination, intake_key=intake_key
            )
        redemption, report = payload
        return build_packet(
            list(path), redemption, report, round_id=round_id, destination=destination, intake_key=intake_key
        )

    def reroute(self, slot: int, failed_url: str | None) -> tuple[str, bytes] | None:
        """A new route and packet for packet ``slot`` whose first hop (``failed_url``) refused it or is down.

        The new route avoids every first hop that failed for this identity in
        the round, and the relays of the other copies of the same report slot
        while enough members are left for that (else only the failed hops);
        the packet carries the same report (or is cover), so at
        most one copy reaches the intake with a valid token (the intake
        refuses a token spent twice). The new route replaces the slot's in
        the stored facts and outbox, so a restart sends the new packet.
        Returns ``(first hop URL, packet)``, or None when no route avoiding
        the failed hops exists or the slot's report is not in memory (after
        a restart): the caller then retries the old packet.
        """
        roster = self.facts(self.roster, "the checked roster")
        with self._reroute_lock:
            if self._payloads is None or self.preparation is None:
                return None
            try:
                if failed_url is not None:  # None: a relay of the route was found dead (route_around)
                    self._avoid.add(relay_node_of(failed_url))
            except ValueError:
                return None
            me = roster.view.index_of[bytes(self.node.identity.public)]
            path = self._fresh_path(roster.view, me, slot)
            if path is None:
                return None
            packet = self._packet(self._payloads[slot], path)
            paths = list(self.preparation.paths)
            paths[slot] = path
            self.preparation = Preparation(tuple(paths), self.preparation.tokens)
            url = roster.view.routes[path[0].node_id]
            self.save()
            if self.db is not None:
                sealed = self.node.vault.seal(packet)
                self.db.reroute_outbox(self.problem.id, self.node.fingerprint, slot, url, sealed)
        return url, packet

    def route_count(self, view: RosterView) -> int:
        """Routes each slot travels over in this problem with ``view``'s roster
        (:func:`~anonml.protocol.route_count`: the problem's ``routes``, fewer when the roster is small)."""
        draft = self.problem.draft
        # Counted over the members that relay (a sender-only member is on no route), the same figure
        # for every member, so all send the same number of packets.
        return route_count(draft.routes, draft.hops, len(view.relay_capable))

    def _cohosted(self, view: RosterView) -> frozenset[bytes]:
        """Members whose relay is on this identity's own relay host (its relay URL's base).

        Left out of its routes while the other members suffice: that host sees the
        sender anyway (relays there add no anonymity against it) and dies with it
        (a copy routed there is lost with the sender's own unsent packets).
        """
        if self.relay_url is None:  # a sender-only identity: no relay of its own
            return frozenset()
        own = self.relay_url.split("/relay/")[0] + "/relay/"
        return frozenset(
            node for node, entry in zip(view.node_ids, view.roster.entries, strict=True)
            if entry.relay_url is not None and entry.relay_url.startswith(own)
        )  # fmt: skip

    def _report_slot(self, packet: int, copies: int) -> int:
        """The report slot packet ``packet`` carries (packet ``j < r·k_h``: slot ``j // r``)."""
        return self._copy_of.get(packet, packet // copies)

    def _fresh_path(self, view: RosterView, me: int, packet: int) -> tuple[Hop, ...] | None:
        """A route for packet ``packet`` avoiding the relays that failed this round and, while enough
        members are left, those of the other copies of its report slot; None when none is left."""
        assert self.preparation is not None
        copies = self.route_count(view)
        mine = self._report_slot(packet, copies)
        siblings = {
            h.node_id
            for j, other in enumerate(self.preparation.paths)
            if j != packet and self._report_slot(j, copies) == mine
            for h in other
        }
        for avoid in (self._avoid | siblings | self._cohosted(view), self._avoid | siblings, self._avoid):
            try:
                draft, round_id = self.problem.draft, self.problem.round_id
                rng, guards = self.node.rng, self.guard_nodes
                return tuple(choose_path(view, me, draft.hops, round_id, rng, frozenset(avoid), guards))
            except ProtocolError:
                continue
        return None

    def crosses_failed(self, packet: int) -> bool:
        """Whether packet ``packet``'s route crosses a relay found dead this round (:meth:`route_around`)."""
        with self._reroute_lock:
            if self.preparation is None or packet >= len(self.preparation.paths):
                return False
            return any(h.node_id in self._avoid for h in self.preparation.paths[packet])

    def route_around(self, dead: frozenset[bytes]) -> list[tuple[int, float, str, bytes]]:
        """Relays ``dead`` were found unreachable in the send window: avoid them, and give every packet
        already sent through one of them one more copy over a fresh route.

        A relay holds what it takes until the send window has closed (:mod:`peer.relay`), so a packet
        sent through a relay that died since is lost with it; its copy (the same report and token, or
        cover: the rule does not depend on the role, so neither does the number of copies) leaves at a
        uniform time in what is left of the window, over a route avoiding every failed relay and the
        relays of the report's other copies. Packets not sent yet are re-routed when their time comes
        (:meth:`crosses_failed`, :meth:`reroute`). The intake keeps one copy per token, so a copy
        costs no ε. Returns ``(packet, send time, first hop, packet bytes)`` of the new copies; none
        when the payloads are not in memory (after a restart) or the window is over.
        """
        roster = self.facts(self.roster, "the checked roster")
        out: list[tuple[int, float, str, bytes]] = []
        with self._reroute_lock:
            self._avoid |= dead
            now, end = time.time(), self.window_end
            if self._payloads is None or self.preparation is None or end is None or now >= end:
                return out
            me = roster.view.index_of[bytes(self.node.identity.public)]
            copies = self.route_count(roster.view)
            gen = resolve_rng(self.node.rng)
            for j in sorted(self._sent_slots - self._resent):
                if not any(h.node_id in dead for h in self.preparation.paths[j]):
                    continue
                self._resent.add(j)
                path = self._fresh_path(roster.view, me, j)
                if path is None:
                    continue
                new = len(self.preparation.paths)
                self._copy_of[new] = self._report_slot(j, copies)
                self.preparation = Preparation((*self.preparation.paths, path), self.preparation.tokens)
                self._payloads.append(self._payloads[j])
                packet = self._packet(self._payloads[j], path)
                out.append((new, float(gen.uniform(now, end)), roster.view.routes[path[0].node_id], packet))
            if out:
                self.save()
                if self.db is not None:
                    sealed = [(j, when, url, self.node.vault.seal(b)) for j, when, url, b in out]
                    self.db.add_outbox(self.problem.id, self.node.fingerprint, sealed)
        return out

    def prepare_round(self) -> Preparation:
        """Routes (:meth:`route_count` pairwise disjoint ones per slot, certificates checked) and, for a
        report peer, its tokens.

        Ahead of the round, as soon as the roster is confirmed; issuance opens
        when the roster is published, so this runs while the median rounds go
        on. Tokens: one per report slot (:func:`peer.reports.fetch_tokens`);
        median-pool identities take none.
        """
        if self.preparation is not None:
            return self.preparation
        roster = self.facts(self.roster, "the checked roster")
        me = roster.view.index_of[bytes(self.node.identity.public)]
        draft, copies, view = self.problem.draft, self.route_count(roster.view), roster.view
        cohosted, round_id, guards = self._cohosted(view), self.problem.round_id, self.guard_nodes
        paths: tuple[tuple[Hop, ...], ...] = ()
        for _ in range(draft.kh):
            try:
                routes = choose_routes(
                    view, me, draft.hops, copies, round_id, self.node.rng, cohosted, guards
                )
            except ProtocolError:  # too few members elsewhere: any other member, as before
                routes = choose_routes(view, me, draft.hops, copies, round_id, self.node.rng, guards=guards)
            paths += tuple(tuple(path) for path in routes)
        tokens = None
        if roster.assignment.role == "report":
            try:
                tokens = tuple(
                    fetch_tokens(
                        self.problem,
                        self.node.identity,
                        bytes(roster.view.roster.token_key),
                        roster.assignment.index,
                        self.client.tokens,
                    )
                )
            except CryptoError as exc:
                raise Aborted(f"token proof does not verify against the pinned key: {exc}") from None
        self.preparation = Preparation(paths, tokens)
        self.save()
        return self.preparation

    def _reports(self, bins: Bins, roster: RosterFacts) -> list[tuple[Redemption, bytes]]:
        if bins.slots_per_peer != len(roster.assignment.subsets):
            raise Aborted(
                f"bins announce {bins.slots_per_peer} slots for {len(roster.assignment.subsets)} subsets"
            )
        n = len(roster.view.keys) - roster.view.roster.median_pool_size
        tokens = self.facts(self.prepare_round().tokens, "this identity's tokens")
        self.compute_example()
        reports, specs, standins = make_reports(
            self.problem,
            roster.assignment,
            self.example,
            bins,
            n // self.problem.draft.kp,
            self.node.fingerprint,
            self.node.rng,
        )
        try:
            self.node.ledger.record_many(specs)  # all k_h releases, before any is sent
        except BudgetExceeded as exc:
            raise Aborted(str(exc)) from None
        for h, why in enumerate(standins):
            if why:
                self._standin(f"report {h}: {why}")
        out = []
        for token, report in zip(tokens, reports, strict=True):
            data = report.to_bytes()
            out.append((token.redeem(data), data))
        return out

    def send(self, slot: int, url: str, packet: bytes) -> None:
        """POST one packet to its first hop (called by the dispatcher at its send time), authenticated
        as this identity's round relay key (sender-only: its identity's long-term X25519 key) to the
        first hop's (:mod:`peer.relayauth`).

        The hop's name is resolved first: a host that is not a global address is a
        :data:`~peer.relay.REFUSED_ADDRESS` refusal, and nothing is sent.
        """
        try:
            check_relay_address(url, allow_loopback_http=self.relay.allow_loopback_http)
        except ValueError as exc:
            raise HTTPRefusal(url, REFUSED_ADDRESS, str(exc)) from None
        view = self.facts(self.roster, "the checked roster").view
        hop = relay_node_of(url)
        public = view.relay_keys().get(hop)
        if public is None:
            raise Aborted(f"first hop {hop.hex()} has no verified relay key in the roster")
        if self.relays:
            key = post_key(self.facts(self.keys, "this identity's round relay key").key, public)
        else:
            key = identity_post_key(self.node.identity, public)
        round_id = self.problem.round_id
        body = seal_post(key, round_id, hop, self.node.node_id, [packet])
        try:  # the address connected to is judged again: a name rebound since the check reaches nothing
            reply = post(
                url,
                body,
                RELAY_POST_TYPE,
                address_check=connect_check(allow_loopback=self.relay.allow_loopback_http),
            )
        except RefusedAddress as exc:
            raise HTTPRefusal(url, REFUSED_ADDRESS, str(exc)) from None
        if reply.status >= 300 and not already_processed(reply.status, reply.text[:300]):
            raise HTTPRefusal(url, reply.status, reply.text[:200], reply.retry_after)
        if reply.status >= 300:  # a retry whose first copy arrived (the hop's replay refusal): sent
            self.relay.count("packets already processed at the first hop")
        self.sent += 1
        with self._reroute_lock:
            self._sent_slots.add(slot)
        if self.db is not None:
            self.db.mark_sent(self.problem.id, self.node.fingerprint, slot)

    # -- 5. model ------------------------------------------------------------------------
    def receive_model(
        self, document: ModelDocument, *, degraded: bool = False, receipts: frozenset[bytes] | None = None
    ) -> AnonMLClassifier:
        """Verify the signed model and predict for this identity's own example (→ done / degraded).

        ``receipts``: the aggregator's receipt digests when the host fetched them once for
        all its identities (:meth:`count_lost_reports`); None: fetched here.
        """
        if self.phase != P.REPORTING:
            raise IllegalTransition(f"a model is taken in phase reporting, not {self.phase}")
        try:
            verify_message(document, bytes(self.problem.aggregator))
        except CryptoError as exc:
            raise Aborted(f"the model is not signed by the aggregator: {exc}") from None
        if document.problem_id != self.problem.id:
            raise Aborted("the model is for another problem")
        model = AnonMLClassifier.from_json(json.dumps(document.model))
        lost = self.count_lost_reports(receipts)
        prediction = None
        self.compute_example()
        if self.example is not None:
            bad = invalid_features(self.example.x, self.problem.draft.features)
            if bad:  # the model cannot bin this value either: no prediction, said locally
                self.reason = f"no prediction: {'; '.join(bad.values())}"
            else:
                try:  # P(label = 1), or the predicted class's probability (LocalPrediction)
                    prediction = predict_example(model, self.example.x, self.problem.draft.label)[0]
                except AnonMLError as exc:  # a model outside the label domain: said locally
                    self.reason = f"no prediction: {exc}"
        self.outcome = Outcome(lost, prediction)
        if self.shortfall:  # its own part was not all done: the reason says what, first
            extra = [self.reason] if self.reason.startswith("no prediction") else []
            self.reason = "; ".join([*self.shortfall, *extra])
        end = P.DEGRADED if degraded else P.PARTIAL if self.shortfall else P.DONE
        self.phase = check_transition(self.phase, end)
        self.save(model_json=document.model_dump_json())
        return model

    def count_lost_reports(self, receipts: frozenset[bytes] | None = None) -> int | None:
        """How many of this identity's reports never reached the intake (relay counters too).

        Compares its tokens' nonces with the aggregator's sorted receipts
        (:class:`~anonml.protocol.ReportReceipts`), locally: a relay that
        accepted a packet and dropped it is noticed by the sender. None when
        this identity sent no reports or the receipts are not available.
        ``receipts``: the digests, when the host fetched them once for all its
        identities (the same public list for each); None: fetched here.
        """
        if not self.tokens or not self.built:
            return None
        if receipts is None:
            try:
                receipts = frozenset(map(bytes, self.client.receipts(self.problem.id).digests))
            except ProtocolError:
                self.relay.count("receipts unavailable")
                return None
        held = receipts
        lost = sum(ReportReceipts.digest(t.nonce) not in held for t in self.tokens)
        self.relay.count("reports delivered", len(self.tokens) - lost)
        self.relay.count("reports lost in transit", lost)
        return lost


def _pick_members(
    gen: np.random.Generator, pool: tuple[int, ...], k: int, me: int, done: Comparisons
) -> list[int]:
    """Up to ``k`` distinct members of ``pool`` (roster indices: the members that relay) to compare
    with, uniformly among those not asked yet (among all but ``me`` and the confirmed ones when every
    other was asked).

    A large pool (few members asked yet) draws by rejection in O(k), not
    O(n) per identity per poll; the result has the same distribution.
    """
    n = len(pool)
    taken = len(done.asked) + len(done.confirmed) + 1
    if n >= 64 and 4 * taken <= n:
        chosen: list[int] = []
        while len(chosen) < k:
            i = pool[int(gen.integers(n))]
            if i != me and i not in done.asked and i not in done.confirmed and i not in chosen:
                chosen.append(i)
        return chosen
    candidates = [i for i in pool if i != me and i not in done.confirmed]
    fresh = [i for i in candidates if i not in done.asked]
    return [int(i) for i in gen.permutation(fresh if fresh else candidates)[:k]]


def _bins_refusal(bins: Bins, problem: Problem) -> str | None:
    """Why ``bins`` are refused as not signed by the problem's aggregator; None if they are."""
    try:
        verify_message(bins, bytes(problem.aggregator))
    except CryptoError as exc:
        return f"bins are not signed by the aggregator: {exc}"
    return None


def _relay_url_refusal(view: RosterView, allow_loopback_http: bool) -> str | None:
    """Why the first roster member's relay URL is refused (form, or not naming its node); None if none is."""
    for i, (entry, node_id) in enumerate(zip(view.roster.entries, view.node_ids, strict=True)):
        if entry.relay_url is None:  # sender-only: nothing to fetch from it
            continue
        try:
            check_relay_url(entry.relay_url, allow_loopback_http=allow_loopback_http)
        except ValueError as exc:
            return f"roster member {i}'s relay URL is refused: {exc}"
        if not entry.relay_url.endswith("/relay/" + node_id.hex()):
            return f"roster member {i}'s relay URL does not name its own node"
    return None


def _node_id(public_identity: bytes) -> bytes:
    return PublicIdentity.from_bytes(public_identity).node_id
