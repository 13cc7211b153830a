"""Anonymity primitives: identities, one-time verification tokens, onion packets."""
