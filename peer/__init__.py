"""The peer daemon (relay, round participation, local privacy ledger).

Not built yet: the protocol services are a later issue. Nothing here is importable API.
"""
