"""What a peer agrees to: its policy, and the decision on a proposal with the reason.

A proposal names its instancer and featurizer by (name, version, params);
the peer runs only plugins that are *installed* (never code from the
network) and, for automatic acceptance, only those its user allowed. It also
checks the privacy cost: the problem's ε (each peer's total under sequential
composition, DESIGN §5) against the per-problem maximum, and against the
lifetime cap together with what it already committed to other problems.

Manual acceptance (``anonml peer accept ID``) may go past the per-problem
maximum and the allow-lists — the user decided — but never past the lifetime
cap, never past the anonymity floors below, and never runs a plugin that is
not installed or a feature the featurizer does not declare.

Anonymity floors
----------------
The aggregator is an adversary (DESIGN §7): the parameters it proposes decide
how many people a report hides among. A peer refuses, before it releases
anything, a problem whose

* onion routes are shorter than ``min_hops`` relays (``draft.hops``; a route
  is exactly ``hops`` distinct members other than the sender, never shortened);
* median pool is more than ``max_pool_fraction`` of the roster (the report
  partitions shrink as the pool grows);
* median answer costs more than ``max_median_epsilon`` (default: the per-problem
  maximum);
* label domain has more than ``max_label_classes`` classes or target bins (the
  wire format already refuses a label spec beyond
  :data:`~anonml.protocol.MAX_LABEL_CLASSES`, with a duplicate class name or
  a numeric range that is not finite: such a proposal is never parsed, so never
  joined);

which :func:`evaluate_problem` checks on the proposal; and, once the signed
roster is out (:func:`check_roster_floors`, before any token request or
answer), a roster of fewer than ``max(min_peers, min_roster_size)`` members,
fewer than ``hops + 1`` members, or a smallest report partition
``floor((n − median pool) / k_p)`` below ``min_anonymity_set`` (with k_p = n
every partition is one person: its reports are attributed by partition alone).

Relays
------
Members that relay state so in their signed registration; sender-only members
(``relay = False``: behind NAT, they open connections and accept none) take part
in everything else, and routes are drawn among the ``r`` members that relay. So a
peer also refuses a roster with fewer than ``min_relays`` relaying members (or
too few for a route of ``hops`` relays other than itself), and one where
concentrated relaying makes a fully hostile route likely
(:func:`hostile_route_probability`): if a share ``a`` (``hostile_share``) of the
roster's ``n`` members is hostile and, at worst, every one of them relays, a
fraction ``f = min(1, a·n/r)`` of the relays is hostile and a route of ``hops``
relays drawn uniformly is hostile end to end — the aggregator links the report to
its sender — with probability ``≈ f^hops``, refused above ``max_hostile_route``.
Fewer relays in the same roster raise ``f``: at ``a = 0.2`` and 3 hops, every
member relaying gives ``0.2³ = 0.008``, half of them ``0.4³ = 0.064``. Relays the
peer trusts for the first hop (``guards``, as Tor's guard nodes) that are on the
roster's relays take the first hop of each of its routes, which is then not
hostile by that trust: the figure is 0 (``docs/threat-model.md``, "Relays").

The trust settings (:func:`peer.transcript.trust_refusal`) hold for manual
acceptance too: a proposal declaring fewer than ``witness_threshold`` of the
peer's trusted witnesses, open admission under ``require_credentials``, or an
issuer outside ``trusted_issuers`` is refused either way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from anonml.errors import AnonMLError
from anonml.model import FeatureKind, FeatureSpec
from anonml.plugins import Featurizer, Instancer, PluginRef, create
from anonml.protocol import MAX_LABEL_CLASSES, Problem
from peer.transcript import trust_refusal

__all__ = [
    "PeerPolicy",
    "Decision",
    "evaluate_problem",
    "load_plugins",
    "check_roster_floors",
    "hostile_route_probability",
    "admission_text",
]


class PeerPolicy(BaseModel):
    """The user's rules for taking part.

    Attributes
    ----------
    allowed_instancers, allowed_featurizers : list of str or None
        ``"name"`` or ``"name==version"``; None allows any installed plugin.
    max_epsilon_per_problem : float
        Largest ε accepted automatically for one problem.
    lifetime_epsilon_cap : float
        Largest total ε over every problem ever accepted (a hard cap, also
        enforced by the ledger itself: :meth:`anonml.privacy.PrivacyLedger.set_lifetime_cap`).
    auto_accept : bool
        Accept proposals within the policy without asking.
    min_roster_size : int
        Fewest roster members this peer reports among (the problem's own
        ``min_peers`` applies too: the larger of the two).
    min_anonymity_set : int
        Fewest report peers in the smallest partition, ``floor((n − pool) / k_p)``.
    min_hops : int
        Fewest relays on a route (a problem with ``hops`` below it is refused).
    max_pool_fraction : float
        Largest median-pool fraction accepted.
    max_median_epsilon : float or None
        Largest ε of one median answer (None: ``max_epsilon_per_problem``).
    max_label_classes : int
        Most label classes (or numeric target bins) accepted: each report's
        domain is K times its cells, so a fine label cuts a partition into
        cells of few peers each.
    offered_sources : list of str or None
        The event sources this person offers to problems (None: all); events of
        other sources are never read. Set by the person, never by a proposal.
    allow_loopback_http : bool
        Test and demo mode: accept roster relay URLs that are plain ``http``
        on a loopback host. Off by default: relay URLs must be ``https``
        (:func:`anonml.protocol.check_relay_url`).
    require_witnesses : bool
        Refuse every problem unless ``witnesses`` names at least
        ``witness_threshold`` trusted witnesses (the default: without a witness
        the aggregator can show this peer a roster, bins or proposal nobody
        else sees). Only simulations turn it off.
    witnesses : list of str
        Hex public identities of the witness services this peer trusts
        (``anonml witness identity``). When any are named, a proposal must
        declare at least ``witness_threshold`` of them, and no stage proceeds
        without that many of their cosignatures on this peer's own transcript.
    witness_threshold : int
        Cosignatures needed from trusted witnesses.
    require_credentials : bool
        Refuse problems with open registration (anyone, Sybils included, may join).
    trusted_issuers : list of str
        Hex identities of credential issuers this peer accepts (empty: any issuer).
    aggregator_keys : dict of str to str
        Aggregator URL → hex Ed25519 key (64 digits) this peer requires of proposals
        from that URL. A URL not named is pinned by the first proposal seen from it
        (:meth:`peer.db.PeerDB.pin_aggregator`); either way a proposal signed by
        another key is refused.
    relay : bool
        This peer offers a relay for others' routes (it must accept inbound
        connections at its relay URL). False: a sender-only peer, which registers
        without a relay URL or certificate and uses outbound connections only.
    relay_only : bool
        An always-on relay (``anonml relay serve``): it holds no data, so every
        report and median answer it owes is a stand-in (DESIGN §10).
    min_relays : int
        Fewest relaying members of a roster this peer takes part in.
    hostile_share : float
        Share of a roster's members this peer assumes hostile (Sybils of the
        aggregator), all of them relaying at worst (module docstring, Relays).
    max_hostile_route : float
        Largest accepted probability that one of its routes is hostile end to end,
        ``min(1, hostile_share·n/r)^hops``.
    guards : list of str
        Hex public identities of relays this peer trusts for the first hop.
    check_reachability : bool
        Before registering a relay with an aggregator, ask that aggregator to
        connect to this peer's relay URL (:mod:`peer.reachability`): a peer
        behind NAT finds out it cannot relay instead of registering a relay
        nobody reaches. Simulations on loopback turn it off unless asked.
    unreachable : {"sender-only", "refuse"}
        What a peer whose relay the check found unreachable does: register
        sender-only (the default) or refuse the problem, with the reason. An
        always-on relay (``relay_only``) always refuses: relaying is all it does.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    allowed_instancers: list[str] | None = None
    allowed_featurizers: list[str] | None = None
    max_epsilon_per_problem: float = Field(default=1.0, gt=0, le=20)
    lifetime_epsilon_cap: float = Field(default=10.0, gt=0, le=1000)
    auto_accept: bool = False
    # Anonymity floors (module docstring).
    min_roster_size: int = Field(default=20, ge=2, le=1_000_000)
    min_anonymity_set: int = Field(default=10, ge=1, le=1_000_000)
    min_hops: int = Field(default=3, ge=1, le=4)
    max_pool_fraction: float = Field(default=0.5, ge=0, lt=1)
    max_median_epsilon: float | None = Field(default=None, gt=0, le=20)
    max_label_classes: int = Field(default=MAX_LABEL_CLASSES, ge=2, le=MAX_LABEL_CLASSES)
    offered_sources: list[str] | None = None
    allow_loopback_http: bool = False
    # Trust: witnesses and admission.
    require_witnesses: bool = True
    witnesses: list[str] = Field(default_factory=list, max_length=64)
    witness_threshold: int = Field(default=1, ge=1, le=16)
    require_credentials: bool = False
    trusted_issuers: list[str] = Field(default_factory=list, max_length=64)
    aggregator_keys: dict[str, str] = Field(default_factory=dict, max_length=256)
    # Relays (module docstring).
    relay: bool = True
    relay_only: bool = False
    min_relays: int = Field(default=10, ge=1, le=1_000_000)
    hostile_share: float = Field(default=0.2, gt=0, le=1)
    max_hostile_route: float = Field(default=0.01, ge=0, le=1)
    guards: list[str] = Field(default_factory=list, max_length=64)
    check_reachability: bool = True
    unreachable: Literal["sender-only", "refuse"] = "sender-only"

    @model_validator(mode="after")
    def _relay_only_relays(self) -> PeerPolicy:
        if self.relay_only and not self.relay:
            raise ValueError("a relay-only peer (relay_only) must relay (relay = true)")
        return self

    @classmethod
    def for_simulation(cls, **fields: Any) -> PeerPolicy:
        """A policy for loopback simulations and tests with small rosters; never for a real person.

        The scale floors become ``min_roster_size = 2``, ``min_relays = 2`` and
        ``min_anonymity_set = 1`` (a few dozen simulated peers cannot meet the
        defaults), relays may be plain http on loopback and are not checked for
        reachability (``check_reachability``); witnesses are
        required only when ``fields`` names some. The route and pool floors, the
        ε limits and everything in ``fields`` are as for any peer.
        """
        defaults = {
            "min_roster_size": 2,
            "min_anonymity_set": 1,
            "min_relays": 2,
            "allow_loopback_http": True,
            "require_witnesses": bool(fields.get("witnesses")),
            "check_reachability": False,
        }
        return cls(**{**defaults, **fields})

    @property
    def median_epsilon_cap(self) -> float:
        """Largest ε of one median answer accepted automatically."""
        cap = self.max_median_epsilon
        return cap if cap is not None else self.max_epsilon_per_problem

    def floors_text(self) -> str:
        """The floors, as shown to the person (``anonml peer proposals``, ``peer start``)."""
        return (
            f"roster ≥ {self.min_roster_size}, anonymity set ≥ {self.min_anonymity_set}, "
            f"hops ≥ {self.min_hops}, median pool ≤ {self.max_pool_fraction:g}, "
            f"median ε ≤ {self.median_epsilon_cap:g}, relays ≥ {self.min_relays}, "
            f"P(route fully hostile) ≤ {self.max_hostile_route:g} at {self.hostile_share:g} hostile"
        )

    @field_validator("aggregator_keys")
    @classmethod
    def _signing_keys(cls, keys: dict[str, str]) -> dict[str, str]:
        for url, key in keys.items():
            if not re.fullmatch(r"[0-9a-fA-F]{64}", key):
                raise ValueError(f"aggregator key for {url[:80]!r} is not an Ed25519 key (64 hex digits)")
        return {url.rstrip("/"): key.lower() for url, key in keys.items()}

    @field_validator("witnesses", "trusted_issuers", "guards")
    @classmethod
    def _hex_identities(cls, keys: list[str]) -> list[str]:
        for key in keys:
            if not re.fullmatch(r"[0-9a-fA-F]{128}", key):
                raise ValueError(f"{key[:20]!r} is not a public identity (128 hex digits)")
        return [key.lower() for key in keys]


