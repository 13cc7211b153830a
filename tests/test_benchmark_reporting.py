"""The benchmarks' shared measurements (``benchmarks/reporting.py``) against what they claim to measure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.reporting import process_cpu_seconds
from tests.waiting import wait_until

#: A child that names itself with the characters that break a naive split of ``/proc/<pid>/stat``
#: (spaces and parentheses in field 2), burns CPU until it has used ``argv[1]`` seconds of it,
#: says so, and waits for its stdin to close.
_BURNER = """
import sys, time
open("/proc/self/comm", "w").write("a) b (c")
t = time.process_time()
while time.process_time() - t < float(sys.argv[1]):
    pass
print("burnt", flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads Linux /proc")
def test_process_cpu_seconds_counts_a_child_s_cpu_whatever_its_name() -> None:
    burn = 0.3
    child = subprocess.Popen(
        [sys.executable, "-c", _BURNER, str(burn)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "burnt"
        wait_until(lambda: Path(f"/proc/{child.pid}/comm").read_text().strip() == "a) b (c", 10, "the name")
        used = process_cpu_seconds(child.pid)
        # At least what it burnt (its start-up comes on top); a field read off by one (the name's
        # words taken as fields) gives a state, a pid or a fault count instead, not CPU seconds.
        assert burn <= used < burn + 10
        assert process_cpu_seconds(child.pid) >= used  # a live process's count never goes back
    finally:
        child.communicate("")
