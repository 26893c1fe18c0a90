"""The line patch of a delta run's export (export/patch.py): the last file's lines replaced at their places."""

from __future__ import annotations

import hashlib
from array import array
from pathlib import Path

import pytest

from firefeed.export import line_index, patch
from firefeed.export.line_index import LineIndex
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


def indexed(old: bytes, lengths: list[int], head: bytes = HEAD) -> LineIndex:
    return LineIndex(hashlib.sha256(old).hexdigest(), len(old), len(head), array("Q", lengths))


def test_with_the_kept_lengths_the_spans_between_changed_items_are_joined_as_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(patch, "_BLOCK", 16)  # spans longer than a block are cut in blocks
    # Item 3's value is quoted over two lines: one item, one length; cutting at line ends could not patch it.
    rows = [f"{i},{'v' * (i % 40)}\n".encode() for i in range(200)]
    rows[3] = b'3,"two\nlines"\n'
    old = HEAD + b"".join(rows)
    for places in ([0, 39, 40, 41, 150, 199], [2, 4], []):
        new = [f"{i},new\n".encode() for i in places]
        src, dest = tmp_path / "old.csv", tmp_path / "new.csv"
        src.write_bytes(old)
        index = indexed(old, [len(r) for r in rows])
        n, size, sha = patch_file(
            src, dest, export=EXPORT, head=HEAD, rows=200, places=places, lines=new, bounds=None, index=index
        )
        expected = list(rows)
        for place, line in zip(places, new, strict=True):
            expected[place] = line
        assert dest.read_bytes() == HEAD + b"".join(expected)
        assert (n, size, sha) == (200, dest.stat().st_size, hashlib.sha256(dest.read_bytes()).hexdigest())


@pytest.mark.parametrize(
    ("lengths", "size", "rows", "why"),
    [
        ([4, 4, 4], 1, 3, "the kept line lengths are not the last file's"),  # another file's size
        ([4, 8], 0, 3, "the kept line lengths are not the last file's"),  # fewer items than the baseline
        ([3, 5, 4], 0, 3, "the kept line lengths do not fit the last file"),  # a replaced item not after a line end
    ],
)
def test_kept_lengths_that_do_not_fit_the_last_file_are_refused(
    tmp_path: Path, lengths: list[int], size: int, rows: int, why: str
) -> None:
    old = HEAD + b"1,a\n2,b\n3,c\n"
    src, dest = tmp_path / "old.csv", tmp_path / "new.csv"
    src.write_bytes(old)
    index = LineIndex(hashlib.sha256(old).hexdigest(), len(old) + size, len(HEAD), array("Q", lengths))
    with pytest.raises(NotPatched, match=why):
        patch_file(
            src, dest, export=EXPORT, head=HEAD, rows=rows, places=[1], lines=[b"2,x\n"], bounds=None, index=index
        )


def test_the_kept_lengths_are_found_only_for_their_own_file_and_whole(tmp_path: Path) -> None:
    old = HEAD + b"1,a\n2,bb\n"
    index = indexed(old, [4, 5])
    where = tmp_path / "lines" / "feed.lines"
    line_index.save(where, index)
    assert line_index.load(where, index.sha256, len(old)) == index
    assert line_index.load(where, "0" * 64, len(old)) is None  # another file
    assert line_index.load(where, index.sha256, len(old) + 1) is None
    assert line_index.load(tmp_path / "none.lines", index.sha256, len(old)) is None
    data = bytearray(where.read_bytes())
    data[-1] ^= 1  # a damaged length
    where.write_bytes(bytes(data))
    assert line_index.load(where, index.sha256, len(old)) is None
    where.write_bytes(b"FFLINES2")  # cut short
    assert line_index.load(where, index.sha256, len(old)) is None
    # Lengths that do not add up to the file are not kept at all.
    line_index.save(where, indexed(old, [4, 4]))
    assert where.read_bytes() == b"FFLINES2"


def test_the_items_positions_are_kept_with_the_lengths_when_known(tmp_path: Path) -> None:
    old = HEAD + b"1,a\n2,bb\n3,c\n"
    where = tmp_path / "feed.lines"
    index = LineIndex(
        hashlib.sha256(old).hexdigest(), len(old), len(HEAD), array("Q", [4, 5, 4]), array("q", [2, 5, 9])
    )
    line_index.save(where, index)
    assert line_index.load(where, index.sha256, len(old)) == index
    # Positions that are not one an item are dropped; the lengths are kept.
    line_index.save(where, LineIndex(index.sha256, len(old), len(HEAD), index.lengths, array("q", [2, 5])))
    loaded = line_index.load(where, index.sha256, len(old))
    assert loaded is not None and loaded.ords is None and list(loaded.lengths) == [4, 5, 4]
    # An index of the first format (lengths only) is still read, without positions.
    data = where.read_bytes()
    first = b"FFLINES1" + data[8:64] + data[72:]  # no count of positions
    where.write_bytes(first)
    assert line_index.load(where, index.sha256, len(old)) == LineIndex(index.sha256, len(old), len(HEAD), index.lengths)
    where.write_bytes(first[:-1])
    assert line_index.load(where, index.sha256, len(old)) is None


def test_the_changed_items_places_are_found_among_the_positions_or_refused() -> None:
    ords = array("q", [2, 5, 9, 14, 20])
    assert patch.places_of(ords, [2, 9, 20]) == [0, 2, 4]
    assert patch.places_of(ords, []) == []
    with pytest.raises(NotPatched, match="enters or leaves"):
        patch.places_of(ords, [5, 10])  # 10 is no item of the last file: it entered the export


@pytest.mark.parametrize(
    ("lines", "why"),
    [
        ([b"2,x\n"], "fewer changed lines than changed items"),
        ([b"1,x\n", b"2,x\n", b"3,x\n"], "more changed lines than changed items"),
    ],
)
def test_changed_lines_that_are_not_one_a_changed_item_are_refused(
    tmp_path: Path, lines: list[bytes], why: str
) -> None:
    old = HEAD + b"1,a\n2,b\n3,c\n"
    src, dest = tmp_path / "old.csv", tmp_path / "new.csv"
    src.write_bytes(old)
    index = indexed(old, [4, 4, 4])
    with pytest.raises(NotPatched, match=why):
        patch_file(
            src, dest, export=EXPORT, head=HEAD, rows=3, places=[0, 2], lines=iter(lines), bounds=None, index=index
        )


def test_the_output_records_the_length_of_each_write_while_asked(tmp_path: Path) -> None:
    from firefeed.export._atomic import atomic_output

    lengths = line_index.recorder()
    with atomic_output(tmp_path / "f.csv") as out:
        out.write(HEAD)
        out.record(lengths)
        for row in (b"1,a\n", b'2,"x\ny"\n'):
            out.write(row)
        out.record(None)
        out.write(b"")
    assert list(lengths) == [4, 8]
    assert (tmp_path / "f.csv").read_bytes() == HEAD + b'1,a\n2,"x\ny"\n'
