"""The record diff (#52, the 1% refresh): exact against a byte-by-byte reference and csv.reader, or refused."""

from __future__ import annotations

import csv
import io
import itertools
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from firefeed.pipeline import record_diff
from firefeed.pipeline.record_diff import ChangedRecord, RecordDiff, diff_records, quotes_agree

Record = tuple[bytes, bytes]  # (bytes without the terminator, the terminator)


def reference_records(data: bytes, quote: int = ord('"')) -> list[Record]:
    """The quote-parity records, one byte at a time."""
    records, start, parity = [], 0, 0
    for i, byte in enumerate(data):
        if byte == quote:
            parity ^= 1
        elif byte == 10 and not parity:
            end = i - 1 if i > start and data[i - 1] == 13 else i
            records.append((data[start:end], data[end : i + 1]))
            start = i + 1
    if start < len(data):
        records.append((data[start:], b""))
    return records


def reference_agree(data: bytes, delimiter: int = ord(",")) -> bool:
    """quotes_agree's condition one byte at a time: no even-count quote after a byte that opens no field."""
    parity, before = 0, None
    for byte in data:
        if byte == 34:
            if not parity and before not in (None, delimiter, 10, 13, 34):
                return False
            parity ^= 1
        before = byte
    return True


def rows(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))


def expected(old: bytes, new: bytes, *, max_changed: int, skip_header: bool = True) -> list[ChangedRecord] | None:
    """The changed records by the reference, or None where diff_records must refuse."""
    a, b = reference_records(old), reference_records(new)
    if len(a) != len(b) or (skip_header and a and a[0] != b[0]):
        return None
    changed, at_old, at_new = [], 0, 0
    for (old_bytes, old_end), (new_bytes, new_end) in zip(a, b, strict=True):
        if (old_bytes, old_end) != (new_bytes, new_end):
            changed.append(ChangedRecord(old_bytes, new_bytes, at_old, at_new))
        at_old += len(old_bytes) + len(old_end)
        at_new += len(new_bytes) + len(new_end)
    return changed if len(changed) <= max_changed else None


@contextmanager
def files(old: bytes, new: bytes) -> Iterator[tuple[Path, Path]]:
    with tempfile.TemporaryDirectory() as folder:
        a, b = Path(folder) / "old.csv", Path(folder) / "new.csv"
        a.write_bytes(old)
        b.write_bytes(new)
        yield a, b


def diff(old: bytes, new: bytes, *, max_changed: int = 100, **options: object) -> RecordDiff:
    with files(old, new) as (a, b):
        return diff_records(a, b, max_changed=max_changed, **options)  # type: ignore[arg-type]


KNOBS = ("_CHUNK", "_FIRST_WINDOW", "_LINEAR", "_BLOCK", "_DENSE", "_MIN_BLOCK")
#: _DENSE so: changed records never compared as lines (the walk a record at a time), or always after the first
NEVER, ALWAYS = -1, 1 << 40


@contextmanager
def sizes(chunk: int, first_window: int, linear: int, block: int = 1 << 18, dense: int = 1 << 10) -> Iterator[None]:
    """Tiny chunks, windows and blocks, so that short files go through every path a 700 MB one takes."""
    saved = [getattr(record_diff, name) for name in KNOBS]
    for name, value in zip(KNOBS, (chunk, first_window, linear, block, dense, min(block, 16)), strict=True):
        setattr(record_diff, name, value)
    try:
        yield
    finally:
        for name, value in zip(KNOBS, saved, strict=True):
            setattr(record_diff, name, value)


SIZES = st.sampled_from(
    [
        (1 << 24, 1 << 12, 64),
        (1, 1, 1, 1 << 18, NEVER),
        (3, 2, 1, 1, ALWAYS),
        (7, 5, 3, 8, ALWAYS),
        (16, 1, 2, 32, 16),
        (1 << 24, 1 << 12, 64, 16, ALWAYS),
    ]
)

VALUES = st.text(alphabet=st.sampled_from(list("ab ,\"\n\r'é€🔥x;")), max_size=8)
ROW = st.lists(VALUES, min_size=1, max_size=4)


