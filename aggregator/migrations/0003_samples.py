"""The console's charts over time: a problem's public counts, sampled by the phase driver.

``problem_samples`` holds, per problem and instant, what its status reads —
registrations, median answers, reports received and refusals by reason
(:mod:`aggregator.timeline`). A database of the previous schema has no
samples: its problems' charts start at the upgrade.

Revision ID: aggregator_0003
Revises: aggregator_0002
"""

import sqlalchemy as sa
from alembic import op

from anonml.migrations._postgresql import BIG_INTEGER

revision = "aggregator_0003"
down_revision = "aggregator_0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "problem_samples",
        sa.Column("problem_id", sa.String(64), nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("registered", BIG_INTEGER, nullable=False),
        sa.Column("median_answers", BIG_INTEGER, nullable=False),
        sa.Column("received", BIG_INTEGER, nullable=False),
        sa.Column("rejects_json", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("problem_id", "at"),
    )


def downgrade() -> None:
    op.drop_table("problem_samples")