@dataclass(frozen=True)
class Decision:
    """Accept, refuse, or ask the user; and why (shown to the user and stored)."""

    verdict: Literal["accept", "refuse", "ask"]
    reason: str

    @property
    def accept(self) -> bool:
        return self.verdict == "accept"


def _allowed(ref: PluginRef, allowed: list[str] | None, installed_version: str) -> bool:
    if allowed is None:
        return True
    return ref.name in allowed or f"{ref.name}=={installed_version}" in allowed


def load_plugins(problem: Problem) -> tuple[Instancer, Featurizer, list[int]]:
    """The problem's installed plugins and, for each proposed feature, its featurizer column.

    Raises
    ------
    AnonMLError
        (:class:`~anonml.errors.PluginNotFound`, :class:`~anonml.errors.PluginError`)
        when a plugin is not installed, has another version or refuses the
        params; when a proposed feature is not one the featurizer declares
        with the same kind (and, for a categorical feature, the same categories
        in the same order: a report's domain is the proposal's categories).
    """
    draft = problem.draft
    instancer = create("instancer", draft.instancer)
    featurizer = create("featurizer", draft.featurizer)
    declared: dict[str, tuple[int, FeatureSpec]] = {
        spec.name: (i, spec) for i, spec in enumerate(featurizer.features())
    }
    columns = []
    for spec in draft.features:
        found = declared.get(spec.name)
        if found is None:
            raise AnonMLError(
                f"feature {spec.name!r} is not computed by featurizer {featurizer.name!r} "
                f"(it declares {', '.join(sorted(declared))})"
            )
        if found[1].kind is not spec.kind:
            raise AnonMLError(
                f"feature {spec.name!r} is {spec.kind.value} in the proposal but "
                f"{found[1].kind.value} in featurizer {featurizer.name!r}"
            )
        if spec.kind is FeatureKind.CATEGORICAL and found[1].categories != spec.categories:
            raise AnonMLError(
                f"feature {spec.name!r} has categories {list(spec.categories)} in the proposal but "
                f"{list(found[1].categories)} in featurizer {featurizer.name!r}"
            )
        columns.append(found[0])
    return instancer, featurizer, columns


