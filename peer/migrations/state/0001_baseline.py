"""A peer host's state DB as created before schema versions existed.

Proposals, decisions and participations, and what a restart needs: each
participation's phase and facts, sealed round keys, the outbox, held packets
and replay tags.

Revision ID: peer_0001
Revises: (none)
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision = "peer_0001"
down_revision = None
branch_labels = None
depends_on = None

#: Every table this revision creates: a database holding them all without a
#: version table was written before migrations and is stamped here.
TABLES = (
    "peer_proposals",
    "peer_decisions",
    "peer_participations",
    "peer_participation_state",
    "peer_round_keys",
    "peer_outbox",
    "peer_held_packets",
    "peer_replay_tags",
)


def upgrade() -> None:
    op.create_table(
        "peer_proposals",
        sa.Column("problem_id", sa.String(64), nullable=False),
        sa.Column("aggregator_url", sa.String(256), nullable=False),
        sa.Column("problem_json", sa.Text(), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("problem_id"),
    )
    _per_participation(
        "peer_decisions",
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("epsilon", sa.Double(), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False),
    )
    _per_participation(
        "peer_participations",
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("roster_fingerprint", sa.String(64), nullable=True),
        sa.Column("model_json", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    _per_participation(
        "peer_participation_state",
        sa.Column("phase", sa.String(32), nullable=False),
        sa.Column("facts_json", sa.Text(), nullable=False),
        sa.Column("sealed_tokens", sa.LargeBinary(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    _per_round(
        "peer_round_keys",
        sa.Column("problem_id", sa.String(64), nullable=False),
        sa.Column("sealed_key", sa.LargeBinary(), nullable=False),
        sa.Column("certificate", sa.LargeBinary(), nullable=False),
    )
    _per_participation(
        "peer_outbox",
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("send_at", sa.Float(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("sealed_packet", sa.LargeBinary(), nullable=False),
        sa.Column("sent", sa.Boolean(), nullable=False),
        also_keyed_by=["slot"],
    )
    op.create_table(
        "peer_held_packets",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        *_node_round(),
        sa.Column("release_at", sa.Float(), nullable=False),
        sa.Column("deadline", sa.Float(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("content_type", sa.String(64), nullable=False),
        sa.Column("what", sa.String(32), nullable=False),
        sa.Column("sealed", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    _per_round(
        "peer_replay_tags", sa.Column("tag", sa.LargeBinary(32), nullable=False), also_keyed_by=["tag"]
    )


def _per_participation(name: str, *columns: sa.Column, also_keyed_by: Sequence[str] = ()) -> None:
    """Create ``name``: a row per (``problem_id``, ``node``, *also_keyed_by*), holding ``columns``."""
    op.create_table(
        name,
        sa.Column("problem_id", sa.String(64), nullable=False),
        sa.Column("node", sa.String(64), nullable=False),
        *columns,
        sa.PrimaryKeyConstraint("problem_id", "node", *also_keyed_by),
    )


def _node_round() -> tuple[sa.Column, sa.Column]:
    """Which identity (its fingerprint, hex) in which round."""
    return (
        sa.Column("node", sa.String(64), nullable=False),
        sa.Column("round_id", sa.BigInteger(), nullable=False),
    )


def _per_round(name: str, *columns: sa.Column, also_keyed_by: Sequence[str] = ()) -> None:
    """Create ``name``: a row per (``node``, ``round_id``, *also_keyed_by*), holding ``columns``."""
    op.create_table(
        name, *_node_round(), *columns, sa.PrimaryKeyConstraint("node", "round_id", *also_keyed_by)
    )


def downgrade() -> None:
    for table in reversed(TABLES):
        op.drop_table(table)
