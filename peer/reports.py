"""What one report peer releases in a round: its tokens, its perturbed reports, its routes.

Pure functions of the peer's state (used by :class:`peer.participant.Participant`):

- :func:`fetch_tokens`: one signed batch, one blinded element per report slot
  ``report_slot(problem, partition, k)`` of the peer's own partition; the
  DLEQ proofs are checked against the token key pinned in the signed roster
  (:func:`anonml.crypto.finalize_tokens`).
- :func:`make_reports`: the example binned with the published edges; per
  subset ``h`` the value ``(codes of the subset, label index)`` in C order over
  the problem's label domain K (:class:`~anonml.protocol.LabelSpec`)
  (:func:`anonml.learn.report_values`) perturbed by the mechanism of least
  expected error at ε/k_h (:func:`anonml.privacy.best_mechanism`, thesis
  eq. 7.2), with the :class:`~anonml.privacy.ReleaseSpec` to record for it;
  a uniform stand-in value through the same mechanism when the value cannot
  be computed (exactly k_h reports, whatever the data).
- :func:`choose_path`: exactly ``hops`` distinct other roster members that
  relay (:attr:`~peer.roster.RosterView.relay_capable`: a sender-only member
  is never on a route), uniformly, each relay certificate checked for the
  round (never fewer: a roster too small for that is refused, not routed over
  a shorter path); with trusted first hops (guards) on the roster, the first
  hop is drawn uniformly among them.
- :func:`choose_routes`: ``routes`` such paths for one slot (redundant
  delivery), pairwise disjoint: no relay carries two copies of a slot.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from anonml.crypto import (
    CryptoError,
    Hop,
    Identity,
    RelayKeyCertificate,
    Token,
    finalize_tokens,
)
from anonml.errors import ProtocolError
from anonml.learn import Binning, PeerAssignment, report_values
from anonml.learn.histograms import domain_size
from anonml.privacy import ReleaseSpec, best_mechanism
from anonml.protocol import (
    Bins,
    PrivateReport,
    Problem,
    TokenBatchRequest,
    TokenBatchResponse,
    pack_bits,
    report_slot,
    token_batch_request,
)
from anonml.randomness import resolve_rng
from peer.features import LocalExample, invalid_features
from peer.roster import RosterView

__all__ = ["fetch_tokens", "make_reports", "choose_path", "choose_routes"]


def fetch_tokens(
    problem: Problem,
    identity: Identity,
    token_key: bytes,
    partition: int,
    issue: Callable[[TokenBatchRequest], TokenBatchResponse],
) -> list[Token]:
    """Blind one nonce per slot of ``partition``, have ``issue(batch)`` evaluate, unblind.

    Nonces and blinds come from the OS CSPRNG, never from a simulation's seeded
    generator: a seeded blind would let anyone who knows the seed link the token
    to its issuance.

    Token ``k`` is for ``report_slot(problem, partition, k)``: the report of
    subset ``k`` of that partition, and nothing else (the intake checks it).

    Raises :class:`~anonml.errors.ProtocolError` if the answer has the wrong
    length and :class:`~anonml.crypto.CryptoError` if the answer's one proof does not verify
    against ``token_key`` (the aggregator used another key: a tagging attempt).
    """
    slots = [report_slot(problem.id, partition, k) for k in range(problem.draft.kh)]
    batch, pending = token_batch_request(problem.id, identity, token_key, slots)
    answer: TokenBatchResponse = issue(batch)
    if len(answer.evaluated) != len(slots):
        raise ProtocolError(f"asked {len(slots)} tokens, got {len(answer.evaluated)}")
    return finalize_tokens(pending, answer.wire())


def make_reports(
    problem: Problem,
    assignment: PeerAssignment,
    example: LocalExample | None,
    bins: Bins,
    partition_size: int,
    peer: str,
    rng: np.random.Generator | None = None,
) -> tuple[list[PrivateReport], list[ReleaseSpec], list[str]]:
    """One perturbed report per assigned subset, the releases to record, and the stand-in reasons.

    A report whose value cannot be computed — no example, a value
    :func:`~peer.features.invalid_features` rejects, or any failure while
    binning — is a *stand-in*: a value drawn uniformly from the report's
    domain, perturbed by the same mechanism and recorded the same way. The
    packet count and the release never depend on the data (a missing report
    would tell the aggregator the condition that caused it); the third list
    says, per report, why a stand-in was sent ("" for a real one), for the
    peer's own log only.
    """
    draft = problem.draft
    gen = resolve_rng(rng)
    binning = Binning.from_published(draft.features, bins.edges)
    if example is None:
        bad: dict[int, str] = {}
        codes = None
    else:
        bad = invalid_features(example.x, draft.features)
        x = np.array(example.x, dtype=float)
        x[list(bad)] = 0.0  # only the reports touching them are replaced; the others are binned
        try:
            codes = binning.transform(x[None, :])
        except Exception as exc:  # whatever fails, stand-ins go instead: never silence
            codes, bad = None, {**bad, -1: f"binning failed: {exc}"}
    k = draft.label.k
    reports, specs, standins = [], [], []
    for h, subset in enumerate(assignment.subsets):
        shape = tuple(binning.n_bins[f] for f in subset)
        m = domain_size(shape, k)
        mechanism = best_mechanism(draft.report_epsilon, m, max(1, partition_size))
        why = _standin_reason(example, codes, bad, subset, k)
        if not why and example is not None and codes is not None:  # (why names a missing one)
            try:
                value = report_values(codes[:, list(subset)], np.asarray([example.y]), shape, k)
            except Exception as exc:  # whatever fails, a stand-in goes instead
                why = f"report value failed: {exc}"
        if why:
            value = gen.integers(m, size=1)
        bits = mechanism.perturb(value, gen)[0]
        reports.append(
            PrivateReport(
                problem_id=problem.id,
                partition=assignment.index,
                subset=h,
                mechanism=mechanism.descriptor(),
                bits=pack_bits(bits),
            )
        )
        specs.append(
            ReleaseSpec(
                peer=peer,
                problem=problem.id,
                round=1,
                attributes=(*(draft.features[f].name for f in subset), "label"),
                mechanism=mechanism.kind,
                epsilon=mechanism.epsilon,
                pool=f"partition-{assignment.index}",
            )
        )
        standins.append(why)
    return reports, specs, standins


def _standin_reason(
    example: LocalExample | None,
    codes: np.ndarray | None,
    bad: dict[int, str],
    subset: tuple[int, ...],
    k: int,
) -> str:
    if example is None:
        return "no example"
    if codes is None:
        return bad.get(-1, "binning failed")
    reasons = [bad[f] for f in subset if f in bad]
    if not (isinstance(example.y, int) and 0 <= example.y < k):
        reasons.append(f"label {example.y!r} is not a class index 0..{k - 1}")
    return "; ".join(reasons)


#: :func:`choose_path` draws by rejection while the relays are at least this many times the members
#: it must leave out (itself, ``avoid``, the hops already drawn): each draw is then taken with
#: probability ≥ 1 − 1/this, so a route costs at most 2·hops draws in expectation instead of a list
#: of every relay. (A host's own members, avoided as first choice, are a third of a 3-host roster.)
_SPARSE_FACTOR = 2


def _draw_sparse(
    view: RosterView, me: int, hops: int, avoid: frozenset[bytes], gen: np.random.Generator
) -> list[int]:
    """``hops`` distinct relaying members other than ``me`` and ``avoid``, uniformly: members drawn
    uniformly from :attr:`~peer.roster.RosterView.relay_capable`, one left out redrawn.

    The same law as :func:`numpy.random.Generator.choice` without replacement over the eligible
    members (each accepted draw is uniform over those not yet taken), in O(hops) expected draws
    where listing the eligible members costs O(n) per route (O(n²) per host at 10,000 members).
    Only called when :data:`_SPARSE_FACTOR` bounds the redraws.
    """
    pool = view.relay_capable
    chosen: list[int] = []
    while len(chosen) < hops:
        i = pool[int(gen.integers(len(pool)))]
        if i != me and i not in chosen and view.node_ids[i] not in avoid:
            chosen.append(i)
    return chosen


def choose_path(
    view: RosterView,
    me: int,
    hops: int,
    round_id: int,
    rng: np.random.Generator | None = None,
    avoid: frozenset[bytes] = frozenset(),
    guards: frozenset[bytes] = frozenset(),
) -> list[Hop]:
    """``hops`` distinct relaying roster members other than ``me`` and the node ids in ``avoid``, uniformly
    at random, certificates checked; the first among ``guards`` (node ids) when any of them is a candidate."""
    gen = resolve_rng(rng)
    pool = view.relay_capable
    if not guards and len(pool) >= _SPARSE_FACTOR * (len(avoid) + hops + 1):
        chosen = _draw_sparse(view, me, hops, avoid, gen)
    else:
        others = [i for i in pool if i != me and view.node_ids[i] not in avoid]
        if hops > len(others):
            raise ProtocolError(
                f"a route of {hops} distinct relays needs {hops} other relaying roster members; "
                f"there are {len(others)}"
            )
        firsts = [i for i in others if view.node_ids[i] in guards]
        if firsts:  # a trusted first hop (a guard), then the rest uniformly among the other relays
            first = firsts[int(gen.integers(len(firsts)))]
            rest = [i for i in others if i != first]
            chosen = [first, *(rest[int(c)] for c in gen.choice(len(rest), size=hops - 1, replace=False))]
        else:
            chosen = [others[int(c)] for c in gen.choice(len(others), size=hops, replace=False)]
    path = []
    for member in chosen:
        certificate = view.roster.entries[member].relay_certificate
        if certificate is None:  # relay_capable lists only members with one
            raise ProtocolError(f"roster member {member} relays for no one (no relay certificate)")
        cert = RelayKeyCertificate.from_bytes(bytes(certificate))
        try:
            path.append(Hop.from_certificate(cert, round_id))
        except CryptoError as exc:
            raise ProtocolError(f"roster member {member}'s relay certificate is invalid: {exc}") from None
    return path


def choose_routes(
    view: RosterView,
    me: int,
    hops: int,
    routes: int,
    round_id: int,
    rng: np.random.Generator | None = None,
    avoid: frozenset[bytes] = frozenset(),
    guards: frozenset[bytes] = frozenset(),
) -> list[list[Hop]]:
    """``routes`` paths of ``hops`` relays for one slot's copies, pairwise disjoint (:func:`choose_path`
    each, avoiding ``avoid`` and the relays of the paths drawn before; each starts at one of ``guards``
    while a guard not used by an earlier copy is on the roster).

    Disjoint, so one dead or dropping relay costs at most one copy of a slot,
    and every copy is drawn as uniformly as a single route over the members
    not used yet. ``routes`` is what :func:`~anonml.protocol.route_count`
    says fits the roster; a roster (less ``avoid``) without ``routes · hops``
    other members is refused with :class:`~anonml.errors.ProtocolError`, like a
    route of more hops than members.
    """
    used: set[bytes] = set(avoid)
    paths = []
    for _ in range(routes):
        path = choose_path(view, me, hops, round_id, rng, frozenset(used), guards)
        used.update(h.node_id for h in path)
        paths.append(path)
    return paths
