"""One identity's report round: its bins checked, its reports and cover packets built over routes,
re-routed around failed relays, and sent at their times (docs/protocol.md, "Report round")."""

from __future__ import annotations

import logging
import time

from anonml.addresses import connect_check
from anonml.crypto import (
    CryptoError,
    Hop,
    PublicIdentity,
    Redemption,
    SphinxRelay,
    WindowSchedule,
    build_cover_packet,
    build_packet,
    send_time,
)
from anonml.errors import BudgetExceeded, ProtocolError
from anonml.outbound import RefusedAddress, post
from anonml.protocol import (
    Bins,
    CosignatureBundle,
    Problem,
    ReportReceipts,
    check_relay_address,
    route_count,
    transcript_hash,
    verify_message,
)
from anonml.randomness import resolve_rng
from peer import participation_store, roster_checks
from peer.client import HTTPRefusal
from peer.participation import Participation
from peer.phases import (
    Aborted,
    IllegalTransition,
    ParticipationPhase,
    Preparation,
    RosterFacts,
)
from peer.relay import RelayRound, StoredReplayCache
from peer.relayauth import (
    RELAY_POST_TYPE,
    identity_post_key,
    member_quota,
    post_key,
    relay_node_of,
    seal_post,
)
from peer.releases import REFUSED_ADDRESS, already_processed
from peer.reports import choose_path, choose_routes, fetch_tokens, make_reports
from peer.roster import RosterView

P = ParticipationPhase
log = logging.getLogger("anonml.peer")


def open_round(p: Participation, bins: Bins, view: RosterView | None = None) -> None:
    """Check the signed bins and start relaying for this round (before anyone sends).

    An identity that stopped taking part still relays for the others — it
    releases nothing of its own by doing so — using ``view`` (the host's
    verified roster) if it never got to check one itself. A sender-only
    identity opens no relay round: it checks the bins and moves on.
    """
    view = p.roster.view if p.roster is not None else view
    if view is None or (p.keys is None and p.relays) or p.relaying:
        return
    draft = p.problem.draft
    refusal = _bins_refusal(bins, p.problem, view)
    if refusal is not None:
        raise Aborted(refusal)
    if bins.slots_per_peer != draft.kh or len(bins.edges) != len(draft.features):
        raise Aborted("bins do not match the proposal (slot count or feature count)")
    if not p.relays:
        p._round_open = True
        if p.phase in (P.CONFIRMED, P.ANSWERED):
            p._into_round()
        return
    if p.keys is None:
        raise Aborted("this identity relays but holds no round relay key")
    schedule = WindowSchedule(bins.t_s, bins.delta, bins.t_r)
    relays = len(view.relay_capable)
    hops = min(draft.hops, relays - 1)
    # Every member sends r packets per slot (redundant delivery), each counted in the quotas.
    quota = member_quota(draft.kh * routes_per_slot(p, view), hops, len(view.keys), relays)
    replays = None if p.db is None else StoredReplayCache(p.db, p.node.node_id, p.problem.round_id)
    p.relay.open_round(
        RelayRound(
            node_id=p.node.node_id,
            round_id=p.problem.round_id,
            relay=SphinxRelay(p.keys.key, replays),
            schedule=schedule,
            routes=view.routes,
            destination=_node_id(bytes(p.problem.aggregator)),
            intake_url=p.client.intake_url,
            stages=hops,
            # Each member spends only its own quota (peer.relayauth); the node's total is their sum.
            # Every member posts (a sender-only one its first hops); only relaying ones are posted to.
            members=view.poster_keys(),
            quota=quota,
            max_packets=quota * (len(view.keys) - 1),
            vault=p.node.vault,
            owner=p.node.fingerprint,
            grace=bins.grace,
        )
    )
    if p.phase in (P.CONFIRMED, P.ANSWERED):
        p._into_round()


