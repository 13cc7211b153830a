"""Relay packet caps that survive a restart: packets each node accepted per round.

A relay accepts at most :func:`peer.relay.packet_cap` packets per (node,
round); the count was kept in memory only, so a host restarted mid-round
(killed by whoever floods it, say) took a full cap again. The count now lives
beside the held packets and is deleted with the round's replay tags at ``t_r``.
A state DB of the previous schema has no count: its open rounds start from 0.

Revision ID: peer_0002
Revises: peer_0001
"""

import sqlalchemy as sa
from alembic import op

revision = "peer_0002"
down_revision = "peer_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "peer_relay_counts",
        sa.Column("node", sa.String(64), nullable=False),
        sa.Column("round_id", sa.BigInteger(), nullable=False),
        sa.Column("accepted", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("node", "round_id"),
    )


def downgrade() -> None:
    op.drop_table("peer_relay_counts")
