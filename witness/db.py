"""The witness's log: one table, rows only ever inserted (revisions in :mod:`witness.migrations`)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import LargeBinary, String, Text, UniqueConstraint, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from anonml.database import make_engine, migrate
from anonml.paths import private_dir

__all__ = ["Base", "CosignatureRow", "open_log", "find_cosignature"]


class Base(DeclarativeBase):
    pass


class CosignatureRow(Base):
    """One log entry (``index`` = ``id - 1``, never reused).

    ``aggregator`` is the whole identity the statement names; ``aggregator_key``
    its Ed25519 half, the key that signs, on which uniqueness rests.
    """

    __tablename__ = "cosignatures"
    __table_args__ = (
        UniqueConstraint("aggregator_key", "problem_id", "stage", name="uq_one_transcript_per_signing_key"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    aggregator: Mapped[bytes] = mapped_column(LargeBinary(64))
    aggregator_key: Mapped[bytes] = mapped_column(LargeBinary(32))
    problem_id: Mapped[str] = mapped_column(String(64))
    stage: Mapped[str] = mapped_column(String(8))
    transcript: Mapped[bytes] = mapped_column(LargeBinary(32))
    cosignature_json: Mapped[str] = mapped_column(Text)


def open_log(path: Path) -> Engine:
    """The log at ``path`` in a 0700 folder, migrated to the newest schema.

    :func:`~anonml.database.make_engine` makes the file and its -wal/-shm 0600;
    ``immediate`` transactions serialise writers, so two first cosignatures of
    one triple cannot both be inserted.
    """
    private_dir(path.parent, tighten=True)
    engine = make_engine(f"sqlite:///{path}", immediate=True)
    migrate(engine, "witness.migrations")
    return engine


def find_cosignature(
    session: Session, aggregator_key: bytes, problem_id: str, stage: str
) -> CosignatureRow | None:
    """The row for (aggregator signing key, problem, stage), if the witness co-signed one."""
    return session.scalars(
        select(CosignatureRow).where(
            CosignatureRow.aggregator_key == aggregator_key,
            CosignatureRow.problem_id == problem_id,
            CosignatureRow.stage == stage,
        )
    ).first()
