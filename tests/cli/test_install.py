"""A fresh ``pip install -e ".[dev]"`` installs everything the code and the tests import.

The suite must pass from the README's test command alone, so every third-party
module imported anywhere in the repository's packages, tests and benchmarks
(``bench --plot`` imports matplotlib, a test exercises it) has to come from
the core dependencies or the ``dev`` extra.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCAL = {
    "anonml", "importers", "instancers", "featurizers", "peer", "aggregator", "witness", "tests", "benchmarks"
}
# Import names whose distribution is spelled otherwise, for modules not installed here.
KNOWN = {"nacl": "pynacl", "bs4": "beautifulsoup4", "dateutil": "python-dateutil",
         "sklearn": "scikit-learn", "mpl_toolkits": "matplotlib"}
# Imported only by a benchmark's worker process that runs in an environment of its own, with the
# command that makes it named in the benchmark's docstring (never importable beside the project's
# own dependencies): module -> the only file that may import it.
OWN_ENVIRONMENT = {"diffprivlib": "benchmarks/central_dp_worker.py"}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    specs = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    return {_normal(re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0]) for spec in specs}


def _installed_with(declared: set[str]) -> set[str]:
    """``declared`` and everything they require, transitively (what pip installs with them)."""
    closure, todo = set(declared), list(declared)
    while todo:
        try:
            needs = requires(todo.pop()) or []
        except PackageNotFoundError:
            continue
        for spec in needs:
            if "extra ==" in spec:
                continue
            name = _normal(re.split(r"[<>=!~\[; (]", spec, maxsplit=1)[0])
            if name not in closure:
                closure.add(name)
                todo.append(name)
    return closure


def _imported_modules() -> dict[str, str]:
    """Top-level module name -> first file importing it, over the repository's Python files."""
    found: dict[str, str] = {}
    for folder in sorted(LOCAL):
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.split(".")[0], str(path.relative_to(ROOT)))
    return found


def test_every_third_party_import_is_a_dependency_or_in_the_dev_extra() -> None:
    declared = _installed_with(_declared())
    installed = packages_distributions()
    missing = {}
    for module, where in _imported_modules().items():
        if module in LOCAL or module in sys.stdlib_module_names or module.startswith("_"):
            continue
        if OWN_ENVIRONMENT.get(module) == where:
            continue
        distributions = installed.get(module) or [KNOWN.get(module, module)]
        if not any(_normal(d) in declared for d in distributions):
            missing[module] = where
    assert missing == {}, f"imported but not installed by pip install -e '.[dev]': {missing}"


def test_the_dev_extra_brings_matplotlib_for_the_plot_tests() -> None:
    assert "matplotlib" in _declared()
