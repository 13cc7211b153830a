"""The peer's routers: :mod:`peer.routes.relay` (for other peers) and :mod:`peer.routes.local` (its user)."""
