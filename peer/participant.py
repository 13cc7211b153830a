"""One identity's side of one problem: register, check, answer, report, predict.

:class:`Participant` holds the phase (:mod:`peer.phases`) and the records of the phases it passed;
every move goes through :meth:`Participant._move`, which persists it before the new phase releases
anything. The steps live beside it: the roster checks in :mod:`peer.roster_checks`, the median
answer in :mod:`peer.median_answer`, the report round in :mod:`peer.round_packets`, save and
resume in :mod:`peer.participation_store`. Each step and why a restart never releases twice:
docs/protocol.md, "Participation".
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Generic, TypeVar, overload

from anonml.crypto import (
    CryptoError,
    Hop,
    PublicIdentity,
    Redemption,
    RoundRelayKey,
    Token,
)
from anonml.errors import AnonMLError
from anonml.learn import PeerAssignment
from anonml.plugins import Featurizer, Instancer
from anonml.protocol import (
    AdmissionCredential,
    Assignment,
    Bins,
    CalibrationRequest,
    CosignatureBundle,
    MedianQuery,
    ModelDocument,
    Problem,
    Registration,
    RosterWitness,
    verify_message,
)
from peer import (
    calibration_answer,
    median_answer,
    participation_store,
    registration,
    roster_checks,
    round_packets,
)
from peer.client import AggregatorClient
from peer.db import ParticipationRow, PeerDB
from peer.features import LocalExample, invalid_features, local_example, predict_example
from peer.node import PeerNode
from peer.participation import Comparisons
from peer.phases import (
    READY,
    TERMINAL,
    Aborted,
    IllegalTransition,
    Outcome,
    ParticipationPhase,
    Preparation,
    RelayKeys,
    RosterFacts,
    check_transition,
)
from peer.policy import PeerPolicy
from peer.relay import RelayService
from peer.roster import RosterView

if TYPE_CHECKING:
    from anonml.learn import AnonMLClassifier

__all__ = ["PeerNode", "Participant", "Aborted", "READY"]

P = ParticipationPhase
T = TypeVar("T")


log = logging.getLogger("anonml.peer")


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

    See docs/protocol.md, "Participation", for the steps and :mod:`peer.phases` for the
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
    #: The signed calibration answer (JSON) once drawn: sent again as it is, never drawn twice.
    stored_calibration_answer: str | None = None
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

        ``⌊(members − median and calibration pools) / k_p⌋``, the smallest report partition of
        the signed roster (what :func:`peer.records.shuffle_bounds` reads from the
        saved facts); None before the roster.
        """
        if self.roster is None:
            return self._resumed_group
        roster = self.roster.view.roster
        draft = self.problem.draft
        return draft.report_pool_size(len(roster.entries), roster.median_pool_size) // draft.kp

    @property
    def relay_url(self) -> str | None:
        """Where others reach this identity's relay; None for a sender-only identity."""
        if not self.relays:
            return None
        return f"{self.relay_base}/relay/{self.node.node_id.hex()}"

    # -- persistence ----------------------------------------------------------------------
    def save(self, model_json: str | None = None) -> None:
        """See :func:`peer.participation_store.save`."""
        return participation_store.save(self, model_json)

    def resume(self, row: ParticipationRow) -> list[tuple[int, float, str, bytes]]:
        """See :func:`peer.participation_store.resume`."""
        return participation_store.resume(self, row)

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
        """This identity's signed registration (:func:`peer.registration.signed_registration`), made
        once: asked again (a batch that got no answer is sent again) it is the same document with the
        same relay key, so what the aggregator may have stored is what the roster check expects."""
        if self._registration is None:
            self._registration = registration.signed_registration(self)
        return self._registration

    # -- 2. roster, assignment, witnesses ------------------------------------------------
    def check_roster(
        self, view: RosterView, bundle: CosignatureBundle, notice: Assignment | None = None
    ) -> None:
        """See :func:`peer.roster_checks.check_roster`."""
        return roster_checks.check_roster(self, view, bundle, notice)

    def restore_roster(
        self, view: RosterView, bundle: CosignatureBundle, notice: Assignment | None = None
    ) -> None:
        """After a restart (:func:`peer.roster_checks.restore_roster`)."""
        return roster_checks.restore_roster(self, view, bundle, notice)

    def compare_fingerprints(self, hosted: frozenset[int] = frozenset()) -> bool:
        """See :func:`peer.roster_checks.compare_fingerprints`."""
        return roster_checks.compare_fingerprints(self, hosted)

    def _into_round(self) -> None:
        """confirmed | answered → relaying. A median-pool identity whose roster check was done only
        after the median steps closed (:attr:`medians_missed`: a full disk, a slow host) says so —
        it ends ``partial`` with the reason, never ``done`` as if it had done its part."""
        if self.phase == P.CONFIRMED and self.medians_missed and self.in_median_pool:
            self._short("median answer not sent: the median steps had closed when this identity's roster "
                        "check was done")
        self._move(P.RELAYING)

    # -- 3. median answer ---------------------------------------------------------------
    @property
    def in_median_pool(self) -> bool:
        """Its checked assignment puts it in the median pool (False before its roster check)."""
        return self.roster is not None and self.roster.assignment.role == "median"

    def answer(self, query: MedianQuery) -> bool:
        """See :func:`peer.median_answer.answer`."""
        return median_answer.answer(self, query)

    def sign_answer(self, query: MedianQuery) -> median_answer.SignedAnswer | None:
        """See :func:`peer.median_answer.sign_answer`."""
        return median_answer.sign_answer(self, query)

    def _short(self, why: str) -> None:
        """Note a part of its own this identity could not do (logged (:func:`peer.median_answer._short`)."""
        return median_answer._short(self, why)

    # -- 5. calibration answer (a calibration-pool identity, after the report round) -----
    @property
    def in_calibration_pool(self) -> bool:
        """See :func:`peer.calibration_answer.in_calibration_pool`."""
        return calibration_answer.in_calibration_pool(self)

    def answer_calibration(self, request: CalibrationRequest) -> bool:
        """See :func:`peer.calibration_answer.answer`."""
        return calibration_answer.answer(self, request)

    def awaits_calibration_choice(self, request: CalibrationRequest) -> bool:
        """See :func:`peer.calibration_answer.awaits_choice`."""
        return calibration_answer.awaits_choice(self, request)

    # -- 4. report round ----------------------------------------------------------------
    def open_round(self, bins: Bins, view: RosterView | None = None) -> None:
        """See :func:`peer.round_packets.open_round`."""
        return round_packets.open_round(self, bins, view)

    def check_bins(self, bins: Bins, bundle: CosignatureBundle) -> None:
        """See :func:`peer.round_packets.check_bins`."""
        return round_packets.check_bins(self, bins, bundle)

    def build_packets(self) -> list[tuple[float, str, bytes]]:
        """See :func:`peer.round_packets.build_packets`."""
        return round_packets.build_packets(self)

    def reroute(self, slot: int, failed_url: str | None) -> tuple[str, bytes] | None:
        """See :func:`peer.round_packets.reroute`."""
        return round_packets.reroute(self, slot, failed_url)

    def crosses_failed(self, packet: int) -> bool:
        """See :func:`peer.round_packets.crosses_failed`."""
        return round_packets.crosses_failed(self, packet)

    def route_around(self, dead: frozenset[bytes]) -> list[tuple[int, float, str, bytes]]:
        """See :func:`peer.round_packets.route_around`."""
        return round_packets.route_around(self, dead)

    def prepare_round(self) -> Preparation:
        """See :func:`peer.round_packets.prepare_round`."""
        return round_packets.prepare_round(self)

    def send(self, slot: int, url: str, packet: bytes) -> None:
        """See :func:`peer.round_packets.send`."""
        return round_packets.send(self, slot, url, packet)

    # -- 5. model ------------------------------------------------------------------------
    def receive_model(
        self, document: ModelDocument, *, degraded: bool = False, receipts: frozenset[bytes] | None = None
    ) -> AnonMLClassifier:
        """Verify the signed model and predict for this identity's own example (→ done / degraded).

        ``receipts``: the aggregator's receipt digests when the host fetched them once for
        all its identities (:meth:`count_lost_reports`); None: fetched here.
        """
        if self.phase not in (P.REPORTING, P.CALIBRATED):
            raise IllegalTransition(f"a model is taken in phase reporting or calibrated, not {self.phase}")
        try:
            verify_message(document, bytes(self.problem.aggregator))
        except CryptoError as exc:
            raise Aborted(f"the model is not signed by the aggregator: {exc}") from None
        if document.problem_id != self.problem.id:
            raise Aborted("the model is for another problem")
        # scikit-learn, SciPy and pandas: loaded with the first model, not by the peer's start (issue 31).
        from anonml.learn import AnonMLClassifier

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
        """See :func:`peer.round_packets.count_lost_reports`."""
        return round_packets.count_lost_reports(self, receipts)




