"""Lifetime caps: a peer's cap on its total over every problem, enforced by the ledger.

A ledger written after lifetime caps were added but before schema versions
existed already has the table (it was made on open); it is then left as is.

Revision ID: ledger_0002
Revises: ledger_0001
"""

import sqlalchemy as sa
from alembic import op

revision = "ledger_0002"
down_revision = "ledger_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("privacy_lifetime_caps"):
        return
    op.create_table(
        "privacy_lifetime_caps",
        sa.Column("peer", sa.String(256), nullable=False),
        sa.Column("cap", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("peer"),
    )


def downgrade() -> None:
    op.drop_table("privacy_lifetime_caps")
