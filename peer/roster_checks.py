"""Every check one identity makes of the roster before it releases anything, in one place.

The common checks are :meth:`peer.roster.RosterView.verify` and the anonymity floors
(:func:`peer.policy.check_roster_floors`); here, an identity's own: its entry and assignment, the
witnesses' cosignatures (:func:`peer.transcript.verify_bundle`), the members' relay URLs, and the
fingerprint comparison through other members' relays (docs/protocol.md, "Roster").
"""

from __future__ import annotations

import hashlib
import logging

import numpy as np

from anonml.crypto import (
    CryptoError,
)
from anonml.errors import AnonMLError, ProtocolError
from anonml.learn import PeerAssignment, verify_assignment
from anonml.outbound import RefusedAddress
from anonml.protocol import (
    Assignment,
    CosignatureBundle,
    RosterWitness,
    check_relay_address,
    check_relay_url,
    sign_message,
    transcript_hash,
    verify_message,
)
from anonml.randomness import resolve_rng
from peer.client import fetch_witness
from peer.participation import Comparisons, Participation
from peer.phases import (
    Aborted,
    ParticipationPhase,
    RosterFacts,
)
from peer.policy import check_roster_floors
from peer.roster import RosterView
from peer.transcript import verify_bundle

P = ParticipationPhase
log = logging.getLogger("anonml.peer")


def _verify_bundle(
    p: Participation, bundle: CosignatureBundle, stage: str, transcript: bytes, view: RosterView | None = None
) -> bytes:
    """The beacon of ``bundle`` checked against ``transcript`` (:func:`~peer.transcript.verify_bundle`).

    With ``view``, checked once per process for every identity of the same trust policy: the
    result is memoised under the bundle's own bytes, so only an identical bundle reuses it (each
    witness's VRF proof cost every identity of a 300-identity host its own check before).
    """
    trusted, threshold = tuple(p.policy.witnesses), p.policy.witness_threshold

    def check() -> bytes:
        return verify_bundle(bundle, problem=p.problem, stage=stage, transcript=transcript,
                             trusted=trusted, threshold=threshold)

    try:
        if view is None:
            return check()
        content = hashlib.sha256(bundle.model_dump_json().encode()).digest()
        return view.memo(("bundle", stage, transcript, content, trusted, threshold), check)
    except ProtocolError as exc:
        raise Aborted(f"{stage} not witnessed: {exc}") from None


def check_roster(
    p: Participation, view: RosterView, bundle: CosignatureBundle, notice: Assignment | None = None
) -> None:
    """Relay URLs, floors, witness cosignatures, own entry, seed commitment, assignment; then
    publish the signed witness (registered → roster_checked).

    ``notice``: this identity's signed assignment when its host fetched many in one
    request (:meth:`~peer.client.AggregatorClient.assignments`); None: fetched here.
    It is checked the same either way.
    """
    p.roster = _verified_roster(p, view, bundle, notice)
    p._move(P.ROSTER_CHECKED)


def restore_roster(
    p: Participation, view: RosterView, bundle: CosignatureBundle, notice: Assignment | None = None
) -> None:
    """After a restart: the same checks, and the roster must be the one checked before."""
    facts = _verified_roster(p, view, bundle, notice)
    if facts.view.fingerprint != p._resumed_fingerprint:
        raise Aborted("after a restart the aggregator serves a roster other than the one checked before")
    p.roster = facts


def _verified_roster(
    p: Participation, view: RosterView, bundle: CosignatureBundle, notice: Assignment | None = None
) -> RosterFacts:
    check_relay_urls(p, view)
    guarded = guarded_by(view, p.guard_nodes)
    try:
        check_roster_floors(
            p.problem, len(view.keys), view.roster.median_pool_size, p.policy,
            relays=len(view.relay_capable), me_relays=p.relays, guarded=guarded,
        )  # fmt: skip
    except AnonMLError as exc:
        raise Aborted(f"refused before releasing anything: {exc}") from None
    certificate = None
    if p.relays:
        certificate = bytes(p.facts(p.keys, "this identity's round relay key").certificate)
    transcript = view.memo(
        ("transcript", "roster", p.problem.id),
        lambda: transcript_hash("roster", p.problem, view.roster),
    )
    beacon = _verify_bundle(p, bundle, "roster", transcript, view)
    me = bytes(p.node.identity.public)
    index = view.index_of.get(me)
    if index is None:
        raise Aborted("this identity is not on the roster it registered for")
    entry = view.roster.entries[index]
    listed = None if entry.relay_certificate is None else bytes(entry.relay_certificate)
    if entry.relay_url != p.relay_url or listed != certificate:
        raise Aborted("the roster lists a different relay URL or key for this identity")
    draft = p.problem.draft
    if notice is None:
        notice = p.client.assignment(p.problem.id, p.node.fingerprint)
    try:
        verify_message(notice, bytes(p.problem.aggregator))
    except CryptoError as exc:
        raise Aborted(f"assignment is not signed by the aggregator: {exc}") from None
    if bytes(notice.identity) != me or notice.problem_id != p.problem.id:
        raise Aborted("the assignment is for another identity or problem")
    claimed = PeerAssignment(notice.role, notice.index, tuple(tuple(s) for s in notice.subsets))
    # The plan needs NumPy (never scikit-learn): with the first roster, not at start.
    from anonml.learn.settings import roster_plan

    try:
        plan = view.memo(("plan", beacon), lambda: roster_plan(draft, view.roster, beacon))
        assignment = verify_assignment(
            claimed, plan, commitment=bytes(p.problem.seed_commitment), peer_keys=view.keys, my_key=me
        )
    except (ProtocolError, ValueError) as exc:
        raise Aborted(f"partition plan check failed: {exc}") from None
    witness = sign_message(
        RosterWitness(
            problem_id=p.problem.id, identity=me, fingerprint=view.fingerprint, signature=bytes(64)
        ),
        p.node.identity,
    )
    return RosterFacts(view, assignment, beacon, witness)


