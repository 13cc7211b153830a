"""Issue 31: what a service loads before it answers ``/healthz`` (structural, never timed).

The aggregator is started exactly as ``anonml aggregator serve`` starts it (the CLI in a fresh
interpreter, uvicorn on loopback); a thread of that process waits for ``/healthz`` to answer 200,
prints which heavy modules are loaded by then, and stops the server with SIGINT as Ctrl-C would.
Neither NumPy, the learner (scikit-learn, SciPy, pandas), the mechanisms, Jinja2 nor requests
is needed to answer it and to take the first requests: each is imported where it is used
(benchmarks/cold_start.py measures what that saves). On a database already at the migrations'
head, Alembic is not loaded either (:func:`anonml.database.migrate`).
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import anonml.privacy
import anonml.privacy.mechanisms
from anonml.serving import free_port

ROOT = Path(__file__).resolve().parents[1]

#: Modules a service never needs before its first answer.
HEAVY = (
    "numpy", "scipy", "sklearn", "pandas", "anonml.learn", "anonml.privacy.mechanisms", "jinja2", "requests",
)

#: Runs in the server's own process: polls /healthz from a thread (stdlib only, so the probe itself
#: loads nothing under test), prints the loaded heavy modules as JSON, then stops the server.
_PROBE = """
import json, os, signal, sys, threading, time, urllib.request

url, watched, argv = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3:]

def probe():
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=5) as answer:
                if answer.status == 200:
                    break
        except OSError:
            time.sleep(0.05)
    else:
        print(json.dumps({"error": "no /healthz answer in 120 s"}), flush=True)
        os.kill(os.getpid(), signal.SIGINT)
        return
    print(json.dumps({"loaded": sorted(m for m in watched if m in sys.modules)}), flush=True)
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: uvicorn shuts down, the process exits

threading.Thread(target=probe, daemon=True).start()
sys.argv = ["anonml", *argv]
from anonml.cli import app
app(prog_name="anonml")
"""


def _loaded_when_healthy(db: Path, home: Path, watched: tuple[str, ...]) -> list[str]:
    """Start ``anonml aggregator serve`` on ``db``; the watched modules loaded once /healthz answered."""
    port = free_port("127.0.0.1")
    argv = ["aggregator", "serve", "--db", f"sqlite:///{db}", "--host", "127.0.0.1", "--port", str(port)]
    env = {**os.environ, "ANONML_HOME": str(home), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, f"http://127.0.0.1:{port}", json.dumps(watched), *argv],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no probe line (exit {done.returncode}): {done.stderr[-2000:]}"
    answer = json.loads(lines[-1])
    assert "loaded" in answer, answer
    return answer["loaded"]


def test_aggregator_answers_healthz_without_the_heavy_modules(tmp_path: Path) -> None:
    db = tmp_path / "aggregator.db"
    first = _loaded_when_healthy(db, tmp_path, (*HEAVY, "alembic"))
    # A new database is built by the migrations (Alembic), nothing else heavy.
    assert first == ["alembic"], first
    restart = _loaded_when_healthy(db, tmp_path, (*HEAVY, "alembic"))
    # At the head the stored revision is compared with the files' head: Alembic stays unloaded.
    assert restart == [], restart


def test_the_watch_list_names_real_modules() -> None:
    # A misspelt name would make the assertions above pass vacuously.
    for name in HEAVY:
        assert importlib.util.find_spec(name) is not None, name


def _type_checking_imports(module: object) -> dict[str, str]:
    """Name → module of the ``if TYPE_CHECKING:`` imports of a package's ``__init__``."""
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))  # type: ignore[attr-defined]
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    return {alias.name: node.module for node in block.body for alias in node.names}  # type: ignore[union-attr]


def test_privacy_surface_is_lazy_and_complete() -> None:
    exports = anonml.privacy._EXPORTS
    assert sorted(anonml.privacy.__all__) == sorted(exports)
    assert _type_checking_imports(anonml.privacy) == exports
    # Every mechanism stays reachable from the package, as the star import made it.
    assert set(anonml.privacy.mechanisms.__all__) <= set(exports)
    for name, module in exports.items():
        assert getattr(anonml.privacy, name) is getattr(importlib.import_module(module), name), name
    with pytest.raises(AttributeError, match="no_such_name"):
        anonml.privacy.no_such_name  # noqa: B018


