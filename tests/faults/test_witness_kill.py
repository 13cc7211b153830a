"""The witness process is SIGKILLed mid-stage, twice (issue 26, "kill the witness mid-stage").

A real witness process (``anonml witness serve``) on a fixed port, behind a
:class:`~tests.faults.helpers.CuttingProxy` whose URL the problem declares: the proxy kills the
witness at the first ``POST /cosign`` of a stage (that request is never answered, as a dead
process would leave it), and the aggregator's retries meet a closed port until the test starts
a new witness process on the same home and port — once it has seen the aggregator come back
at least once while the witness was down. First in the roster stage (witnessing), then in the
bins stage (reporting, before ``t_s``): the proxy matches each cut to its stage's request body,
and the bins cut is armed before the roster's restart, so neither depends on timing.

What must hold: the problem never fails; it passes witnessing and gets both bundles, each with
the witness's one cosignature on the stage's transcript; and the witness's log (kept across the
kill in its home) holds exactly one cosignature per stage — a restart makes it co-sign nothing
twice and nothing else.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from aggregator.app import create_app, start_server
from anonml.protocol import WitnessRef
from anonml.serving import free_port
from tests.aggregator.helpers import aggregator_settings, draft, propose, register_and_close, status
from tests.faults.helpers import CuttingProxy
from tests.waiting import wait_until
from tests.witness.test_aggregator import bundle_of
from witness.app import WitnessProcess, start_witness_process

#: Seconds each stage may take: room for a witness process to start again on a loaded machine.
WITNESS_SECONDS = 120.0


def stage_mark(stage: str) -> bytes:
    """What a cosign request's body (``CosignRequest.model_dump_json()``) holds for ``stage``."""
    return f'"stage":"{stage}"'.encode()


@pytest.mark.slow
def test_a_witness_killed_in_each_stage_and_restarted_costs_nothing(tmp_path: Path) -> None:
    home, port = tmp_path / "witness", free_port()
    current: list[WitnessProcess] = [start_witness_process(home, port=port)]
    identity = current[0].identity
    kills: list[int] = []

    def kill_witness() -> None:
        current[0].process.kill()  # SIGKILL: no shutdown handler runs
        current[0].process.wait(timeout=30)
        kills.append(current[0].process.returncode)

    proxy = CuttingProxy(current[0].url, b"POST /cosign", kill_witness)
    server = start_server(create_app(aggregator_settings(tmp_path)))
    try:
        d = draft(n_numeric=1, median_step=2.0, steps=2)
        d = d.model_copy(update={
            "witnesses": (WitnessRef(identity=identity, url=proxy.url),),
            "schedule": d.schedule.model_copy(update={"witness_seconds": WITNESS_SECONDS}),
        })
        url = server.url
        problem = propose(url, d)

        def outage(stage_done: str, next_stage: str | None = None) -> None:
            """Wait for the kill and for a retry against the dead port; arm the next stage's cut
            (before the restart, so this stage's retries pass and that stage's first request cannot
            slip through unarmed); restart; then wait for this stage's bundle."""
            killed = f"the witness to be killed at its first {stage_done} cosign request"
            wait_until(proxy.cut.is_set, 120, killed)
            refused = proxy.refused
            wait_until(lambda: proxy.refused > refused, 60, "the aggregator to retry the dead witness")
            if next_stage is not None:
                proxy.arm(stage_mark(next_stage))
            current[0] = start_witness_process(home, port=port)
            bundle = bundle_of(url, problem.id, stage_done, timeout=WITNESS_SECONDS)
            assert [bytes(c.witness) for c in bundle.cosignatures] == [identity]
            assert [c.statement.stage for c in bundle.cosignatures] == [stage_done]

        proxy.arm(stage_mark("roster"))
        register_and_close(url, problem)
        outage("roster", next_stage="bins")
        outage("bins")
        assert len(kills) == 2
        final = status(url, problem.id)
        assert final.phase not in ("failed",), final.message
        log = requests.get(f"{current[0].url}/log", timeout=30).json()
        stages = [e["cosignature"]["statement"]["stage"] for e in log]
        assert sorted(stages) == ["bins", "roster"], stages  # one per stage, across the kills
        assert all(code == -9 for code in kills), kills
    finally:
        server.stop()
        proxy.close()
        current[0].stop()
