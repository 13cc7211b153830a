"""Revisions of a witness's database (table ``cosignatures``, :mod:`witness.db`).

:func:`anonml.database.migrate` runs them when a witness opens its log
(:class:`witness.service.Witness`); :mod:`anonml.migrations` says how to write
a revision.
"""

#: Where the witness database's schema revision is kept.
VERSION_TABLE = "anonml_schema_witness"