def test_a_descriptor_validates_in_a_process_that_never_loaded_the_mechanisms() -> None:
    # The wire models import only the descriptor, whose consistency check uses the NumPy-free
    # closed forms: checking (and refusing) a descriptor loads neither the mechanisms nor NumPy.
    # Building the mechanism needs the classes, which register as their module is imported.
    wire = anonml.privacy.OUE.from_epsilon(1.0, 8).descriptor().model_dump_json()
    bad = json.dumps({**json.loads(wire), "p": 0.3})
    code = (
        "import sys, json\n"
        "from anonml.protocol import PrivateReport\n"
        "from anonml.privacy.descriptor import MechanismDescriptor\n"
        "d = MechanismDescriptor.model_validate_json(sys.argv[1])\n"
        "try:\n"
        "    MechanismDescriptor.model_validate_json(sys.argv[2])\n"
        "except ValueError as exc:\n"
        "    print('refused' if 'disagrees' in str(exc) else str(exc))\n"
        "print(json.dumps(sorted({'anonml.privacy.mechanisms', 'numpy'} & set(sys.modules))))\n"
        "try:\n"
        "    d.to_mechanism()\n"
        "except LookupError as exc:\n"
        "    print('unregistered' if 'import anonml.privacy.mechanisms' in str(exc) else str(exc))\n"
        "import anonml.privacy.mechanisms\n"
        "print(type(d.to_mechanism()).__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, wire, bad], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["refused", "[]", "unregistered", "OUE"], done.stdout + done.stderr


def _loaded_after_import(module: str, watched: tuple[str, ...]) -> list[str]:
    """The watched modules a fresh interpreter has loaded after ``import module``."""
    code = f"import json, sys, {module}\nprint(json.dumps(sorted(set({list(watched)!r}) & set(sys.modules))))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_the_witness_app_loads_none_of_the_heavy_modules() -> None:
    assert _loaded_after_import("witness.app", HEAVY) == []


def test_the_peer_app_loads_no_learner() -> None:
    # A peer draws reports with NumPy from its first round on; scikit-learn, SciPy and pandas
    # arrive with its first roster plan or model, not with its start.
    learner = ("sklearn", "scipy", "pandas", "anonml.learn.model", "anonml.learn.settings", "jinja2")
    assert _loaded_after_import("peer.app", learner) == []



def test_a_roster_plan_loads_no_learner() -> None:
    # The aggregator builds the plan on its first intake after a restart, and every peer with its
    # first roster: scikit-learn there cost a restarted aggregator's relays their delivery deadline.
    learner = ("sklearn", "scipy", "pandas", "anonml.learn.model")
    assert _loaded_after_import("anonml.learn.settings", learner) == []
    code = (
        "import json, sys\n"
        "from anonml.learn.settings import roster_plan\n"
        "from tests.aggregator.helpers import draft\n"
        "from types import SimpleNamespace as NS\n"
        "d = draft(n_numeric=2, kp=2, pool_fraction=0.25, min_peers=4)\n"
        "entries = [NS(identity=bytes([i]) * 32) for i in range(12)]\n"
        "plan = roster_plan(d, NS(entries=entries, seed=bytes(32), median_pool_size=3), b'')\n"
        f"print(json.dumps([len(plan.median_pool()), sorted(set({list(learner)!r}) & set(sys.modules))]))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [3, []]


def test_a_binary_or_class_label_loads_no_learner() -> None:
    # A peer indexes its label with its first example (during registration); only a numeric label
    # needs the learner's binning.
    learner = ("sklearn", "scipy", "pandas", "anonml.learn.model", "anonml.learn.regression")
    code = (
        "import json, sys\n"
        "from anonml.protocol import LabelSpec\n"
        "from peer.features import label_index\n"
        "classes = LabelSpec(kind='classes', classes=('a', 'b'))\n"
        "found = [label_index(True, LabelSpec()), label_index('b', classes)]\n"
        f"print(json.dumps([found, sorted(set({list(learner)!r}) & set(sys.modules))]))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [[1, 1], []]
