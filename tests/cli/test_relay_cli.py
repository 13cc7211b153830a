"""``anonml relay serve``: an always-on relay that holds no data, as a real process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from anonml.serving import free_port, wait_answering
from tests.cli.test_cli import run_process


def test_relay_serve_needs_an_aggregator(tmp_path: Path) -> None:
    result = run_process("relay", "serve", "--home", str(tmp_path / "relay"), home=tmp_path)
    assert result.returncode == 1
    assert "no aggregator to poll" in result.stderr


def test_relay_serve_serves_a_relay_that_holds_no_data(tmp_path: Path) -> None:
    port = free_port()
    home = tmp_path / "relay"
    env = {**os.environ, "ANONML_HOME": str(tmp_path)}
    process = subprocess.Popen(
        [sys.executable, "-m", "anonml", "relay", "serve", "-a", "http://127.0.0.1:9", "--home", str(home),
         "--port", str(port), "--poll", "5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        wait_answering(f"http://127.0.0.1:{port}", process, what="anonml relay serve", timeout=90)
        policy = json.loads((home / "policy.json").read_text())
        assert (policy["relay"], policy["relay_only"], policy["auto_accept"]) == (True, True, True)
        assert policy["offered_sources"] == []  # no event source is ever read
        assert (home / "identity.json").exists() and (home / "relay.db").exists()
        assert not (tmp_path / "events.db").exists()  # nor any event store created
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=60)
    assert re.search(r"^relay [0-9a-f]{128}$", stderr, re.MULTILINE), stderr
    assert f"relaying at http://127.0.0.1:{port}" in stderr
