"""Services run as child processes: their interpreter's environment, their start and one handle to stop them.

- :func:`child_environment`: the folder and environment of a child interpreter that must import
  this repository (``python -m aggregator``, ``anonml witness serve``, benchmark workers).
- :func:`spawn_child` starts one there with text pipes; :func:`ready_line` waits for the line it
  prints once it serves, :func:`wait_answering` for its ``/healthz`` when it prints none.
- :class:`ChildServer`: the one handle of a service in a child process (its URL, ``stop``).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from anonml import outbound
from anonml.lifeline import LIFELINE_VARIABLE

__all__ = [
    "ROOT",
    "CHILD_START_SECONDS",
    "child_environment",
    "spawn_child",
    "ready_line",
    "wait_answering",
    "ChildServer",
]

#: The repository root: the folder holding the ``anonml`` package and the role packages.
ROOT = Path(__file__).resolve().parents[2]

#: Seconds a child service (``python -m aggregator``, ``anonml witness serve``) may take to say it
#: is ready. The wait ends as soon as it is (about 2 s on a quiet machine), but importing the stack
#: took 40-60 s at load 25 on 2 cores.
CHILD_START_SECONDS = 300.0

def child_environment() -> tuple[str, dict[str, str]]:
    """The repository root and this environment with ``PYTHONPATH`` starting at that root."""
    root = str(ROOT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    return root, env


def spawn_child(
    args: Sequence[str], *, first_line: str | None = None, stderr: Path | None = None
) -> subprocess.Popen[str]:
    """``python ARGS`` started from the repository root in :func:`child_environment`.

    ``stderr``: a file the child's log is appended to (default: this process's stderr).

    Its stdout is a text pipe, and so is its stdin, left open. With ``first_line``,
    that line (a newline added) is written and flushed — the child's settings or
    configuration, as JSON — and the child reads its stdin to the end as its stop channel
    (``python -m aggregator``; an empty line keeps the pipe for that alone); without, the
    pipe is the child's lifeline (:mod:`anonml.lifeline`): a ``python -m anonml`` child
    ends when this process does, however it ends. A child that cannot be handed its line
    is killed before the error propagates.
    """
    root, env = child_environment()
    if first_line is None:
        env[LIFELINE_VARIABLE] = "1"
    log = None if stderr is None else stderr.open("a")
    try:
        process = subprocess.Popen(
            [sys.executable, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
            cwd=root,
        )
    finally:
        if log is not None:
            log.close()  # the child holds its own descriptor
    if first_line is not None:
        try:
            if process.stdin is None:  # asked for a pipe above: Popen always opens one
                raise OSError("the child's stdin pipe is not open")
            process.stdin.write(first_line + "\n")
            process.stdin.flush()
        except OSError:
            process.kill()
            process.wait(timeout=10)
            raise
    return process


def ready_line(process: subprocess.Popen[str], timeout: float = CHILD_START_SECONDS) -> str:
    """The first line ``process`` (from :func:`spawn_child`) prints within ``timeout`` seconds, else "".

    The wait ends as soon as the line comes; "" also when the child closed its stdout
    (it died): callers kill it and say it did not start.
    """
    if process.stdout is None:  # not spawned by spawn_child: no line to wait for
        return ""
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    return process.stdout.readline() if ready else ""


def wait_answering(
    url: str, process: subprocess.Popen, *, what: str, timeout: float = CHILD_START_SECONDS
) -> None:
    """Poll ``url/healthz`` until it answers 200, for a child service that prints no ready line.

    Raises
    ------
    RuntimeError
        When ``process`` exits first (with its exit code) or ``timeout`` seconds pass (it is then
        killed), naming ``what``.
    """
    import requests  # only a parent waiting on a child needs it: not in a service's start-up

    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode} before it answered {url}/healthz")
        try:
            answer = requests.get(f"{url}/healthz", timeout=5, verify=outbound.requests_verify())
            if answer.status_code == 200:
                return
        except requests.RequestException:
            pass  # not listening yet: the deadline below decides
        if time.monotonic() > deadline:
            process.kill()
            process.wait(timeout=30)
            raise RuntimeError(f"{what} did not answer {url}/healthz in {timeout:g} s")
        time.sleep(0.1)


@dataclass
class ChildServer:
    """A service served from a child process (its own interpreter, its own core), at ``url``.

    ``stop`` closes its stdin when ``stop_signal`` is None (a child of :func:`spawn_child` given a
    first line stops at EOF), else sends that signal (uvicorn stops gracefully on SIGINT and
    SIGTERM); a child still running 30 s later gets SIGTERM, and one still running 30 s after that
    is killed.
    """

    url: str
    process: subprocess.Popen
    stop_signal: int | None = signal.SIGTERM

    def stop(self) -> None:
        if self.process.poll() is None:
            if self.stop_signal is not None:
                self.process.send_signal(self.stop_signal)
            elif self.process.stdin is not None and not self.process.stdin.closed:
                self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            # SIGTERM still lets uvicorn (and a --workers supervisor's children) stop cleanly;
            # only a child that ignores it too is killed.
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()
