"""The peer's own records: proposals seen, decisions with reasons, participations, models.

SQLAlchemy 2 typed models (SQLite by default). What a peer released is in
its :class:`~anonml.privacy.PrivacyLedger`, not here.

What a restart needs (:meth:`peer.host.PeerHost.resume`) is here too:
each participation's phase and facts (in its one ``peer_participations``
row), the round relay keys (``peer_round_keys``,
deleted when the round closes at ``t_r``, with the replay tags its relay saw,
``peer_replay_tags``), the packets an identity built and
whether each went (``peer_outbox``), and the packets its relay holds with
their release times (``peer_held_packets``, deleted once released) with how
many packets each node's relay accepted in the round (``peer_relay_counts``,
its per-round cap must not start again at a restart) and each member posted
to it (``peer_relay_quotas``, likewise for each member's quota). Every
secret among them — relay keys, tokens, packets — is stored sealed under
the identity's at-rest key (:class:`peer.vault.Vault`), never in clear.

Schema. :class:`PeerDB` brings the file to the newest revision of
:mod:`peer.migrations.state` when it opens it (:func:`anonml.database.migrate`),
so a state DB written by an earlier version keeps its rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    Integer,
    LargeBinary,
    String,
    Text,
    delete,
    insert,
    select,
    update,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from anonml.database import BigInt, UTCDateTime, increment, make_engine, migrate, upsert_insert

__all__ = [
    "PeerDB",
    "ProposalRow",
    "DecisionRow",
    "ParticipationRow",
    "ProposalView",
    "RoundKeyRow",
    "OutboxRow",
    "HeldRow",
    "ReplayTagRow",
    "RelayCountRow",
    "RelayQuotaRow",
]


class _Base(DeclarativeBase):
    type_annotation_map = {datetime: UTCDateTime(), str: String(256), int: BigInt}


class _PerParticipation:
    """Keyed by one identity's part in one problem: (``problem_id``, ``node``), first in the table."""

    problem_id: Mapped[str] = mapped_column(String(64), primary_key=True, sort_order=-1)
    node: Mapped[str] = mapped_column(String(64), primary_key=True, sort_order=-1)  # fingerprint, hex


class _PerRound:
    """Keyed by one node's round: (``node``, ``round_id``), first in the table."""

    node: Mapped[str] = mapped_column(String(64), primary_key=True, sort_order=-1)  # node id, hex
    round_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, sort_order=-1)


class ProposalRow(_Base):
    __tablename__ = "peer_proposals"

    problem_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    aggregator_url: Mapped[str]
    problem_json: Mapped[str] = mapped_column(Text)
    seen_at: Mapped[datetime]


class AggregatorKeyRow(_Base):
    """The Ed25519 key pinned for an aggregator URL (first proposal seen, or the policy's)."""

    __tablename__ = "peer_aggregator_keys"

    url: Mapped[str] = mapped_column(String(512), primary_key=True)
    signing_key: Mapped[bytes] = mapped_column(LargeBinary(32))
    pinned_at: Mapped[datetime]


class DecisionRow(_PerParticipation, _Base):
    """One identity's decision on one problem (``node`` = its fingerprint, hex)."""

    __tablename__ = "peer_decisions"

    verdict: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text)
    epsilon: Mapped[float]
    decided_at: Mapped[datetime]


class ParticipationRow(_PerParticipation, _Base):
    """One identity's part in one problem: its phase (:class:`~peer.phases.ParticipationPhase`), why it
    stopped, the roster it checked, the model it downloaded, and the facts a restart needs (secrets
    sealed: :mod:`peer.vault`)."""

    __tablename__ = "peer_participations"

    phase: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(Text, default="")
    roster_fingerprint: Mapped[str | None] = mapped_column(String(64))
    model_json: Mapped[str | None] = mapped_column(Text)
    facts_json: Mapped[str] = mapped_column(Text)
    sealed_tokens: Mapped[bytes | None] = mapped_column(LargeBinary)
    updated_at: Mapped[datetime]


