"""A reader's rows cut into COPY chunks and encoded as COPY text, as a stream of frames.

STAGE loads a feed with one COPY per `chunk_rows` rows. `frames` decides
everything about those chunks where the rows are read: a `Fields` frame first
(the table's columns) and again whenever a row is wider than the columns so far
(the feed grew a field: the chunk ends early and the table gains columns), and
`Block`s of COPY text in between, the last block of each chunk marked. The
consumer only executes what it is told, so the frames can as well be made in
another process (`_child`) as here.

Encoding is block-wise (~1.7 s CPU for the 1M-item feed, plus ~0.5 s to
escape): each row's values are joined with NUL and encoded on their own, the
rows' bytes joined with RS, and only then escaped, with a few whole-block
replaces. Counting the RS bytes proves that no value holds one; a CSV reader
whose text has shown no RS (`rs_seen`, found while reading at no cost) spares
that count (~0.25 s).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass

from firefeed.pipeline.parse._base import FeedReader, Row, StageBlock
from firefeed.pipeline.parse._lists import fill_empty_lists

#: rows encoded per block: ~350 KB of a typical feed, small enough to overlap well with the COPY
BLOCK_ROWS = 500


@dataclass(frozen=True)
class Fields:
    """The reader's fields: first the table's columns, later the wider list a growing feed needs."""

    names: list[str]


@dataclass(frozen=True)
class Block:
    """`rows` rows of COPY text; `last` ends the chunk (and so the COPY).

    With `joined`, `data` is `join_block`'s output, still to be escaped.
    """

    rows: int
    data: bytes
    last: bool
    joined: bool = False


@dataclass(frozen=True)
class End:
    """Every row was framed; the reader's `fields` and `stats` are final."""


Frame = Fields | Block | End


def frames(reader: FeedReader, chunk_rows: int, *, escape: bool = True) -> Generator[Frame, None, None]:
    """The frames of one pass over `reader`; exceptions from the reader propagate.

    Rows get `_ff_ord` 1..n in feed order. A row shorter than the columns is
    padded with "". A block never spans two chunks, and the frame after a last
    block is a `Fields`, the next chunk's first block, or `End`. Without
    `escape`, blocks are left `joined` where they can be (for `escape_block`
    in another process).
    """
    # A reader that stages its list cells a block at a time (CsvReader) leaves them to the blocks cut here.
    block_rows = getattr(reader, "block_rows", None)
    rows, stage = block_rows() if block_rows is not None else (iter(reader), None)
    try:
        yield from _frames(reader, rows, stage, max(1, chunk_rows), escape)
    finally:
        # Closing the reader's iterator closes its file now, not whenever it is collected.
        close = getattr(rows, "close", None)
        if close is not None:
            close()


def _frames(
    reader: FeedReader, rows: Iterator[Row], stage: StageBlock | None, chunk_rows: int, escape: bool
) -> Iterator[Frame]:
    # The first row is read before anything is framed: by then the reader knows its fields.
    pending: Row | None = next(rows, None)
    width = len(reader.fields)
    yield Fields(list(reader.fields))
    # A list field an item lacks is "" in its row: staged as `{}` (its column is text[]). A csv reader's rows
    # hold a staged value at every list field already (`lists_filled`); one staged delimited is text.
    filled = getattr(reader, "lists_filled", False)
    delimited = getattr(reader, "delimited", None) or {}
    lists = () if filled else [f for f in getattr(reader, "lists", None) or () if f not in delimited]

    def list_columns() -> list[int]:
        return [i for i, name in enumerate(reader.fields) if name in lists]

    positions = list_columns()
    first = 1
    while pending is not None:
        if len(pending[1]) > width:
            width = len(reader.fields)
            yield Fields(list(reader.fields))
            positions = list_columns()
        left = chunk_rows
        while pending is not None:
            items, pending = _take(rows, pending, min(left, BLOCK_ROWS), width)
            if stage is not None:
                stage(items)
            if positions:
                fill_empty_lists(items, positions)
            left -= len(items)
            last = left == 0 or pending is None or len(pending[1]) > width
            joined = join_block(items, first, width, rs_possible=getattr(reader, "rs_seen", True))
            if joined is None:
                yield Block(len(items), _encode_slowly(items, first), last)
            elif escape:
                yield Block(len(items), escape_block(joined), last)
            else:
                yield Block(len(items), joined, last, joined=True)
            first += len(items)
            if last:
                break
    yield End()


def _take(rows: Iterator[Row], pending: Row, budget: int, width: int) -> tuple[list[Row], Row | None]:
    """Up to `budget` rows starting with `pending` (which fits), and the row after them."""
    items = [pending if len(pending[1]) == width else (pending[0], pending[1] + [""] * (width - len(pending[1])))]
    keep = items.append
    n = 1
    if n < budget:
        for item in rows:
            k = len(item[1])
            if k != width:
                if k > width:
                    return items, item
                item = (item[0], item[1] + [""] * (width - k))
            keep(item)
            n += 1
            if n >= budget:
                break
        else:
            return items, None
    return items, next(rows, None)


def join_block(items: list[Row], first: int, width: int, *, rs_possible: bool = True) -> bytes | None:
    """The rows as UTF-8, NUL between fields and RS (U+001E) after each row; None if that is ambiguous.

    NUL never occurs in values (FeedReader's promise; if broken, the COPY fails
    on a misaligned row rather than storing anything wrong). RS is rare but
    legal: unless the reader has shown none (`rs_possible` false), counting it
    proves no value holds one. A block with an RS or a lone surrogate in a
    value (None) needs `_encode_slowly`. Rows are encoded one by one: joined
    first, a single emoji would widen the whole block's text to 4 bytes a
    character (~25% slower).
    """
    join = "\x00".join
    try:
        if width:
            rows = [f"{n}\x00{line}\x00{join(values)}\x1e".encode() for n, (line, values) in enumerate(items, first)]
        else:
            rows = [f"{n}\x00{line}\x1e".encode() for n, (line, _values) in enumerate(items, first)]
    except UnicodeEncodeError:
        return None
    data = b"".join(rows)
    if rs_possible and data.count(b"\x1e") != len(items):
        return None
    return data


def escape_block(data: bytes) -> bytes:
    """COPY text from `join_block`'s bytes: a few whole-block replaces, then NUL becomes tab and RS newline."""
    if b"\\" in data:
        data = data.replace(b"\\", b"\\\\")
    if b"\t" in data:
        data = data.replace(b"\t", b"\\t")
    if b"\r" in data:
        data = data.replace(b"\r", b"\\r")
    if b"\n" in data:
        data = data.replace(b"\n", b"\\n")
    return data.translate(_SEPARATORS)


_SEPARATORS = bytes.maketrans(b"\x00\x1e", b"\t\n")
_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\x00": None})


def _encode_slowly(items: list[Row], first: int) -> bytes:
    """The careful path for a block with an RS, a NUL or a lone surrogate in a value."""
    lines = []
    for n, (line, values) in enumerate(items, first):
        escaped = [v.translate(_ESCAPES) for v in values]
        lines.append("\t".join([str(n), str(line), *escaped]) + "\n")
    # "replace": a lone surrogate (from an exotic codec) becomes "?" instead of failing the COPY.
    return "".join(lines).encode("utf-8", "replace")
