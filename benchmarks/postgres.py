"""A throwaway PostgreSQL server for benchmarks, started the way ``.ci/run`` starts one.

:func:`throwaway_postgresql` finds the server binaries (the newest
``/usr/lib/postgresql/*/bin``, else ``initdb`` on ``PATH``), runs ``initdb`` in
a temporary folder, starts ``postgres`` with ``pg_ctl`` on a free loopback
port (durability off: ``fsync``, ``synchronous_commit`` and
``full_page_writes``; its socket in that folder), creates a database
``anonml`` for user ``anonml`` (trust authentication, loopback only) and
yields its SQLAlchemy URL. On exit the server is stopped (``-m immediate``)
and the folder removed. PostgreSQL refuses to run as root: as root, every
server command runs as the ``postgres`` system user through ``runuser``.

Raises :class:`PostgresUnavailable` (with what to install) when no server
binaries are found; benchmarks turn that into a clear skip message.

Run ``python -m benchmarks.postgres`` to start one and print its URL until Ctrl-C
(e.g. to run the test suites against it with ``ANONML_TEST_DATABASE_URL``).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from anonml.serving import free_port

__all__ = ["PostgresUnavailable", "postgres_bin", "throwaway_postgresql"]


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries on this machine."""


def postgres_bin() -> Path:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres`` (:class:`PostgresUnavailable` if none)."""

    def version(path: str) -> tuple[int, ...]:
        name = Path(path).parent.name
        return tuple(int(p) for p in name.split(".") if p.isdigit())

    for found in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True):
        if os.access(Path(found) / "initdb", os.X_OK):
            return Path(found)
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    raise PostgresUnavailable(
        "no PostgreSQL server found (no /usr/lib/postgresql/*/bin/initdb, no initdb on PATH); "
        "install it, e.g. 'apt-get install postgresql'"
    )


@contextmanager
def throwaway_postgresql(max_connections: int = 300) -> Iterator[str]:
    """Start a private PostgreSQL server; yields ``postgresql+psycopg://anonml@127.0.0.1:<port>/anonml``."""
    binaries = postgres_bin()
    folder = Path(tempfile.mkdtemp(prefix="anonml-pg-"))
    folder.chmod(0o755)
    as_pg: list[str] = []
    if os.geteuid() == 0:
        if subprocess.run(["id", "-u", "postgres"], capture_output=True).returncode != 0:
            subprocess.run(
                [
                    "useradd",
                    "--system",
                    "--home-dir",
                    str(folder),
                    "--shell",
                    "/usr/sbin/nologin",
                    "postgres",
                ],
                check=True,
            )
        shutil.chown(folder, user="postgres")
        as_pg = ["runuser", "-u", "postgres", "--"]
    data, port = folder / "data", free_port()

    def run(*args: str) -> None:
        done = subprocess.run([*as_pg, *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(
                f"{Path(args[0]).name} failed ({done.returncode}): {done.stderr.strip()[-500:]}"
            )

    started = False
    try:
        run(
            str(binaries / "initdb"),
            "-D",
            str(data),
            "-U",
            "anonml",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-locale",
        )
        options = (
            f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c max_connections={max_connections} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        run(str(binaries / "pg_ctl"), "-D", str(data), "-l", str(folder / "server.log"), "-w", "-t", "60",
            "-o", options, "start")  # fmt: skip
        started = True
        run(str(binaries / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "anonml", "anonml")
        yield f"postgresql+psycopg://anonml@127.0.0.1:{port}/anonml"
    finally:
        if started:
            subprocess.run(
                [*as_pg, str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                capture_output=True,
            )
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    import signal

    stops = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    try:
        with throwaway_postgresql() as url:
            print(url, flush=True)
            signal.sigwait(stops)
    except PostgresUnavailable as exc:
        raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    main()