def csv_bytes(table: list[list[str]], terminators: list[str], final: bool) -> bytes:
    out = io.StringIO(newline="")
    for i, (row, end) in enumerate(zip(table, terminators, strict=True)):
        line = io.StringIO(newline="")
        csv.writer(line, lineterminator=end).writerow(row)
        text = line.getvalue()
        out.write(text if final or i < len(table) - 1 else text[: -len(end)])
    return out.getvalue().encode("utf-8")


@st.composite
def edited(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """A csv file as csv.writer writes it and an edit of it: values, terminators, order, records, final newline."""
    table = draw(st.lists(ROW, min_size=2, max_size=12))
    ends = draw(st.lists(st.sampled_from(["\n", "\r\n"]), min_size=len(table), max_size=len(table)))
    final = draw(st.booleans())
    old = csv_bytes(table, ends, final)
    table, ends = [list(r) for r in table], list(ends)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["value", "value", "value", "end", "swap", "insert", "remove", "final"]))
        at = draw(
            st.integers(0, len(table) - 1)
            if draw(st.integers(0, 9)) == 0
            else st.integers(min(1, len(table) - 1), len(table) - 1)
        )
        if kind == "value":
            row = table[at]
            row[draw(st.integers(0, len(row) - 1))] = draw(VALUES)
        elif kind == "end":
            ends[at] = "\r\n" if ends[at] == "\n" else "\n"
        elif kind == "swap":
            other = draw(st.integers(0, len(table) - 1))
            table[at], table[other] = table[other], table[at]
        elif kind == "insert":
            table.insert(at, draw(ROW))
            ends.insert(at, "\n")
        elif kind == "remove" and len(table) > 1:
            del table[at], ends[at]
        elif kind == "final":
            final = not final
    return old, csv_bytes(table, ends, final)


@settings(max_examples=200, deadline=None)
@given(edited(), st.integers(0, 6), st.booleans(), SIZES)
def test_the_diff_is_the_references_or_refused_where_the_reference_refuses(
    pair: tuple[bytes, bytes], max_changed: int, skip_header: bool, size: tuple[int, int, int]
) -> None:
    old, new = pair
    with sizes(*size):
        got = diff(old, new, max_changed=max_changed, skip_header=skip_header)
    want = expected(old, new, max_changed=max_changed, skip_header=skip_header)
    if want is None:
        assert got.refused is not None and got.changed == []
        return
    if got.refused is not None:
        # only csv's reading of a changed record may refuse what the bytes allow (csv.writer leaves a
        # carriage return unquoted when the line terminator is "\n"), or a run of records moved by one
        # (an insertion and a removal, which positions alone allow)
        assert "csv" in got.refused or "inserted or removed" in got.refused, got.refused
        return
    assert got.changed == want
    # what the delta relies on: csv reads each file as its records read one at a time, and a changed
    # record as one row, so the new file's rows are the old one's with the changed ones' replaced
    old_parts = [rows(content + end) for content, end in reference_records(old)]
    new_parts = [rows(content + end) for content, end in reference_records(new)]
    assert rows(old) == [row for part in old_parts for row in part]
    assert rows(new) == [row for part in new_parts for row in part]
    for record in got.changed:
        index = len(reference_records(old[: record.old_offset]))
        assert [rows(record.old), rows(record.new)] == [old_parts[index], new_parts[index]]
        assert len(old_parts[index]) == len(new_parts[index]) == 1


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40).map(lambda b: bytes(b'a,"\n\r'[x % 5] for x in b)), SIZES)
def test_quotes_agree_exactly_when_csv_reads_the_parity_records(data: bytes, size: tuple[int, int, int]) -> None:
    with sizes(*size), files(data, b"") as (path, _):
        agree = quotes_agree(path)
    assert agree == reference_agree(data)
    if agree:
        # the claim the module rests on: csv.reader's rows are the rows of each parity record read alone
        assert rows(data) == [row for content, end in reference_records(data) for row in rows(content + end)]


