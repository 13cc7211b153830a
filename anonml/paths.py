"""Where AnonML keeps a user's files, and how they are created: owner-only, always.

``$ANONML_HOME`` (else ``~/.anonml``) holds the event store, the privacy
ledger, the peer's and the aggregator's databases, identities and tokens —
secrets and personal data. Another local user must read none of it, so:

- :func:`private_dir` makes a folder (and missing parents) mode 0700, and
  :func:`anonml_home` re-applies 0700 to the home folder even when it already
  exists with a looser mode (a home created by hand, or by an older version);
- :func:`private_file` creates or tightens a file to 0600;
  :func:`write_secret` writes a new secret file that is 0600 from its first
  byte (``O_CREAT | O_EXCL`` with mode 0600, never a chmod after the fact);
  :func:`stored_token` reads a random bearer token kept in such a file, or
  creates it;
- SQLite databases are created 0600 with their ``-wal`` / ``-shm`` /
  ``-journal`` companions by :func:`anonml.database.make_engine`, which uses
  these helpers.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

__all__ = [
    "anonml_home",
    "default_store_url",
    "private_dir",
    "private_file",
    "stored_token",
    "write_secret",
]

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path, *, tighten: bool = False) -> Path:
    """Create ``path`` (and missing parents) with mode 0700; ``tighten`` also chmods it if it exists.

    Only folders this call creates, and ``path`` itself with ``tighten``, are
    changed: an existing parent chosen by the user (``/tmp``, a project
    folder) keeps its mode.
    """
    path = Path(path).expanduser()
    missing = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=DIR_MODE)
        except FileExistsError:
            pass  # created concurrently: still ours to tighten below
        os.chmod(folder, DIR_MODE)  # mkdir's mode is filtered by the umask
    if tighten and stat.S_IMODE(path.stat().st_mode) != DIR_MODE:
        try:
            os.chmod(path, DIR_MODE)
        except PermissionError:
            raise PermissionError(
                f"{path}: cannot make this folder private (mode 0700); is it another user's? "
                "Point ANONML_HOME at a folder of your own"
            ) from None
    return path


def private_file(path: Path) -> Path:
    """Create ``path`` empty if missing, and make it mode 0600 (its folder is created 0700).

    An existing file is never opened, only its mode set: closing any
    descriptor of a file drops every POSIX lock the process holds on it, so
    opening and closing a SQLite database this process already has open
    (a second engine on it, as a migration makes) would release its
    connections' locks, and another process closing its own connection would
    then take itself for the last one and delete the write-ahead log under
    them — their later commits would be invisible to every other process.
    """
    path = Path(path)
    private_dir(path.parent)
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, FILE_MODE)
        os.close(fd)
    if stat.S_IMODE(path.stat().st_mode) != FILE_MODE:
        os.chmod(path, FILE_MODE)
    return path


def write_secret(path: Path, text: str) -> Path:
    """Write a new secret file, 0600 from creation (FileExistsError if it exists)."""
    path = Path(path)
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path


def stored_token(path: Path) -> str:
    """The bearer token kept in ``path``, or a new one (32 random bytes, URL-safe) written there 0600.

    A service's admin or local API token when none is configured: it outlives a
    restart, so clients holding it keep working; :func:`write_secret` creates the
    file (and its folder 0700).
    """
    path = Path(path)
    if path.exists():
        return path.read_text(encoding="utf-8").strip()
    token = secrets.token_urlsafe(32)
    write_secret(path, token + "\n")
    return token


def anonml_home(*, create: bool = True) -> Path:
    """The AnonML home folder: created, or tightened, to mode 0700 (module docstring).

    ``create=False`` only names it, for commands that read and must not
    leave a folder behind.
    """
    home = Path(os.environ.get("ANONML_HOME") or Path.home() / ".anonml").expanduser()
    return private_dir(home, tighten=True) if create else home


def default_store_url(filename: str = "events.db", *, create: bool = True) -> str:
    """SQLAlchemy URL of a SQLite file in :func:`anonml_home`."""
    return f"sqlite:///{anonml_home(create=create) / filename}"
