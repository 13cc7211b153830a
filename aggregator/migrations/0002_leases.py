"""The phase lease: one process at a time advances a database's problems.

``anonml aggregator serve --workers N`` runs several processes on one
database; the row of ``leases`` names which of them may drive the phase
machine until its expiry (:mod:`aggregator.lease`). A database of the previous
schema has no lease: the first process to open it after the upgrade takes it.

Revision ID: aggregator_0002
Revises: aggregator_0001
"""

import sqlalchemy as sa
from alembic import op

revision = "aggregator_0002"
down_revision = "aggregator_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("holder", sa.String(256), nullable=False),
        sa.Column("expires", sa.Double(), nullable=False),
        sa.Column("taken", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("leases")
