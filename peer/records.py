"""What one identity agreed to, spent and saw go wrong, read from its state database and its ledger.

The queries ``anonml peer ledger`` / ``proposals`` / ``accept``, the
dashboard and the host share: they need the state database
(:class:`~peer.db.PeerDB`) and the privacy ledger, never the running peer
(relay, worker, participants), so the CLI reads a ledger without loading them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from anonml.errors import AnonMLError
from anonml.privacy import PrivacyLedger
from anonml.privacy.amplification import ShuffleBound, report_pool_bound
from anonml.privacy.budget import Release
from anonml.protocol import Problem
from peer.db import PeerDB
from peer.phases import ParticipationPhase
from peer.policy import Decision, PeerPolicy, admission_text, evaluate_problem

__all__ = [
    "committed_epsilon",
    "decide_by_hand",
    "release_marks",
    "shuffle_bounds",
    "ProposalVerdict",
    "proposal_verdicts",
]


def committed_epsilon(db: PeerDB | None, ledger: PrivacyLedger | None, fingerprint: str) -> float:
    """ε the identity ``fingerprint`` agreed to or spent, over every problem (for the lifetime cap).

    Per problem the larger of what it accepted (``db``) and what its ledger
    recorded; either may be None when it does not exist yet (nothing agreed
    or spent there).
    """
    agreed = db.accepted_epsilon(fingerprint) if db is not None else {}
    spent: dict[str, float] = {}
    for release in ledger.releases(peer=fingerprint) if ledger is not None else []:
        spent[release.problem] = spent.get(release.problem, 0.0) + release.epsilon
    problems = set(agreed) | set(spent)
    return sum(max(agreed.get(p, 0.0), spent.get(p, 0.0)) for p in problems)


@dataclass(frozen=True)
class ProposalVerdict:
    """One proposal seen, and this identity's decision on it — the one view of ``anonml peer proposals``
    and the dashboard's proposal cards.

    ``decided``: the verdict was recorded (an accept or refuse); otherwise it is what the policy would
    decide now (``evaluate_problem``, floors included). ``can_accept``: accepting it by hand would be
    recorded (``manual=True``: the policy's ceilings and floors, not ``auto_accept``), else
    ``accept_blocked`` is the rule that stops it. ``status``: the participation's phase, if any.
    """

    problem: Problem
    aggregator_url: str
    verdict: str
    reason: str
    decided: bool
    status: str | None
    admission: str
    can_accept: bool
    accept_blocked: str


def proposal_verdicts(
    db: PeerDB, ledger: PrivacyLedger | None, fingerprint: str, policy: PeerPolicy
) -> list[ProposalVerdict]:
    """Every proposal ``db`` saw, newest first, with ``fingerprint``'s decision under ``policy``.

    Undecided ones are evaluated against what the identity has committed so far
    (:func:`committed_epsilon`, for the lifetime cap).
    """
    committed = committed_epsilon(db, ledger, fingerprint) if fingerprint else 0.0
    out = []
    for view in db.proposals(fingerprint):
        problem = Problem.model_validate_json(view.problem_json)
        verdict, reason, decided = view.verdict, view.reason or "", view.verdict is not None
        if verdict is None:
            decision = evaluate_problem(problem, policy, committed)
            verdict, reason = decision.verdict, decision.reason
        by_hand = evaluate_problem(problem, policy, committed, manual=True)
        out.append(
            ProposalVerdict(
                problem=problem,
                aggregator_url=view.aggregator_url,
                verdict=verdict,
                reason=reason,
                decided=decided,
                status=view.status,
                admission=admission_text(problem),
                can_accept=by_hand.accept,
                accept_blocked="" if by_hand.accept else by_hand.reason,
            )
        )
    return out


def decide_by_hand(
    db: PeerDB,
    ledger: PrivacyLedger | None,
    policy: PeerPolicy,
    fingerprint: str,
    problem_id: str,
    *,
    accept: bool,
) -> Decision:
    """Record the person's own answer to a proposal (``anonml peer accept``, the dashboard's buttons).

    Accepting re-evaluates the proposal with ``manual=True`` (beyond the
    automatic limits, never past the lifetime cap, the floors or the trust
    rules) and records the verdict; a running daemon joins at its next poll.
    Declining records a refusal the worker never overrides.

    Raises
    ------
    AnonMLError
        The proposal was never seen; accepting it breaks a rule that even the
        person cannot waive (the reason); declining one already accepted.
    """
    row = db.proposal(problem_id)
    if row is None:
        raise AnonMLError(f"no proposal {problem_id!r} seen yet; run 'anonml peer proposals -a URL'")
    problem = Problem.model_validate_json(row.problem_json)
    previous = db.decision(problem_id, fingerprint)
    if not accept:
        if previous is not None and previous.verdict == "accept":
            raise AnonMLError(f"{problem_id} is already accepted: this peer takes part in it")
        decision = Decision("refuse", "declined by the user")
    else:
        decision = evaluate_problem(
            problem, policy, committed_epsilon(db, ledger, fingerprint), manual=True
        )
    db.decide(problem_id, fingerprint, decision.verdict, decision.reason, problem.draft.epsilon)
    if accept and not decision.accept:
        raise AnonMLError(f"cannot accept {problem_id}: {decision.reason}")
    return decision


def release_marks(db: PeerDB | None, fingerprint: str) -> dict[str, str]:
    """Per problem, what went wrong with the identity's releases there ('' when nothing did).

    ``problem failed`` (the aggregator failed the problem: the ε was spent for
    no model), ``stopped: <reason>`` (this peer aborted after releasing),
    ``N of K reports lost`` (counted from the aggregator's receipts when the
    model was downloaded), ``degraded`` (the problem ended degraded), ``incomplete: <reason>`` (this
    identity could not do all of its part: ``partial``).
    """
    marks: dict[str, str] = {}
    for row in db.states(fingerprint) if db is not None else []:
        facts = json.loads(row.facts_json)
        notes = []
        if row.phase == ParticipationPhase.FAILED:
            notes.append("problem failed")
        elif row.phase == ParticipationPhase.ABORTED:
            notes.append(f"stopped: {facts.get('reason', '')}")
        elif row.phase == ParticipationPhase.DEGRADED:
            notes.append("degraded")
        elif row.phase == ParticipationPhase.PARTIAL:
            notes.append(f"incomplete: {facts.get('reason', '')}")
        lost, sent = facts.get("lost"), len(facts.get("token_nonces") or [])
        if lost:
            notes.append(f"{lost} of {sent} reports lost")
        marks[row.problem_id] = "; ".join(notes)
    return marks


def shuffle_bounds(
    db: PeerDB | None, fingerprint: str, releases: Sequence[Release]
) -> dict[str, tuple[ShuffleBound | None, str]]:
    """Per problem of ``releases``, the conditional shuffle bound of the identity's reports, and its basis.

    Each of its k reports (pool ``partition-…``) of ε₀ is shuffled among the
    ``n`` reports of its (partition, subset), ``n = ⌊(members − median pool) /
    k_p⌋`` from the signed roster it checked (saved in its state, so this
    works after a restart and without the daemon):
    :func:`~anonml.privacy.amplification.report_pool_bound` (FMT 2021), the
    same figure the aggregator publishes. A median or calibration answer is
    signed and keeps its local ε. ``anonml peer ledger`` and the dashboard both call this.

    Returns
    -------
    dict
        problem → ``(bound or None, note)``: the note says what the bound rests
        on, or why there is none.
    """
    groups: dict[str, int | None] = {}
    for row in db.states(fingerprint) if db is not None else []:
        groups[row.problem_id] = json.loads(row.facts_json).get("report_group")
    by_problem: dict[str, list[Release]] = {}
    for r in releases:
        by_problem.setdefault(r.problem, []).append(r)
    out: dict[str, tuple[ShuffleBound | None, str]] = {}
    for pid, rs in by_problem.items():
        reports = [r for r in rs if (r.pool or "").startswith("partition-")]
        n = groups.get(pid)
        if not reports:
            signed = "median answers are signed, not shuffled, and so are calibration answers"
            out[pid] = (None, f"no reports ({signed})")
        elif n is None:
            out[pid] = (None, "no checked roster on record: local ε only")
        elif n < 2:
            out[pid] = (None, f"a partition of {n} peer: nothing to hide among")
        else:
            bound = report_pool_bound(float(reports[0].epsilon), len(reports), int(n))
            out[pid] = (bound, f"partitions of ≥ {n} peers")
    return out
