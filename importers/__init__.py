"""Importer plugins: one module per data source, registered under ``anonml.importers``."""
