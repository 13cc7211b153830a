"""What revisions share about PostgreSQL: 64-bit integer columns, and changes to its column types only."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
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


#: A 64-bit integer column as the models declare it (:data:`anonml.database.BigInt`), spelled out
#: for revisions: ``BIGINT`` on PostgreSQL, ``INTEGER`` (already 64-bit, and the rowid alias as a
#: primary key) on SQLite.
BIG_INTEGER = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