def check_bins(p: Participation, bins: Bins, bundle: CosignatureBundle) -> None:
    """The witnesses co-signed this peer's own bins transcript (Problem, Roster, Bins, schedule).

    Nothing of this identity's own is sent for the round before this passed.
    """
    roster = p.facts(p.roster, "the checked roster")
    view = roster.view
    refusal = _bins_refusal(bins, p.problem, view)
    if refusal is not None:
        raise Aborted(refusal)
    transcript = view.memo(
        ("transcript", "bins", p.problem.id, bytes(bins.signature)),
        lambda: transcript_hash("bins", p.problem, view.roster, bins),
    )
    roster_checks._verify_bundle(p, bundle, "bins", transcript, view)
    p.bins = bins


def build_packets(p: Participation) -> list[tuple[float, str, bytes]]:
    """This identity's packets for the round (relaying → reporting), kept sealed in the state DB.

    Returns ``(send time, first hop URL, packet)`` for exactly
    ``r · slots_per_peer`` packets (``r`` = :func:`routes_per_slot`: packet
    ``j`` is copy ``j mod r`` of slot ``j // r``, each copy over its own
    route, a report's copies identical inside); the caller schedules them.
    """
    roster = p.facts(p.roster, "the checked roster")
    if p.phase != P.RELAYING:
        raise IllegalTransition(f"packets are built while relaying, not in phase {p.phase}")
    if p.bins is None:
        raise Aborted("the bins were not co-signed by the witnesses; nothing is sent")
    bins = p.bins
    schedule = WindowSchedule(bins.t_s, bins.delta, bins.t_r)
    if time.time() >= bins.t_s + bins.delta:
        raise Aborted("the bins arrived after the send window closed")
    payloads: list[tuple[Redemption, bytes] | None]
    copies = routes_per_slot(p, roster.view)
    if roster.assignment.role == "report":
        payloads = [payload for payload in _reports(p, bins, roster) for _ in range(copies)]
    else:  # cover multiplied the same way: the packet count says nothing of the role
        payloads = [None] * (bins.slots_per_peer * copies)
    packets = []
    preparation = prepare_round(p)
    for payload, path in zip(payloads, preparation.paths, strict=True):
        first = roster.view.routes[path[0].node_id]
        packets.append((send_time(schedule, p.node.rng), first, _packet(p, payload, path)))
    p._payloads = payloads
    p.window_end = bins.t_s + bins.delta
    if p.db is not None:
        vault = p.node.vault
        p.db.save_outbox(
            p.problem.id, p.node.fingerprint, [(w, u, vault.seal(packet)) for w, u, packet in packets]
        )
    p._move(P.REPORTING)
    return packets


def _packet(p: Participation, payload: tuple[Redemption, bytes] | None, path: tuple[Hop, ...]) -> bytes:
    """The onion packet of one slot over ``path``: its report, or cover (``payload`` None).

    Onion keys from the OS CSPRNG, never from the simulation's seeded rng.
    """
    # Reports and cover are sealed to the X25519 half of the aggregator identity the signed Problem
    # names — a document inside the bins transcript the witnesses co-signed (check_bins), so every
    # peer seals to the same key and none to one shown only to it.
    aggregator = PublicIdentity.from_bytes(bytes(p.problem.aggregator))
    round_id, destination, intake_key = p.problem.round_id, aggregator.node_id, aggregator.relay_key
    if payload is None:
        return build_cover_packet(
            list(path), round_id=round_id, destination=destination, intake_key=intake_key
        )
    redemption, report = payload
    return build_packet(
        list(path), redemption, report, round_id=round_id, destination=destination, intake_key=intake_key
    )


