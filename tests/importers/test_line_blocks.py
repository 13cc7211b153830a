"""anonml.readers.iter_line_blocks: whole lines, every byte once, each block numbered by its first line.

The reader has a path for the common file (one read per block, ``\\n`` alone ending lines, counted
without testing every byte) and the general one (``\\r\\n`` and lone ``\\r``, reads that stop short,
gzip); both must number lines as text mode with universal newlines does.
"""

from __future__ import annotations

import gzip
import io
import random
from pathlib import Path

import pytest

from anonml.errors import RecordError
from anonml.readers import iter_line_blocks


def _lines(data: bytes) -> list[bytes]:
    """Lines as text mode with ``newline=""`` cuts them (the numbering the reader must follow)."""
    return [line.encode("latin-1") for line in io.StringIO(data.decode("latin-1"), newline="").readlines()]


def _random_text(rnd: random.Random, ends: tuple[bytes, ...]) -> bytes:
    pieces = [b"x" * rnd.choice([0, 1, 5, 50, 300]) + rnd.choice(ends) for _ in range(rnd.randint(0, 40))]
    return b"".join(pieces)


@pytest.mark.parametrize("ends", [(b"\n",), (b"\n", b"\r\n", b"\r"), (b"\n", b"")])
@pytest.mark.parametrize(("size", "first_size"), [(1, 1), (7, None), (64, 3), (1 << 20, 1 << 16)])
@pytest.mark.parametrize("packed", [False, True])
def test_blocks_hold_whole_lines_numbered_as_text_mode_numbers_them(
    tmp_path: Path, ends: tuple[bytes, ...], size: int, first_size: int | None, packed: bool
) -> None:
    rnd = random.Random(f"{ends}{size}{packed}")
    for k in range(40):
        data = _random_text(rnd, ends)
        path = tmp_path / f"f{k}.log"
        path.write_bytes(gzip.compress(data) if packed else data)
        blocks = list(iter_line_blocks(path, size, first_size=first_size))
        assert b"".join(block for _, block in blocks) == data
        lines, expected_first = _lines(data), 1
        for first, block in blocks:
            assert first == expected_first
            assert block.endswith((b"\n", b"\r")) or block is blocks[-1][1]  # only the last may be cut
            expected_first += len(_lines(block))
        assert expected_first == len(lines) + 1


def test_a_truncated_gzip_stream_names_the_line_the_data_stops_in(tmp_path: Path) -> None:
    data = b"".join(b"line %d\n" % n for n in range(1, 5001))
    path = tmp_path / "cut.log.gz"
    path.write_bytes(gzip.compress(data)[:-40])
    seen = []
    with pytest.raises(RecordError, match="cannot read on from this line") as failure:
        for first, block in iter_line_blocks(path, 4096):
            seen.append((first, block))
    whole = b"".join(block for _, block in seen)
    assert data.startswith(whole) and whole.endswith(b"\n")
    assert failure.value.line == len(_lines(whole)) + 1
