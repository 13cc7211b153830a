"""Per-member relay quotas that survive a restart: packets each member posted to a node per round.

A relay of a round with a roster takes packets only in posts authenticated
by a member (:mod:`peer.relayauth`) and at most
:func:`peer.relayauth.member_quota` from each member; the count lives beside
the node's total (``peer_relay_counts``) and is deleted with it at ``t_r``.
A state DB of the previous schema has no such count: its open rounds start from 0.

Revision ID: peer_0004
Revises: peer_0003
"""

import sqlalchemy as sa
from alembic import op

revision = "peer_0004"
down_revision = "peer_0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "peer_relay_quotas",
        sa.Column("node", sa.String(64), nullable=False),
        sa.Column("round_id", sa.BigInteger(), nullable=False),
        sa.Column("poster", sa.String(32), nullable=False),
        sa.Column("accepted", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("node", "round_id", "poster"),
    )


def downgrade() -> None:
    op.drop_table("peer_relay_quotas")
