"""The event store as created before schema versions existed: ``imports`` and ``events``.

Revision ID: store_0001
Revises: (none)
"""

import sqlalchemy as sa
from alembic import op

revision = "store_0001"
down_revision = None
branch_labels = None
depends_on = None

#: Every table this revision creates: a database holding them all without a
#: version table was written before migrations and is stamped here.
TABLES = ("imports", "events")


def upgrade() -> None:
    op.create_table(
        "imports",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("importer", sa.String(64), nullable=False),
        sa.Column("importer_version", sa.String(32), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("file_sha256", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(256), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("accepted", sa.Integer(), nullable=False),
        sa.Column("duplicate", sa.Integer(), nullable=False),
        sa.Column("rejected", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_imports_file_sha256", "imports", ["file_sha256"])
    op.create_table(
        "events",
        sa.Column("user_id", sa.String(256), nullable=False),
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("source", sa.String(64), nullable=False),
        sa.Column("type", sa.String(256), nullable=False),
        sa.Column("ts_us", sa.Integer(), nullable=True),
        sa.Column("fields", sa.Text(), nullable=False),
        sa.Column("import_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["import_id"], ["imports.id"]),
        sa.PrimaryKeyConstraint("user_id", "id"),
    )
    op.create_index("ix_events_source_type_time", "events", ["source", "type", "ts_us"])
    op.create_index("ix_events_user_time", "events", ["user_id", "ts_us"])


def downgrade() -> None:
    op.drop_table("events")
    op.drop_table("imports")
