"""The patch finds the changed records' staged rows by their keys when it can (pipeline/stage_patch.py):
each record's key as the full parse's csv reader reads it, and when that way must give up."""

from __future__ import annotations

import pytest

from firefeed.pipeline.record_diff import ChangedRecord
from firefeed.pipeline.stage_patch import Refused, _check_bytes, _keys_kept, _record_keys


def changed(*pairs: tuple[bytes, bytes]) -> list[ChangedRecord]:
    return [ChangedRecord(old=o, new=n, old_offset=0, new_offset=0) for o, n in pairs]


def test_keys_read_as_csv_reads_them_quoted_multi_line_and_short() -> None:
    records = [b'"a,1",x', b'b,"two\nlines"', b'"c""q"', b"d;e"]
    assert _record_keys(records, b",", 0) == ["a,1", "b", 'c"q', "d;e"]
    # A short row's missing cell is empty, as a full parse pads it.
    assert _record_keys(records, b",", 1) == ["x", "two\nlines", "", ""]
    assert _record_keys([b"d;e"], b";", 1) == ["e"]
    # Without a quote the cells are split, not read by csv: the same keys, short rows padded.
    assert _record_keys([b"1,a,x", b"2,b", b"3"], b",", 1) == ["a", "b", ""]
    assert _record_keys([b"1,a,x", b"2,b,y"], b",", 1) == ["a", "b"]
    assert _record_keys([b"\xc3\xa9t\xc3\xa9,1"], b",", 0) == ["\u00e9t\u00e9"]
    assert _record_keys([], b",", 0) == []


def test_a_record_that_is_not_one_row_here_gives_no_keys() -> None:
    assert _record_keys([b'a,"x', b'y",1'], b",", 0) is None  # two records read as one row
    assert _record_keys([b"\xff,1"], b",", 0) is None  # not UTF-8
    assert _record_keys([b'"\xff",1'], b",", 0) is None


def test_kept_keys_distinct_allow_the_keys_way() -> None:
    assert _keys_kept(changed((b"1,a", b"1,b"), (b"2,a", b'"2",a')), b",", 0) == ["1", "2"]


def test_a_key_two_changed_records_share_takes_the_old_records_way() -> None:
    assert _keys_kept(changed((b"1,a", b"1,b"), (b"1,c", b"1,d")), b",", 0) is None


@pytest.mark.parametrize("new", [b"9,b", b",b"])
def test_a_changed_or_emptied_key_is_refused(new: bytes) -> None:
    with pytest.raises(Refused, match="changes its key"):
        _keys_kept(changed((b"1,a", new)), b",", 0)


def test_clean_utf8_records_pass_the_byte_checks() -> None:
    _check_bytes(changed((b"1,\xc3\xa9", b"1,\xe2\x82\xac"), (b"2,a", b"2,b")))


@pytest.mark.parametrize(
    ("pairs", "reason"),
    [
        (((b"1,a", b"1,\x00"),), "NUL"),
        (((b"1,\x00", b"1,a"),), "NUL"),
        (((b"1,a", b"1,\xff"),), "not UTF-8"),
        # A multibyte character cut between two records: each record alone is not UTF-8, though their bytes
        # joined without a separator would be.
        (((b"1,a", b"1,\xc3"), (b"2,a", b"\xa9,b")), "not UTF-8"),
    ],
)
def test_a_nul_or_a_record_that_is_not_utf8_is_refused(pairs: tuple[tuple[bytes, bytes], ...], reason: str) -> None:
    with pytest.raises(Refused, match=reason):
        _check_bytes(changed(*pairs))
