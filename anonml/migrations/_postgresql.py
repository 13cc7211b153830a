"""What revisions that change only PostgreSQL's column types share."""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op


def alter_on_postgresql(statements: Sequence[str]) -> None:
    """Run ``statements`` when the database is PostgreSQL; nothing on SQLite.

    SQLite's integers are 64-bit whatever the declared type and its datetimes
    are text, so widening a column there would only copy the table.
    """
    if op.get_bind().dialect.name != "postgresql":
        return
    for statement in statements:
        op.execute(statement)


def refuse_narrowing() -> None:
    """The downgrade of a widening: refused, as values past 2^31 would not fit back."""
    raise NotImplementedError("64-bit columns are not narrowed again: values past 2^31 would not fit")
