"""64-bit integers and time-zone-aware timestamps on PostgreSQL.

PostgreSQL's ``INTEGER`` is 32-bit: a round number or a release id past
2^31 would not fit. ``privacy_releases.recorded_at`` becomes ``timestamp
with time zone`` (its naive values were UTC), so a session in another time
zone reads the same instant. SQLite integers are already 64-bit and its
datetimes are text, so nothing changes there.

Revision ID: ledger_0003
Revises: ledger_0002
"""

from anonml.migrations._postgresql import alter_on_postgresql, refuse_narrowing

revision = "ledger_0003"
down_revision = "ledger_0002"
branch_labels = None
depends_on = None

_POSTGRESQL = (
    "ALTER SEQUENCE IF EXISTS privacy_releases_id_seq AS bigint",
    "ALTER TABLE privacy_releases ALTER COLUMN id TYPE bigint",
    "ALTER TABLE privacy_releases ALTER COLUMN round TYPE bigint",
    "ALTER TABLE privacy_releases ALTER COLUMN recorded_at TYPE timestamptz"
    " USING recorded_at AT TIME ZONE 'UTC'",
    "ALTER TABLE privacy_release_attributes ALTER COLUMN release_id TYPE bigint",
    "ALTER TABLE privacy_release_attributes ALTER COLUMN position TYPE bigint",
)


def upgrade() -> None:
    alter_on_postgresql(_POSTGRESQL)


def downgrade() -> None:
    refuse_narrowing()
