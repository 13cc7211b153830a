"""The aggregator's state: SQLAlchemy 2 typed models (SQLite by default, any URL).

Tables
------
``problems``            one row per proposal: the signed Problem, the secret seed and
                        token key, the phase, the roster / bins / model once published,
                        and the witnesses' cosignature bundles once complete.
``registrations``       who registered (signed, with its credential), in registration order.
``median_queries``      every IsGreater query asked, signed, with its members.
``median_answers``      one signed bit per (peer, problem); identified by design.
``reports``             the anonymous reports. Nothing here links to a peer: the
                        primary key is 16 random bytes, there is no arrival time,
                        no relay address and no token or issuance id, and on SQLite
                        the table is ``WITHOUT ROWID`` so not even the physical row
                        order records arrival order.
``reject_counts``       how many requests were refused, per problem and reason.
``spent_tokens`` /      from :func:`anonml.crypto.create_crypto_tables`: redeemed tokens
``token_issuance``      (key id, slot, nonce) and evaluations (key id, peer, slot).
"""

from __future__ import annotations

import secrets
from datetime import datetime

from sqlalchemy import (
    ForeignKey,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    select,
)
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from anonml.crypto import create_crypto_tables
from anonml.database import UTCDateTime

__all__ = [
    "Base",
    "ProblemRow",
    "RegistrationRow",
    "MedianQueryRow",
    "MedianAnswerRow",
    "ReportRow",
    "RejectRow",
    "create_tables",
    "count_reject",
    "new_report_id",
]




class Base(DeclarativeBase):
    type_annotation_map = {datetime: UTCDateTime(), bytes: LargeBinary(), str: String(256)}


class ProblemRow(Base):
    """A proposal and everything published about it."""

    __tablename__ = "problems"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    problem_json: Mapped[str] = mapped_column(Text)
    seed: Mapped[bytes]  # secret until the roster reveals it
    token_secret: Mapped[bytes]  # the POPRF key (never leaves the aggregator)
    round_id: Mapped[int]
    phase: Mapped[str] = mapped_column(String(16), index=True)
    message: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime]
    phase_started: Mapped[float]  # POSIX time the current phase began
    phase_seconds_json: Mapped[str] = mapped_column(Text, default="{}")
    close_requested: Mapped[bool] = mapped_column(default=False)
    train_requested: Mapped[bool] = mapped_column(default=False)
    roster_json: Mapped[str | None] = mapped_column(Text)
    bins_json: Mapped[str | None] = mapped_column(Text)
    model_json: Mapped[str | None] = mapped_column(Text)
    roster_cosignatures_json: Mapped[str | None] = mapped_column(Text)  # CosignatureBundle, once complete
    bins_cosignatures_json: Mapped[str | None] = mapped_column(Text)
    t_r: Mapped[float | None]
    median_answered: Mapped[int] = mapped_column(default=0)


class RegistrationRow(Base):
    """One signed registration; ``id`` gives registration order (the roster order)."""

    __tablename__ = "registrations"
    __table_args__ = (UniqueConstraint("problem_id", "identity", name="uq_registration_peer"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    problem_id: Mapped[str] = mapped_column(ForeignKey("problems.id"), index=True)
    identity: Mapped[bytes] = mapped_column(LargeBinary(64))
    relay_url: Mapped[str]
    certificate: Mapped[bytes] = mapped_column(LargeBinary(136))
    signature: Mapped[bytes] = mapped_column(LargeBinary(64))
    credential_json: Mapped[str | None] = mapped_column(Text)  # AdmissionCredential, when admission needs one


class MedianQueryRow(Base):
    """One IsGreater query of the median search (signed JSON kept as sent)."""

    __tablename__ = "median_queries"

    problem_id: Mapped[str] = mapped_column(ForeignKey("problems.id"), primary_key=True)
    feature: Mapped[int] = mapped_column(primary_key=True)
    step: Mapped[int] = mapped_column(primary_key=True)
    query_json: Mapped[str] = mapped_column(Text)
    open: Mapped[bool] = mapped_column(default=True)


class MedianAnswerRow(Base):
    """One randomised answer; a peer answers once per problem."""

    __tablename__ = "median_answers"
    __table_args__ = (UniqueConstraint("problem_id", "identity", name="uq_median_answer_peer"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    problem_id: Mapped[str] = mapped_column(ForeignKey("problems.id"), index=True)
    feature: Mapped[int]
    step: Mapped[int]
    identity: Mapped[bytes] = mapped_column(LargeBinary(64))
    bit: Mapped[bool]


class ReportRow(Base):
    """An anonymous report: random key, no time, no address, no token (module notes)."""

    __tablename__ = "reports"
    __table_args__ = {"sqlite_with_rowid": False}

    id: Mapped[bytes] = mapped_column(LargeBinary(16), primary_key=True)
    problem_id: Mapped[str] = mapped_column(String(64), index=True)
    partition: Mapped[int]
    subset: Mapped[int]
    mechanism_json: Mapped[str] = mapped_column(Text)
    bits: Mapped[bytes] = mapped_column(LargeBinary(512))


class RejectRow(Base):
    """Refused requests per problem ("" when the problem is unknown) and reason."""

    __tablename__ = "reject_counts"

    problem_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    reason: Mapped[str] = mapped_column(String(64), primary_key=True)
    count: Mapped[int] = mapped_column(default=0)


def new_report_id() -> bytes:
    """A report's primary key: 16 bytes from the OS CSPRNG (carries no order)."""
    return secrets.token_bytes(16)




def create_tables(engine: Engine) -> None:
    """Create the aggregator's tables and the crypto ledgers if missing."""
    Base.metadata.create_all(engine)
    create_crypto_tables(engine)


def count_reject(session: Session, problem_id: str, reason: str) -> None:
    """Add one to the refusal counter of (problem, reason) inside the caller's transaction."""
    if session.get_bind().dialect.name == "sqlite":
        stmt = sqlite_insert(RejectRow).values(problem_id=problem_id, reason=reason, count=1)
        session.execute(
            stmt.on_conflict_do_update(
                index_elements=["problem_id", "reason"], set_={"count": RejectRow.count + 1}
            )
        )
        return
    row = session.scalars(
        select(RejectRow)
        .where(RejectRow.problem_id == problem_id, RejectRow.reason == reason)
        .with_for_update()
    ).first()
    if row is None:
        session.add(RejectRow(problem_id=problem_id, reason=reason, count=1))
    else:
        row.count += 1
