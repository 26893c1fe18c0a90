"""Which CSV records changed between two versions of a file, found from their bytes (#52, the 1% refresh).

A refresh where 1% of a 1M-item feed changed should parse and stage only the changed records, not the
whole 700 MB file again. Splitting and hashing every record in Python costs ~4.5 s there; this module
compares the new file with the copy of the old one instead, in C-speed primitives only (`mmap.find` of
one file's slice inside the other's exactly sized window compares without copies, `count` and `rfind`
place the record boundaries near a difference), so unchanged records cost no Python work at all.

Records are RFC 4180 ones: a `\\n` ends a record iff the count of quote bytes since the record's start is
even (so `""` escapes need nothing special); the terminator (`\\n` or `\\r\\n`) is not part of a record's
bytes, but a changed terminator (or a final newline added or removed) makes the record a changed one.
Records pair by position: the diff is only accepted when the new file is the old one with exactly the
changed records' bytes replaced, record for record. Everything else is refused with a reason: records
added or removed (anywhere, including at the end; in the middle the records after it are each the one
before them in the other file, and a run of 8 of those stops the diff), the header changed, more than
`max_changed` changes (the diff stops at the first one past it: ~10 us of CPU a changed record, ~3 us
in dense changes, so a rewritten file costs `max_changed` of them), a quote left open at the end of a
changed record's file.

Dense changes (the stock refresh: every 10th row of a file of ~35-byte rows) would cost those ~10 us a
record in finding, placing and cutting each one; so a changed record that follows the last one closely
(`_DENSE` bytes after its end) starts a block compared line for line instead: each file from there,
`_BLOCK` bytes cut at a newline, split into lines in C, the lines paired by position (`map` of `ne`,
`compress`), up to the first line of an odd quote count in either. That is exact: a block starts at a
record start in both files (the walk's invariant), a line of an even quote count ends at a newline with
an even count since its record's start, so each line before the first odd one is one whole record in
both files, and the lines pair as the records do; a line holds its `\\r`, so a changed terminator is a
changed line. What is past the shorter list of lines (length-changing edits, records added or removed)
and a record of quoted newlines is left to the walk, which goes on from the next record start as after
any changed record; the changed lines are the same records, in the same order, through the same checks
(csv's reading, records moved by one, the bounds), and take no step of MAX_STEPS, as the walk's own
records of one line take none. Sparse changes (the 1% refresh's, ~70 KB apart) never start a block.

Quote parity is exactly csv.reader's record structure only while every quote is one csv reads as
quoting. csv.reader (not strict) reads a quote inside an unquoted field (`5" screen`) as a literal,
parity does not, and from there on the two disagree about which newlines end records, so parsing only
the changed records would not give what a full parse gives. The two agree exactly iff no quote reached
with an even quote count since its record's start follows a byte other than the delimiter, `\\n`,
`\\r`, a quote or the record's start (that byte is the first disagreement, and without one they never
disagree). This holds record by record, so: the changed records (old and new bytes) are checked here,
and the rest of the new file is the old file's records, checked (`quotes_agree`, ~0.5 s CPU for 700 MB
of items most of which hold quotes; bytes without one cost only the `find` past them) unless the caller
vouches for them with `old_quotes_checked`: the old file is the new file of an earlier diff that was not
refused (whose own old file was checked), or passed `quotes_agree`. A changed record is also refused
when csv would not read it as exactly one row of its own: a blank line (no row), or a carriage return
outside quotes other than in the terminator (csv ends a row there).

The comparison is of bytes: the caller uses it only for encodings where the quote, the delimiter, `\\r`
and `\\n` are single bytes never part of another character (UTF-8 and single-byte code pages, not UTF-16).
Both files are mapped: neither may be truncated while a diff reads it (a read past the new end kills
the process with SIGBUS), so the caller passes its own copies (dataplane/parsed_copy.py), never a local
source file in place.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from itertools import accumulate, compress, count, repeat
from operator import ne
from pathlib import Path

#: bytes copied at once to count quotes in (and to check them in, `quotes_agree`): 1 MB stays in cache
_CHUNK = 1 << 20
#: the least first window compared after a difference (then half the last distance, as the next difference
#: is often about as far on); doubled while equal. Small, for dense changes: a window under _LINEAR is one step
_FIRST_WINDOW = 1 << 8
_MAX_WINDOW = 1 << 24
#: below this a differing window's first difference is found in one step instead of halving it again
_LINEAR = 1024
#: this many changed records in a row, each the one before it in the other file, are records inserted or
#: removed (a swapped pair is one): refused then rather than after `max_changed` records
_SHIFTED = 8

#: a changed record at most this many bytes past the last one's end marks dense changes: the records from it
#: are compared line for line, a block at a time. Splitting costs by the byte (~1-2 ns each, both files),
#: walking by the change (~10-15 us): measured, lines cost what the walk does at ~1.4 KB apart (the stock
#: file's every 40th row), half at ~300 B (every 10th); feed items (~700 B) changed every 10th walk faster
_DENSE = 1 << 10
#: the most bytes of each file split into lines at once in dense changes (~7,000 stock rows, ~370 feed
#: items), and the least after lines cut short by a record of quoted newlines
_BLOCK = 1 << 18
_MIN_BLOCK = 1 << 13
#: odd or not, in C (map's function)
_ODD = (1).__and__

#: a diff's budget of quoted line ends walked past in changed records (~1 s): more is refused
MAX_STEPS = 1_000_000
#: the changed records' bytes a diff holds at most (old and new): more is refused, memory stays bounded
MAX_CHANGED_BYTES = 256 << 20

_Data = mmap.mmap | bytes


@dataclass(frozen=True, slots=True)  # slots: made in half the time, and a dense diff makes ~100,000
class ChangedRecord:
    """One record whose bytes differ; `old`/`new` without the line terminator, offsets where they start."""

    old: bytes
    new: bytes
    old_offset: int
    new_offset: int


@dataclass(frozen=True)
class RecordDiff:
    """The changed records in file order, or why the two files are not the same records but those."""

    changed: list[ChangedRecord]
    refused: str | None


class _Refused(Exception):
    """Ends a diff early: the files are not one another with some records replaced (args[0] says why)."""


@contextmanager
def _mapped(path: Path) -> Iterator[_Data]:
    """The file's bytes, mapped (an empty file cannot be mapped: plain empty bytes then)."""
    with path.open("rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            yield b""
            return
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            yield mm
        finally:
            with suppress(BufferError):  # a view still alive (an exception's frame): the collector unmaps it
                mm.close()


def _count(data: _Data, sub: bytes, start: int, end: int) -> int:
    """`sub`'s count in data[start:end], copied a chunk at a time (mmap has no count of its own)."""
    if end - start <= _CHUNK:
        return data[start:end].count(sub)
    n = 0
    while start < end:
        stop = min(end, start + _CHUNK)
        n += data[start:stop].count(sub)
        start = stop
    return n


def _csv_trouble(record: bytes, quote: bytes, delimiter: bytes) -> str | None:
    """Why csv.reader would not read `record` (no terminator, starting a csv record) as one row of its own."""
    if not record:
        return "a blank line, which csv reads as no row"
    if quote not in record:  # the checks below, with one piece (dense changes of quote-free files take it often)
        return "a carriage return outside quotes, where csv ends a row" if b"\r" in record else None
    pieces = record.split(quote)
    # pieces[i] for even i is outside quotes and precedes quote i (none follows the last piece); empty
    # ones are the record's start or a quote's; map and filter keep the loop in C (a dense diff runs it a lot)
    outside = pieces[0::2]
    if b"\r" in record and any(b"\r" in piece for piece in outside):
        return "a carriage return outside quotes, where csv ends a row"
    if not all(map(bytes.endswith, filter(None, pieces[0 : len(pieces) - 1 : 2]), repeat(delimiter))):
        return "a quote inside an unquoted field, which csv reads as a literal"
    return None


def quotes_agree(path: Path, *, quote: bytes = b'"', delimiter: bytes = b",") -> bool:
    """Whether csv.reader's records in the file are exactly the quote-parity ones (module docstring)."""
    _check_bytes(quote, delimiter)
    with _mapped(path) as data:
        return _quotes_agree(data, quote, delimiter)


def _quotes_agree(data: _Data, quote: bytes, delimiter: bytes) -> bool:
    allowed = (delimiter, b"\n", b"\r")
    allowed_or_quote = (*allowed, quote)
    parity, at = 0, 0
    # bytes up to the next quote need no look (a quote-free stretch keeps the parity): in C, no copy
    while (start := data.find(quote, at)) >= 0:
        # the chunk's first quote: the file's start allows an opening quote, as a quote before it does
        if parity == 0 and (data[start - 1 : start] or quote) not in allowed_or_quote:
            return False
        pieces = data[start : start + _CHUNK].split(quote)  # pieces[0] is empty
        # quote j of the chunk (after pieces[j]) has an even count before it iff j and parity agree
        # an empty piece is a quote after a quote; map and filter keep the loop over pieces in C
        if not all(map(bytes.endswith, filter(None, pieces[2 - parity : len(pieces) - 1 : 2]), repeat(allowed))):
            return False
        parity ^= (len(pieces) - 1) & 1
        at = start + _CHUNK
    return True


def _check_bytes(quote: bytes, delimiter: bytes) -> None:
    for name, value in (("quote", quote), ("delimiter", delimiter)):
        if len(value) != 1 or value in b"\r\n":
            raise ValueError(f"the {name} must be one byte other than CR and LF, not {value!r}")
    if quote == delimiter:
        raise ValueError("the quote and the delimiter must differ")


class _Differ:
    """One diff's two files and the primitives it walks them with (all of them C-speed)."""

    def __init__(self, old: _Data, new: _Data, old_view: memoryview, quote: bytes) -> None:
        self.old, self.new, self.old_view, self.quote = old, new, old_view, quote
        self.window = _FIRST_WINDOW
        self.block = _BLOCK  # the bytes of each file split into lines at once in dense changes
        self.steps = MAX_STEPS

    def step(self) -> None:
        """One newline of a changed record's quoted values walked past: a budget, so that a crafted file
        (records of millions of quoted newlines) costs a bounded time before it is refused."""
        self.steps -= 1
        if self.steps < 0:
            raise _Refused(f"the changed records span more than {MAX_STEPS:,} quoted line ends")

    def first_difference(self, start: int, size: int, shift: int) -> int | None:
        """The first old offset in [start, start+size) whose byte differs in new (shifted), or None."""
        find, view = self.new.find, self.old_view  # `same`, inlined: this loop runs ~8 times a change
        end, origin, window = start + size, start, self.window
        while start < end:
            stop = min(start + window, end)
            if find(view[start:stop], start + shift, stop + shift) == start + shift:
                start, window = stop, min(window * 2, _MAX_WINDOW)
                continue
            while stop - start > _LINEAR:
                mid = (start + stop) // 2
                if find(view[start:mid], start + shift, mid + shift) == start + shift:
                    start = mid
                else:
                    stop = mid
            # the highest bit set in the xor is in the first differing byte (big-endian)
            a, b = self.old[start:stop], self.new[start + shift : stop + shift]
            at = stop - ((int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).bit_length() + 7) // 8
            # changes often come at about even distances: the next search starts with half this one's
            self.window = max(_FIRST_WINDOW, min((at - origin) // 2, _MAX_WINDOW))
            return at
        return None

    def record_start(self, at: int, synced: int) -> int:
        """The start of the old record holding offset `at`; `synced` <= at is a record start."""
        old, quote = self.old, self.quote
        newline = old.rfind(b"\n", synced, at)
        if newline < 0:
            return synced
        parity = _count(old, quote, synced, newline) & 1
        while parity:  # that newline is inside quotes (a multi-line value): the one before it, then
            self.step()
            before = old.rfind(b"\n", synced, newline)
            if before < 0:
                return synced
            parity ^= _count(old, quote, before, newline) & 1
            newline = before
        return newline + 1

    def record_end(self, data: _Data, start: int) -> tuple[int, int]:
        """Where the record starting at `start` ends without its terminator, and where the next one starts."""
        quote, parity, at = self.quote, 0, start
        while (newline := data.find(b"\n", at)) >= 0:
            parity ^= _count(data, quote, at, newline) & 1
            if not parity:
                return (newline - 1 if newline > start and data[newline - 1] == 13 else newline), newline + 1
            self.step()
            at = newline + 1
        if (parity ^ _count(data, quote, at, len(data))) & 1:
            raise _Refused("a quote is left open at the end of a file")
        return len(data), len(data)


def diff_records(
    old: Path,
    new: Path,
    *,
    max_changed: int,
    quote: bytes = b'"',
    skip_header: bool = True,
    delimiter: bytes = b",",
    old_quotes_checked: bool = False,
) -> RecordDiff:
    """The records of `new` that differ from `old`'s, when `new` is `old` with only those replaced.

    `delimiter` and `old_quotes_checked` (the old file passed `quotes_agree`, or is the new file of an
    earlier diff that was not refused) serve the check that quote parity is csv's record structure. A
    diff that is not refused vouches for its new file so, with changes or without.
    """
    _check_bytes(quote, delimiter)
    with _mapped(old) as old_data, _mapped(new) as new_data:
        view = memoryview(old_data)
        try:
            taker = _Taker(max_changed=max_changed, quote=quote, delimiter=delimiter)
            _walk(_Differ(old_data, new_data, view, quote), taker, skip_header=skip_header)
            # even with no change: a diff that is not refused vouches for its new file (the next one's old)
            if not old_quotes_checked and not _quotes_agree(old_data, quote, delimiter):
                raise _Refused("the old file has a quote inside an unquoted field (csv's records are not the quotes')")
        except _Refused as refused:
            return RecordDiff([], str(refused.args[0]))
        finally:
            view.release()
    return RecordDiff(taker.changed, None)


class _Taker:
    """The changed records found so far, and the checks each one passes (in file order) before it is taken."""

    def __init__(self, *, max_changed: int, quote: bytes, delimiter: bytes) -> None:
        self.changed: list[ChangedRecord] = []
        self.max_changed, self.quote, self.delimiter = max_changed, quote, delimiter
        self.synced = 0  # the old offset just past the last changed record (its terminator included)
        self.shifted = 0  # changed records in a row so far that are the record before them in the other file
        self.held = 0  # the changed records' bytes, old and new

    def take(self, record: ChangedRecord, old_next: int, *, csv_clean: bool = False) -> None:
        """Appends the record (`old_next`: where the old record after it starts), or raises _Refused.

        `csv_clean`: the caller knows both bytes free of quotes and carriage returns, and not empty."""
        if not csv_clean:
            for side, data, offset in (("old", record.old, record.old_offset), ("new", record.new, record.new_offset)):
                if (trouble := _csv_trouble(data, self.quote, self.delimiter)) is not None:
                    raise _Refused(f"the changed record at {side} offset {offset} holds {trouble}")
        changed = self.changed
        if (
            changed
            and record.old_offset == self.synced
            and (record.new == changed[-1].old or record.old == changed[-1].new)
        ):
            self.shifted += 1
            if self.shifted >= _SHIFTED:
                raise _Refused(
                    f"records were inserted or removed before offset {record.old_offset}: {self.shifted} moved by one"
                )
        else:
            self.shifted = 0
        changed.append(record)
        if len(changed) > self.max_changed:
            raise _Refused(f"more than {self.max_changed} records changed")
        self.held += len(record.old) + len(record.new)
        if self.held > MAX_CHANGED_BYTES:
            raise _Refused(f"the changed records hold more than {MAX_CHANGED_BYTES:,} bytes")
        self.synced = old_next

    def dense(self, start: int) -> bool:
        """Whether a changed record at old offset `start` follows the last one closely (module docstring)."""
        return bool(self.changed) and start - self.synced <= _DENSE


def _walk(differ: _Differ, taker: _Taker, *, skip_header: bool) -> None:
    """Hands the changed records to `taker` in file order, or raises _Refused."""
    old, new = differ.old, differ.new
    old_len, new_len = len(old), len(new)
    pos, shift = 0, 0  # old offset of a record start (all before it compared), and where it starts in new (+ shift)
    while True:
        size = min(old_len - pos, new_len - pos - shift)
        at = differ.first_difference(pos, size, shift)
        if at is None:
            if old_len - pos == new_len - pos - shift:
                return
            at = pos + size  # one file ends where the other goes on
        start = differ.record_start(at, pos)
        new_start = start + shift
        if start >= old_len:
            raise _Refused("the new file has records the old one does not (added at its end)")
        if new_start >= new_len:
            raise _Refused("the old file has records the new one does not (removed from its end)")
        if skip_header and start == 0:
            raise _Refused("the header changed")
        if taker.dense(start) and (moved := _compare_lines(differ, taker, start, new_start)) is not None:
            pos, shift = moved
            continue
        old_end, old_next = differ.record_end(old, start)
        new_end, new_next = differ.record_end(new, new_start)
        taker.take(ChangedRecord(old[start:old_end], new[new_start:new_end], start, new_start), old_next)
        pos, shift = old_next, new_next - old_next


def _record_lines(data: _Data, start: int, size: int, quote: bytes) -> tuple[list[bytes], bool, bool]:
    """The lines from `start` (a record start) within `size` bytes, up to the first of an odd quote count:
    each is one whole record with its terminator's `\\n` cut off. And whether they hold no quote and no
    carriage return (each line is then a record's bytes exactly, and csv reads any that is not empty), and
    whether a line of an odd count cut them short."""
    end = data.rfind(b"\n", start, start + size)
    if end < 0:
        return [], False, False
    block = data[start:end]
    lines = block.split(b"\n")
    if quote in block:
        odd = next(compress(count(), map(_ODD, map(bytes.count, lines, repeat(quote)))), None)
        if odd is not None:
            del lines[odd:]
        return lines, False, odd is not None
    return lines, b"\r" not in block, False


def _compare_lines(differ: _Differ, taker: _Taker, start: int, new_start: int) -> tuple[int, int] | None:
    """The records from `start` and `new_start` compared line for line, a block of them: where the next
    uncompared record starts (old offset, shift), or None when no line there is a whole record in both."""
    size = differ.block
    old_lines, old_plain, old_cut = _record_lines(differ.old, start, size, differ.quote)
    new_lines, new_plain, new_cut = _record_lines(differ.new, new_start, size, differ.quote)
    n = min(len(old_lines), len(new_lines))
    if n == 0:
        return None
    del old_lines[n:], new_lines[n:]
    old_at = list(accumulate(map(len, old_lines), initial=start))  # line i starts at old_at[i] + i (newlines)
    shift = new_start - start  # unchanged lines are as long in both files: only a changed one moves the rest
    changed = compress(count(), map(ne, old_lines, new_lines))
    take = taker.take
    if old_plain and new_plain:
        for i in changed:  # the common case (a quote-free file): no byte to strip, csv trouble only if blank
            a, b = old_lines[i], new_lines[i]
            at = old_at[i] + i
            take(ChangedRecord(a, b, at, at + shift), at + len(a) + 1, csv_clean=bool(a and b))
            shift += len(b) - len(a)
    else:
        for i in changed:
            a, b = old_lines[i], new_lines[i]
            at = old_at[i] + i
            old, new = a[:-1] if a[-1:] == b"\r" else a, b[:-1] if b[-1:] == b"\r" else b
            take(ChangedRecord(old, new, at, at + shift), at + len(a) + 1)
            shift += len(b) - len(a)
    # records of quoted newlines every ~50 KB (the bench's feed) cut the lines short: the next block about
    # twice what these lines were, so that lines split past such a record cost about what the rest did
    used = old_at[n] + n - start
    differ.block = min(_BLOCK, max(2 * used, _MIN_BLOCK) if old_cut or new_cut else 2 * size)
    return old_at[n] + n, shift
