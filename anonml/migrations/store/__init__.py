"""Revisions of the event store's schema (tables ``imports`` and ``events``)."""
