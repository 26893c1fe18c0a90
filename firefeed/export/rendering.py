"""What a format module hands the writer: the bytes around the rows and the SQL for each row."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from firefeed.export._atomic import Sink
from firefeed.export.select import Piece

#: COPY options that pass each row's single text value through untouched. COPY only
#: quotes a line holding \x01, \x02, CR or LF, i.e. one whose values do (our markup
#: never does); the json and xml writers unquote such lines and escape those characters.
RAW_OPTIONS = "FORMAT csv, DELIMITER E'\\x01', QUOTE E'\\x02'"


def _no_tail(rows: int) -> bytes:
    return b""


class RowStream(Protocol):
    """Where COPY writes the rows (one per write); `finish` pushes out anything held back."""

    def write(self, data: bytes, /) -> object: ...

    def finish(self) -> None: ...


class _Unframed:
    def __init__(self, sink: Sink) -> None:
        self.write = sink.write

    def finish(self) -> None:
        pass


@dataclass(frozen=True)
class Rendering:
    """An export format, ready to run: `head`, then COPY of `row` per item, then `tail(rows)`."""

    head: bytes
    #: the SELECT list of the COPY (one or more text expressions)
    row: Piece
    #: COPY's WITH options (FireFeed's own SQL, no user text)
    options: str = RAW_OPTIONS
    tail: Callable[[int], bytes] = field(default=_no_tail)
    #: wraps the output to adjust rows on their way (json's commas, xml's forbidden characters)
    framing: Callable[[Sink], RowStream] = field(default=_Unframed)
