"""Revisions of the privacy ledger's schema (tables ``privacy_*``)."""

#: Where the ledger's schema revision is kept (beside a store's in a shared file).
VERSION_TABLE = "anonml_schema_ledger"
