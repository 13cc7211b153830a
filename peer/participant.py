"""One identity's side of one problem: register, check, answer, report, predict.

The steps, each checked before anything is released (DESIGN §7; the
aggregator is treated as an adversary):

1. **Register** with a fresh round relay key certified by the identity.
2. **Roster**: the peer's anonymity floors
   (:func:`peer.policy.check_roster_floors`: roster size, smallest
   partition, enough members for ``hops`` distinct relays), the common
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
   members through theirs: any mismatch aborts (the aggregator showed peers
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
   members chosen uniformly. A median peer builds k_h cover packets. Every
   peer sends exactly ``slots_per_peer`` packets at independent uniform times
   in ``(t_s, t_s + δ)``.
6. **Model**: downloads the signed model, checks the signature with the pinned
   key, and predicts for itself.

Failures of the aggregator's promises abort the participation with a
reason (stored in :class:`~peer.db.PeerDB`); nothing is released after an abort.
Failures on the peer's own data never do: a report or median answer that
cannot be computed is replaced by a stand-in (a uniform value through the same
mechanism, recorded like any release), so an identity that joined always
sends exactly its slot count; why is logged locally only.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np

from anonml.crypto import (
    CryptoError,
    Hop,
    Identity,
    PublicIdentity,
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
from anonml.learn import AnonMLClassifier, PeerAssignment, verify_assignment
from anonml.plugins import Featurizer, Instancer
from anonml.privacy import BinaryRandomizedResponse, PrivacyLedger
from anonml.protocol import (
    AdmissionCredential,
    Bins,
    CosignatureBundle,
    MedianAnswer,
    MedianQuery,
    ModelDocument,
    Problem,
    Registration,
    ReportReceipts,
    RosterWitness,
    check_relay_url,
    sign_message,
    transcript_hash,
    verify_message,
)
from anonml.store import EventStore
from peer.client import AggregatorClient, HTTPRefusal, fetch_witness
from peer.dispatch import post
from peer.features import LocalExample, invalid_features, local_example
from peer.policy import PeerPolicy, check_roster_floors
from peer.relay import RelayRound, RelayService, packet_cap
from peer.reports import choose_path, fetch_tokens, make_reports
from peer.roster import RosterView
from peer.transcript import credential_for, verify_bundle

__all__ = ["PeerNode", "Participant", "Aborted"]

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


@dataclass
class Participant:
    """The state of one :class:`PeerNode` in one problem (module docstring)."""

    node: PeerNode
    problem: Problem
    client: AggregatorClient
    relay: RelayService
    relay_base: str
    roster_comparisons: int = 2
    policy: PeerPolicy = field(default_factory=PeerPolicy)
    credentials: tuple[AdmissionCredential, ...] = ()
    status: str = "accepted"
    reason: str = ""
    example: LocalExample | None = None
    relay_key: RoundRelayKey | None = None
    certificate: RelayKeyCertificate | None = None
    view: RosterView | None = None
    assignment: PeerAssignment | None = None
    witness: RosterWitness | None = None
    confirmed: set[int] = field(default_factory=set)
    asked: set[int] = field(default_factory=set)
    roster_confirmed: bool = False
    relaying: bool = False
    built: bool = False
    tokens: list[Token] | None = None
    paths: list[list[Hop]] | None = None
    answered: bool = False
    sent: int = 0
    lost: int | None = None
    prediction: float | None = None
    standins: list[str] = field(default_factory=list)
    beacon: bytes | None = None
    bins_checked: bool = False

    @property
    def relay_url(self) -> str:
        return f"{self.relay_base}/relay/{self.node.node_id.hex()}"

    @property
    def active(self) -> bool:
        return self.status not in ("aborted", "failed", "done")

    def abort(self, reason: str) -> None:
        self.status, self.reason = "aborted", reason

    # -- 0. the local example ----------------------------------------------------------
    def prepare(self, plugins: tuple[Instancer, Featurizer, list[int]] | None = None) -> None:
        """Cap this problem's ε in the ledger at the agreed value; compute the local example.

        Never refuses: when the example cannot be computed (no example in the
        store, a plugin failing on this person's events, …) the identity takes
        part all the same and sends stand-ins (:meth:`_reports`, :meth:`answer`),
        logging why locally only — refusing would tell the aggregator the
        outcome of a condition it chose.
        """
        self.node.ledger.set_cap(self.problem.id, self.problem.draft.epsilon, peer=self.node.fingerprint)
        try:
            self.example = local_example(
                self.problem,
                self.node.store,
                self.node.user,
                self.node.rng,
                plugins,
                sources=self.policy.offered_sources,
            )
        except Exception as exc:  # whatever fails, this identity sends stand-ins instead
            self.example = None
            self._standin(f"no example: {exc}")

    def _standin(self, why: str) -> None:
        """Note locally (the peer's log and its own state DB, never the aggregator) why a stand-in goes."""
        log.info("identity %s sends a stand-in in %s: %s", self.node.fingerprint[:12], self.problem.id, why)
        self.standins.append(why)

    # -- 1. registration ---------------------------------------------------------------
    def register(self) -> None:
        try:  # the form every member checks: refuse here rather than be refused by all of them
            check_relay_url(self.relay_url, allow_loopback_http=self.relay.allow_loopback_http)
        except ValueError as exc:
            raise Aborted(f"this peer's own relay URL cannot be registered: {exc}") from None
        me = bytes(self.node.identity.public)
        credential = None
        if self.problem.draft.admission.mode == "credentials":
            credential = credential_for(self.credentials, self.problem, me, now=datetime.now(UTC))
            if credential is None:
                raise Aborted("this problem admits by credentials and this identity holds no valid one")
        key, cert = self.node.identity.new_round_relay_key(self.problem.round_id, self.node.rng)
        self.relay_key, self.certificate = key, cert
        registration = sign_message(
            Registration(
                problem_id=self.problem.id,
                identity=me,
                relay_url=self.relay_url,
                relay_certificate=bytes(cert),
                credential=credential,
                signature=bytes(64),
            ),
            self.node.identity,
        )
        self.client.register(registration)
        self.status = "registered"

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

    def check_roster(self, view: RosterView, bundle: CosignatureBundle) -> None:
        """Relay URLs, floors, witness cosignatures, own entry, seed commitment, assignment; then
        publish the signed witness."""
        self.check_relay_urls(view)
        try:
            check_roster_floors(self.problem, len(view.keys), view.roster.median_pool_size, self.policy)
        except AnonMLError as exc:
            raise Aborted(f"refused before releasing anything: {exc}") from None
        transcript = transcript_hash("roster", self.problem, view.roster)
        self.beacon = self._verify_bundle(bundle, "roster", transcript)
        me = bytes(self.node.identity.public)
        index = view.index_of.get(me)
        if index is None:
            raise Aborted("this identity is not on the roster it registered for")
        entry = view.roster.entries[index]
        if entry.relay_url != self.relay_url or bytes(entry.relay_certificate) != bytes(self.certificate):
            raise Aborted("the roster lists a different relay URL or key for this identity")
        draft = self.problem.draft
        notice = self.client.assignment(self.problem.id, self.node.fingerprint)
        try:
            verify_message(notice, bytes(self.problem.aggregator))
        except CryptoError as exc:
            raise Aborted(f"assignment is not signed by the aggregator: {exc}") from None
        if bytes(notice.identity) != me or notice.problem_id != self.problem.id:
            raise Aborted("the assignment is for another identity or problem")
        claimed = PeerAssignment(notice.role, notice.index, tuple(tuple(s) for s in notice.subsets))
        try:
            self.assignment = verify_assignment(
                claimed,
                commitment=bytes(self.problem.seed_commitment),
                seed=bytes(view.roster.seed),
                peer_keys=list(view.keys),
                my_key=me,
                n_features=len(draft.features),
                n_partitions=draft.kp,
                n_subsets=draft.kh,
                subset_size=draft.ks,
                subsets=draft.subsets,
                median_pool_size=view.roster.median_pool_size,
                beacon=self.beacon,
            )
        except ProtocolError as exc:
            raise Aborted(f"partition plan check failed: {exc}") from None
        self.view = view
        self.witness = sign_message(
            RosterWitness(
                problem_id=self.problem.id, identity=me, fingerprint=view.fingerprint, signature=bytes(64)
            ),
            self.node.identity,
        )
        self.status = "checked"

    def check_relay_urls(self, view: RosterView) -> None:
        """Every member's relay URL has the one relay form and names its own node, or abort.

        Runs before this identity fetches anything from any member (witnesses,
        packets): a roster that makes peers request other URLs is the
        aggregator's doing (it checks the form at registration).
        """
        for i, (entry, node_id) in enumerate(zip(view.roster.entries, view.node_ids, strict=True)):
            try:
                check_relay_url(entry.relay_url, allow_loopback_http=self.relay.allow_loopback_http)
            except ValueError as exc:
                raise Aborted(f"roster member {i}'s relay URL is refused: {exc}") from None
            if not entry.relay_url.endswith("/relay/" + node_id.hex()):
                raise Aborted(f"roster member {i}'s relay URL does not name its own node")

    def compare_fingerprints(self) -> bool:
        """Ask other members' relays for their fingerprint; True once enough agree.

        Raises :class:`Aborted` on any mismatch. Members that cannot answer yet
        (not processed the roster, unreachable) are asked again later.
        """
        assert self.view is not None
        n = len(self.view.keys)
        me = self.view.index_of[bytes(self.node.identity.public)]
        need = min(self.roster_comparisons, n - 1)
        if len(self.confirmed) >= need:
            self.roster_confirmed = True
            return True
        gen = self.node.rng if self.node.rng is not None else np.random.default_rng()
        candidates = [i for i in range(n) if i != me and i not in self.confirmed]
        fresh = [i for i in candidates if i not in self.asked]
        pool = fresh if fresh else candidates
        for i in gen.permutation(pool)[: need - len(self.confirmed)]:
            i = int(i)
            self.asked.add(i)
            entry = self.view.roster.entries[i]
            try:
                witness = fetch_witness(entry.relay_url, self.problem.id)
            except ProtocolError:
                continue  # not ready or unreachable: ask again next time
            try:
                verify_message(witness, bytes(entry.identity))
            except CryptoError:
                continue
            if bytes(witness.identity) != bytes(entry.identity) or witness.problem_id != self.problem.id:
                continue
            if witness.fingerprint != self.view.fingerprint:
                raise Aborted(
                    f"roster fingerprint differs from roster member {i}'s ({witness.fingerprint[:16]}… vs "
                    f"{self.view.fingerprint[:16]}…): the aggregator shows peers different rosters"
                )
            self.confirmed.add(i)
        self.roster_confirmed = len(self.confirmed) >= need
        return self.roster_confirmed

    # -- 3. median answer ---------------------------------------------------------------
    def answer(self, query: MedianQuery) -> bool:
        """Answer ``query`` if it names this identity (once per problem); True if answered."""
        assert self.view is not None and self.assignment is not None
        me = self.view.index_of[bytes(self.node.identity.public)]
        if self.answered or me not in query.members:
            return False
        draft = self.problem.draft
        try:
            verify_message(query, bytes(self.problem.aggregator))
        except CryptoError as exc:
            raise Aborted(f"median query is not signed by the aggregator: {exc}") from None
        if self.assignment.role != "median":
            raise Aborted("asked a median query, but the plan puts this identity in a report partition")
        if query.feature not in draft.numeric_features:
            raise Aborted(f"median query names feature {query.feature}, which is not numeric")
        if not math.isclose(query.epsilon, draft.median_epsilon, rel_tol=1e-12):
            raise Aborted(
                f"median query asks ε={query.epsilon}, the proposal promised {draft.median_epsilon}"
            )
        rr = BinaryRandomizedResponse(draft.median_epsilon)
        self.node.ledger.record(
            peer=self.node.fingerprint,
            problem=self.problem.id,
            round=0,
            attributes=[draft.features[query.feature].name],
            mechanism=rr,
            pool="median",
        )
        self.answered = True  # recorded: never answer twice, even if the POST fails
        gen = self.node.rng if self.node.rng is not None else np.random.default_rng()
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
        self.status = "answered"
        try:
            self.client.answer(answer)
        except HTTPRefusal as exc:
            if exc.status != 409:
                raise
            # The search moved on before this answer arrived: it is not counted, the
            # release stays recorded (conservative), and the peer goes on (cover packets).
            self.reason = f"median answer not counted: {exc.detail}"
        return True

    def _median_truth(self, query: MedianQuery, gen: np.random.Generator) -> bool:
        """Is this identity's value above the threshold; a uniform bit when it cannot say."""
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
        verified roster) if it never got to check one itself.
        """
        view = self.view or view
        if view is None or self.relay_key is None or self.relaying:
            return
        draft = self.problem.draft
        try:
            verify_message(bins, bytes(self.problem.aggregator))
        except CryptoError as exc:
            raise Aborted(f"bins are not signed by the aggregator: {exc}") from None
        if bins.slots_per_peer != draft.kh or len(bins.edges) != len(draft.features):
            raise Aborted("bins do not match the proposal (slot count or feature count)")
        schedule = WindowSchedule(bins.t_s, bins.delta, bins.t_r)
        self.relay.open_round(
            RelayRound(
                node_id=self.node.node_id,
                round_id=self.problem.round_id,
                relay=SphinxRelay(self.relay_key),
                schedule=schedule,
                routes=view.routes,
                destination=_node_id(bytes(self.problem.aggregator)),
                intake_url=self.client.intake_url,
                stages=min(draft.hops, len(view.keys) - 1),
                max_packets=packet_cap(draft.kh, min(draft.hops, len(view.keys) - 1)),
            )
        )
        self.relaying = True
        if self.active:
            self.status = "relaying"

    def check_bins(self, bins: Bins, bundle: CosignatureBundle) -> None:
        """The witnesses co-signed this peer's own bins transcript (Problem, Roster, Bins, schedule).

        Nothing of this identity's own is sent for the round before this passed.
        """
        assert self.view is not None
        try:
            verify_message(bins, bytes(self.problem.aggregator))
        except CryptoError as exc:
            raise Aborted(f"bins are not signed by the aggregator: {exc}") from None
        self._verify_bundle(bundle, "bins", transcript_hash("bins", self.problem, self.view.roster, bins))
        self.bins_checked = True

    def build_packets(self, bins: Bins) -> list[tuple[float, str, bytes]]:
        """This identity's packets for the round (after :meth:`open_round`).

        Returns ``(send time, first hop URL, packet)`` for exactly
        ``slots_per_peer`` packets; the caller schedules them.
        """
        assert self.view is not None and self.assignment is not None
        if not self.bins_checked:
            raise Aborted("the bins were not co-signed by the witnesses; nothing is sent")
        schedule = WindowSchedule(bins.t_s, bins.delta, bins.t_r)
        if time.time() >= bins.t_s + bins.delta:
            raise Aborted("the bins arrived after the send window closed")
        if self.assignment.role == "report":
            payloads = self._reports(bins)
        else:
            payloads = [None] * bins.slots_per_peer
        packets = []
        paths = self.paths if self.paths is not None else self.choose_paths()
        for payload, path in zip(payloads, paths, strict=True):
            destination = _node_id(bytes(self.problem.aggregator))
            if payload is None:
                packet = build_cover_packet(
                    path, round_id=self.problem.round_id, destination=destination, rng=self.node.rng
                )
            else:
                redemption, report = payload
                packet = build_packet(
                    path,
                    redemption,
                    report,
                    round_id=self.problem.round_id,
                    destination=destination,
                    rng=self.node.rng,
                )
            first = self.view.routes[path[0].node_id]
            packets.append((send_time(schedule, self.node.rng), first, packet))
        self.status, self.built = "reporting", True
        return packets

    def fetch_tokens(self) -> None:
        """This identity's tokens, one per report slot (:func:`peer.reports.fetch_tokens`).

        Issuance opens when the roster is published, so this runs while the
        median rounds go on; median-pool identities take no tokens.
        """
        assert self.view is not None and self.assignment is not None
        if self.tokens is not None or self.assignment.role != "report":
            return
        try:
            self.tokens = fetch_tokens(
                self.problem,
                self.node.identity,
                bytes(self.view.roster.token_key),
                self.assignment.index,
                self.client.tokens,
                self.node.rng,
            )
        except CryptoError as exc:
            raise Aborted(f"token proof does not verify against the pinned key: {exc}") from None

    def _reports(self, bins: Bins) -> list[tuple[object, bytes]]:
        assert self.view is not None and self.assignment is not None
        if bins.slots_per_peer != len(self.assignment.subsets):
            raise Aborted(
                f"bins announce {bins.slots_per_peer} slots for {len(self.assignment.subsets)} subsets"
            )
        n = len(self.view.keys) - self.view.roster.median_pool_size
        self.fetch_tokens()
        assert self.tokens is not None
        reports, specs, standins = make_reports(
            self.problem,
            self.assignment,
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
        for token, report in zip(self.tokens, reports, strict=True):
            data = report.to_bytes()
            out.append((token.redeem(data), data))
        return out

    def choose_paths(self) -> list[list[Hop]]:
        """One route per slot, chosen (and its certificates checked) ahead of the round."""
        assert self.view is not None
        if self.paths is None:
            me = self.view.index_of[bytes(self.node.identity.public)]
            self.paths = [
                choose_path(self.view, me, self.problem.draft.hops, self.problem.round_id, self.node.rng)
                for _ in range(self.problem.draft.kh)
            ]
        return self.paths

    def send(self, url: str, packet: bytes) -> None:
        """POST one packet to its first hop (called by the dispatcher at its send time)."""
        reply = post(url, packet, "application/octet-stream")
        if reply.status < 300:
            self.sent += 1
        else:
            raise HTTPRefusal(url, reply.status, reply.text[:200])

    # -- 5. model ------------------------------------------------------------------------
    def receive_model(self, document: ModelDocument) -> AnonMLClassifier:
        """Verify the signed model and predict for this identity's own example."""
        try:
            verify_message(document, bytes(self.problem.aggregator))
        except CryptoError as exc:
            raise Aborted(f"the model is not signed by the aggregator: {exc}") from None
        if document.problem_id != self.problem.id:
            raise Aborted("the model is for another problem")
        model = AnonMLClassifier.from_json(json.dumps(document.model))
        self.count_lost_reports()
        if self.example is not None:
            bad = invalid_features(self.example.x, self.problem.draft.features)
            if bad:  # the model cannot bin this value either: no prediction, said locally
                self.reason = f"no prediction: {'; '.join(bad.values())}"
            else:
                self.prediction = float(model.predict_proba(self.example.x[None, :])[0, 1])
        self.status = "done"
        return model


    def count_lost_reports(self) -> int | None:
        """How many of this identity's reports never reached the intake (relay counters too).

        Compares its tokens' nonces with the aggregator's sorted receipts
        (:class:`~anonml.protocol.ReportReceipts`), locally: a relay that
        accepted a packet and dropped it is noticed by the sender. None when
        this identity sent no reports or the receipts are not available.
        """
        if not self.tokens or not self.built:
            return None
        try:
            receipts = self.client.receipts(self.problem.id)
        except ProtocolError:
            self.relay.count("receipts unavailable")
            return None
        held = set(map(bytes, receipts.digests))
        self.lost = sum(ReportReceipts.digest(t.nonce) not in held for t in self.tokens)
        self.relay.count("reports delivered", len(self.tokens) - self.lost)
        self.relay.count("reports lost in transit", self.lost)
        return self.lost


def _node_id(public_identity: bytes) -> bytes:
    return PublicIdentity.from_bytes(public_identity).node_id