class RoundKeyRow(_PerRound, _Base):
    """One identity's round relay key, sealed, until the round closes at ``t_r``."""

    __tablename__ = "peer_round_keys"

    problem_id: Mapped[str] = mapped_column(String(64))
    sealed_key: Mapped[bytes] = mapped_column(LargeBinary)
    certificate: Mapped[bytes] = mapped_column(LargeBinary)


class OutboxRow(_PerParticipation, _Base):
    """One packet an identity built for its round (sealed), its send time, and whether it went."""

    __tablename__ = "peer_outbox"

    slot: Mapped[int] = mapped_column(Integer, primary_key=True)
    send_at: Mapped[float] = mapped_column(Float)
    url: Mapped[str] = mapped_column(Text)
    sealed_packet: Mapped[bytes] = mapped_column(LargeBinary)
    sent: Mapped[bool] = mapped_column(Boolean, default=False)


class HeldRow(_Base):
    """One packet this peer's relay holds for release (sealed), with its time and last chance."""

    __tablename__ = "peer_held_packets"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node: Mapped[str] = mapped_column(String(64))  # node id, hex
    round_id: Mapped[int] = mapped_column(BigInteger)
    release_at: Mapped[float] = mapped_column(Float)
    deadline: Mapped[float] = mapped_column(Float)
    url: Mapped[str] = mapped_column(Text)
    content_type: Mapped[str] = mapped_column(String(64))
    what: Mapped[str] = mapped_column(String(32))
    sealed: Mapped[bytes] = mapped_column(LargeBinary)


class ReplayTagRow(_PerRound, _Base):
    """One replay tag a relay saw in a round (a restarted relay must still refuse the replay)."""

    __tablename__ = "peer_replay_tags"

    tag: Mapped[bytes] = mapped_column(LargeBinary(32), primary_key=True)


class RelayCountRow(_PerRound, _Base):
    """How many packets a node's relay accepted in a round (its cap, :func:`peer.relay.packet_cap`)."""

    __tablename__ = "peer_relay_counts"

    accepted: Mapped[int] = mapped_column(Integer)


class RelayQuotaRow(_PerRound, _Base):
    """How many packets one member posted to a node's relay in a round (its quota,
    :func:`peer.relayauth.member_quota`)."""

    __tablename__ = "peer_relay_quotas"

    poster: Mapped[str] = mapped_column(String(32), primary_key=True)  # the member's node id, hex
    accepted: Mapped[int] = mapped_column(Integer)


@dataclass(frozen=True)
class ProposalView:
    problem_id: str
    aggregator_url: str
    problem_json: str
    verdict: str | None
    reason: str | None
    status: str | None