def guarded_by(view: RosterView, guards: frozenset[bytes]) -> bool:
    """Whether one of ``guards`` (node ids a policy trusts for the first hop) relays in this roster.

    The roster's relaying node ids are collected once per process (:meth:`RosterView.memo`), so
    each hosted identity's check costs O(its guards), not O(roster): at 10,000 members and 2,500
    identities a host, a scan of the roster per identity was 25 million lookups.
    """
    relaying = view.memo(("relay nodes",), lambda: frozenset(view.node_ids[i] for i in view.relay_capable))
    return not relaying.isdisjoint(guards)


def check_relay_urls(p: Participation, view: RosterView) -> None:
    """Every member's relay URL has the one relay form and names its own node, or abort.

    Runs before this identity fetches anything from any member (witnesses,
    packets): a roster that makes peers request other URLs is the
    aggregator's doing (it checks the form at registration).
    The same for every identity of this process: checked once per roster.
    """
    loopback = p.relay.allow_loopback_http
    refusal = view.memo(("relay urls", loopback), lambda: _relay_url_refusal(view, loopback))
    if refusal is not None:
        raise Aborted(refusal)


def compare_fingerprints(p: Participation, hosted: frozenset[int] = frozenset()) -> bool:
    """Ask other members' relays for their fingerprint; True once enough agree (→ confirmed).

    Raises :class:`Aborted` on any mismatch. Members that cannot answer yet
    (not processed the roster, unreachable) are asked again later.

    ``hosted``: roster indices of the identities this process hosts. One of them drawn is counted
    as agreeing without a request: it holds this process's one verified
    :class:`~peer.roster.RosterView`, so its answer is this fingerprint by construction, and the
    request went through this host's own relay for nothing (in a 300-identity demo host, 600
    requests and most of the time before the median answers). The members drawn, and so what the
    comparison can detect, are as before.
    """
    view = p.facts(p.roster, "the checked roster").view
    me = view.index_of[bytes(p.node.identity.public)]
    # Only members that relay can be asked (a sender-only one accepts no connection).
    need = min(p.roster_comparisons, sum(1 for i in view.relay_capable if i != me))
    done = p.comparisons
    if len(done.confirmed) < need:
        gen = resolve_rng(p.node.rng)
        for i in _pick_members(gen, view.relay_capable, need - len(done.confirmed), me, done):
            done.asked.add(i)
            if i in hosted:
                done.confirmed.add(i)
                continue
            entry = view.roster.entries[i]
            if entry.relay_url is None:  # relay_capable lists only members with one
                continue
            try:  # what its name resolves to now, just before connecting: global addresses only
                check_relay_address(entry.relay_url, allow_loopback_http=p.relay.allow_loopback_http)
            except ValueError:
                p.relay.count("roster witness refused: relay address")
                continue
            try:
                witness = fetch_witness(
                    entry.relay_url, p.problem.id, allow_loopback=p.relay.allow_loopback_http
                )
            except RefusedAddress:
                p.relay.count("roster witness refused: relay address")
                continue
            except ProtocolError:
                continue  # not ready or unreachable: ask again next time
            try:
                verify_message(witness, bytes(entry.identity))
            except CryptoError:
                continue
            if bytes(witness.identity) != bytes(entry.identity) or witness.problem_id != p.problem.id:
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
    if p.phase == P.ROSTER_CHECKED:
        p._move(P.CONFIRMED)
        if p.relaying:  # the round opened while the comparisons went on
            p._into_round()
    return True


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
