"""Held-out quality: the latest score of each problem's model on its operator's labelled rows.

``model_evaluations`` holds one :class:`~anonml.protocol.ModelEvaluation` (JSON) per
problem — figures only, never the rows (:mod:`aggregator.evaluation`).

Revision ID: aggregator_0004
Revises: aggregator_0003
"""

import sqlalchemy as sa
from alembic import op

revision = "aggregator_0004"
down_revision = "aggregator_0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "model_evaluations",
        sa.Column("problem_id", sa.String(64), sa.ForeignKey("problems.id"), nullable=False),
        sa.Column("evaluation_json", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("problem_id"),
    )


def downgrade() -> None:
    op.drop_table("model_evaluations")
