"""Schema migrations (Alembic) of the databases AnonML creates, one package of revisions each.

:func:`anonml.database.migrate` runs them when a database is opened:
``migrate(engine, "anonml.migrations.store")`` brings an event store to the
newest schema, ``"anonml.migrations.ledger"`` a privacy ledger. Each package
names its own version table in ``VERSION_TABLE`` (``anonml_schema_store``,
``anonml_schema_ledger``), so databases that share a file (the ledger's
``privacy_`` tables beside the event store) are versioned independently. The
services' databases have packages of their own, each naming its table:
``peer.migrations.state`` (a peer host's state DB), ``witness.migrations``
(a witness's log) and ``aggregator.migrations``; this package never imports
them, :func:`~anonml.database.migrate` is given their names.

Writing a revision: add ``NNNN_what.py`` to the package with ``revision``,
``down_revision`` (the previous file's revision), and ``upgrade()`` using
``alembic.op``. Write ``revision`` and ``down_revision`` as plain string
literals (``None`` for the first): opening a database already at the head
reads them as text instead of importing Alembic (a computed value still
works, through Alembic, at the cost of its import). A revision is frozen once released: it spells its DDL out
and never imports the current models, whose shape moves on (a column set
several of its tables share may be named by a small function inside the
revision, frozen with it). The first
revision of each package (``down_revision = None``) creates the schema as it
was before migrations existed and lists its tables in ``TABLES``: a database
holding all of them but no version table was written by that earlier code and
is stamped at that revision, then upgraded.

:mod:`env` is the one Alembic environment every package shares: it runs the
revisions on the connection :func:`~anonml.database.migrate` passes in.
"""
