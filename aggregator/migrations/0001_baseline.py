"""The aggregator's database as created before schema versions existed.

Problems, registrations, the median search, staged and settled reports and
refusal counts (:mod:`aggregator.db`), and the crypto ledgers in the same
file: spent tokens and token issuance (:mod:`anonml.crypto.spent`).

Revision ID: aggregator_0001
Revises: (none)
"""

import sqlalchemy as sa
from alembic import op

from anonml.migrations._postgresql import BIG_INTEGER

revision = "aggregator_0001"
down_revision = None
branch_labels = None
depends_on = None

#: Every table this revision creates: a database holding them all without a
#: version table was written before migrations and is stamped here.
TABLES = (
    "problems",
    "registrations",
    "median_queries",
    "median_answers",
    "reports",
    "report_staging",
    "reject_counts",
    "spent_tokens",
    "token_issuance",
)


def upgrade() -> None:
    _problems()
    _registrations()
    _median_search()
    _reports()
    _reject_counts()
    _crypto_ledgers()


def _problems() -> None:
    """The problems and their phase machine (:class:`aggregator.db.ProblemRow`)."""
    op.create_table(
        "problems",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("problem_json", sa.Text(), nullable=False),
        sa.Column("seed", sa.LargeBinary(), nullable=False),
        sa.Column("token_secret", sa.LargeBinary(), nullable=False),
        sa.Column("round_id", BIG_INTEGER, nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("phase_started", sa.Double(), nullable=False),
        sa.Column("phase_seconds_json", sa.Text(), nullable=False),
        sa.Column("close_requested", sa.Boolean(), nullable=False),
        sa.Column("train_requested", sa.Boolean(), nullable=False),
        sa.Column("roster_json", sa.Text(), nullable=True),
        sa.Column("bins_json", sa.Text(), nullable=True),
        sa.Column("model_json", sa.Text(), nullable=True),
        sa.Column("roster_cosignatures_json", sa.Text(), nullable=True),
        sa.Column("bins_cosignatures_json", sa.Text(), nullable=True),
        sa.Column("t_r", sa.Double(), nullable=True),
        sa.Column("median_answered", BIG_INTEGER, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_problems_phase", "problems", ["phase"])


def _problem_id() -> sa.Column:
    """The ``problem_id`` column of every table below ``problems``."""
    return sa.Column("problem_id", sa.String(64), nullable=False)


def _of_a_problem() -> sa.ForeignKeyConstraint:
    """``problem_id`` names a row of ``problems``."""
    return sa.ForeignKeyConstraint(["problem_id"], ["problems.id"])


def _registrations() -> None:
    """Who registered for which problem (:class:`aggregator.db.RegistrationRow`)."""
    op.create_table(
        "registrations",
        sa.Column("id", BIG_INTEGER, nullable=False),
        _problem_id(),
        sa.Column("identity", sa.LargeBinary(64), nullable=False),
        sa.Column("relay_url", sa.String(256), nullable=False),
        sa.Column("certificate", sa.LargeBinary(136), nullable=False),
        sa.Column("signature", sa.LargeBinary(64), nullable=False),
        sa.Column("credential_json", sa.Text(), nullable=True),
        _of_a_problem(),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("problem_id", "identity", name="uq_registration_peer"),
    )
    op.create_index("ix_registrations_problem_id", "registrations", ["problem_id"])


def _median_search() -> None:
    """The median search: each (feature, step)'s query and the peers' one answer each."""
    op.create_table(
        "median_queries",
        _problem_id(),
        *_feature_step(),
        sa.Column("query_json", sa.Text(), nullable=False),
        sa.Column("open", sa.Boolean(), nullable=False),
        _of_a_problem(),
        sa.PrimaryKeyConstraint("problem_id", "feature", "step"),
    )
    op.create_table(
        "median_answers",
        sa.Column("id", BIG_INTEGER, nullable=False),
        _problem_id(),
        *_feature_step(),
        sa.Column("identity", sa.LargeBinary(64), nullable=False),
        sa.Column("bit", sa.Boolean(), nullable=False),
        _of_a_problem(),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("problem_id", "identity", name="uq_median_answer_peer"),
    )
    op.create_index("ix_median_answers_problem_id", "median_answers", ["problem_id"])


def _feature_step() -> tuple[sa.Column, sa.Column]:
    """Which query of the median search: the feature, and the step of its binary search."""
    return sa.Column("feature", BIG_INTEGER, nullable=False), sa.Column("step", BIG_INTEGER, nullable=False)


def _reports() -> None:
    """Settled reports, and the reports of an open round staged with the token each spent."""
    op.create_table(
        "reports",
        sa.Column("id", sa.LargeBinary(16), nullable=False),
        _problem_id(),
        *_report_body(),
        sa.PrimaryKeyConstraint("id"),
        sqlite_with_rowid=False,  # not even the physical row order records arrival order
    )
    op.create_index("ix_reports_problem_id", "reports", ["problem_id"])
    op.create_table(
        "report_staging",
        sa.Column("id", sa.LargeBinary(16), nullable=False),
        _problem_id(),
        *_token(),
        *_report_body(),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("key_id", "slot", "nonce", name="uq_report_staging_token"),
        sqlite_with_rowid=False,
    )
    op.create_index("ix_report_staging_problem_id", "report_staging", ["problem_id"])


def _report_body() -> tuple[sa.Column, ...]:
    """What a report says: its (partition, subset), its mechanism and its packed bits."""
    return (
        sa.Column("partition", BIG_INTEGER, nullable=False),
        sa.Column("subset", BIG_INTEGER, nullable=False),
        sa.Column("mechanism_json", sa.Text(), nullable=False),
        sa.Column("bits", sa.LargeBinary(512), nullable=False),
    )


def _token() -> tuple[sa.Column, ...]:
    """A spent one-time token: the key it was issued under, its slot and its nonce."""
    return (
        sa.Column("key_id", sa.LargeBinary(32), nullable=False),
        sa.Column("slot", sa.LargeBinary(64), nullable=False),
        sa.Column("nonce", sa.LargeBinary(32), nullable=False),
    )


def _reject_counts() -> None:
    """Refused requests per problem and reason (:class:`aggregator.db.RejectRow`)."""
    op.create_table(
        "reject_counts",
        _problem_id(),
        sa.Column("reason", sa.String(64), nullable=False),
        sa.Column("count", BIG_INTEGER, nullable=False),
        sa.PrimaryKeyConstraint("problem_id", "reason"),
    )


def _crypto_ledgers() -> None:
    """The tokens spent and the tokens issued (:mod:`anonml.crypto.spent`)."""
    op.create_table(
        "spent_tokens",
        *_token(),
        sa.PrimaryKeyConstraint("key_id", "slot", "nonce"),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "token_issuance",
        sa.Column("id", BIG_INTEGER, nullable=False),
        sa.Column("key_id", sa.LargeBinary(32), nullable=False),
        sa.Column("peer_id", sa.LargeBinary(64), nullable=False),
        sa.Column("slot", sa.LargeBinary(64), nullable=False),
        sa.Column("issued_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("key_id", "peer_id", "slot", name="uq_token_issuance_peer_slot"),
    )


def downgrade() -> None:
    for table in reversed(TABLES):
        op.drop_table(table)