def test_a_few_megabytes_with_changes_spread_over_them() -> None:
    """The real sizes' paths: windows doubling past the chunk, halving, counts over several chunks."""

    def record(i: int, tail: str = "") -> bytes:
        line = io.StringIO(newline="")
        body = "x" * (i % 97) + (f'multi\nline "{i}"' if i % 5 == 0 else "")
        title, body = (f"Item, {i}{tail}", body) if i % 2 else (f"Item, {i}", body + tail)  # after a quoted newline
        csv.writer(line, lineterminator="\r\n" if i % 11 == 0 else "\n").writerow([f"id{i}", title, body])
        return line.getvalue().encode()

    records = [record(i) for i in range(40_000)]
    edited = list(records)
    at = sorted({i * i % 39_999 + 1 for i in range(1, 120)} | {39_999})
    for i in at:
        edited[i] = record(i, " (new)" if i % 3 else "")  # every third is the same bytes
    old, new = HEADER + b"".join(records), HEADER + b"".join(edited)
    assert len(old) > 2 * record_diff._CHUNK
    offsets = list(itertools.accumulate((len(r) for r in records), initial=len(HEADER)))
    new_offsets = list(itertools.accumulate((len(r) for r in edited), initial=len(HEADER)))
    got = diff(old, new, max_changed=len(at))
    want = [
        ChangedRecord(records[i].rstrip(b"\r\n"), edited[i].rstrip(b"\r\n"), offsets[i], new_offsets[i])
        for i in at
        if records[i] != edited[i]
    ]
    assert got == RecordDiff(want, None)


def test_the_claim_fails_without_the_check() -> None:
    """A quote inside an unquoted field puts a later newline inside csv's quotes but outside parity's."""
    data = b'a"b,"c\nd"\n'
    assert not quotes_agree_bytes(data)
    assert rows(data) != [row for content, end in reference_records(data) for row in rows(content + end)]


def quotes_agree_bytes(data: bytes) -> bool:
    with files(data, b"") as (path, _):
        return quotes_agree(path)


HEADER = b"id,title,description\n"
ROWS = [b"1,One,plain\n", b'2,Two,"multi\nline, ""quoted"" value"\n', b"3,Three,x\n", b'4,Four,"a,b"\n', b"5,Five,y\n"]
FEED = HEADER + b"".join(ROWS)


def changed_rows(*replaced: tuple[int, bytes]) -> bytes:
    rows_ = list(ROWS)
    for at, row in replaced:
        rows_[at] = row
    return HEADER + b"".join(rows_)


def test_identical_files_have_no_changes() -> None:
    assert diff(FEED, FEED) == RecordDiff([], None)
    assert diff(b"", b"") == RecordDiff([], None)
    assert diff(HEADER, HEADER) == RecordDiff([], None)


def test_a_changed_value_is_one_changed_record_with_its_offsets() -> None:
    new = changed_rows((2, b"3,Three (new),x\n"))
    start = len(HEADER) + len(ROWS[0]) + len(ROWS[1])
    assert diff(FEED, new) == RecordDiff([ChangedRecord(b"3,Three,x", b"3,Three (new),x", start, start)], None)


def test_a_change_inside_a_quoted_multiline_value_is_that_record() -> None:
    new = changed_rows((1, b'2,Two,"multi\nline, ""quoted"" value\nand one more line"\n'))
    (record,) = diff(FEED, new).changed
    assert record.old == ROWS[1][:-1] and record.new.endswith(b'and one more line"')
    assert record.old_offset == record.new_offset == len(HEADER) + len(ROWS[0])


def test_a_value_losing_its_quotes_and_a_record_gaining_lines() -> None:
    new = changed_rows((3, b"4,Four,a\n"), (0, b'1,"One\nTwo\nThree",plain\n'))
    got = diff(FEED, new)
    assert got.refused is None
    assert [(r.old, r.new) for r in got.changed] == [
        (ROWS[0][:-1], b'1,"One\nTwo\nThree",plain'),
        (ROWS[3][:-1], b"4,Four,a"),
    ]
    # the later record's offsets are each file's own
    assert got.changed[1].new_offset - got.changed[1].old_offset == len(b'1,"One\nTwo\nThree",plain\n') - len(ROWS[0])


def test_a_swapped_pair_is_two_changes() -> None:
    new = HEADER + ROWS[0] + ROWS[2] + ROWS[1] + ROWS[3] + ROWS[4]
    got = diff(FEED, new)
    assert got.refused is None and [(r.old, r.new) for r in got.changed] == [
        (ROWS[1][:-1], ROWS[2][:-1]),
        (ROWS[2][:-1], ROWS[1][:-1]),
    ]


