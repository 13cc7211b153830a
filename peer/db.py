"""The peer's own records: proposals seen, decisions with reasons, participations, models.

SQLAlchemy 2 typed models (SQLite by default). Secrets never go here: round
relay keys and tokens live in memory only and die with the round. What a
peer released is in its :class:`~anonml.privacy.PrivacyLedger`, not here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import String, Text, select
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from anonml.database import BigInt, UTCDateTime, make_engine

__all__ = ["PeerDB", "ProposalRow", "DecisionRow", "ParticipationRow", "ProposalView"]




class _Base(DeclarativeBase):
    type_annotation_map = {datetime: UTCDateTime(), str: String(256), int: BigInt}


class ProposalRow(_Base):
    __tablename__ = "peer_proposals"

    problem_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    aggregator_url: Mapped[str]
    problem_json: Mapped[str] = mapped_column(Text)
    seen_at: Mapped[datetime]


class DecisionRow(_Base):
    """One identity's decision on one problem (``node`` = its fingerprint, hex)."""

    __tablename__ = "peer_decisions"

    problem_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    node: Mapped[str] = mapped_column(String(64), primary_key=True)
    verdict: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text)
    epsilon: Mapped[float]
    decided_at: Mapped[datetime]


class ParticipationRow(_Base):
    """How one identity's part in a problem went, and the model it downloaded."""

    __tablename__ = "peer_participations"

    problem_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    node: Mapped[str] = mapped_column(String(64), primary_key=True)
    status: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(Text, default="")
    roster_fingerprint: Mapped[str | None] = mapped_column(String(64))
    model_json: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime]


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
        _Base.metadata.create_all(self.engine)
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
                        p.status if p else None,
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

    def set_participation(
        self,
        problem_id: str,
        node: str,
        status: str,
        *,
        reason: str = "",
        fingerprint: str | None = None,
        model_json: str | None = None,
    ) -> None:
        with self.sessions() as s, s.begin():
            row = s.get(ParticipationRow, (problem_id, node))
            if row is None:
                row = ParticipationRow(
                    problem_id=problem_id,
                    node=node,
                    status=status,
                    reason=reason,
                    updated_at=datetime.now(UTC),
                )
                s.add(row)
            row.status, row.reason, row.updated_at = status, reason, datetime.now(UTC)
            if fingerprint is not None:
                row.roster_fingerprint = fingerprint
            if model_json is not None:
                row.model_json = model_json

    def participation(self, problem_id: str, node: str) -> ParticipationRow | None:
        with self.sessions() as s:
            return s.get(ParticipationRow, (problem_id, node))
