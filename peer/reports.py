"""What one report peer releases in a round: its tokens, its perturbed reports, its routes.

Pure functions of the peer's state (used by :class:`peer.participant.Participant`):

- :func:`fetch_tokens`: one signed batch, one blinded element per report slot
  ``report_slot(problem, partition, k)`` of the peer's own partition; the
  DLEQ proofs are checked against the token key pinned in the signed roster
  (:func:`anonml.crypto.finalize_tokens`).
- :func:`make_reports`: the example binned with the published edges; per
  subset ``h`` the value ``(codes of the subset, label)`` in C order
  (:func:`anonml.learn.report_values`) perturbed by the mechanism of least
  expected error at ε/k_h (:func:`anonml.privacy.best_mechanism`, thesis
  eq. 7.2), with the :class:`~anonml.privacy.ReleaseSpec` to record for it.
- :func:`choose_path`: ``hops`` distinct other roster members, uniformly, each
  relay certificate checked for the round.
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
    TokenPublicKey,
    finalize_tokens,
    request_tokens,
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
    TokenSlotRequest,
    pack_bits,
    report_slot,
    sign_message,
)
from peer.features import LocalExample
from peer.roster import RosterView

__all__ = ["fetch_tokens", "make_reports", "choose_path"]


def fetch_tokens(
    problem: Problem,
    identity: Identity,
    token_key: bytes,
    partition: int,
    issue: Callable[[TokenBatchRequest], TokenBatchResponse],
    rng: np.random.Generator | None = None,
) -> list[Token]:
    """Blind one nonce per slot of ``partition``, have ``issue(batch)`` evaluate, unblind.

    Token ``k`` is for ``report_slot(problem, partition, k)``: the report of
    subset ``k`` of that partition, and nothing else (the intake checks it).

    Raises :class:`~anonml.errors.ProtocolError` if the answer has the wrong
    length and :class:`~anonml.crypto.CryptoError` if a proof does not verify
    against ``token_key`` (the aggregator used another key: a tagging attempt).
    """
    slots = [report_slot(problem.id, partition, k) for k in range(problem.draft.kh)]
    key = TokenPublicKey(bytes(token_key))
    pending = [request_tokens(key, slot, 1, rng) for slot in slots]
    batch = sign_message(
        TokenBatchRequest(
            problem_id=problem.id,
            identity=bytes(identity.public),
            requests=tuple(
                TokenSlotRequest(slot=slot, blinded=r.message())
                for slot, r in zip(slots, pending, strict=True)
            ),
            signature=bytes(64),
        ),
        identity,
    )
    answer: TokenBatchResponse = issue(batch)
    if len(answer.responses) != len(pending):
        raise ProtocolError(f"asked {len(pending)} tokens, got {len(answer.responses)}")
    return [finalize_tokens(r, bytes(z))[0] for r, z in zip(pending, answer.responses, strict=True)]


def make_reports(
    problem: Problem,
    assignment: PeerAssignment,
    example: LocalExample,
    bins: Bins,
    partition_size: int,
    peer: str,
    rng: np.random.Generator | None = None,
) -> tuple[list[PrivateReport], list[ReleaseSpec]]:
    """One perturbed report per assigned subset, and the releases to record before sending."""
    draft = problem.draft
    binning = Binning.from_thresholds(draft.features, dict(enumerate(bins.edges)))
    codes = binning.transform(example.x[None, :])
    reports, specs = [], []
    for h, subset in enumerate(assignment.subsets):
        shape = tuple(binning.n_bins[f] for f in subset)
        value = report_values(codes[:, list(subset)], np.asarray([example.y]), shape)
        mechanism = best_mechanism(draft.report_epsilon, domain_size(shape), max(1, partition_size))
        bits = mechanism.perturb(value, rng)[0]
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
    return reports, specs


def choose_path(
    view: RosterView, me: int, hops: int, round_id: int, rng: np.random.Generator | None = None
) -> list[Hop]:
    """``hops`` distinct roster members other than ``me``, uniformly at random, certificates checked."""
    others = [i for i in range(len(view.keys)) if i != me]
    gen = rng if rng is not None else np.random.default_rng()
    path = []
    for c in gen.choice(len(others), size=min(hops, len(others)), replace=False):
        member = others[int(c)]
        cert = RelayKeyCertificate.from_bytes(bytes(view.roster.entries[member].relay_certificate))
        try:
            path.append(Hop.from_certificate(cert, round_id))
        except CryptoError as exc:
            raise ProtocolError(f"roster member {member}'s relay certificate is invalid: {exc}") from None
    return path
