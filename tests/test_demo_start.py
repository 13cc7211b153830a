"""``anonml demo`` starts its witness and aggregator beside the import: a failed import stops them."""

from __future__ import annotations

from pathlib import Path

import pytest

from anonml import demo


def test_an_import_that_fails_stops_the_processes_started_beside_it(monkeypatch, tmp_path: Path) -> None:
    launched: list[demo._Launch] = []
    launch_processes = demo._launch_processes

    def recording(root: Path, report_delay_seconds: float) -> demo._Launch:
        launch = launch_processes(root, report_delay_seconds)
        launched.append(launch)
        return launch

    def failing_import(*args: object, **kwargs: object) -> None:
        # the children are up (or failed) before the import fails: the demo must stop both
        launched[0].witness.result(timeout=120)
        launched[0].aggregator.result(timeout=120)
        raise OSError("disk full while importing the students")

    monkeypatch.setattr(demo, "_launch_processes", recording)
    monkeypatch.setattr(demo, "simulate_peers", failing_import)
    with pytest.raises(OSError, match="disk full"):
        demo.run_demo(20, workdir=tmp_path)
    (launch,) = launched
    for server in (launch.witness.result(), launch.aggregator.result()):
        # stop() waited for the child: it has exited, nothing of the demo is left serving
        assert server.process.poll() is not None, server.url
