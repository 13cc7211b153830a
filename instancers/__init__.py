"""Instancer plugins (problem definitions), registered under ``anonml.instancers``."""
