"""CSV and TSV: the header names the fields, each record is one row (SPEC 8.6).

The hot loop is csv.reader over a TextIOWrapper, both in C; per row Python only
compares the cell count with the header's. Line numbers come from the reader's
`line_num` (physical lines, so a quoted newline counts; a blank line counts as
a line, never as a row).

A blank line holds nothing but white space; a line with a quoted field is a
record even when every cell is empty (`""`, SPEC 8.22). csv.reader gives both
the same cells, so a row whose cells could be a blank line's is checked
against its raw text, which an `itertools.tee` keeps a few hundred lines of
(C speed, no Python call per line: about 2 % more of the reader's own work).
"""

from __future__ import annotations

import csv
import itertools
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from firefeed.errors import ParseError
from firefeed.pipeline.parse._base import (
    MAX_VALUE_CHARS,
    ParseStats,
    Row,
    RowCounter,
    Rows,
    StageBlock,
    restartable,
    too_long,
)
from firefeed.pipeline.parse._encoding import FeedText
from firefeed.pipeline.parse._lists import delimit_block, delimited_lists, list_positions, split_cell
from firefeed.pipeline.parse._names import header_names

#: delimiter candidates, in the order that breaks ties
CANDIDATES = (",", ";", "|", "\t")
_NAMED = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";", "pipe": "|"}
#: a header record longer than this is not a header; detection uses what was read
_HEADER_MAX_LINES = 1000
#: raw lines kept behind the csv reader (about; memory: that many lines), to tell a blank line from `""`
_RAW_KEEP = 256


def detect_delimiter(header: str) -> str:
    """The candidate found most often outside quotes in the header record; none -> ','."""
    outside = "".join(header.split('"')[0::2])
    best, best_count = ",", 0
    for cand in CANDIDATES:
        count = outside.count(cand)
        if count > best_count:
            best, best_count = cand, count
    return best


def _long_cell(record: str, delimiter: str, cap: int) -> int | None:
    """Which cell of a record's raw text is the first longer than `cap` characters (None: not found).

    Only called for a row csv.reader refused as too long, which says nothing of where: the text is
    split at quotes, and the delimiters outside them count the cells. A doubled quote counts as none,
    so a cell within a few characters of the cap may go unnamed.
    """
    cell = length = 0
    for n, part in enumerate(record.split('"')):
        pieces = [part] if n % 2 else part.split(delimiter)
        for i, piece in enumerate(pieces):
            if i:
                cell, length = cell + 1, 0
            length += len(piece)
            if length > cap:
                return cell
    return None


def _delimiter_option(source: str, delimiter: str, fmt: str) -> str | None:
    """The delimiter to use, or None to detect it from the header."""
    if delimiter in ("auto", ""):
        return "\t" if fmt == "tsv" else None
    delimiter = _NAMED.get(delimiter.lower(), delimiter)
    if len(delimiter) != 1 or delimiter in '"\r\n':
        raise ParseError(source, f"delimiter must be one character, not {delimiter!r}")
    return delimiter


class _RawLines:
    """The physical lines behind csv.reader's rows, kept by a tee the reader runs ahead of."""

    def __init__(self, raw: Iterator[str]) -> None:
        self._raw = raw
        #: lines taken from `raw` so far: the next one is line `read + 1`
        self.read = 0

    def forget_before(self, line: int) -> None:
        """Drop the lines before `line` (1-based), which no later row needs."""
        n = line - 1 - self.read
        if n > 0:
            deque(itertools.islice(self._raw, n), maxlen=0)
            self.read += n

    def quoted(self, first: int, last: int) -> bool:
        """Whether lines `first`..`last` hold a quote character."""
        return any('"' in line for line in self._take(first, last))

    def text(self, first: int, last: int) -> str:
        """Lines `first`..`last`, joined."""
        return "".join(self._take(first, last))

    def _take(self, first: int, last: int) -> list[str]:
        self.forget_before(first)
        lines = list(itertools.islice(self._raw, last - first + 1))
        self.read += len(lines)
        return lines


def _staged_one_by_one(rows: Rows, stage: StageBlock) -> Rows:
    """The rows, each staged as a block of one: a reader that stops early reads no row ahead."""
    for row in rows:
        stage([row])
        yield row


def _is_blank(row: list[str], raw: _RawLines, first: int, last: int) -> bool:
    """Whether the row on lines `first`..`last` is a blank line: white space only, no quoted field.

    Only cells that are all white space can be a blank line's; only then is the
    raw text looked at (a quote in it means a quoted field, so a record).
    """
    if not row:
        return True
    first_cell = row[0]
    if (first_cell and not first_cell.isspace()) or "".join(row).strip():
        return False
    return not raw.quoted(first, last)


