"""A child service that ends when the process that started it ends, however that one ended.

:func:`anonml.serving.spawn_child` hands a child with nothing else to read a stdin pipe and
names it in :data:`LIFELINE_VARIABLE`; the child's entry point calls :func:`watch_lifeline`,
which reads that pipe in a daemon thread and, at end of file, sends the child ``SIGTERM``
(uvicorn then stops as on Ctrl-C). The kernel closes the parent's end when the parent exits
for any reason, ``SIGKILL`` included, so a demo, benchmark or test that is killed leaves no
witness serving behind it. (``prctl(PR_SET_PDEATHSIG)`` would not do: it fires when the
*thread* that started the child ends, and the demo starts its services from a thread pool.)
"""

from __future__ import annotations

import os
import signal
import sys
import threading

__all__ = ["LIFELINE_VARIABLE", "watch_lifeline"]

#: Set (to ``1``) in a child's environment when its stdin is its parent's lifeline.
LIFELINE_VARIABLE = "ANONML_LIFELINE"


def watch_lifeline() -> bool:
    """If this process's stdin is a lifeline, end the process (``SIGTERM``) when it closes.

    Returns whether a watch was started. The variable is removed first, so a process this one
    starts does not take the same stdin for its own lifeline.
    """
    if os.environ.pop(LIFELINE_VARIABLE, None) != "1":
        return False
    stdin = sys.stdin.buffer

    def watch() -> None:
        while stdin.read(65536):  # the parent writes nothing: this returns b"" at its end
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="lifeline", daemon=True).start()
    return True
