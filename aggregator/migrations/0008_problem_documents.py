"""The published roster, bins and model move from ``problems`` to ``problem_documents``.

One row per (problem, kind) holding the document's JSON as published. Why: in SQLite a row's
columns stored after a large value are reached only by walking that value's overflow-page chain,
and ``x IS NOT NULL`` on a large TEXT loads it; with a ~7 MB roster in ``problems`` every read of
the row (each status poll, each driver tick) cost O(roster). Every non-NULL document is copied
across, then the three columns are dropped. Downgrade adds the columns back, copies the documents
into them and drops the table.

Revision ID: aggregator_0008
Revises: aggregator_0007
"""

import sqlalchemy as sa
from alembic import op

revision = "aggregator_0008"
down_revision = "aggregator_0007"
branch_labels = None
depends_on = None

#: (kind, the ``problems`` column that held it before this revision)
DOCUMENTS = (("roster", "roster_json"), ("bins", "bins_json"), ("model", "model_json"))


def _for_each_document(statement: str) -> None:
    """Run ``statement`` once per document: ``{column}`` is the old column's name (this module's
    constant), ``:kind`` a bound parameter."""
    for kind, column in DOCUMENTS:
        op.execute(sa.text(statement.format(column=column)).bindparams(kind=kind))


def upgrade() -> None:
    op.create_table(
        "problem_documents",
        sa.Column("problem_id", sa.String(64), sa.ForeignKey("problems.id"), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("problem_id", "kind"),
    )
    _for_each_document(
        "INSERT INTO problem_documents (problem_id, kind, body) "
        "SELECT id, :kind, {column} FROM problems WHERE {column} IS NOT NULL"
    )
    # SQLite drops the columns in place (ALTER TABLE … DROP COLUMN, SQLite ≥ 3.35): batch's default
    # copy-and-swap would DROP TABLE problems, which the registrations' foreign keys refuse while
    # ``foreign_keys`` is on (and it cannot be turned off inside the migration's transaction).
    with op.batch_alter_table("problems", recreate="never") as batch:
        for _, column in DOCUMENTS:
            batch.drop_column(column)


def downgrade() -> None:
    with op.batch_alter_table("problems") as batch:
        for _, column in DOCUMENTS:
            batch.add_column(sa.Column(column, sa.Text(), nullable=True))
    _for_each_document(
        "UPDATE problems SET {column} = (SELECT body FROM problem_documents "
        "WHERE problem_documents.problem_id = problems.id AND problem_documents.kind = :kind)"
    )
    op.drop_table("problem_documents")
