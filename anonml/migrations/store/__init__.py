"""Revisions of the event store's schema (tables ``imports`` and ``events``)."""

#: Where the store's schema revision is kept (beside a ledger's in a shared file).
VERSION_TABLE = "anonml_schema_store"
