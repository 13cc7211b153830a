"""The calibration step: a problem's signed question to its calibration pool, and the pool's answers.

``calibration_questions`` holds the signed question and the signed uncalibrated model it names
(one per problem); ``calibration_answers`` one signed, perturbed (score bin, label) answer per
(problem, peer), unique, so a resumed step neither loses nor doubles an answer.

Revision ID: aggregator_0006
Revises: aggregator_0005
"""

import sqlalchemy as sa
from alembic import op

from anonml.migrations._postgresql import BIG_INTEGER

revision = "aggregator_0006"
down_revision = "aggregator_0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "calibration_questions",
        sa.Column("problem_id", sa.String(64), sa.ForeignKey("problems.id"), nullable=False),
        sa.Column("question_json", sa.Text(), nullable=False),
        sa.Column("model_json", sa.Text(), nullable=False),
        sa.Column("open", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("problem_id"),
    )
    op.create_table(
        "calibration_answers",
        sa.Column("id", BIG_INTEGER, nullable=False),
        sa.Column("problem_id", sa.String(64), sa.ForeignKey("problems.id"), nullable=False),
        sa.Column("identity", sa.LargeBinary(64), nullable=False),
        sa.Column("mechanism_json", sa.Text(), nullable=False),
        sa.Column("bits", sa.LargeBinary(64), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("problem_id", "identity", name="uq_calibration_answer_peer"),
    )
    op.create_index("ix_calibration_answers_problem_id", "calibration_answers", ["problem_id"])


def downgrade() -> None:
    op.drop_index("ix_calibration_answers_problem_id", table_name="calibration_answers")
    op.drop_table("calibration_answers")
    op.drop_table("calibration_questions")