@pytest.mark.parametrize(
    ("new", "why"),
    [
        (HEADER + ROWS[0] + b"9,Nine,z\n" + b"".join(ROWS[1:]), "added"),
        (HEADER + b"".join(ROWS[1:]), "removed"),
        (HEADER + b"".join(ROWS[:3]) + ROWS[4], "removed"),
        (FEED + b"6,Six,z\n", "added"),
        (FEED + b"\n", "added"),
        (FEED[:-1] + b"\r\n6,Six,z", "added"),
        (b"", "removed"),
        (b"id,title,description,extra\n" + b"".join(ROWS), "header"),
        (HEADER.replace(b"\n", b"\r\n") + b"".join(ROWS), "header"),
    ],
)
def test_records_added_or_removed_and_a_changed_header_are_refused(new: bytes, why: str) -> None:
    got = diff(FEED, new)
    assert got.changed == [] and got.refused is not None and why in got.refused


def test_an_insertion_is_refused_whatever_max_changed_allows() -> None:
    got = diff(FEED, HEADER + b"0,Zero,z\n" + b"".join(ROWS), max_changed=1000)
    assert got.refused is not None and "added" in got.refused


@pytest.mark.parametrize("at", [0, 10, 30])
def test_an_insertion_or_a_removal_is_refused_before_the_records_after_it(at: int) -> None:
    """The records after an insertion are each the one before it: a run of them stops the diff early."""
    records = [f"{i},Item {i},{'x' * (i % 7)}\n".encode() for i in range(40)]
    old = HEADER + b"".join(records)
    inserted = HEADER + b"".join([*records[:at], b"new,New,n\n", *records[at:]])
    removed = HEADER + b"".join(records[:at] + records[at + 1 :])
    for new in (inserted, removed):
        for a, b in ((old, new), (new, old)):
            got = diff(a, b, max_changed=1000)
            assert got.changed == [] and "inserted or removed" in (got.refused or ""), got.refused
    # a swapped pair, or two, is no such run
    swapped = [*records[:at], records[at + 1], records[at], records[at + 3], records[at + 2], *records[at + 4 :]]
    assert len(diff(old, HEADER + b"".join(swapped)).changed) == 4


def test_the_header_counts_as_a_record_when_not_skipped() -> None:
    new = b"id,name,description\n" + b"".join(ROWS)
    assert diff(FEED, new, skip_header=False).changed == [ChangedRecord(HEADER[:-1], b"id,name,description", 0, 0)]


def test_an_empty_old_file_and_a_file_that_is_only_its_header() -> None:
    assert "added" in (diff(b"", FEED).refused or "")
    assert "added" in (diff(HEADER, FEED).refused or "")
    assert "header" in (diff(HEADER, b"id\n").refused or "")


def test_terminators_and_the_final_newline_count_as_changes() -> None:
    last = len(FEED) - len(ROWS[4])
    assert diff(FEED, FEED[:-1]).changed == [ChangedRecord(ROWS[4][:-1], ROWS[4][:-1], last, last)]
    assert diff(FEED[:-1], FEED).changed == [ChangedRecord(ROWS[4][:-1], ROWS[4][:-1], last, last)]
    crlf = changed_rows((2, b"3,Three,x\r\n"))
    start = len(HEADER) + len(ROWS[0]) + len(ROWS[1])
    assert diff(FEED, crlf).changed == [ChangedRecord(b"3,Three,x", b"3,Three,x", start, start)]
    assert diff(crlf, FEED).changed == [ChangedRecord(b"3,Three,x", b"3,Three,x", start, start)]


def test_more_than_max_changed_is_refused_and_up_to_it_is_not() -> None:
    new = changed_rows((0, b"1,One!,plain\n"), (2, b"3,Three!,x\n"), (4, b"5,Five!,y\n"))
    assert len(diff(FEED, new, max_changed=3).changed) == 3
    got = diff(FEED, new, max_changed=2)
    assert got.changed == [] and "more than 2" in (got.refused or "")
    assert "more than 0" in (diff(FEED, new, max_changed=0).refused or "")


def test_a_quote_left_open_in_a_changed_last_record_is_refused() -> None:
    got = diff(FEED, FEED + b'6,"Six')
    assert got.refused is not None
    got = diff(FEED[:-1], FEED[:-1] + b'"')
    assert got.refused is not None and "open" in got.refused


