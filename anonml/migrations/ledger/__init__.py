"""Revisions of the privacy ledger's schema (tables ``privacy_*``)."""