def reroute(p: Participation, slot: int, failed_url: str | None) -> tuple[str, bytes] | None:
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
    roster = p.facts(p.roster, "the checked roster")
    with p._reroute_lock:
        if p._payloads is None or p.preparation is None:
            return None
        try:
            if failed_url is not None:  # None: a relay of the route was found dead (route_around)
                p._avoid.add(relay_node_of(failed_url))
        except ValueError:
            return None
        me = roster.view.index_of[bytes(p.node.identity.public)]
        path = _fresh_path(p, roster.view, me, slot)
        if path is None:
            return None
        packet = _packet(p, p._payloads[slot], path)
        paths = list(p.preparation.paths)
        paths[slot] = path
        p.preparation = Preparation(tuple(paths), p.preparation.tokens)
        url = roster.view.routes[path[0].node_id]
        participation_store.save(p)
        if p.db is not None:
            sealed = p.node.vault.seal(packet)
            p.db.reroute_outbox(p.problem.id, p.node.fingerprint, slot, url, sealed)
    return url, packet


def routes_per_slot(p: Participation, view: RosterView) -> int:
    """Routes each slot travels over in this problem with ``view``'s roster
    (:func:`~anonml.protocol.route_count`: the problem's ``routes``, fewer when the roster is small)."""
    draft = p.problem.draft
    # Counted over the members that relay (a sender-only member is on no route), the same figure
    # for every member, so all send the same number of packets.
    return route_count(draft.routes, draft.hops, len(view.relay_capable))


def _cohosted(p: Participation, view: RosterView) -> frozenset[bytes]:
    """Members whose relay is on this identity's own relay host (its relay URL's base).

    Left out of its routes while the other members suffice: that host sees the
    sender anyway (relays there add no anonymity against it) and dies with it
    (a copy routed there is lost with the sender's own unsent packets).
    """
    if p.relay_url is None:  # a sender-only identity: no relay of its own
        return frozenset()
    own = p.relay_url.split("/relay/")[0] + "/relay/"

    def members_at(own: str) -> frozenset[bytes]:
        return frozenset(
            node for node, entry in zip(view.node_ids, view.roster.entries, strict=True)
            if entry.relay_url is not None and entry.relay_url.startswith(own)
        )  # fmt: skip

    # The same set for every identity of the host (O(n) each: O(n²) per host at 10,000 members).
    return view.memo(("cohosted", own), lambda: members_at(own))


