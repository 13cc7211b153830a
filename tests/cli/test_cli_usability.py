"""What a new user trips over: real files, exit codes, the messages they read.

Commands run in this process (``run``: the same app as ``python -m anonml``) unless only a process
shows the behaviour: Ctrl-C, shell completion, ``--help`` as printed, a server's port already taken.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from anonml.store import EventStore
from tests.cli.test_cli import run, run_process

EDX = Path(__file__).resolve().parents[1] / "importers" / "fixtures" / "edx"


def _store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'e.db'}"


# --- importers through the command line -----------------------------------------------------


def test_a_commented_edx_log_is_detected_and_imports_with_skip_bad(tmp_path: Path) -> None:
    log = EDX / "commented.log"
    result = run("import", str(log), "--skip-bad", "--store", _store(tmp_path), "--json", home=tmp_path)
    assert result.returncode == 0, result.stderr
    (report,) = json.loads(result.stdout)
    assert (report["importer"], report["inserted"], report["rejected"]) == ("edx", 2, 2)
    assert f"skipped {log}:1: a '#' comment line, not JSON (--skip-bad reports it" in result.stderr


def test_a_comment_line_without_skip_bad_points_at_it(tmp_path: Path) -> None:
    log = EDX / "commented.log"
    result = run("import", str(log), "--store", _store(tmp_path), home=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {log}:1: a '#' comment line, not JSON (--skip-bad reports it and imports the rest)"
    )


def test_nothing_recognised_says_so_plainly(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text("")
    result = run("import", str(empty), "--store", _store(tmp_path), home=tmp_path)
    assert result.returncode == 1
    line = result.stderr.strip()
    assert line.startswith(f"error: {empty}: no importer recognises it (every importer scored 0); "
                           "choose one with --importer NAME (installed importers: ")
    assert "no importer named" not in line and "Traceback" not in result.stderr


def test_a_misspelt_importer_gets_a_suggestion(tmp_path: Path, samples_dir: Path) -> None:
    result = run("import", str(samples_dir / "uber" / "trips_snake_case.csv"), "--importer", "ubr",
                 "--store", _store(tmp_path), home=tmp_path)
    assert result.returncode == 1
    assert "no importer named 'ubr'; did you mean 'uber'?" in result.stderr


def test_replace_swaps_an_import_made_with_the_wrong_zone(tmp_path: Path, samples_dir: Path) -> None:
    sleep = samples_dir / "fitbit" / "sleep.json"
    store = _store(tmp_path)
    refused = run("import", str(sleep), "--store", store, home=tmp_path)
    assert refused.returncode == 1 and "Fitbit times are local" in refused.stderr
    assert "pass params timezone" in refused.stderr
    utc = run("import", str(sleep), "--params", '{"fitbit": {"timezone": "UTC"}}', "--store", store,
              "--json", home=tmp_path)
    assert json.loads(utc.stdout)[0]["inserted"] == 2
    paris = '{"fitbit": {"timezone": "Europe/Paris"}}'
    fixed = run("import", str(sleep), "--params", paris, "--replace", "--store", store, "--json",
                home=tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    (report,) = json.loads(fixed.stdout)
    assert (report["replaced"], report["inserted"]) == (2, 2)
    events = EventStore(store).events(source="fitbit")
    assert len(events) == 2 and {e.fields["assumed_tz"] for e in events} == {"Europe/Paris"}


def test_the_import_table_names_the_users_of_a_multi_user_log(tmp_path: Path) -> None:
    result = run("import", str(EDX / "anonymous_enrollment.log"), "--store", _store(tmp_path), "--json",
                 home=tmp_path)
    (report,) = json.loads(result.stdout)
    assert (report["user"], report["users"]) == ("3 users", 3)
    table = run("events", "--by-import", "--store", _store(tmp_path), home=tmp_path)
    assert "3 users" in table.stdout and " me " not in table.stdout


# --- messages are printed as they are ---------------------------------------------------------


def test_brackets_in_paths_and_params_are_printed_not_eaten(tmp_path: Path) -> None:
    odd = tmp_path / "records [old].json"
    odd.write_text("")
    result = run("import", str(odd), "--store", _store(tmp_path), home=tmp_path)
    assert result.returncode == 1 and f"{odd}: no importer recognises it" in result.stderr
    crash = run("import", str(odd), "--importer", "uber", "--params", '{"timezone": "[/x]"}',
                "--store", _store(tmp_path), home=tmp_path)
    assert crash.returncode == 1
    assert "unknown timezone '[/x]'" in crash.stderr and "Traceback" not in crash.stderr


def test_the_scaffold_hint_keeps_its_extra(tmp_path: Path) -> None:
    result = run("importer", "new", "garmin", "--dir", str(tmp_path), home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "pip install -e '.[dev]' && pytest" in result.stderr


# --- importer check --params ----------------------------------------------------------------------


def test_importer_check_takes_params(tmp_path: Path, samples_dir: Path) -> None:
    trips = samples_dir / "uber" / "trips_snake_case.csv"
    without = run("importer", "check", str(trips), "--importer", "uber", "--json", home=tmp_path)
    assert without.returncode == 1 and "pass params timezone" in json.loads(without.stdout)["fatal"]
    checked = run("importer", "check", str(trips), "--importer", "uber", "--params",
                  '{"timezone": "America/New_York"}', "--json", home=tmp_path)
    assert checked.returncode == 0, checked.stderr
    report = json.loads(checked.stdout)
    assert report["events"] == 1234 and report["idempotent"] is True
    detected = run("importer", "check", str(trips), "--params", '{"uber": {"timezone": "UTC"}}',
                   "--json", home=tmp_path)
    assert detected.returncode == 0 and json.loads(detected.stdout)["importer"] == "uber"


# --- several files: what was committed, what failed, what was not tried ------------------------


def test_a_failing_file_among_several_is_reported_with_the_rest(tmp_path: Path) -> None:
    good, bad, later = EDX / "tracking.log", EDX / "bad_json.log", EDX / "blank_lines.log"
    store = _store(tmp_path)
    result = run("import", str(good), str(bad), str(later), "--store", store, home=tmp_path)
    assert result.returncode == 1
    assert f"committed before it: {good} (22 new)" in result.stderr
    assert f"failed (nothing of it stored): {bad}" in result.stderr
    assert f"not tried: {later}" in result.stderr
    as_json = run("import", str(good), str(bad), str(later), "--store", store, "--json", home=tmp_path)
    document = json.loads(as_json.stdout)
    assert document["error"]["type"] == "RecordError" and document["error"]["line"] == 2
    assert [r["inserted"] for r in document["imported"]] == [0]  # the second run adds nothing
    assert (document["failed"], document["not_tried"]) == (str(bad), [str(later)])


def test_a_missing_file_among_several_stops_before_anything_is_stored(tmp_path: Path) -> None:
    result = run("import", str(EDX / "tracking.log"), str(tmp_path / "absent.log"),
                 "--store", _store(tmp_path), home=tmp_path)
    assert result.returncode == 1 and "absent.log: no such file or folder" in result.stderr
    assert not (tmp_path / "e.db").exists() or EventStore(_store(tmp_path)).count() == 0


# --- say what is wrong and exit non-zero ---------------------------------------------------------


def test_aggregator_serve_on_a_port_in_use_says_so_before_listening(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_process("aggregator", "serve", "--host", "127.0.0.1", "--port", str(port), "--db",
                             f"sqlite:///{tmp_path / 'agg.db'}", "--identity", str(tmp_path / "agg.key"),
                             home=tmp_path)
    assert result.returncode == 1
    assert f"cannot start the aggregator on 127.0.0.1:{port}" in result.stderr
    assert "listening on" not in result.stderr and "Errno" not in result.stderr


def test_featurize_on_an_empty_or_missing_store_fails(tmp_path: Path) -> None:
    args = ["featurize", "--instancer", "user_window", "--featurizer", "mooc_engagement", "-o",
            str(tmp_path / "m.csv")]
    missing = run(*args, "--store", _store(tmp_path), home=tmp_path)
    assert missing.returncode == 1 and "does not exist yet" in missing.stderr
    EventStore(_store(tmp_path)).close()
    empty = run(*args, "--store", _store(tmp_path), home=tmp_path)
    assert empty.returncode == 1 and "the event store holds no events" in empty.stderr
    assert not (tmp_path / "m.csv").exists()


def test_mooc_engagement_without_edx_data_fails(tmp_path: Path, samples_dir: Path) -> None:
    store = _store(tmp_path)
    imported = run("import", str(samples_dir / "uber" / "trips_snake_case.csv"), "--importer", "uber",
                   "--params", '{"timezone": "UTC"}', "--store", store, home=tmp_path)
    assert imported.returncode == 0, imported.stderr
    result = run("featurize", "--instancer", "user_window", "--featurizer", "mooc_engagement", "-o",
                 str(tmp_path / "m.csv"), "--store", store, home=tmp_path)
    assert result.returncode == 1
    assert "featurizer 'mooc_engagement' reads 'edx' events and the store holds none" in result.stderr
    assert not (tmp_path / "m.csv").exists()


# --- reading never writes ----------------------------------------------------------------------


def test_events_and_help_create_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for args in (["events"], ["events", "--json"], ["events", "--by-import"], ["--help"],
                 ["import", "--help"], ["peer", "--help"], ["plugins"],
                 ["importer", "check", str(EDX / "tracking.log")]):
        result = run(*args, home=home)
        assert result.returncode == 0, (args, result.stderr)
    assert json.loads(run("events", "--json", home=home).stdout) == []
    assert not home.exists()


def test_peer_reading_commands_create_no_home(tmp_path: Path) -> None:
    """`peer ledger` and `peer proposals` with nothing stored say so and leave no $ANONML_HOME behind
    (the settings' default paths named the home folder by creating it)."""
    home = tmp_path / "home"
    for args in (["peer", "ledger"], ["peer", "ledger", "--json"], ["peer", "proposals"],
                 ["peer", "proposals", "--json"]):
        result = run(*args, home=home)
        assert result.returncode == 0, (args, result.stderr)
        assert not home.exists(), args


# --- a mature command line -------------------------------------------------------------------


def test_version(tmp_path: Path) -> None:
    from importlib.metadata import version

    result = run("--version", home=tmp_path)
    assert (result.returncode, result.stdout) == (0, f"anonml {version('anonml')}\n")


def test_shell_completion_script_and_completions(tmp_path: Path) -> None:
    # Typer names the shell from the process tree: run it under bash, as a user's shell would
    # (a test runner started in the background has no shell among its ancestors). The trailing
    # `exit` keeps bash as the parent: given a single command, bash execs it in its own place.
    script = subprocess.run(
        ["bash", "-c", '"$0" -m anonml --show-completion; exit $?', sys.executable],
        capture_output=True, text=True, env={**os.environ, "ANONML_HOME": str(tmp_path)}, timeout=60,
    )
    assert script.returncode == 0 and "_ANONML_COMPLETE=complete_bash" in script.stdout, script.stderr
    env = {**os.environ, "ANONML_HOME": str(tmp_path), "_ANONML_COMPLETE": "complete_bash",
           "COMP_WORDS": "anonml imp", "COMP_CWORD": "1"}
    words = subprocess.run([sys.executable, "-m", "anonml"], capture_output=True, text=True, env=env,
                           timeout=60)
    assert words.stdout.split() == ["import", "importer"]
    env.update(COMP_WORDS="anonml peer start --max-e", COMP_CWORD="3")
    options = subprocess.run([sys.executable, "-m", "anonml"], capture_output=True, text=True, env=env,
                             timeout=60)
    assert options.stdout.split() == ["--max-epsilon"]  # completed inside a lazily loaded group


def _help(*args: str, home: Path) -> str:
    env = {**os.environ, "ANONML_HOME": str(home), "COLUMNS": "200"}
    result = subprocess.run([sys.executable, "-m", "anonml", *args, "--help"], capture_output=True,
                            text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_help_shows_defaults_and_flags_as_flags(tmp_path: Path) -> None:
    text = _help("import", home=tmp_path)
    assert "<bool>" not in text
    assert "--skip-bad" in text and "--no-skip-bad" in text and "--replace" in text
    assert "[default: 0.5]" in text and "$ANONML_HOME/events.db" in text
    for args in (["events"], ["peer", "start"], ["aggregator", "serve"], ["importer", "check"]):
        assert "<bool>" not in _help(*args, home=tmp_path), args
    peer = " ".join(_help("peer", "start", home=tmp_path).split())
    for shown in ("Relay port. [default: (8471 or $ANONML_PEER_PORT)]", "--auto-accept --ask",
                  "[default: (ask)]", "Largest ε per problem. [default: (1.0)]",
                  "Largest total ε ever. [default: (10.0)]"):
        assert shown in peer, shown
    aggregator = " ".join(_help("aggregator", "serve", home=tmp_path).split())
    assert "Port to listen on. [default: (8470 or $ANONML_AGGREGATOR_PORT)]" in aggregator


def test_lazy_groups_list_the_help_their_modules_give() -> None:
    import importlib

    import typer

    from anonml.cli import LAZY_GROUPS

    for name, (module, short) in LAZY_GROUPS.items():
        command = typer.main.get_command(importlib.import_module(module).app)
        assert command.help.strip().splitlines()[0] == short, name


def test_tables_are_not_cut_when_stdout_is_not_a_terminal(tmp_path: Path) -> None:
    deep = tmp_path / ("a-rather-long-folder-name-" * 4) / "tracking.log"
    deep.parent.mkdir(parents=True)
    shutil.copyfile(EDX / "tracking.log", deep)
    result = run("import", str(deep), "--store", _store(tmp_path), home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert str(deep) in result.stdout  # whole, on one line, not folded or cut with …


def test_json_errors_are_json_documents(tmp_path: Path) -> None:
    result = run("import", str(tmp_path / "absent.log"), "--store", _store(tmp_path), "--json",
                 home=tmp_path)
    assert result.returncode == 1
    absent = tmp_path / "absent.log"
    assert json.loads(result.stdout) == {
        "error": {"type": "RecordError", "path": str(absent), "message": f"{absent}: no such file or folder"}
    }
    bad = run("importer", "check", str(EDX / "tracking.log"), "--importer", "nope", "--json", home=tmp_path)
    assert bad.returncode == 1 and json.loads(bad.stdout)["error"]["type"] == "PluginNotFound"


# --- a sample to run the README on -------------------------------------------------------------


def test_datasets_mooc_then_import_then_featurize(tmp_path: Path) -> None:
    folder = tmp_path / "mooc"
    made = run("datasets", "mooc", "--students", "12", "--weeks", "6", "-o", str(folder), "--json",
               home=tmp_path)
    assert made.returncode == 0, made.stderr
    sample = json.loads(made.stdout)
    assert sample["logs"] == 12 and len(list(folder.glob("tracking.log-*"))) == 12
    truth = (folder / "truth.csv").read_text().splitlines()
    assert truth[0] == "username,user_id,dropout_week,events" and len(truth) == 13
    again = run("datasets", "mooc", "--students", "12", "-o", str(folder), home=tmp_path)
    assert again.returncode == 1 and "already holds tracking logs" in again.stderr
    store = _store(tmp_path)
    imported = run("import", str(folder), "--store", store, "--json", home=tmp_path)
    assert imported.returncode == 0, imported.stderr
    assert sum(r["inserted"] for r in json.loads(imported.stdout)) == sample["events"]
    matrix = tmp_path / "matrix.npz"
    featurized = run("featurize", "--instancer", "user_window", "--featurizer", "mooc_engagement",
                     "-o", str(matrix), "--store", store, home=tmp_path)
    assert featurized.returncode == 0, featurized.stderr
    with np.load(matrix) as data:
        assert data["X"].shape[0] == 12 and data["X"].any()
    with sqlite3.connect(tmp_path / "e.db") as con:
        assert con.execute("select count(distinct user_id) from events").fetchone() == (12,)


@pytest.mark.parametrize("students", ["0", "100001"])
def test_datasets_mooc_bounds_are_usage_errors(tmp_path: Path, students: str) -> None:
    assert run("datasets", "mooc", "--students", students, "-o", str(tmp_path / "m"),
               home=tmp_path).returncode == 2


def test_error_lines_keep_every_bracket(capsys: pytest.CaptureFixture[str]) -> None:
    import typer

    from anonml.cli_support import expected_errors
    from anonml.errors import AnonMLError

    message = "plotting needs matplotlib: pip install 'anonml[plot]' (see [bold]x[/] and [/x])"
    with pytest.raises(typer.Exit) as info, expected_errors():
        raise AnonMLError(message)
    assert info.value.exit_code == 1
    assert capsys.readouterr().err == f"error: {message}\n"


def test_a_fitbit_export_folder_imports_in_the_zone_its_profile_states(tmp_path: Path,
                                                                      samples_dir: Path) -> None:
    from tests.importers.test_fitbit import _export_with_profile

    root = tmp_path / "MyFitbitData" / "Ann"
    _export_with_profile(samples_dir, root, "America/Chicago")
    result = run("import", str(tmp_path / "MyFitbitData"), "--store", _store(tmp_path), "--json",
                 home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert [r["inserted"] for r in json.loads(result.stdout)] == [2]
    events = EventStore(_store(tmp_path)).events(source="fitbit")
    assert {e.fields["assumed_tz"] for e in events} == {"America/Chicago"}


# --- params, completion, and what a failed or interrupted import leaves -------------------------


def test_flat_params_go_to_the_detected_importer(tmp_path: Path, samples_dir: Path) -> None:
    """Fitbit refuses local times without a zone; the flat params it asks for are then taken."""
    sleep = samples_dir / "fitbit" / "sleep.json"
    store = _store(tmp_path)
    refused = run("import", str(sleep), "--store", store, home=tmp_path)
    assert refused.returncode == 1 and "pass params timezone" in refused.stderr
    flat = run("import", str(sleep), "--params", '{"timezone": "Europe/Amsterdam"}', "--store", store,
               "--json", home=tmp_path)
    assert flat.returncode == 0, flat.stderr
    assert json.loads(flat.stdout)[0]["inserted"] == 2
    assert {e.fields["assumed_tz"] for e in EventStore(store).events(source="fitbit")} == {"Europe/Amsterdam"}
    # The importer chosen must take them: google_activity has no timezone param.
    activity = samples_dir / "google_takeout" / "Takeout" / "My Activity" / "Search" / "My Activity.json"
    wrong = run("import", str(activity), "--params", '{"timezone": "UTC"}', "--store", store, home=tmp_path)
    assert wrong.returncode == 1
    assert wrong.stderr.strip().startswith(
        f"error: {activity}: read by 'google_activity', which does not take the --params given (timezone): "
    )
    assert "anonml importer params google_activity" in wrong.stderr
    nobody = run("import", str(sleep), "--params", '{"colour": "red"}', "--store", store, home=tmp_path)
    assert "error: --params: no importer takes 'colour' as params" in nobody.stderr
    mixed = run("import", str(sleep), "--params", '{"fitbit": {}, "timezone": "UTC"}', "--store", store,
                home=tmp_path)
    assert "error: --params mixes importer names (fitbit) with other keys (timezone)" in mixed.stderr


def test_importer_params_lists_types_defaults_and_bounds(tmp_path: Path) -> None:
    listed = run("importer", "params", "ical", "--json", home=tmp_path)
    assert listed.returncode == 0, listed.stderr
    document = json.loads(listed.stdout)
    assert document["importer"] == "ical"
    by_name = {p["name"]: p for p in document["params"]}
    assert list(by_name) == ["window_start", "window_end", "horizon_days", "max_occurrences", "timezone"]
    assert by_name["horizon_days"] == {"name": "horizon_days", "type": "int", "default": "365",
                                       "bounds": "≥ 1, ≤ 36600", "description": ""}
    assert by_name["timezone"]["type"] == "IANA time zone | None" and by_name["timezone"]["default"] == "null"
    table = run("importer", "params", "fitbit", home=tmp_path)
    assert "heart_rate_timezone" in table.stdout and "IANA time zone" in table.stdout
    assert run("importer", "params", "edx", home=tmp_path).stdout.strip() == "edx takes no params"
    missing = run("importer", "params", "fitbt", home=tmp_path)
    assert missing.returncode == 1 and "no importer named 'fitbt'; did you mean 'fitbit'?" in missing.stderr


def test_importer_option_completes_plugin_names(tmp_path: Path) -> None:
    for words, cword in (("anonml import x.json --importer goo", "4"), ("anonml importer check x -i ub", "5"),
                         ("anonml importer params a", "3")):
        env = {**os.environ, "ANONML_HOME": str(tmp_path), "_ANONML_COMPLETE": "complete_bash",
               "COMP_WORDS": words, "COMP_CWORD": cword}
        done = subprocess.run([sys.executable, "-m", "anonml"], env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        expected = {"goo": ["google_activity", "google_location"], "ub": ["uber"], "a": ["apple_health"]}
        assert done.stdout.split() == expected[words.rsplit(" ", 1)[1]]


def test_a_failed_first_import_leaves_no_store_behind(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    nothing = tmp_path / "notes.txt"
    nothing.write_text("hello\n")
    for args in (
        [str(tmp_path / "absent.json")],  # no such file
        [str(nothing)],  # nothing recognises it
        [str(EDX / "bad_json.log")],  # a bad record rolls the only file back
        [str(EDX / "tracking.log"), "--dry-run"],  # a dry run stores nothing
    ):
        result = run("import", *args, "--store", f"sqlite:///{db}", home=tmp_path)
        assert not db.exists() and not list(tmp_path.glob("e.db-*")), (args, result.stderr)
    # The default store too: no events.db appears in ANONML_HOME.
    home = tmp_path / "home"
    assert run("import", str(nothing), home=home).returncode == 1
    assert not (home / "events.db").exists()
    # A store that existed before is kept, whatever happens to the import.
    first = run("import", str(EDX / "tracking.log"), "--store", f"sqlite:///{db}", home=tmp_path)
    assert first.returncode == 0
    assert run("import", str(nothing), "--store", f"sqlite:///{db}", home=tmp_path).returncode == 1
    assert EventStore(f"sqlite:///{db}").count() > 0


def test_an_empty_importer_name_is_an_error(tmp_path: Path) -> None:
    log = str(EDX / "tracking.log")
    for command in (["import", log, "--store", _store(tmp_path)], ["importer", "check", log]):
        result = run(*command, "--importer", "", home=tmp_path)
        assert result.returncode == 1
        assert result.stderr.strip() == (
            "error: --importer is empty: name an importer (see 'anonml plugins'), "
            "or leave the option out to detect one per file"
        )
    assert not (tmp_path / "e.db").exists()


def test_ctrl_c_during_an_import_says_what_is_stored_and_rolls_back(tmp_path: Path) -> None:
    """SIGINT while the second file is being read (a FIFO the test holds open): one line, exit 130,
    the first file's import kept, nothing of the second."""
    fifo = tmp_path / "tracking.log"
    os.mkfifo(fifo)
    db = tmp_path / "e.db"
    env = {**os.environ, "ANONML_HOME": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "anonml", "import", str(EDX / "blank_lines.log"), str(fifo),
         "--importer", "edx", "--store", f"sqlite:///{db}"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        with open(fifo, "w") as writer:  # returns once the import opened the FIFO to read it
            writer.write((EDX / "tracking.log").read_text())
            writer.flush()
            proc.send_signal(signal.SIGINT)  # the importer waits for more lines: interrupt it there
            _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == (
        f"interrupted: the import of {fifo} was rolled back (nothing of it stored); "
        "1 file(s) imported before it stay stored"
    )
    assert "Traceback" not in stderr
    store = EventStore(f"sqlite:///{db}")
    assert [Path(r.path).name for r in store.imports()] == ["blank_lines.log"]
    assert store.count() == store.imports()[0].added > 0
    with sqlite3.connect(db) as con:
        assert con.execute("pragma integrity_check").fetchone() == ("ok",)