def evaluate_problem(
    problem: Problem,
    policy: PeerPolicy,
    committed: float,
    *,
    manual: bool = False,
    plugins: tuple[Instancer, Featurizer, list[int]] | None = None,
) -> Decision:
    """Decide on ``problem`` given ε already ``committed`` to other problems.

    ``manual`` is an explicit ``accept`` by the user (module docstring);
    ``plugins`` are :func:`load_plugins`'s result when the caller has them.
    """
    draft = problem.draft
    try:
        instancer, featurizer, _ = plugins if plugins is not None else load_plugins(problem)
    except AnonMLError as exc:
        return Decision("refuse", f"cannot run this problem: {exc}")
    if not manual:
        if not _allowed(draft.instancer, policy.allowed_instancers, instancer.version):
            return Decision("refuse", f"instancer {draft.instancer.name!r} is not in the allowed list")
        if not _allowed(draft.featurizer, policy.allowed_featurizers, featurizer.version):
            return Decision("refuse", f"featurizer {draft.featurizer.name!r} is not in the allowed list")
        if draft.epsilon > policy.max_epsilon_per_problem:
            return Decision(
                "refuse",
                f"ε={draft.epsilon:g} exceeds this peer's maximum of "
                f"{policy.max_epsilon_per_problem:g} per problem",
            )
        median_cap = policy.median_epsilon_cap
        if draft.median.pool_fraction > 0 and draft.numeric_features and draft.median_epsilon > median_cap:
            return Decision(
                "refuse", f"median ε={draft.median_epsilon:g} exceeds this peer's maximum of {median_cap:g}"
            )
    if committed + draft.epsilon > policy.lifetime_epsilon_cap + 1e-9:
        return Decision(
            "refuse",
            f"ε={draft.epsilon:g} would bring the lifetime total to {committed + draft.epsilon:g}, "
            f"past the cap of {policy.lifetime_epsilon_cap:g}",
        )
    floor = proposal_floors(problem, policy)
    if floor is not None:
        return Decision("refuse", floor)
    if policy.require_witnesses and len(policy.witnesses) < policy.witness_threshold:
        return Decision(
            "refuse",
            f"this peer trusts {len(policy.witnesses)} witness(es) and its policy requires "
            f"{policy.witness_threshold}: name the witnesses you trust "
            "(anonml peer start --witness <identity hex>)",
        )
    refusal = trust_refusal(
        problem,
        trusted_witnesses=policy.witnesses,
        witness_threshold=policy.witness_threshold,
        require_credentials=policy.require_credentials,
        trusted_issuers=policy.trusted_issuers,
    )
    if refusal is not None:
        return Decision("refuse", refusal)
    if not manual and not policy.auto_accept:
        return Decision("ask", "within policy; waiting for 'anonml peer accept' (auto_accept is off)")
    return Decision("accept", "within policy" if not manual else "accepted by the user")