class PeerDB:
    """Read and write the peer's records; each call is one short transaction."""

    def __init__(self, url: str) -> None:
        self.engine = make_engine(url)
        migrate(self.engine, "peer.migrations.state")
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)

    def close(self) -> None:
        self.engine.dispose()

    def record_proposal(self, problem_id: str, aggregator_url: str, problem_json: str) -> bool:
        """Store a proposal once; True if it was new."""
        with self.sessions() as s, s.begin():
            if s.get(ProposalRow, problem_id) is not None:
                return False
            s.add(
                ProposalRow(
                    problem_id=problem_id,
                    aggregator_url=aggregator_url,
                    problem_json=problem_json,
                    seen_at=datetime.now(UTC),
                )
            )
            return True

    def pin_aggregator(self, url: str, signing_key: bytes) -> bytes:
        """The key pinned for ``url``: ``signing_key`` if none was (pinned now), else the earlier one."""
        with self.sessions() as s, s.begin():
            row = s.get(AggregatorKeyRow, url)
            if row is None:
                s.add(AggregatorKeyRow(url=url, signing_key=bytes(signing_key), pinned_at=datetime.now(UTC)))
                return bytes(signing_key)
            return bytes(row.signing_key)

    def proposal(self, problem_id: str) -> ProposalRow | None:
        with self.sessions() as s:
            return s.get(ProposalRow, problem_id)

    def proposals(self, node: str) -> list[ProposalView]:
        with self.sessions() as s:
            rows = s.scalars(select(ProposalRow).order_by(ProposalRow.seen_at.desc())).all()
            out = []
            for row in rows:
                d = s.get(DecisionRow, (row.problem_id, node))
                p = s.get(ParticipationRow, (row.problem_id, node))
                out.append(
                    ProposalView(
                        row.problem_id,
                        row.aggregator_url,
                        row.problem_json,
                        d.verdict if d else None,
                        d.reason if d else None,
                        p.phase if p else None,
                    )
                )
            return out

    def decide(self, problem_id: str, node: str, verdict: str, reason: str, epsilon: float) -> None:
        with self.sessions() as s, s.begin():
            row = s.get(DecisionRow, (problem_id, node))
            if row is None:
                s.add(
                    DecisionRow(
                        problem_id=problem_id,
                        node=node,
                        verdict=verdict,
                        reason=reason,
                        epsilon=epsilon,
                        decided_at=datetime.now(UTC),
                    )
                )
            else:
                row.verdict, row.reason, row.epsilon = verdict, reason, epsilon
                row.decided_at = datetime.now(UTC)

    def decision(self, problem_id: str, node: str) -> DecisionRow | None:
        with self.sessions() as s:
            return s.get(DecisionRow, (problem_id, node))

    def accepted_epsilon(self, node: str) -> dict[str, float]:
        """ε agreed to per accepted problem."""
        with self.sessions() as s:
            rows = s.scalars(
                select(DecisionRow).where(DecisionRow.node == node, DecisionRow.verdict == "accept")
            )
            return {r.problem_id: r.epsilon for r in rows}

    def unstarted_accepts(self) -> dict[str, set[str]]:
        """Per identity fingerprint, the problems it accepted and has no participation row for yet.

        One query for every hosted identity, and one that returns only what is left to start: a
        host polls it several times a second, and every accept it ever started is excluded by the
        participations' primary key, so a poll costs no row per hosted identity.
        """
        started = (ParticipationRow.problem_id == DecisionRow.problem_id) & (
            ParticipationRow.node == DecisionRow.node
        )
        out: dict[str, set[str]] = {}
        with self.sessions() as s:
            for node, problem_id in s.execute(
                select(DecisionRow.node, DecisionRow.problem_id)
                .outerjoin(ParticipationRow, started)
                .where(DecisionRow.verdict == "accept", ParticipationRow.node.is_(None))
            ):
                out.setdefault(node, set()).add(problem_id)
        return out

    def participation(self, problem_id: str, node: str) -> ParticipationRow | None:
        with self.sessions() as s:
            return s.get(ParticipationRow, (problem_id, node))

    # -- what a restart needs ------------------------------------------------------------
    def save_participation(
        self,
        problem_id: str,
        node: str,
        phase: str,
        facts_json: str,
        sealed_tokens: bytes | None,
        *,
        reason: str = "",
        fingerprint: str | None = None,
        model_json: str | None = None,
    ) -> None:
        """Write a participation's phase, restart facts and what the dashboard and CLI read (reason,
        roster fingerprint, model): one row, one statement (an upsert; a fingerprint or model not
        given keeps the stored one).

        Every identity saves at each step of its round, hundreds per poll on a large host: a read of
        the row before its write doubled the statements (and read the stored model's whole text).
        """
        values: dict[str, object] = {
            "phase": phase,
            "reason": reason,
            "updated_at": datetime.now(UTC),
            "facts_json": facts_json,
            "sealed_tokens": sealed_tokens,
        }
        if fingerprint is not None:
            values["roster_fingerprint"] = fingerprint
        if model_json is not None:
            values["model_json"] = model_json
        with self.sessions() as s, s.begin():
            stmt = upsert_insert(s, ParticipationRow).values(problem_id=problem_id, node=node, **values)
            s.execute(stmt.on_conflict_do_update(index_elements=["problem_id", "node"], set_=values))

    def states(self, node: str) -> list[ParticipationRow]:
        """Every participation of the identity ``node`` (what a restart resumes, what the ledger marks)."""
        with self.sessions() as s:
            return list(s.scalars(select(ParticipationRow).where(ParticipationRow.node == node)))

    def save_round_key(self, node: str, round_id: int, problem_id: str, sealed: bytes, cert: bytes) -> None:
        with self.sessions() as s, s.begin():
            s.merge(
                RoundKeyRow(
                    node=node, round_id=round_id, problem_id=problem_id, sealed_key=sealed, certificate=cert
                )
            )

    def round_key(self, node: str, round_id: int) -> RoundKeyRow | None:
        with self.sessions() as s:
            return s.get(RoundKeyRow, (node, round_id))

    def forget_round_key(self, node: str, round_id: int) -> None:
        """Delete the sealed round key (the round closed, or the participation ended)."""
        with self.sessions() as s, s.begin():
            s.execute(delete(RoundKeyRow).where(RoundKeyRow.node == node, RoundKeyRow.round_id == round_id))

    def save_outbox(self, problem_id: str, node: str, packets: list[tuple[float, str, bytes]]) -> None:
        """The identity's built packets (send time, first hop, sealed packet), slot by slot."""
        with self.sessions() as s, s.begin():
            s.execute(delete(OutboxRow).where(OutboxRow.problem_id == problem_id, OutboxRow.node == node))
            for slot, (when, url, sealed) in enumerate(packets):
                s.add(
                    OutboxRow(
                        problem_id=problem_id,
                        node=node,
                        slot=slot,
                        send_at=when,
                        url=url,
                        sealed_packet=sealed,
                        sent=False,
                    )
                )

    def add_outbox(self, problem_id: str, node: str, packets: list[tuple[int, float, str, bytes]]) -> None:
        """More built packets (slot, send time, first hop, sealed packet): copies sent around a dead relay."""
        with self.sessions() as s, s.begin():
            for slot, when, url, sealed in packets:
                s.add(
                    OutboxRow(
                        problem_id=problem_id, node=node, slot=slot, send_at=when, url=url,
                        sealed_packet=sealed, sent=False,
                    )
                )

    def reroute_outbox(self, problem_id: str, node: str, slot: int, url: str, sealed: bytes) -> None:
        """Replace one slot's packet and first hop (the sender rebuilt it over another route)."""
        with self.sessions() as s, s.begin():
            s.execute(
                update(OutboxRow)
                .where(OutboxRow.problem_id == problem_id, OutboxRow.node == node, OutboxRow.slot == slot)
                .values(url=url, sealed_packet=sealed)
            )

    def outbox(self, problem_id: str, node: str) -> list[OutboxRow]:
        with self.sessions() as s:
            return list(
                s.scalars(
                    select(OutboxRow)
                    .where(OutboxRow.problem_id == problem_id, OutboxRow.node == node)
                    .order_by(OutboxRow.slot)
                )
            )

    def mark_sent(self, problem_id: str, node: str, slot: int) -> None:
        with self.sessions() as s, s.begin():
            s.execute(
                update(OutboxRow)
                .where(OutboxRow.problem_id == problem_id, OutboxRow.node == node, OutboxRow.slot == slot)
                .values(sent=True)
            )

    def clear_outbox(self, problem_id: str, node: str) -> None:
        with self.sessions() as s, s.begin():
            s.execute(delete(OutboxRow).where(OutboxRow.problem_id == problem_id, OutboxRow.node == node))

    def hold(
        self,
        node: str,
        round_id: int,
        release_at: float,
        deadline: float,
        url: str,
        content_type: str,
        what: str,
        sealed: bytes,
    ) -> int:
        """Record a held packet and count it under the node's cap; its row id (to :meth:`unhold`)."""
        (row_id,) = self.hold_many(
            [(node, round_id, release_at, deadline, url, content_type, what, sealed)],
            [],
            {(node, round_id): 1},
        )
        return row_id

    def hold_many(
        self,
        held: list[tuple[str, int, float, float, str, str, str, bytes]],
        tags: list[tuple[str, int, bytes]],
        accepted: dict[tuple[str, int], int] | None = None,
        quotas: dict[tuple[str, int, str], int] | None = None,
    ) -> list[int]:
        """One transaction: the replay tags ``(node, round, tag)``, the held packets (``hold``'s
        arguments, in order), ``accepted`` packets counted per ``(node, round)`` under the
        relay's cap (:meth:`relay_count`) and ``quotas`` per ``(node, round, poster)`` under each
        member's quota (:meth:`relay_quotas`); the held rows' ids, in order.

        What a relay does for a batch of packets before it answers for any of
        them: once this returns, every tag, packet and count of the batch
        survives a restart (a restarted relay grants no fresh cap); if it
        raises, none was stored.
        """
        fields = ("node", "round_id", "release_at", "deadline", "url", "content_type", "what", "sealed")
        with self.sessions() as s, s.begin():
            # Core statements on the tables (not ORM bulk inserts): one executemany each.
            conn = s.connection()
            if tags:  # each tag is new: the relay's replay cache refused any it had seen
                conn.execute(
                    insert(ReplayTagRow.__table__), [{"node": n, "round_id": r, "tag": t} for n, r, t in tags]
                )
            for (node, round_id), count in (accepted or {}).items():
                increment(s, RelayCountRow, {"node": node, "round_id": round_id}, "accepted", by=count)
            for (node, round_id, poster), count in (quotas or {}).items():
                key = {"node": node, "round_id": round_id, "poster": poster}
                increment(s, RelayQuotaRow, key, "accepted", by=count)
            if not held:
                return []
            stmt = insert(HeldRow.__table__).returning(HeldRow.__table__.c.id, sort_by_parameter_order=True)
            return list(conn.execute(stmt, [dict(zip(fields, row, strict=True)) for row in held]).scalars())

    def relay_count(self, node: str, round_id: int) -> int:
        """Packets the node's relay accepted in the round, over every run of this host."""
        with self.sessions() as s:
            row = s.get(RelayCountRow, (node, round_id))
            return 0 if row is None else row.accepted

    def relay_quotas(self, node: str, round_id: int) -> dict[str, int]:
        """Packets each member (node id, hex) posted to the node's relay in the round, over every run."""
        with self.sessions() as s:
            rows = s.scalars(
                select(RelayQuotaRow).where(RelayQuotaRow.node == node, RelayQuotaRow.round_id == round_id)
            )
            return {row.poster: row.accepted for row in rows}

    def unhold(self, row_id: int) -> None:
        self.unhold_many([row_id])

    def unhold_many(self, row_ids: list[int]) -> None:
        """Delete held packets (released or lost) in one transaction."""
        if not row_ids:
            return
        with self.sessions() as s, s.begin():
            s.execute(delete(HeldRow).where(HeldRow.id.in_(row_ids)))

    def resumable(self) -> tuple[set[str], set[str]]:
        """``(identities with a participation state, relay nodes holding packets)``, in two queries."""
        with self.sessions() as s:
            stated = set(s.scalars(select(ParticipationRow.node).distinct()))
            holding = set(s.scalars(select(HeldRow.node).distinct()))
        return stated, holding

    def held(self, node: str) -> list[HeldRow]:
        with self.sessions() as s:
            return list(s.scalars(select(HeldRow).where(HeldRow.node == node).order_by(HeldRow.release_at)))

    def add_replay_tag(self, node: str, round_id: int, tag: bytes) -> None:
        with self.sessions() as s, s.begin():
            s.merge(ReplayTagRow(node=node, round_id=round_id, tag=tag))

    def replay_tags(self, node: str, round_id: int) -> list[bytes]:
        with self.sessions() as s:
            rows = s.scalars(
                select(ReplayTagRow.tag).where(ReplayTagRow.node == node, ReplayTagRow.round_id == round_id)
            )
            return list(rows)

    def forget_replay_tags(self, node: str, round_id: int) -> None:
        """Delete the round's replay tags, its relay count and its members' quotas (the round closed)."""
        with self.sessions() as s, s.begin():
            s.execute(
                delete(ReplayTagRow).where(ReplayTagRow.node == node, ReplayTagRow.round_id == round_id)
            )
            s.execute(
                delete(RelayCountRow).where(RelayCountRow.node == node, RelayCountRow.round_id == round_id)
            )
            s.execute(
                delete(RelayQuotaRow).where(RelayQuotaRow.node == node, RelayQuotaRow.round_id == round_id)
            )