def report_slot(p: Participation, packet: int, copies: int) -> int:
    """The report slot packet ``packet`` carries (packet ``j < r·k_h``: slot ``j // r``)."""
    return p._copy_of.get(packet, packet // copies)


def _fresh_path(p: Participation, view: RosterView, me: int, packet: int) -> tuple[Hop, ...] | None:
    """A route for packet ``packet`` avoiding the relays that failed this round and, while enough
    members are left, those of the other copies of its report slot; None when none is left."""
    if p.preparation is None:  # no routes were built: there is nothing to route afresh
        return None
    copies = routes_per_slot(p, view)
    mine = report_slot(p, packet, copies)
    siblings = {
        h.node_id
        for j, other in enumerate(p.preparation.paths)
        if j != packet and report_slot(p, j, copies) == mine
        for h in other
    }
    for avoid in (p._avoid | siblings | _cohosted(p, view), p._avoid | siblings, p._avoid):
        try:
            draft, round_id = p.problem.draft, p.problem.round_id
            rng, guards = p.node.rng, p.guard_nodes
            return tuple(choose_path(view, me, draft.hops, round_id, rng, frozenset(avoid), guards))
        except ProtocolError:
            continue
    return None


def crosses_failed(p: Participation, packet: int) -> bool:
    """Whether packet ``packet``'s route crosses a relay found dead this round (:meth:`route_around`)."""
    with p._reroute_lock:
        if p.preparation is None or packet >= len(p.preparation.paths):
            return False
        return any(h.node_id in p._avoid for h in p.preparation.paths[packet])


def route_around(p: Participation, dead: frozenset[bytes]) -> list[tuple[int, float, str, bytes]]:
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
    roster = p.facts(p.roster, "the checked roster")
    out: list[tuple[int, float, str, bytes]] = []
    with p._reroute_lock:
        p._avoid |= dead
        now, end = time.time(), p.window_end
        if p._payloads is None or p.preparation is None or end is None or now >= end:
            return out
        me = roster.view.index_of[bytes(p.node.identity.public)]
        copies = routes_per_slot(p, roster.view)
        gen = resolve_rng(p.node.rng)
        for j in sorted(p._sent_slots - p._resent):
            if not any(h.node_id in dead for h in p.preparation.paths[j]):
                continue
            p._resent.add(j)
            path = _fresh_path(p, roster.view, me, j)
            if path is None:
                continue
            new = len(p.preparation.paths)
            p._copy_of[new] = report_slot(p, j, copies)
            p.preparation = Preparation((*p.preparation.paths, path), p.preparation.tokens)
            p._payloads.append(p._payloads[j])
            packet = _packet(p, p._payloads[j], path)
            out.append((new, float(gen.uniform(now, end)), roster.view.routes[path[0].node_id], packet))
        if out:
            participation_store.save(p)
            if p.db is not None:
                sealed = [(j, when, url, p.node.vault.seal(b)) for j, when, url, b in out]
                p.db.add_outbox(p.problem.id, p.node.fingerprint, sealed)
    return out


def prepare_round(p: Participation) -> Preparation:
    """Routes (:func:`routes_per_slot` pairwise disjoint ones per slot, certificates checked) and, for a
    report peer, its tokens.

    Ahead of the round, as soon as the roster is confirmed; issuance opens
    when the roster is published, so this runs while the median rounds go
    on. Tokens: one per report slot (:func:`peer.reports.fetch_tokens`);
    median-pool identities take none.
    """
    if p.preparation is not None:
        return p.preparation
    roster = p.facts(p.roster, "the checked roster")
    me = roster.view.index_of[bytes(p.node.identity.public)]
    draft, copies, view = p.problem.draft, routes_per_slot(p, roster.view), roster.view
    cohosted, round_id, guards = _cohosted(p, view), p.problem.round_id, p.guard_nodes
    paths: tuple[tuple[Hop, ...], ...] = ()
    for _ in range(draft.kh):
        try:
            routes = choose_routes(view, me, draft.hops, copies, round_id, p.node.rng, cohosted, guards)
        except ProtocolError:  # too few members elsewhere: any other member, as before
            routes = choose_routes(view, me, draft.hops, copies, round_id, p.node.rng, guards=guards)
        paths += tuple(tuple(path) for path in routes)
    tokens = None
    if roster.assignment.role == "report":
        try:
            tokens = tuple(
                fetch_tokens(
                    p.problem,
                    p.node.identity,
                    bytes(roster.view.roster.token_key),
                    roster.assignment.index,
                    p.client.tokens,
                )
            )
        except CryptoError as exc:
            raise Aborted(f"token proof does not verify against the pinned key: {exc}") from None
    p.preparation = Preparation(paths, tokens)
    participation_store.save(p)
    return p.preparation


def _reports(p: Participation, bins: Bins, roster: RosterFacts) -> list[tuple[Redemption, bytes]]:
    if bins.slots_per_peer != len(roster.assignment.subsets):
        raise Aborted(
            f"bins announce {bins.slots_per_peer} slots for {len(roster.assignment.subsets)} subsets"
        )
    n = p.problem.draft.report_pool_size(len(roster.view.keys), roster.view.roster.median_pool_size)
    tokens = p.facts(prepare_round(p).tokens, "this identity's tokens")
    p.compute_example()
    reports, specs, standins = make_reports(
        p.problem,
        roster.assignment,
        p.example,
        bins,
        n // p.problem.draft.kp,
        p.node.fingerprint,
        p.node.rng,
    )
    try:
        p.node.ledger.record_many(specs)  # all k_h releases, before any is sent
    except BudgetExceeded as exc:
        raise Aborted(str(exc)) from None
    for h, why in enumerate(standins):
        if why:
            p._standin(f"report {h}: {why}")
    out = []
    for token, report in zip(tokens, reports, strict=True):
        data = report.to_bytes()
        out.append((token.redeem(data), data))
    return out


def send(p: Participation, slot: int, url: str, packet: bytes) -> None:
    """POST one packet to its first hop (called by the dispatcher at its send time), authenticated
    as this identity's round relay key (sender-only: its identity's long-term X25519 key) to the
    first hop's (:mod:`peer.relayauth`).

    The hop's name is resolved first: a host that is not a global address is a
    :data:`~peer.relay.REFUSED_ADDRESS` refusal, and nothing is sent.
    """
    try:
        check_relay_address(url, allow_loopback_http=p.relay.allow_loopback_http)
    except ValueError as exc:
        raise HTTPRefusal(url, REFUSED_ADDRESS, str(exc)) from None
    view = p.facts(p.roster, "the checked roster").view
    hop = relay_node_of(url)
    public = view.relay_keys().get(hop)
    if public is None:
        raise Aborted(f"first hop {hop.hex()} has no verified relay key in the roster")
    if p.relays:
        key = post_key(p.facts(p.keys, "this identity's round relay key").key, public)
    else:
        key = identity_post_key(p.node.identity, public)
    round_id = p.problem.round_id
    body = seal_post(key, round_id, hop, p.node.node_id, [packet])
    try:  # the address connected to is judged again: a name rebound since the check reaches nothing
        reply = post(
            url,
            body,
            RELAY_POST_TYPE,
            address_check=connect_check(allow_loopback=p.relay.allow_loopback_http),
        )
    except RefusedAddress as exc:
        raise HTTPRefusal(url, REFUSED_ADDRESS, str(exc)) from None
    if reply.status >= 300 and not already_processed(reply.status, reply.text[:300]):
        raise HTTPRefusal(url, reply.status, reply.text[:200], reply.retry_after)
    if reply.status >= 300:  # a retry whose first copy arrived (the hop's replay refusal): sent
        p.relay.count("packets already processed at the first hop")
    p.sent += 1
    with p._reroute_lock:
        p._sent_slots.add(slot)
    if p.db is not None:
        p.db.mark_sent(p.problem.id, p.node.fingerprint, slot)


def count_lost_reports(p: Participation, receipts: frozenset[bytes] | None = None) -> int | None:
    """How many of this identity's reports never reached the intake (relay counters too).

    Compares its tokens' nonces with the aggregator's sorted receipts
    (:class:`~anonml.protocol.ReportReceipts`), locally: a relay that
    accepted a packet and dropped it is noticed by the sender. None when
    this identity sent no reports or the receipts are not available.
    ``receipts``: the digests, when the host fetched them once for all its
    identities (the same public list for each); None: fetched here.
    """
    if not p.tokens or not p.built:
        return None
    if receipts is None:
        try:
            receipts = frozenset(map(bytes, p.client.receipts(p.problem.id).digests))
        except ProtocolError:
            p.relay.count("receipts unavailable")
            return None
    held = receipts
    lost = sum(ReportReceipts.digest(t.nonce) not in held for t in p.tokens)
    p.relay.count("reports delivered", len(p.tokens) - lost)
    p.relay.count("reports lost in transit", lost)
    return lost


def _bins_refusal(bins: Bins, problem: Problem, view: RosterView) -> str | None:
    """Why ``bins`` are refused as not signed by the problem's aggregator; None if they are.

    The same check for every identity of this process (:meth:`open_round` and :meth:`check_bins`
    of each): once per signed bins document and aggregator key, memoised in ``view`` under all of
    the document, signature included, so any other bins are checked anew.
    """

    def check() -> str | None:
        try:
            verify_message(bins, bytes(problem.aggregator))
        except CryptoError as exc:
            return f"bins are not signed by the aggregator: {exc}"
        return None

    return view.memo(("bins signature", bytes(problem.aggregator), bins.model_dump_json()), check)


def _node_id(public_identity: bytes) -> bytes:
    return PublicIdentity.from_bytes(public_identity).node_id
