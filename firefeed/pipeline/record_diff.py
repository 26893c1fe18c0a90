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
`max_changed` changes (the diff stops at the first one past it: ~10 us of CPU a changed record, so a
rewritten file costs `max_changed` of them), a quote left open at the end of a changed record's file.

Quote parity is exactly csv.reader's record structure only while every quote is one csv reads as
quoting. csv.reader (not strict) reads a quote inside an unquoted field (`5" screen`) as a literal,
parity does not, and from there on the two disagree about which newlines end records, so parsing only
the changed records would not give what a full parse gives. The two agree exactly iff no quote reached
with an even quote count since its record's start follows a byte other than the delimiter, `\\n`,
`\\r`, a quote or the record's start (that byte is the first disagreement, and without one they never
disagree). This holds record by record, so: the changed records (old and new bytes) are checked here,
and the rest of the new file is the old file's records, checked (`quotes_agree`, ~0.5 s CPU for 700 MB)
unless the caller vouches for them with `old_quotes_checked`: the old file is the new file of an
earlier diff that was not refused (whose own old file was checked), or passed `quotes_agree`. A changed
record is also refused when csv would not read it as exactly one row of its own: a blank line (no row),
or a carriage return outside quotes other than in the terminator (csv ends a row there).

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
from itertools import repeat
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

#: a diff's budget of quoted line ends walked past in changed records (~1 s): more is refused
MAX_STEPS = 1_000_000
#: the changed records' bytes a diff holds at most (old and new): more is refused, memory stays bounded
MAX_CHANGED_BYTES = 256 << 20

_Data = mmap.mmap | bytes


@dataclass(frozen=True)
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
    parity, before = 0, quote  # the file's start allows an opening quote, as a quote before it does
    for start in range(0, len(data), _CHUNK):
        pieces = data[start : start + _CHUNK].split(quote)
        # quote j of the chunk (after pieces[j]) has an even count before it iff j and parity agree
        first = pieces[0]
        if parity == 0 and len(pieces) > 1 and not (first.endswith(allowed) if first else before in allowed_or_quote):
            return False
        # an empty piece is a quote after a quote; map and filter keep the loop over pieces in C
        if not all(map(bytes.endswith, filter(None, pieces[2 - parity : len(pieces) - 1 : 2]), repeat(allowed))):
            return False
        parity ^= (len(pieces) - 1) & 1
        before = pieces[-1][-1:] or quote
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
    changed: list[ChangedRecord] = []
    with _mapped(old) as old_data, _mapped(new) as new_data:
        view = memoryview(old_data)
        try:
            differ = _Differ(old_data, new_data, view, quote)
            _walk(differ, changed, max_changed=max_changed, skip_header=skip_header, delimiter=delimiter)
            # even with no change: a diff that is not refused vouches for its new file (the next one's old)
            if not old_quotes_checked and not _quotes_agree(old_data, quote, delimiter):
                raise _Refused("the old file has a quote inside an unquoted field (csv's records are not the quotes')")
        except _Refused as refused:
            return RecordDiff([], str(refused.args[0]))
        finally:
            view.release()
    return RecordDiff(changed, None)


def _walk(
    differ: _Differ, changed: list[ChangedRecord], *, max_changed: int, skip_header: bool, delimiter: bytes
) -> None:
    """Appends the changed records to `changed`, or raises _Refused."""
    old, new, quote = differ.old, differ.new, differ.quote
    old_len, new_len = len(old), len(new)
    synced, shift = 0, 0  # old offset of a record start, and where that record starts in new (synced + shift)
    shifted = 0  # changed records in a row so far that are the record before them in the other file
    held = 0  # the changed records' bytes, old and new
    while True:
        size = min(old_len - synced, new_len - synced - shift)
        at = differ.first_difference(synced, size, shift)
        if at is None:
            if old_len - synced == new_len - synced - shift:
                return
            at = synced + size  # one file ends where the other goes on
        start = differ.record_start(at, synced)
        new_start = start + shift
        if start >= old_len:
            raise _Refused("the new file has records the old one does not (added at its end)")
        if new_start >= new_len:
            raise _Refused("the old file has records the new one does not (removed from its end)")
        if skip_header and start == 0:
            raise _Refused("the header changed")
        old_end, old_next = differ.record_end(old, start)
        new_end, new_next = differ.record_end(new, new_start)
        record = ChangedRecord(old[start:old_end], new[new_start:new_end], start, new_start)
        for side, data, offset in (("old", record.old, start), ("new", record.new, new_start)):
            if (trouble := _csv_trouble(data, quote, delimiter)) is not None:
                raise _Refused(f"the changed record at {side} offset {offset} holds {trouble}")
        if changed and start == synced and (record.new == changed[-1].old or record.old == changed[-1].new):
            shifted += 1
            if shifted >= _SHIFTED:
                raise _Refused(f"records were inserted or removed before offset {start}: {shifted} moved by one")
        else:
            shifted = 0
        changed.append(record)
        if len(changed) > max_changed:
            raise _Refused(f"more than {max_changed} records changed")
        held += len(record.old) + len(record.new)
        if held > MAX_CHANGED_BYTES:
            raise _Refused(f"the changed records hold more than {MAX_CHANGED_BYTES:,} bytes")
        synced, shift = old_next, new_next - old_next
