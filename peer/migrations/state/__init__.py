"""Revisions of a peer host's state DB (tables ``peer_*``, :mod:`peer.db`)."""

#: Where the state DB's schema revision is kept.
VERSION_TABLE = "anonml_schema_peer"
