"""The line patch of a delta run's export (export/patch.py): the last file's lines replaced at their places."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from firefeed.export import patch
from firefeed.export.patch import NotPatched, patch_file
from firefeed.spec.model import ExportSpec

EXPORT = ExportSpec.model_validate({"name": "feed", "format": "csv", "path": "feed.csv"})
HEAD = b"id,stock\n"


def patched(tmp_path: Path, old: bytes, rows: int, places: list[int], lines: list[bytes]) -> bytes:
    src, dest = tmp_path / "old.csv", tmp_path / "new.csv"
    src.write_bytes(old)
    n, size, sha = patch_file(src, dest, export=EXPORT, head=HEAD, rows=rows, places=places, lines=lines, bounds=None)
    out = dest.read_bytes()
    assert (n, size) == (rows, len(out))
    assert sha == hashlib.sha256(out).hexdigest()
    return out


def test_the_changed_lines_are_replaced_and_the_others_kept_byte_for_byte(tmp_path: Path) -> None:
    old = HEAD + b"1,a\n2,b\n3,c\n4,d\n"
    out = patched(tmp_path, old, 4, [0, 2], [b'1,"x, y"\n', b"3,\n"])
    assert out == HEAD + b'1,"x, y"\n2,b\n3,\n4,d\n'
    assert patched(tmp_path, old, 4, [], []) == old


def test_lines_across_many_blocks_and_longer_than_a_block_are_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(patch, "_BLOCK", 16)
    rows = [f"{i},{'v' * (i % 40)}\n".encode() for i in range(200)]
    places = [0, 39, 40, 41, 150, 199]
    new = [f"{i},new\n".encode() for i in places]
    out = patched(tmp_path, HEAD + b"".join(rows), 200, places, new)
    expected = list(rows)
    for place, line in zip(places, new, strict=True):
        expected[place] = line
    assert out == HEAD + b"".join(expected)


@pytest.mark.parametrize(
    ("old", "why"),
    [
        (b"other\n1,a\n", "the last file does not start with the export's head"),
        (HEAD + b'1,"a\nb"\n2,c\n', "the last file is not one line per item"),  # a value over two lines
        (HEAD + b"1,a\n", "the last file is not one line per item"),  # a line short
        (HEAD + b"1,a\n2,b", "the last file is not one line per item"),  # no line end at the end
    ],
)
def test_a_last_file_that_is_not_the_head_and_one_line_per_item_is_not_patched(
    tmp_path: Path, old: bytes, why: str
) -> None:
    with pytest.raises(NotPatched, match=why):
        patched(tmp_path, old, 2, [1], [b"2,x\n"])


def test_an_export_written_whole_says_why() -> None:
    assert patch.static_reason(EXPORT) is None
    assert patch.static_reason(EXPORT.model_copy(update={"gzip": True})) == "gzip"
    assert patch.static_reason(EXPORT.model_copy(update={"format": "json"})) == "json is written whole"