def test_a_quote_csv_reads_as_a_literal_in_the_old_file_refuses_a_change_anywhere() -> None:
    """Parity and csv disagree from a stray quote on: refused unless the caller vouches for the old file."""
    old = HEADER + b'1,12" screen,plain\n2,"x\ny",z"\n3,Three,x\n'
    assert rows(old)[1:] == [["1", '12" screen', "plain"], ["2", "x\ny", 'z"'], ["3", "Three", "x"]]
    new = old.replace(b"Three", b"Three (new)")
    got = diff(old, new)
    assert got.changed == [] and "unquoted field" in (got.refused or "")
    # identical files too: a diff not refused vouches for its new file, the next diff's old one
    assert "unquoted field" in (diff(old, old).refused or "")
    # vouched for (wrongly here), the parity records are taken as they are
    assert len(diff(old, new, old_quotes_checked=True).changed) == 1


def test_a_quote_csv_reads_as_a_literal_in_a_changed_record_is_refused() -> None:
    got = diff(FEED, changed_rows((2, b'3,Three 12" 15",x\n')), old_quotes_checked=True)
    assert got.changed == [] and "literal" in (got.refused or "")
    got = diff(FEED, changed_rows((2, b'3,"Three"x"",x\n')), old_quotes_checked=True)
    assert got.changed == [] and "literal" in (got.refused or "")


def test_a_quote_after_a_closing_one_is_still_csv_quoting() -> None:
    """`"a"b` is a quoted value with text after it, to csv as to parity: the change stands."""
    got = diff(FEED, changed_rows((2, b'3,"Three"b,x\n')))
    assert got.refused is None and [r.new for r in got.changed] == [b'3,"Three"b,x']
    assert rows(got.changed[0].new) == [["3", "Threeb", "x"]]


def test_a_changed_record_csv_reads_as_no_row_or_two_is_refused() -> None:
    assert "blank" in (diff(FEED, changed_rows((2, b"\n"))).refused or "")
    assert "carriage return" in (diff(FEED, changed_rows((2, b"3,Three\r,x\n"))).refused or "")
    # inside quotes a carriage return is a value's
    assert diff(FEED, changed_rows((2, b'3,"Thr\ree",x\n'))).refused is None


def test_another_delimiter_and_quote() -> None:
    old = b"id;title\n1;'a;b'\n2;c\n"
    new = b"id;title\n1;'a;b'\n2;'c;d'\n"
    got = diff(old, new, delimiter=b";", quote=b"'")
    assert got.refused is None and [r.new for r in got.changed] == [b"2;'c;d'"]
    with pytest.raises(ValueError, match="differ"):
        diff(old, new, delimiter=b";", quote=b";")
    with pytest.raises(ValueError, match="one byte"):
        diff(old, new, delimiter=b"\n")