def proposal_floors(problem: Problem, policy: PeerPolicy) -> str | None:
    """Why ``problem``'s own parameters break an anonymity floor (module docstring), or None."""
    draft = problem.draft
    if draft.hops < policy.min_hops:
        return f"routes of {draft.hops} hop(s) are shorter than this peer's floor of {policy.min_hops}"
    if draft.median.pool_fraction > policy.max_pool_fraction:
        return (
            f"median pool fraction {draft.median.pool_fraction:g} exceeds this peer's maximum of "
            f"{policy.max_pool_fraction:g}"
        )
    if draft.label.k > policy.max_label_classes:
        return (
            f"the label ({draft.label.describe()}) has {draft.label.k} classes, more than this peer's "
            f"maximum of {policy.max_label_classes}"
        )
    return None


def hostile_route_probability(
    members: int, relays: int, hops: int, hostile_share: float, *, guarded: bool = False
) -> float:
    """Probability that a route of ``hops`` relays is hostile end to end: ``min(1, a·n/r)^hops``.

    With a share ``a`` of the ``n`` members hostile and, at worst, all of them
    among the ``r`` that relay, a fraction ``f = min(1, a·n/r)`` of the relays is
    hostile; ``hops`` distinct relays drawn uniformly are all hostile with
    probability ``C(f·r, h)/C(r, h) ≤ f^h``, the figure used (as Tor's analyses
    use ``f^h`` for a path of h relays chosen uniformly). ``guarded``: the first
    hop is a relay the peer trusts, so the route is never hostile end to end by
    that trust: 0.
    """
    if relays < 1 or members < relays:
        raise ValueError(f"{relays} relays among {members} members")
    if guarded:
        return 0.0
    return min(1.0, hostile_share * members / relays) ** hops


