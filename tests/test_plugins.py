"""The plugin registry: entry points, names, versions, params, third-party plugin modules.

An installed third-party package, listed and used through the CLI, is tested with the
importer kit that scaffolds it (tests/cli/test_importer_kit.py).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from anonml.errors import PluginError, PluginNotFound
from anonml.plugins import PluginRef, available, create, load_class


def test_builtin_instancers_and_featurizers_are_registered():
    names = {i.name for i in available("instancer")}
    assert {"user_window", "per_event"} <= names
    assert {"declarative"} <= {i.name for i in available("featurizer")}
    assert all(i.distribution == "anonml" for i in available("instancer"))


def test_unknown_plugin_lists_candidates():
    with pytest.raises(PluginNotFound) as info:
        load_class("instancer", "nope")
    message = str(info.value)
    assert "no instancer named 'nope'" in message
    assert "per_event" in message and "user_window" in message


def test_version_mismatch_is_not_found():
    with pytest.raises(PluginNotFound, match="installed version 1.0, asked 9.9"):
        load_class("instancer", "user_window", "9.9")


def test_params_are_validated_and_frozen():
    inst = create("instancer", PluginRef(name="user_window", params={"history_periods": 3, "label_start": 3}))
    assert inst.params.history_periods == 3
    with pytest.raises(PluginError, match="history_periods"):
        create("instancer", PluginRef(name="user_window", params={"history_periods": 0}))
    with pytest.raises(PluginError, match="Extra inputs"):
        create("instancer", PluginRef(name="user_window", params={"code": "import os"}))
    assert inst.ref() == PluginRef(name="user_window", version="1.0", params=inst.params.model_dump())


def test_plugin_ref_refuses_non_names():
    with pytest.raises(ValueError):
        PluginRef(name="os.system")


def _write_plugin_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, params: str) -> str:
    """A third-party importer module on ``sys.path`` whose ``Params`` is ``params`` (source)."""
    body = textwrap.indent(params, "    ")
    (tmp_path / f"{name}.py").write_text(
        "from pydantic import BaseModel, ConfigDict\n"
        "from anonml.plugins import Importer\n\n"
        "class Loose(Importer):\n"
        "    name = 'loose'\n"
        "    version = '1.0'\n"
        f"{body}\n"
        "    def detect(self, path):\n"
        "        return 0.0\n\n"
        "    def parse(self, path):\n"
        "        return iter(())\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{name}:Loose"


@pytest.mark.parametrize(
    ("module", "params", "reason"),
    [
        ("loose_plain", "class Params(BaseModel):\n    limit: int = 1\n",
         "must be frozen and forbid extra keys"),
        ("loose_extra", "class Params(BaseModel):\n    model_config = ConfigDict(frozen=True)\n",
         "must be frozen and forbid extra keys"),
        ("loose_dict", "Params = dict\n", "must be a pydantic model subclassing anonml.plugins.PluginParams"),
    ],
)
def test_loader_refuses_a_plugin_whose_params_is_not_frozen_and_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, params: str, reason: str
):
    from anonml.plugins import _load

    value = _write_plugin_module(tmp_path, monkeypatch, module, params)
    with pytest.raises(PluginError) as info:
        _load("importer", "loose", value)
    assert str(info.value).startswith(f"importer 'loose' ({value}): Params")
    assert reason in str(info.value)


def test_loader_accepts_a_plugin_params_subclass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from anonml.plugins import PluginParams, _load

    value = _write_plugin_module(
        tmp_path, monkeypatch, "loose_ok",
        "from anonml.plugins import PluginParams\nclass Params(PluginParams):\n    limit: int = 1\n",
    )
    cls = _load("importer", "loose", value)
    assert issubclass(cls.Params, PluginParams)
    assert cls({"limit": 3}).params.limit == 3
    with pytest.raises(PluginError, match="Extra inputs"):
        cls({"other": 1})


def test_every_builtin_plugin_params_subclasses_plugin_params():
    from anonml.plugins import GROUPS, PluginParams, iter_classes

    classes = [cls for kind in GROUPS for cls in iter_classes(kind)]
    assert len(classes) >= 15
    assert [c.name for c in classes if not issubclass(c.Params, PluginParams)] == []


@pytest.mark.parametrize("zone", ["Mars/Olympus", ""])
def test_timezone_params_are_checked_once_by_one_type(zone: str):
    from anonml.readers import TimeZoneName

    fields = {
        (cls.name, field)
        for cls in (load_class("importer", n) for n in ("uber", "ical", "csv", "apple_health", "fitbit"))
        for field, info in cls.Params.model_fields.items()
        if "timezone" in field
    }
    assert len(fields) == 6
    for name, field in sorted(fields):
        annotation = load_class("importer", name).Params.model_fields[field].annotation
        assert TimeZoneName in getattr(annotation, "__args__", ()), (name, field)
        with pytest.raises(PluginError, match=field):
            create("importer", name, {field: zone})
    assert create("importer", "uber", {"timezone": "Europe/Paris"}).params.timezone == "Europe/Paris"
