"""The aggregator server (problems, registration, tokens, collection, training).

Not built yet: the protocol services are a later issue. Nothing here is importable API.
"""
