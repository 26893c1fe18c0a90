"""What every reader shares: its statistics, the protocol the loader relies on, the restart signal."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from firefeed.errors import ParseError

#: malformed rows whose line numbers are kept for the report
MAX_MALFORMED_LINES = 20
#: the longest value a reader takes, in characters: FIREFEED_PARSE_MAX_VALUE_CHARS's default, which
#: `open_reader` gives every reader (a reader made directly keeps this)
MAX_VALUE_CHARS = 131_072


def too_long(field: str | None, cap: int) -> str:
    """Why a row holding a value over the cap is malformed, the same words for every format.

    The one cap on a value (csv cell, JSON value, XML text) keeps a hostile value out of every later
    step: a 20 MB one-item feed and a rule writing it eight times made one Postgres backend take 1.1 GB.
    """
    what = "a value" if field is None else f"field {field!r}"
    return f"{what} holds more than {cap:,} characters, the most a value may hold (FIREFEED_PARSE_MAX_VALUE_CHARS)"


class ValueTooLong(Exception):
    """A value of the row being read is over the cap; the reader counts the row as malformed."""

    def __init__(self, field: str | None) -> None:
        super().__init__(field)
        self.field = field


def check_values(values: list[str], fields: list[str], cap: int) -> None:
    """Raise ValueTooLong for the first value over `cap`. A JSON reader calls it only for an item whose text
    is long enough to hold such a value, so a usual item costs nothing."""
    for i, value in enumerate(values):
        if len(value) > cap:
            raise ValueTooLong(fields[i] if i < len(fields) else None)


@dataclass
class ParseStats:
    """Counts a reader keeps while it reads; they end up in the run report, per source."""

    rows: int = 0
    malformed: int = 0
    malformed_lines: list[int] = field(default_factory=list)
    nul_removed: int = 0
    warnings: list[str] = field(default_factory=list)
    #: the encoding the rows were decoded with ("utf-8", "windows-1252", ...)
    encoding: str = ""


class FeedReader(Protocol):
    """Rows of one feed file: `fields` may grow while iterating (xml, json), never shrink.

    Each row is `(line, values)`: the line where the row starts and its values
    aligned with `fields` as it was when yielded (shorter lists mean "" for the
    rest). Values and field names never contain NUL or lone surrogates.
    """

    fields: list[str]
    stats: ParseStats

    def __iter__(self) -> Iterator[tuple[int, list[str]]]: ...


class EncodingRestart(Exception):
    """The feed proved not to be UTF-8 after rows were yielded: discard them and iterate again.

    The reader has already switched to windows-1252 and reset `fields` and
    `stats`; the next `iter(reader)` starts from the first byte. A consumer that
    cannot discard what it received treats this as fatal.
    """


class RowCounter:
    """Malformed-row bookkeeping and the end-of-file verdict, shared by the readers."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.stats = ParseStats()
        self.first_problem: tuple[int, str] | None = None

    def malformed(self, line: int, why: str) -> None:
        stats = self.stats
        stats.malformed += 1
        if len(stats.malformed_lines) < MAX_MALFORMED_LINES:
            stats.malformed_lines.append(line)
        if self.first_problem is None:
            self.first_problem = (line, why)

    def finish(self, rows: int) -> None:
        """Record the row count; a feed where rows exist but none parses is not a feed of that format.
        Skipped rows get a warning with the first one's reason: line numbers alone do not say what to fix."""
        self.stats.rows = rows
        if self.first_problem is None:
            return
        line, why = self.first_problem
        if rows == 0:
            raise ParseError(self.source, f"line {line}: no row could be parsed: {why}")
        n = self.stats.malformed
        self.stats.warnings.append(f"{n} malformed row{'' if n == 1 else 's'} skipped; the first, line {line}: {why}")


Row = tuple[int, list[str]]
Rows = Iterator[Row]
#: stages a block of rows' list cells in place (a reader's `block_rows`)
StageBlock = Callable[[list[Row]], None]


def restartable(reader: Any, feed_text: Any, attempt: Callable[[RowCounter], Rows]) -> Rows:
    """Read the feed once per encoding it turns out to have, the way every reader must.

    `attempt(counter)` reads the whole file once (opening and closing its own
    text). A decode error before the first row quietly starts over in
    windows-1252; after rows were yielded, EncodingRestart tells the consumer to
    discard them. `reader.fields` and `reader.stats` are fresh for every attempt.
    """
    while True:
        counter = RowCounter(reader.source)
        reader.stats = counter.stats
        reader.stats.encoding = feed_text.codec
        reader.fields = []
        yielded = 0
        try:
            for row in attempt(counter):
                yielded += 1
                yield row
        except UnicodeError as exc:
            feed_text.decode_failed(exc)
            if yielded:
                raise EncodingRestart(reader.source) from None
            continue
        counter.finish(yielded)
        return