def check_roster_floors(
    problem: Problem,
    n_members: int,
    median_pool_size: int,
    policy: PeerPolicy,
    *,
    relays: int | None = None,
    me_relays: bool = True,
    guarded: bool = False,
) -> None:
    """Refuse a signed roster below this peer's floors (module docstring); before any release.

    ``relays``: members of the roster that relay (None: all); ``me_relays``: this
    peer is one of them (its routes then draw among the others); ``guarded``: one of
    the policy's guards relays on this roster.

    Raises
    ------
    AnonMLError
        Naming the floor and the roster's value: fewer members than
        ``max(min_peers, min_roster_size)``; fewer than ``hops + 1`` (a route
        of ``hops`` distinct other members would be impossible); a smallest
        report partition ``floor((n − pools) / k_p)`` below ``min_anonymity_set`` (pools: the
        median and calibration pools, :meth:`~anonml.protocol.ProblemDraft.report_pool_size`);
        fewer relaying members than ``min_relays`` or than a route needs; a route
        hostile end to end more likely than ``max_hostile_route``;
        or a proposal floor (:func:`proposal_floors`).
    """
    draft = problem.draft
    reason = proposal_floors(problem, policy)
    if reason is not None:
        raise AnonMLError(reason)
    need = max(draft.min_peers, policy.min_roster_size)
    if n_members < need:
        raise AnonMLError(
            f"the roster has {n_members} members, fewer than {need} "
            f"(the larger of the problem's min_peers={draft.min_peers} and this peer's floor of "
            f"{policy.min_roster_size})"
        )
    if n_members < draft.hops + 1:
        raise AnonMLError(
            f"the roster has {n_members} members: too few for routes of {draft.hops} distinct other members"
        )
    smallest = draft.report_pool_size(n_members, median_pool_size) // draft.kp
    if smallest < policy.min_anonymity_set:
        pools = n_members - draft.report_pool_size(n_members, median_pool_size)
        raise AnonMLError(
            f"the smallest report partition holds {smallest} peers ((n={n_members} − pool "
            f"{pools}) / k_p={draft.kp}), fewer than this peer's anonymity floor of "
            f"{policy.min_anonymity_set}"
        )
    r = n_members if relays is None else relays
    if r < policy.min_relays:
        raise AnonMLError(
            f"{r} of the roster's {n_members} members relay, fewer than this peer's floor of "
            f"{policy.min_relays}"
        )
    if r - (1 if me_relays else 0) < draft.hops:
        raise AnonMLError(
            f"{r} of the roster's {n_members} members relay: too few for routes of {draft.hops} distinct "
            "relays other than this peer"
        )
    figure = hostile_route_probability(n_members, r, draft.hops, policy.hostile_share, guarded=guarded)
    if figure > policy.max_hostile_route:
        share = min(1.0, policy.hostile_share * n_members / r)
        raise AnonMLError(
            f"{r} of the roster's {n_members} members relay: if {policy.hostile_share:.0%} of the members "
            f"are hostile and all relay, {share:.0%} of the relays are, and a route of {draft.hops} hops is "
            f"hostile end to end with probability {share:.3g}^{draft.hops} = {figure:.3g}, above this "
            f"peer's maximum of {policy.max_hostile_route:g} (name trusted first hops: guards)"
        )


def admission_text(problem: Problem) -> str:
    """Who may register, in the words a person deciding should read — with what open admission costs.

    With open registration the aggregator may register as many fake peers as it
    likes; if they fill a person's partition, the shuffle's amplification is gone
    and only the local ε of the reports protects that person (``docs/threat-model.md``,
    "Admission and Sybils"). The proposals page and ``anonml peer proposals`` both say so.
    """
    d = problem.draft
    if d.admission.mode == "open":
        return (
            "open: anyone may register — the aggregator too, as many fake peers as it likes; if they "
            f"surround you in your partition, only your local ε = {d.epsilon:g} protects you"
        )
    issuer = bytes(d.admission.issuer or b"").hex()[:16]
    return f"credentials of issuer {issuer}… for scope {d.admission.scope}"
