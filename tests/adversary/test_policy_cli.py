"""The peer's terminal and its policy against a hostile aggregator, through the real ``anonml`` processes.

* Markup and escape sequences in proposal titles reach ``anonml peer
  proposals`` as literal, printable text (it used to crash on ``[/oops]``).
* A lifetime cap given to ``peer start`` holds for ``peer accept`` run as a
  separate process, and in the ledger itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from anonml.errors import BudgetExceeded
from anonml.privacy import PrivacyLedger
from anonml.serving import free_port
from peer.app import load_or_create_identity
from peer.settings import PeerSettings
from tests.adversary.malicious import MaliciousAggregator, hostile, mooc_draft
from tests.waiting import wait_until

#: Seconds an ``anonml`` process may take before it counts as hung. A ``peer`` command costs about
#: 5 CPU seconds of imports, so on 2 cores shared with the suite's other workers one has taken over
#: 120 s; the deadline only separates slow from hung, nothing here is timed.
HUNG_AFTER = 300


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANONML_")}
    return env | {"ANONML_HOME": str(home), "COLUMNS": "400", "NO_COLOR": "1"}


def _anonml(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "anonml", *args],
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=HUNG_AFTER,
    )


@pytest.mark.slow
def test_markup_and_escape_sequences_in_titles_print_as_plain_text(
    adversary: MaliciousAggregator, tmp_path: Path
):
    titles = ["[/oops]", "\x1b[31mRED\x1b[0m title\x07 \x1b]0;pwned\x07end [bold]x[/bold]", "A" * 150]
    for title in titles:
        adversary.propose(hostile(mooc_draft(min_peers=20), title=title))
    home = tmp_path / "home"
    for _ in range(2):  # it used to fail on every run, not only the first
        shown = _anonml(home, "peer", "proposals", "-a", adversary.url)
        assert shown.returncode == 0, shown.stderr
        text = shown.stdout
        assert "[/oops]" in text
        assert "RED title end [bold]x[/bold]" in text
        assert not any(c in text for c in "\x1b\x07\x9b")
        assert "A" * 79 + "…" in text and "A" * 80 not in text  # titles are cut at 80 characters
    listed = json.loads(_anonml(home, "peer", "proposals", "--json").stdout)
    assert sorted(r["title"] for r in listed) == sorted(titles)  # the data itself is kept as sent
    # Open registration: the person is told, where they decide, what it costs (issue 24, item 12).
    assert all("fake peers" in r["admission"] and "only your local ε" in r["admission"] for r in listed)
    assert shown.stderr.count("as many fake peers as it likes") == len(titles)


@pytest.mark.slow
def test_a_lifetime_cap_given_to_start_holds_for_accept_in_another_process(
    adversary: MaliciousAggregator, tmp_path
):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    # This peer already spent ε = 1 in an earlier problem (recorded in its own ledger).
    settings = PeerSettings(
        ledger_url=f"sqlite:///{home / 'ledger.db'}",
        state_url=f"sqlite:///{home / 'peer' / 'peer.db'}",
        identity_file=home / "peer" / "identity.json",
    )
    fingerprint = load_or_create_identity(settings).fingerprint.hex()
    with PrivacyLedger(settings.ledger_url) as ledger:
        ledger.record(
            peer=fingerprint, problem="p-earlier", round=1, attributes=["x"], mechanism="oue", epsilon=1.0
        )
    start = ["peer", "start", "-a", adversary.url, "--port", str(free_port()), "--poll", "0.2"]
    policy = ["--lifetime-cap", "1.5", "--max-epsilon", "1", "--auto-accept"]
    daemon = subprocess.Popen(
        [sys.executable, "-m", "anonml", *start, *policy],
        env=_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        problem = adversary.propose(mooc_draft(min_peers=20, epsilon=1.0))

        def decided() -> bool:
            rows = json.loads(_anonml(home, "peer", "proposals", "--json").stdout or "[]")
            return any(r["id"] == problem.id and r["decision"] == "refuse" for r in rows)

        wait_until(decided, HUNG_AFTER, "the daemon to refuse the problem")
        saved = home / "peer" / "policy.json"
        assert saved.stat().st_mode & 0o777 == 0o600
        assert json.loads(saved.read_text())["lifetime_epsilon_cap"] == 1.5

        accepted = _anonml(home, "peer", "accept", problem.id)  # a separate process, no flags
        assert accepted.returncode == 1
        assert "lifetime total to 2, past the cap of 1.5" in accepted.stderr

        ledger = json.loads(_anonml(home, "peer", "ledger", "--json").stdout)
        assert ledger["lifetime_cap"] == 1.5  # stored in the ledger by 'peer start'
        assert ledger["lifetime_total"] <= 1.5
    finally:
        daemon.terminate()
        _, err = daemon.communicate(timeout=30)
    assert f"{problem.id}: refused" in err and "past the cap of 1.5" in err  # told on stderr
    # Even a path that ignored the policy cannot record past the cap: the ledger refuses.
    with PrivacyLedger(settings.ledger_url) as ledger:
        with pytest.raises(BudgetExceeded, match="lifetime cap 1.5"):
            ledger.record(
                peer=fingerprint, problem=problem.id, round=1, attributes=["x"], mechanism="oue", epsilon=1.0
            )
        assert ledger.lifetime_total(fingerprint) == pytest.approx(1.0)