def test_a_changed_record_of_too_many_quoted_line_ends_is_refused_in_bounded_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A crafted file (a value of a million quoted newlines) is refused once the walk's budget is spent,
    not walked a Python step per newline for as long as it takes."""
    monkeypatch.setattr(record_diff, "MAX_STEPS", 1_000)
    tall = '"' + "\n" * 5_000 + '"'
    old = f"id,text\n1,a\n2,{tall}\n3,c\n".encode()
    new = f"id,text\n1,a\n2,{tall}x\n3,c\n".encode().replace(b'"x', b'x"')
    got = diff(old, new)
    assert got.refused == "the changed records span more than 1,000 quoted line ends" and got.changed == []
    short = '"' + "\n" * 500 + '"'
    old = f"id,text\n1,a\n2,{short}\n3,c\n".encode()
    got = diff(old, old.replace(b"\n3,c", b"\n3,d"))
    assert got.refused is None and [c.new for c in got.changed] == [b"3,d"]


def test_changed_records_holding_too_many_bytes_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record_diff, "MAX_CHANGED_BYTES", 100)
    old = b"id,text\n1," + b"a" * 40 + b"\n2," + b"b" * 40 + b"\n"
    one = diff(old, old.replace(b"a" * 40, b"A" * 40))
    assert one.refused is None and len(one.changed) == 1
    both = diff(old, old.replace(b"a" * 40, b"A" * 40).replace(b"b" * 40, b"B" * 40))
    assert both.refused == "the changed records hold more than 100 bytes" and both.changed == []


# Dense changes: the records from a changed one compared line for line, a block at a time, must give what
# the walk a record at a time gives (NEVER), changes and refusals alike, word for word.


def walked(old: bytes, new: bytes, *, max_changed: int, **options: object) -> RecordDiff:
    """The diff a record at a time (no lines compared), the result the line comparison must equal."""
    with sizes(1 << 24, 1 << 12, 64, dense=NEVER):
        return diff(old, new, max_changed=max_changed, **options)


def lined(old: bytes, new: bytes, *, max_changed: int, block: int, **options: object) -> RecordDiff:
    with sizes(1 << 24, 1 << 12, 64, block=block, dense=ALWAYS):
        return diff(old, new, max_changed=max_changed, **options)


#: values csv leaves unquoted
_PLAIN = st.text(alphabet=st.sampled_from(list("aaabb,,x")), min_size=1, max_size=7)
#: a value csv quotes: a delimiter, a doubled quote, a quoted newline or carriage return inside
_QUOTED = st.builds(
    lambda plain, value: plain + ',"' + value.replace('"', '""') + '"',
    _PLAIN,
    st.text(alphabet=st.sampled_from(list('ab,"\n\r')), max_size=6),
)
LINE = st.one_of(*[_PLAIN] * 3, _QUOTED)
#: and now and then any bytes: stray quotes (odd counts, csv's literals), carriage returns, blank lines
RAW_LINE = st.one_of(*[_PLAIN] * 3, _QUOTED, st.text(alphabet=st.sampled_from(list('ab,"\r')), max_size=7))


@st.composite
def densely_edited(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """Raw lines and an edit of many of them (every k-th, values changing length), then structural edits."""
    quotes, raw = draw(st.booleans()), draw(st.booleans())
    any_line = RAW_LINE if raw else LINE

    def kept(line: str) -> str:
        """Without quotes a quoted line end is csv trouble (a carriage return, a blank line): raw lines only."""
        if quotes:
            return line
        return line.replace('"', "") if raw else line.replace('"', "").replace("\r", "").replace("\n", "")

    lines = [kept(line) for line in draw(st.lists(any_line, min_size=10, max_size=60))]
    ends = draw(st.lists(st.sampled_from(["\n", "\n", "\r\n"]), min_size=len(lines), max_size=len(lines)))
    final = draw(st.booleans())

    def text() -> bytes:
        body = "".join(line + end for line, end in zip(lines, ends, strict=True))
        return (body if final else body[: -len(ends[-1])]).encode()

    old = text()
    every, phase = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    for at in range(phase, len(lines), every):
        edit = draw(st.sampled_from(["append", "append", "replace", "end"]))
        if edit == "append":
            lines[at] += draw(st.sampled_from(["x", "yy", ",", '"q"', '"'] if raw and quotes else ["x", "yy", ","]))
        elif edit == "replace":
            lines[at] = kept(draw(any_line))
        else:
            ends[at] = "\r\n" if ends[at] == "\n" else "\n"
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.sampled_from(["insert", "remove", "swap", "final"]))
        if kind == "insert":
            lines.insert(at, draw(_PLAIN))
            ends.insert(at, "\n")
        elif kind == "remove" and len(lines) > 1:
            del lines[at], ends[at]
        elif kind == "swap":
            other = draw(st.integers(0, len(lines) - 1))
            lines[at], lines[other] = lines[other], lines[at]
        elif kind == "final":
            final = not final
    return old, text()


@settings(max_examples=300, deadline=None)
@given(
    densely_edited(),
    st.sampled_from([100, 100, 100, 0, 2, 7]),
    st.booleans(),
    st.sampled_from([1, 8, 13, 32, 64, 1 << 18]),
    st.sampled_from([0, 16, 64, ALWAYS, ALWAYS]),
    st.sampled_from([1 << 20, 1 << 20, 200, 40]),
    st.sampled_from([1_000_000, 1_000_000, 3, 1, 0]),
    st.booleans(),
)
def test_lines_compared_in_blocks_give_exactly_what_the_walk_a_record_at_a_time_gives(
    pair: tuple[bytes, bytes],
    max_changed: int,
    skip_header: bool,
    block: int,
    dense: int,
    max_bytes: int,
    steps: int,
    vouched: bool,
) -> None:
    """Vouched for, the stray quotes' files are diffed too (not refused after the walk, whatever it found)."""
    old, new = pair
    options = {"skip_header": skip_header, "old_quotes_checked": vouched}
    saved = record_diff.MAX_CHANGED_BYTES, record_diff.MAX_STEPS
    record_diff.MAX_CHANGED_BYTES, record_diff.MAX_STEPS = max_bytes, steps
    try:
        want = walked(old, new, max_changed=max_changed, **options)
        with sizes(1 << 24, 1 << 12, 64, block=block, dense=dense):
            got = diff(old, new, max_changed=max_changed, **options)
    finally:
        record_diff.MAX_CHANGED_BYTES, record_diff.MAX_STEPS = saved
    assert got == want


