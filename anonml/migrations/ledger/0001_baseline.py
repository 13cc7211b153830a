"""The privacy ledger as first released: releases, their attributes and per-problem caps.

Revision ID: ledger_0001
Revises: (none)
"""

import sqlalchemy as sa
from alembic import op

revision = "ledger_0001"
down_revision = None
branch_labels = None
depends_on = None

#: Every table this revision creates: a database holding them all without a
#: version table was written before migrations and is stamped here.
TABLES = ("privacy_releases", "privacy_release_attributes", "privacy_caps")


def upgrade() -> None:
    op.create_table(
        "privacy_releases",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("peer", sa.String(256), nullable=False),
        sa.Column("problem", sa.String(256), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("mechanism", sa.String(64), nullable=False),
        sa.Column("epsilon", sa.Double(), nullable=False),
        sa.Column("pool", sa.String(256), nullable=True),
        sa.Column("recorded_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_privacy_releases_problem", "privacy_releases", ["problem"])
    op.create_index("ix_privacy_releases_peer", "privacy_releases", ["peer"])
    op.create_table(
        "privacy_caps",
        sa.Column("problem", sa.String(256), nullable=False),
        sa.Column("peer", sa.String(256), nullable=False),
        sa.Column("cap", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("problem", "peer"),
    )
    op.create_table(
        "privacy_release_attributes",
        sa.Column("release_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.ForeignKeyConstraint(["release_id"], ["privacy_releases.id"]),
        sa.PrimaryKeyConstraint("release_id", "position"),
    )
    op.create_index("ix_privacy_release_attributes_name", "privacy_release_attributes", ["name"])


def downgrade() -> None:
    op.drop_table("privacy_release_attributes")
    op.drop_table("privacy_caps")
    op.drop_table("privacy_releases")
