"""Revisions of a witness's database (table ``cosignatures``, :mod:`peer.witness`)."""

#: Where the witness database's schema revision is kept.
VERSION_TABLE = "anonml_schema_witness"
