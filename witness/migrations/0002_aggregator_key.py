"""One transcript per aggregator *signing* key: the log keys uniqueness on the Ed25519 half.

Revision 0001 made ``(aggregator, problem_id, stage)`` unique with the
aggregator's whole 64-byte identity (Ed25519 ‖ X25519). Only the Ed25519 half
signs anything, so an aggregator that kept its signing key and swapped the
X25519 half got a fresh slot at every witness (issue 24, item 3). This
revision adds ``aggregator_key`` (the 32-byte Ed25519 key, filled from the
existing rows) and makes ``(aggregator_key, problem_id, stage)`` unique instead.

A log that already holds two transcripts for one signing key, problem and
stage recorded that very attack; it is not rewritten (the log is append-only
evidence): the upgrade stops with the rows named, and the operator starts a
fresh witness home and keeps the old one.

Revision ID: witness_0002
Revises: witness_0001
"""

import sqlalchemy as sa
from alembic import op

revision = "witness_0002"
down_revision = "witness_0001"
branch_labels = None
depends_on = None

#: SQLite rebuilds the table for these changes; the log's indices are never reused (AUTOINCREMENT).
_KEEP = {"sqlite_autoincrement": True}


def upgrade() -> None:
    connection = op.get_bind()
    rows = connection.execute(sa.text("SELECT id, aggregator, problem_id, stage FROM cosignatures")).all()
    seen: dict[tuple[bytes, str, str], int] = {}
    for row_id, aggregator, problem_id, stage in rows:
        key = (bytes(aggregator)[:32], problem_id, stage)
        if key in seen:
            raise RuntimeError(
                f"witness log rows {seen[key]} and {row_id} co-sign two transcripts for one aggregator "
                f"signing key ({key[0].hex()[:16]}…), problem {problem_id}, stage {stage}: keep this log "
                "as evidence and start the witness with a fresh --home"
            )
        seen[key] = row_id
    with op.batch_alter_table("cosignatures", table_kwargs=_KEEP) as batch:
        batch.add_column(sa.Column("aggregator_key", sa.LargeBinary(32), nullable=True))
    for row_id, aggregator, _, _ in rows:
        connection.execute(
            sa.text("UPDATE cosignatures SET aggregator_key = :key WHERE id = :id"),
            {"key": bytes(aggregator)[:32], "id": row_id},
        )
    with op.batch_alter_table("cosignatures", table_kwargs=_KEEP) as batch:
        batch.alter_column("aggregator_key", existing_type=sa.LargeBinary(32), nullable=False)
        batch.drop_constraint("uq_one_transcript_per_stage", type_="unique")
        batch.create_unique_constraint(
            "uq_one_transcript_per_signing_key", ["aggregator_key", "problem_id", "stage"]
        )


def downgrade() -> None:
    with op.batch_alter_table("cosignatures", table_kwargs=_KEEP) as batch:
        batch.drop_constraint("uq_one_transcript_per_signing_key", type_="unique")
        batch.create_unique_constraint("uq_one_transcript_per_stage", ["aggregator", "problem_id", "stage"])
        batch.drop_column("aggregator_key")
