"""One participation, one row: the restart facts move into ``peer_participations``.

Before, a participation was two rows written together — its summary
(``peer_participations``: status, reason, roster fingerprint, model) and its
restart state (``peer_participation_state``: phase, facts, sealed tokens) —
with status always equal to phase. Now ``peer_participations`` holds all of it
under ``phase``; every existing row keeps its facts and tokens (a state row
without a summary, which the old code never wrote, is carried over too).

Revision ID: peer_0005
Revises: peer_0004
"""

import sqlalchemy as sa
from alembic import op

revision = "peer_0005"
down_revision = "peer_0004"
branch_labels = None
depends_on = None

_PHASE = sa.String(32)
_KEY = "s.problem_id = peer_participations.problem_id AND s.node = peer_participations.node"


def upgrade() -> None:
    with op.batch_alter_table("peer_participations") as batch:
        batch.alter_column("status", new_column_name="phase", existing_type=_PHASE, existing_nullable=False)
        batch.add_column(sa.Column("facts_json", sa.Text(), nullable=False, server_default="{}"))
        batch.add_column(sa.Column("sealed_tokens", sa.LargeBinary(), nullable=True))
    op.execute(
        "UPDATE peer_participations SET "
        f"facts_json = (SELECT s.facts_json FROM peer_participation_state s WHERE {_KEY}), "
        f"sealed_tokens = (SELECT s.sealed_tokens FROM peer_participation_state s WHERE {_KEY}), "
        f"phase = (SELECT s.phase FROM peer_participation_state s WHERE {_KEY}) "
        f"WHERE EXISTS (SELECT 1 FROM peer_participation_state s WHERE {_KEY})"
    )
    op.execute(
        "INSERT INTO peer_participations "
        "(problem_id, node, phase, reason, roster_fingerprint, model_json, updated_at, facts_json,"
        " sealed_tokens) "
        "SELECT s.problem_id, s.node, s.phase, '', NULL, NULL, s.updated_at, s.facts_json, s.sealed_tokens "
        "FROM peer_participation_state s WHERE NOT EXISTS (SELECT 1 FROM peer_participations p "
        "WHERE p.problem_id = s.problem_id AND p.node = s.node)"
    )
    op.drop_table("peer_participation_state")
    with op.batch_alter_table("peer_participations") as batch:
        batch.alter_column("facts_json", server_default=None, existing_type=sa.Text())


def downgrade() -> None:
    op.create_table(
        "peer_participation_state",
        sa.Column("problem_id", sa.String(64), nullable=False),
        sa.Column("node", sa.String(64), nullable=False),
        sa.Column("phase", sa.String(32), nullable=False),
        sa.Column("facts_json", sa.Text(), nullable=False),
        sa.Column("sealed_tokens", sa.LargeBinary(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("problem_id", "node"),
    )
    op.execute(
        "INSERT INTO peer_participation_state"
        " (problem_id, node, phase, facts_json, sealed_tokens, updated_at) "
        "SELECT problem_id, node, phase, facts_json, sealed_tokens, updated_at FROM peer_participations"
    )
    with op.batch_alter_table("peer_participations") as batch:
        batch.drop_column("sealed_tokens")
        batch.drop_column("facts_json")
        batch.alter_column("phase", new_column_name="status", existing_type=_PHASE, existing_nullable=False)
