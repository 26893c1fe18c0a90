"""csv and tsv: Postgres writes the rows with COPY, Python writes the header.

The header is not COPY's: SQL aliases stop at 63 bytes and output names may be
anything (quotes, newlines, 200 characters). Both sides quote the same way:
a value is quoted when it holds the delimiter, a `"`, CR or LF, and `"` is
doubled; lines end with LF, so the bytes equal Python's csv.writer output.
COPY quotes any value equal to its NULL marker; the default (empty) would turn
every "" into `""`, and `\\N` would quote a literal `\\N` value. So the marker
is a string no feed holds (`NULL_MARKER`); items are never NULL, so it is never
written, and a value equal to it would only be quoted (still the same value).
`tsv` is CSV quoting with a tab delimiter (as tsv sources are read).

With a single column an empty value would be an empty line, which CSV readers
skip; so a one-column export quotes every value and its header (`""`), as
Python's csv module does for a lone empty field.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence

from firefeed.export.rendering import Rendering
from firefeed.export.select import OutputColumn, Piece, bound, join, sql_text

DELIMITERS = {"csv": ",", "tsv": "\t"}
NULL_MARKER = "ff:null:5b1e0c7a"


def header_line(names: Sequence[str], delimiter: str) -> bytes:
    buffer = io.StringIO()
    if len(names) == 1:
        writer = csv.writer(buffer, delimiter=delimiter, lineterminator="\n", quoting=csv.QUOTE_ALL)
    else:
        writer = csv.writer(buffer, delimiter=delimiter, lineterminator="\n")
    writer.writerow(names)
    return buffer.getvalue().encode("utf-8")


def cell(column: OutputColumn, list_separator: str) -> Piece:
    """A column's cell: a list's elements joined with the export's `list_separator` (SPEC 9)."""
    if column.elements is None:
        return column.value
    return sql_text("array_to_string(") + column.elements + sql_text(", ") + bound(list_separator) + sql_text(")")


def render_delimited(columns: Sequence[OutputColumn], fmt: str, list_separator: str = ",") -> Rendering:
    delimiter = DELIMITERS[fmt]
    options = f"FORMAT csv, NULL '{NULL_MARKER}', DELIMITER " + ("E'\\t'" if delimiter == "\t" else "','")
    if len(columns) == 1:
        options += ", FORCE_QUOTE *"
    return Rendering(
        head=header_line([c.name for c in columns], delimiter),
        row=join(", ", (cell(c, list_separator) for c in columns)),
        options=options,
    )
