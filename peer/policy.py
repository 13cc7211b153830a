"""What a peer agrees to: its policy, and the decision on a proposal with the reason.

A proposal names its instancer and featurizer by (name, version, params);
the peer runs only plugins that are *installed* (never code from the
network) and, for automatic acceptance, only those its user allowed. It also
checks the privacy cost: the problem's ε (each peer's total under sequential
composition, DESIGN §5) against the per-problem maximum, and against the
lifetime cap together with what it already committed to other problems.

Manual acceptance (``anonml peer accept ID``) may go past the per-problem
maximum and the allow-lists — the user decided — but never past the lifetime
cap, and never runs a plugin that is not installed or a feature the
featurizer does not declare.

The trust settings (:func:`peer.transcript.trust_refusal`) hold for manual
acceptance too: a proposal declaring fewer than ``witness_threshold`` of the
peer's trusted witnesses, open admission under ``require_credentials``, or an
issuer outside ``trusted_issuers`` is refused either way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from anonml.errors import AnonMLError
from anonml.model import FeatureSpec
from anonml.plugins import Featurizer, Instancer, PluginRef, create
from anonml.protocol import Problem
from peer.transcript import trust_refusal

__all__ = ["PeerPolicy", "Decision", "evaluate_problem", "load_plugins"]


class PeerPolicy(BaseModel):
    """The user's rules for taking part.

    Attributes
    ----------
    allowed_instancers, allowed_featurizers : list of str or None
        ``"name"`` or ``"name==version"``; None allows any installed plugin.
    max_epsilon_per_problem : float
        Largest ε accepted automatically for one problem.
    lifetime_epsilon_cap : float
        Largest total ε over every problem ever accepted (a hard cap).
    auto_accept : bool
        Accept proposals within the policy without asking.
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
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    allowed_instancers: list[str] | None = None
    allowed_featurizers: list[str] | None = None
    max_epsilon_per_problem: float = Field(default=1.0, gt=0, le=20)
    lifetime_epsilon_cap: float = Field(default=10.0, gt=0, le=1000)
    auto_accept: bool = False
    # -- trust: witnesses and admission
    witnesses: list[str] = Field(default_factory=list, max_length=64)
    witness_threshold: int = Field(default=1, ge=1, le=16)
    require_credentials: bool = False
    trusted_issuers: list[str] = Field(default_factory=list, max_length=64)

    @field_validator("witnesses", "trusted_issuers")
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
        with the same kind.
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
    refusal = trust_refusal(
        problem,
        trusted_witnesses=policy.witnesses,
        witness_threshold=policy.witness_threshold,
        require_credentials=policy.require_credentials,
        trusted_issuers=policy.trusted_issuers,
    )
    if refusal is not None:
        return Decision("refuse", refusal)
    if committed + draft.epsilon > policy.lifetime_epsilon_cap + 1e-9:
        return Decision(
            "refuse",
            f"ε={draft.epsilon:g} would bring the lifetime total to {committed + draft.epsilon:g}, "
            f"past the cap of {policy.lifetime_epsilon_cap:g}",
        )
    if not manual and not policy.auto_accept:
        return Decision("ask", "within policy; waiting for 'anonml peer accept' (auto_accept is off)")
    return Decision("accept", "within policy" if not manual else "accepted by the user")
