"""Aggregator keys pinned per URL: a peer refuses proposals from a URL whose signing key changed.

A peer learned an aggregator's key from each proposal's own ``aggregator``
field, so an aggregator (or whoever answers at its URL) could sign proposals
with a fresh key at will — the lever of issue 24's item 3. The first proposal
seen from a URL pins its Ed25519 key here (or the policy names it); a proposal
from that URL signed by another key is refused. A state DB of the previous
schema has no pins: each URL is pinned by its next proposal.

Revision ID: peer_0003
Revises: peer_0002
"""

import sqlalchemy as sa
from alembic import op

revision = "peer_0003"
down_revision = "peer_0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "peer_aggregator_keys",
        sa.Column("url", sa.String(512), nullable=False),
        sa.Column("signing_key", sa.LargeBinary(32), nullable=False),
        sa.Column("pinned_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("url"),
    )


def downgrade() -> None:
    op.drop_table("peer_aggregator_keys")
