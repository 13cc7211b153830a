"""64-bit integers and time-zone-aware timestamps on PostgreSQL.

PostgreSQL's ``INTEGER`` is 32-bit: ``events.ts_us`` (microseconds since
1970) overflows for every date after 1970-01-01T00:35:47Z, and the ids
could not outgrow 2^31. ``timestamp without time zone`` read back through
a session in another zone would shift ``imports.started_at``; the columns
become ``timestamp with time zone`` (the naive values were UTC). SQLite
integers are already 64-bit and its datetimes are text, so nothing changes
there.

Revision ID: store_0002
Revises: store_0001
"""

from anonml.migrations._postgresql import alter_on_postgresql, refuse_narrowing

revision = "store_0002"
down_revision = "store_0001"
branch_labels = None
depends_on = None

_POSTGRESQL = (
    "ALTER SEQUENCE IF EXISTS imports_id_seq AS bigint",
    "ALTER TABLE imports ALTER COLUMN id TYPE bigint",
    "ALTER TABLE imports ALTER COLUMN accepted TYPE bigint",
    "ALTER TABLE imports ALTER COLUMN duplicate TYPE bigint",
    "ALTER TABLE imports ALTER COLUMN rejected TYPE bigint",
    "ALTER TABLE imports ALTER COLUMN started_at TYPE timestamptz USING started_at AT TIME ZONE 'UTC'",
    "ALTER TABLE imports ALTER COLUMN finished_at TYPE timestamptz USING finished_at AT TIME ZONE 'UTC'",
    "ALTER TABLE events ALTER COLUMN ts_us TYPE bigint",
    "ALTER TABLE events ALTER COLUMN import_id TYPE bigint",
)


def upgrade() -> None:
    alter_on_postgresql(_POSTGRESQL)


def downgrade() -> None:
    refuse_narrowing()