class CsvReader:
    """Rows of a CSV/TSV file; `fields` is the de-duplicated header."""

    #: the longest cell taken (FIREFEED_PARSE_MAX_VALUE_CHARS); set by open_reader
    max_value_chars = MAX_VALUE_CHARS

    def __init__(self, path: Path, *, source: str, encoding: str, delimiter: str, fmt: str) -> None:
        self.source = source
        self._text = FeedText(path, source, encoding)
        self._delimiter = _delimiter_option(source, delimiter, fmt)
        self.fields: list[str] = []
        self.stats = ParseStats(encoding=self._text.codec)
        self.delimiter = self._delimiter or ","

    @property
    def rs_seen(self) -> bool:
        """Whether the text read so far holds a U+001E; until it does, no row yielded holds one."""
        return self._text.rs_seen

    def _header(self, text: IO[str]) -> tuple[Iterable[str], str]:
        """Peek at the lines up to the end of the header record; give them back with the delimiter."""
        if self._delimiter is not None:
            return text, self._delimiter
        peeked: list[str] = []
        record: list[str] = []
        for line in text:
            peeked.append(line)
            if not record and not line.strip():
                continue
            record.append(line)
            # An even number of quotes so far: the header record ends with this line.
            if sum(part.count('"') for part in record) % 2 == 0 or len(record) >= _HEADER_MAX_LINES:
                break
        return itertools.chain(peeked, text), detect_delimiter("".join(record))

    #: the source's list fields -> separator (SPEC 9); set by open_reader
    lists: dict[str, str] = {}
    #: every row holds its staged value at each list field (after short rows are padded): the cell
    #: delimited (`delimit_block`, see `delimited`) or an array literal (`split_cell`)
    lists_filled = True

    @property
    def delimited(self) -> dict[str, str]:
        """The list fields staged delimited, as text (field -> separator; parse._lists)."""
        return delimited_lists("csv", self.lists)

    def __iter__(self) -> Iterator[tuple[int, list[str]]]:
        rows, stage = self.block_rows()
        if stage is None:
            return rows
        return _staged_one_by_one(rows, stage)

    def block_rows(self) -> tuple[Rows, StageBlock | None]:
        """The rows with their list cells as read, and what stages a block of them in place (None: no lists).

        The framing of a run's COPY (`_chunks.frames`) stages each block it cuts, so a list costs no
        per-row Python; any other reader of the rows gets them staged one by one (`__iter__`).
        """
        rows = restartable(self, self._text, self._attempt)
        return rows, (self._stage_lists if self.lists else None)

    _staged_for: list[str] | None = None
    _delimited_at: list[tuple[int, str]] = []
    _literal_at: list[tuple[int, str]] = []

    def _stage_lists(self, block: list[Row]) -> None:
        """Each list field's cell of `block` as its elements (P3): split, trimmed, empty ones dropped."""
        fields = self.fields
        if fields is not self._staged_for:  # the header is known from the first row on (again after a restart)
            self._staged_for = fields
            delimited = self.delimited
            positions = list_positions(fields, self.lists)
            self._delimited_at = [(i, sep) for i, sep in positions if fields[i] in delimited]
            self._literal_at = [(i, sep) for i, sep in positions if fields[i] not in delimited]
        for i, separator in self._delimited_at:
            delimit_block(block, i, separator)
        for i, separator in self._literal_at:
            for _, values in block:
                values[i] = split_cell(values[i], separator)

    def _too_long(self, raw: _RawLines, first: int, last: int) -> str:
        """Why the record on lines `first`..`last` was refused as too long, naming the cell's field."""
        at = _long_cell(raw.text(first, last), self.delimiter, self.max_value_chars)
        field = self.fields[at] if at is not None and at < len(self.fields) else None
        return too_long(field, self.max_value_chars)

    def _attempt(self, counter: RowCounter) -> Iterator[tuple[int, list[str]]]:
        # csv.reader checks the cap in C as it reads. The limit is the csv module's, process-wide: set for
        # this pass and given back after it, so other csv code (a test reading an export) keeps its own.
        previous = csv.field_size_limit(self.max_value_chars)
        text = self._text.text(newline="")
        try:
            lines, self.delimiter = self._header(text)
            lines, tee = itertools.tee(lines)
            raw = _RawLines(tee)
            reader = csv.reader(lines, delimiter=self.delimiter, quotechar='"', doublequote=True)
            header: list[str] | None = None
            prev = 0
            try:
                for row in reader:
                    if not _is_blank(row, raw, prev + 1, reader.line_num):
                        header = row
                        break
                    prev = reader.line_num
            except csv.Error as exc:
                # no header, no rows: the feed cannot be read at all
                raise ParseError(self.source, f"line {prev + 1}: the header cannot be read: {exc}") from None
            if header is None:
                return
            self.fields = header_names(header, counter.stats)
            width = len(self.fields)
            # With a white-space delimiter any row may be a blank line, else only a row of at most one cell.
            spaced = self.delimiter.isspace()
            loose = spaced or width == 1
            prev = reader.line_num
            raw.forget_before(prev + 1)
            forget_at = prev + _RAW_KEEP
            while True:
                try:
                    for row in reader:
                        n = len(row)
                        if n == width and not loose:
                            yield prev + 1, row
                        elif (n <= 1 or spaced) and _is_blank(row, raw, prev + 1, reader.line_num):
                            pass  # not a row, not malformed: nothing to count
                        elif n > width:
                            counter.malformed(prev + 1, f"{n} cells but the header has {width}")
                        else:
                            if n < width:
                                row.extend([""] * (width - n))
                            yield prev + 1, row
                        prev = reader.line_num
                        if prev > forget_at:
                            raw.forget_before(prev + 1)
                            forget_at = prev + _RAW_KEEP
                    break
                except csv.Error as exc:
                    if "field larger than field limit" in str(exc):
                        why = self._too_long(raw, prev + 1, reader.line_num)
                    else:
                        why = str(exc)
                    counter.malformed(prev + 1, why)
                    prev = reader.line_num
                    raw.forget_before(prev + 1)
        finally:
            csv.field_size_limit(previous)
            counter.stats.nul_removed += self._text.nul_removed
            text.close()
