"""Sender-only members: a registration may carry no relay URL and no relay certificate.

A member behind NAT opens connections and accepts none: it registers without a
relay (both columns NULL, as its signed :class:`~anonml.protocol.Registration`
says) and routes are drawn among the members that relay. Rows stored before
this revision all have both.

Revision ID: aggregator_0005
Revises: aggregator_0004
"""

import sqlalchemy as sa
from alembic import op

revision = "aggregator_0005"
down_revision = "aggregator_0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("registrations") as batch:
        batch.alter_column("relay_url", existing_type=sa.String(256), nullable=True)
        batch.alter_column("certificate", existing_type=sa.LargeBinary(136), nullable=True)


def downgrade() -> None:
    connection = op.get_bind()
    held = connection.execute(sa.text("SELECT COUNT(*) FROM registrations WHERE relay_url IS NULL")).scalar()
    if held:
        raise RuntimeError(
            f"{held} registration(s) of sender-only members have no relay URL: the previous schema "
            "cannot hold them; keep this revision"
        )
    with op.batch_alter_table("registrations") as batch:
        batch.alter_column("relay_url", existing_type=sa.String(256), nullable=False)
        batch.alter_column("certificate", existing_type=sa.LargeBinary(136), nullable=False)
