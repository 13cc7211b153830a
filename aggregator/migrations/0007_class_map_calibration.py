"""K ≥ 3 calibration: the second stage's question, and the choice half's answers.

``calibration_questions`` gains ``choice_json`` (the signed question to the choice half, NULL
until asked and for a binary model) and ``choice_open``; ``calibration_choices`` holds one signed,
perturbed log-loss report per (problem, peer), unique, so a resumed step neither loses nor doubles
an answer. Rows stored before this revision are binary questions: no choice, closed.

Revision ID: aggregator_0007
Revises: aggregator_0006
"""

import sqlalchemy as sa
from alembic import op

from anonml.migrations._postgresql import BIG_INTEGER

revision = "aggregator_0007"
down_revision = "aggregator_0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("calibration_questions") as batch:
        batch.add_column(sa.Column("choice_json", sa.Text(), nullable=True))
        batch.add_column(sa.Column("choice_open", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_table(
        "calibration_choices",
        sa.Column("id", BIG_INTEGER, nullable=False),
        sa.Column("problem_id", sa.String(64), sa.ForeignKey("problems.id"), nullable=False),
        sa.Column("identity", sa.LargeBinary(64), nullable=False),
        sa.Column("report_json", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("problem_id", "identity", name="uq_calibration_choice_peer"),
    )
    op.create_index("ix_calibration_choices_problem_id", "calibration_choices", ["problem_id"])


def downgrade() -> None:
    connection = op.get_bind()
    held = connection.execute(sa.text("SELECT COUNT(*) FROM calibration_choices")).scalar()
    if held:
        raise RuntimeError(
            f"{held} choice-half calibration answer(s) are stored: the previous schema cannot hold "
            "them; keep this revision"
        )
    op.drop_index("ix_calibration_choices_problem_id", table_name="calibration_choices")
    op.drop_table("calibration_choices")
    with op.batch_alter_table("calibration_questions") as batch:
        batch.drop_column("choice_open")
        batch.drop_column("choice_json")
