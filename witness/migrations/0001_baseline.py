"""A witness's log as created before schema versions existed: one table of cosignatures.

Revision ID: witness_0001
Revises: (none)
"""

import sqlalchemy as sa
from alembic import op

revision = "witness_0001"
down_revision = None
branch_labels = None
depends_on = None

#: Every table this revision creates: a database holding them all without a
#: version table was written before migrations and is stamped here.
TABLES = ("cosignatures",)


def upgrade() -> None:
    op.create_table(
        "cosignatures",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("aggregator", sa.LargeBinary(64), nullable=False),
        sa.Column("problem_id", sa.String(64), nullable=False),
        sa.Column("stage", sa.String(8), nullable=False),
        sa.Column("transcript", sa.LargeBinary(32), nullable=False),
        sa.Column("cosignature_json", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("aggregator", "problem_id", "stage", name="uq_one_transcript_per_stage"),
        sqlite_autoincrement=True,  # log indices are never reused
    )


def downgrade() -> None:
    op.drop_table("cosignatures")
