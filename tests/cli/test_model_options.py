"""Command-line options derived from a pydantic model's fields (``with_model_options``)."""

from __future__ import annotations

from typing import Any

import typer
from pydantic import BaseModel, Field
from typer.testing import CliRunner

from anonml.cli_support import ModelFlag, with_model_options
from peer.policy import PeerPolicy


class Knobs(BaseModel):
    level: int = Field(default=3, ge=1, le=4)
    rate: float = Field(default=0.5, gt=0, lt=1)
    loud: bool = False
    names: list[str] = Field(default_factory=list)


FLAGS = (
    ModelFlag("level", "--level", "How high."),
    ModelFlag("rate", "--rate", "How often."),
    ModelFlag("loud", "--loud/--soft", "Whether to shout."),
    ModelFlag("names", "--name", "A name (repeatable)."),
)
SEEN: list[dict[str, Any]] = []
app = typer.Typer()


@app.command()
@with_model_options(Knobs, FLAGS)
def run(other: str = "x", **changes: Any) -> None:
    SEEN.append({"other": other, **changes})


def _invoke(*args: str):
    SEEN.clear()
    return CliRunner().invoke(app, list(args))


def test_only_the_options_given_reach_the_command_as_field_changes() -> None:
    assert _invoke().exit_code == 0 and SEEN == [{"other": "x"}]
    result = _invoke("--level", "2", "--rate", "0.25", "--soft", "--name", "a", "--name", "b", "--other", "y")
    assert result.exit_code == 0, result.output
    assert SEEN == [{"other": "y", "level": 2, "rate": 0.25, "loud": False, "names": ["a", "b"]}]


def test_a_value_past_an_inclusive_bound_is_refused_naming_the_option() -> None:
    result = _invoke("--level", "5")
    assert result.exit_code == 2 and SEEN == []
    assert "Invalid value for '--level'" in result.output and "less than or equal to 4" in result.output


def test_help_shows_each_field_s_default_and_type_from_the_model() -> None:
    shown = " ".join(_invoke("--help").output.split())
    assert "How high." in shown and "[default: (3)]" in shown
    assert "--loud --soft" in shown and "[default: (soft)]" in shown
    assert "[default: (0.5)]" in shown


def test_peer_start_offers_every_policy_option_under_its_old_name() -> None:
    from anonml.commands.peer import POLICY_FLAGS

    assert {f.field for f in POLICY_FLAGS} <= set(PeerPolicy.model_fields)
    names = {f.flags.split("/")[0] for f in POLICY_FLAGS} | {f.flags.split("/")[-1] for f in POLICY_FLAGS}
    kept = {"--max-epsilon", "--lifetime-cap", "--sender-only", "--relay", "--ask", "--guard", "--witness"}
    assert kept <= names
