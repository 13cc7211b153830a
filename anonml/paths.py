"""Where AnonML keeps a user's files: ``$ANONML_HOME``, else ``~/.anonml``."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["anonml_home", "default_store_url"]


def anonml_home(*, create: bool = True) -> Path:
    """The AnonML home folder (created on first use with owner-only permissions).

    ``create=False`` only names it, for commands that read and must not
    leave a folder behind.
    """
    home = Path(os.environ.get("ANONML_HOME") or Path.home() / ".anonml").expanduser()
    if create:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
    return home


def default_store_url(filename: str = "events.db", *, create: bool = True) -> str:
    """SQLAlchemy URL of a SQLite file in :func:`anonml_home`."""
    return f"sqlite:///{anonml_home(create=create) / filename}"