def stock(n: int, flipped: int = 0, *, every: int = 3, crlf_every: int = 0) -> bytes:
    """A stock-like file (no quotes): every `every`-th row's availability flipped `flipped` times."""
    states = ["in_stock", "out_of_stock", "preorder"]
    out = [b"id,availability,quantity,price\n"]
    for i in range(n):
        state = states[(i + (flipped if i % every == 0 else 0)) % 3]
        end = "\r\n" if crlf_every and i % crlf_every == 0 else "\n"
        out.append(f"FF{i:06d},{state},{i % 400},{i % 90}.99 EUR{end}".encode())
    return b"".join(out)


def counted_record_ends(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The calls of the walk a record at a time (record_end) from here on, counted in the list's length."""
    calls: list[int] = []
    record_end = record_diff._Differ.record_end

    def counting(self: record_diff._Differ, data: bytes, start: int) -> tuple[int, int]:
        calls.append(start)
        return record_end(self, data, start)

    monkeypatch.setattr(record_diff._Differ, "record_end", counting)
    return calls


@pytest.mark.parametrize("crlf_every", [0, 7])
def test_dense_changes_of_a_quote_free_file_are_compared_as_lines(
    monkeypatch: pytest.MonkeyPatch, crlf_every: int
) -> None:
    """A stock refresh: a third of the rows changed, values changing length (in_stock -> out_of_stock)."""
    old, new = stock(3_000, crlf_every=crlf_every), stock(3_000, 1, crlf_every=crlf_every)
    want = expected(old, new, max_changed=10_000)
    assert want is not None and len(want) == 1_000
    assert walked(old, new, max_changed=10_000) == RecordDiff(want, None)
    calls = counted_record_ends(monkeypatch)
    for block in (64, 1_000, 1 << 18):
        assert lined(old, new, max_changed=10_000, block=block) == RecordDiff(want, None)
    with sizes(1 << 24, 1 << 12, 64):  # the module's own sizes
        assert diff(old, new, max_changed=10_000) == RecordDiff(want, None)
    assert len(calls) < 100, "the changed records were walked one at a time"


def test_a_block_boundary_anywhere_in_or_next_to_a_changed_record() -> None:
    old, new = stock(40, crlf_every=5), stock(40, 2, every=2, crlf_every=5)
    want = walked(old, new, max_changed=100)
    assert want.refused is None and len(want.changed) == 20
    for block in range(1, len(old) + 2):
        assert lined(old, new, max_changed=100, block=block) == want, block


def test_a_terminator_alone_changing_among_dense_changes() -> None:
    old = stock(50)
    new = old.replace(b"EUR\n", b"EUR\r\n", 30).replace(b"FF000020,", b"FF000020,x")
    got = lined(old, new, max_changed=100, block=256)
    assert got == walked(old, new, max_changed=100) and got.refused is None and len(got.changed) == 30
    assert got.changed[0].old == got.changed[0].new  # the bytes are the same, their terminator is not


def test_a_quote_in_one_of_the_two_blocks_only() -> None:
    """Quoted values in the new file only: a line of an even quote count is a record, a line of an odd
    one ends the lines compared (a quoted newline: the walk takes that record)."""
    old = stock(60)
    rows = old.split(b"\n")
    rows[5] = rows[5].rsplit(b",", 1)[0] + b',"5.99, net"'  # even: one line, one record
    rows[8] = rows[8].rsplit(b",", 1)[0] + b',"8.99\nnet"'  # odd lines: two lines, one record
    clean = b"\n".join(rows)
    rows[9] = rows[9].replace(b"EUR", b'EUR""')  # a quote csv reads as a literal: refused as before
    for new in (clean, b"\n".join(rows)):
        for a, b in ((old, new), (new, old)):
            want = walked(a, b, max_changed=100, old_quotes_checked=True)
            for block in (1, 16, 64, 100, 1 << 18):
                assert lined(a, b, max_changed=100, block=block, old_quotes_checked=True) == want
    want = walked(old, clean, max_changed=100)
    assert want.refused is None and [len(r.new.split(b"\n")) for r in want.changed] == [1, 2]
    assert "literal" in (walked(old, b"\n".join(rows), max_changed=100).refused or "")


@pytest.mark.parametrize("at", [3, 20, 39, 40])
def test_records_inserted_or_removed_among_dense_changes_are_refused_as_before(at: int) -> None:
    """The line counts of the two files differ: the same refusal, with the same offsets, as the walk's."""
    old, new = stock(40), stock(40, 1, every=2)
    rows = new.split(b"\n")  # the header, 40 rows, and the empty piece after the final newline
    inserted = b"\n".join([*rows[: at + 1], b"FF999999,in_stock,1,1.99 EUR", *rows[at + 1 :]])
    removed = b"\n".join(rows[:at] + rows[at + 1 :])  # row `at` (at 40: the last one)
    for b in (inserted, removed):
        for first, second in ((old, b), (b, old)):
            want = walked(first, second, max_changed=100)
            assert want.refused is not None
            for block in (1, 64, 300, 1 << 18):
                assert lined(first, second, max_changed=100, block=block) == want


def test_refusals_of_dense_changes_name_the_same_record() -> None:
    old, rows = stock(100), stock(100, 1).split(b"\n")
    blank = b"\n".join([*rows[:51], b"", *rows[52:]])
    carriage = b"\n".join([*rows[:52], rows[52].replace(b",", b"\r,", 1), *rows[53:]])
    for new, why in ((stock(100, 1), "more than 20"), (blank, "blank"), (carriage, "carriage return")):
        want = walked(old, new, max_changed=20 if why.startswith("more") else 100)
        assert why in (want.refused or "")
        assert lined(old, new, max_changed=20 if why.startswith("more") else 100, block=512) == want


def test_records_of_quoted_newlines_among_dense_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A feed-like file: every 7th record has a quoted newline (a line of an odd quote count cuts the lines
    compared short, the walk takes that record, the next block is sized by what was used), every 3rd record
    changed, some changed records being ones of quoted newlines, all under a budget of steps that ends the
    diff in the middle for a tight one."""

    def item(i: int, tail: str = "") -> bytes:
        line = io.StringIO(newline="")
        text = f"Item {i}, a description" + ("\nof two lines" if i % 7 == 0 else "") + tail
        csv.writer(line, lineterminator="\n").writerow([f"FF{i:06d}", f"Title {i}", text, f"{i % 90}.99 EUR"])
        return line.getvalue().encode()

    old = HEADER + b"".join(item(i) for i in range(2_000))
    new = HEADER + b"".join(item(i, " (new)" if i % 3 == 0 else "") for i in range(2_000))
    want = expected(old, new, max_changed=1_000)
    assert want is not None and len(want) == 667
    for block in (100, 5_000, 1 << 18):
        assert lined(old, new, max_changed=1_000, block=block) == RecordDiff(want, None)
    for budget in (10, 50):
        monkeypatch.setattr(record_diff, "MAX_STEPS", budget)
        got = walked(old, new, max_changed=1_000)
        assert got.refused == f"the changed records span more than {budget:,} quoted line ends"
        assert lined(old, new, max_changed=1_000, block=5_000) == got


def test_quotes_agree_looks_only_from_each_quote_on() -> None:
    """Quote-free stretches longer than a chunk are skipped: a quote after one is still checked."""
    stretch = b"a,b\n" * 1_000
    with sizes(16, 1, 1):
        assert quotes_agree_bytes(stretch)
        assert quotes_agree_bytes(stretch + b'"y,z"\n' + stretch + b'1,"x""y"\n' + stretch)
        assert not quotes_agree_bytes(stretch + b'x"y\n' + stretch)
        assert not quotes_agree_bytes(stretch + b'"y,z"\n' + stretch + b'1,"x"y"z"\n')
        assert not quotes_agree_bytes(b'"open\n' + stretch + b'x"y\n' + stretch + b'a"b\n')
        assert quotes_agree_bytes(b'"open\n' + stretch + b'x"y\n' + stretch)
