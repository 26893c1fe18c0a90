"""json and jsonl: each item's JSON object is built in SQL and COPYed out as raw text.

Postgres' to_json(text) escapes byte by byte and made the export 3x the csv
one, so a value is escaped with two replace() calls instead (`\\` -> `\\\\`,
`"` -> `\\"`) between bound constant pieces (`{"key":"`, `","key2":"`, `"}`),
and control characters, which must be escaped too, are finished on whole lines
at C speed on the way to the file (`_JsonRows`): they never occur in our own
markup, and real feeds rarely hold any but CR and LF. A line holding CR, LF,
\\x01 or \\x02 is one COPY quotes (see `rendering.RAW_OPTIONS`); it is unquoted
there first. Keys are the output names, JSON-encoded once in Python; every
value is a string. Python never parses a value.

json is one array, an object per line (`[`, `{...},`, ..., `]`); jsonl is one
object per line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from firefeed.export._atomic import Sink
from firefeed.export.rendering import Rendering
from firefeed.export.select import OutputColumn, Piece, bound, concat, sql_text

_BATCH_BYTES = 1 << 20
#: maps every control byte but \x00 (our line separator) to \x01, for a one-pass check
_FLAG_CONTROLS = bytes(1 if 0 < b < 32 else b for b in range(256))
_SHORT = {0x08: b"\\b", 0x09: b"\\t", 0x0A: b"\\n", 0x0C: b"\\f", 0x0D: b"\\r"}
_ESCAPES = [(bytes([b]), _SHORT.get(b, b"\\u%04x" % b)) for b in range(1, 32)]


def _escaped(value: Piece) -> Piece:
    inner = sql_text("replace(") + value + sql_text(", ") + bound("\\") + sql_text(", ")
    inner = inner + bound("\\\\") + sql_text(")")
    return sql_text("replace(") + inner + sql_text(", ") + bound('"') + sql_text(", ") + bound('\\"') + sql_text(")")


def _array(elements: Piece) -> Piece:
    """A list as a JSON array (`["a"]` for one element); no elements is the empty value `""` (P1); a
    text held in a list field (an array from 0: `set`, `join`, a source without the list...) is its
    JSON string (P2).

    to_json of a text[] escapes each element; only list columns pay for it. A text is escaped as any
    value is (`_escaped`, control characters finished on the way out).
    """
    text = _escaped(sql_text("(") + elements + sql_text(")[0]"))
    return (
        sql_text("(CASE WHEN cardinality(")
        + elements
        + sql_text(") = 0 THEN '\"\"' WHEN array_lower(")
        + elements
        + sql_text(", 1) = 0 THEN '\"' || ")
        + text
        + sql_text(" || '\"' ELSE to_json(")
        + elements
        + sql_text(")::text END)")
    )


def object_sql(columns: Sequence[OutputColumn]) -> Piece:
    """`'{"name":"' || esc(value) || '","name2":"' || ... || '"}'`; a list column is a JSON array, a
    parent of sub-attributes a nested object holding every sub-key ("" included, P27)."""
    if not columns:
        return bound("{}")
    parts: list[Piece] = []
    pending: list[str] = []  # constant JSON text between two values, bound as one piece

    def flush() -> None:
        parts.append(bound("".join(pending)))
        pending.clear()

    def members(cols: Sequence[OutputColumn]) -> None:
        pending.append("{")
        for i, column in enumerate(cols):
            pending.append(("," if i else "") + json.dumps(column.name, ensure_ascii=False) + ":")
            if column.parts:
                members(column.parts)
            elif column.elements is not None:
                flush()
                parts.append(_array(column.elements))
            else:
                pending.append('"')
                flush()
                parts.append(_escaped(column.value))
                pending.append('"')
        pending.append("}")

    members(columns)
    flush()
    return concat(parts)


def _with_controls_escaped(lines: bytes) -> bytes:
    """Lines of JSON objects with every control byte inside them escaped (row ends excluded)."""
    if lines.translate(_FLAG_CONTROLS).find(b"\x01") == -1:
        return lines
    for raw, escape in _ESCAPES:
        if raw in lines:
            lines = lines.replace(raw, escape)
    return lines


class _JsonRows:
    """Escapes control characters in the COPYed lines, then frames them (jsonl: as they are).

    Lines arrive one per write(); unquoted ones hold no CR or LF but their
    terminator, so a batch is checked (and rarely fixed) line terminators and all,
    with LF restored after. A quoted line is fixed on its own.
    """

    def __init__(self, sink: Sink) -> None:
        self._sink = sink
        self._batch: list[bytes] = []
        self._size = 0
        self.lines = 0

    def write(self, data: bytes, /) -> int:
        if data[:1] == b"\x02":  # COPY quoted the line: strip the quotes, undouble inner ones
            self.finish()  # keep the order of lines
            line = data[1:-2].replace(b"\x02\x02", b"\x02")
            self._emit([_with_controls_escaped(line)])
            return len(data)
        self._batch.append(data[:-1])
        self._size += len(data)
        if self._size >= _BATCH_BYTES:
            self.finish()
        return len(data)

    def finish(self) -> None:
        if self._batch:
            # \x00 cannot occur in Postgres text: a safe stand-in for the line ends while escaping.
            joined = _with_controls_escaped(b"\x00".join(self._batch))
            self._batch.clear()
            self._size = 0
            self._emit(joined.split(b"\x00"))

    def _emit(self, lines: list[bytes]) -> None:
        self._sink.write(b"\n".join(lines) + b"\n")
        self.lines += len(lines)


class _JsonArrayRows(_JsonRows):
    """The same lines as the items of one JSON array: `[`, `{...},` ..., `{...}`, `]`."""

    def _emit(self, lines: list[bytes]) -> None:
        separator = b"\n" if self.lines == 0 else b",\n"
        self._sink.write(separator + b",\n".join(lines))
        self.lines += len(lines)


def _array_tail(rows: int) -> bytes:
    return b"\n]\n" if rows else b"]\n"


def render_json(columns: Sequence[OutputColumn]) -> Rendering:
    return Rendering(head=b"[", row=object_sql(columns), tail=_array_tail, framing=_JsonArrayRows)


def render_jsonl(columns: Sequence[OutputColumn]) -> Rendering:
    return Rendering(head=b"", row=object_sql(columns), framing=_JsonRows)
