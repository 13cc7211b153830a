"""The streaming JSON reader: equal to json.load at any buffer size, located errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import anonml.json_stream as js
from anonml.errors import RecordError
from anonml.json_stream import iter_json_items


@pytest.mark.parametrize("chunk", [1, 2, 5, 17, 4096])
def test_streaming_reader_matches_json_load_at_any_buffer_size(
    chunk: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    doc = {"meta": {"v": 1.5e-3, "s": "é\n\\\""}, "locations": [{"a": i, "n": 12345678901234 + i}
                                                            for i in range(6)],
           "empty": [], "tail": 987654321}
    text = json.dumps(doc, indent=1, ensure_ascii=False)
    path = tmp_path / "doc.json"
    path.write_text(text, encoding="utf-8")
    monkeypatch.setattr(js, "_CHUNK", chunk)
    items = list(iter_json_items(path))
    assert [(k, i) for k, i, _, _ in items] == [("meta", None)] + [
        ("locations", i) for i in range(6)] + [("tail", None)]
    assert [v for k, _, _, v in items if k == "locations"] == doc["locations"]
    assert items[0][3] == doc["meta"] and items[-1][3] == 987654321  # numbers never cut short
    lines = text.splitlines()
    for key, index, line, _ in items:
        if key == "locations":
            assert lines[line - 1].strip() == "{", (index, line)


def test_streaming_reader_rejects_trailing_garbage(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('[{"a": 1}]\n]', encoding="utf-8")
    with pytest.raises(RecordError, match=r"x.json:2: invalid JSON: extra data"):
        list(iter_json_items(path))
