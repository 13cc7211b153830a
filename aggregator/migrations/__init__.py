"""Revisions of the aggregator's database (:mod:`aggregator.db` and the crypto ledgers).

:func:`anonml.database.migrate` runs them when the aggregator opens its
database (:func:`aggregator.db.create_tables`); :mod:`anonml.migrations` says
how to write a revision.
"""

#: Where the aggregator database's schema revision is kept.
VERSION_TABLE = "anonml_schema_aggregator"
