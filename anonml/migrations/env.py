"""The Alembic environment shared by every migration package (see :mod:`anonml.migrations`).

Alembic loads this file itself; :func:`anonml.database.migrate` has put the
connection (already inside its transaction) and the version table in the
config's ``attributes``. Offline (``--sql``) generation is not supported:
migrations always run against a live database when it is opened.
"""

from alembic import context

if context.is_offline_mode():
    raise RuntimeError("AnonML migrations run on a live connection (anonml.database.migrate), not offline")

_attributes = context.config.attributes
context.configure(
    connection=_attributes["connection"],
    version_table=_attributes["version_table"],
    render_as_batch=True,  # SQLite alters tables by copying them
)
with context.begin_transaction():
    context.run_migrations()
