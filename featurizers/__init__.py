"""Featurizer plugins, registered under ``anonml.featurizers``."""
