"""Schema migrations (Alembic) of the peer's databases, one package of revisions each.

:func:`anonml.database.migrate` runs them when a database is opened, as it does
the event store's and the ledger's (:mod:`anonml.migrations`, whose notes say
how to write a revision): :mod:`peer.migrations.state` for the host's state DB
(:class:`peer.db.PeerDB`). A witness's log has its own, :mod:`witness.migrations`.
"""
