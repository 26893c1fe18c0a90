"""The SQL side of an export: which values each output column holds, and which items go out.

Every output column is one text SQL expression: a field's column, `''` for a
field the table does not have (SPEC 8.18: missing -> ""), or a template
rendered in SQL. Field names reach SQL only through `ident(column_for_field())`
and every literal is a bound value. Each piece of SQL travels with its own
params, in placeholder order (`Piece`), so the format modules can wrap and
join pieces without ever losing track of which value fills which `%s`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from psycopg2 import sql

from firefeed.rules.template import parse_template
from firefeed.schema.identifiers import column_for_field, ident

if TYPE_CHECKING:
    from firefeed.spec.model import ExportSpec

_EMPTY = sql.SQL("''::text")


@dataclass(frozen=True)
class Piece:
    """A fragment of SQL and the bound values of its placeholders, in order."""

    text: sql.Composable
    params: tuple[Any, ...] = ()

    def __add__(self, other: Piece) -> Piece:
        return Piece(self.text + other.text, self.params + other.params)


def sql_text(text: str) -> Piece:
    """Fixed SQL written by FireFeed itself (never user input)."""
    return Piece(sql.SQL(text))


def bound(value: str) -> Piece:
    """A text value as a bound parameter."""
    return Piece(sql.SQL("%s::text"), (value,))


def join(separator: str, pieces: Iterable[Piece]) -> Piece:
    items = list(pieces)
    return Piece(
        sql.SQL(separator).join(p.text for p in items),
        tuple(v for p in items for v in p.params),
    )


def concat(pieces: Iterable[Piece]) -> Piece:
    """`a || b || ...` as one text expression, nested as a balanced tree.

    A left-deep `||` chain copies the growing prefix once per piece (quadratic
    in the line length); a balanced tree copies each byte about log2(n) times.
    """
    items = list(pieces)
    if not items:
        return Piece(_EMPTY)
    while len(items) > 1:
        pairs = [
            sql_text("(") + items[i] + sql_text(" || ") + items[i + 1] + sql_text(")")
            for i in range(0, len(items) - 1, 2)
        ]
        items = pairs + ([items[-1]] if len(items) % 2 else [])
    return items[0]


@dataclass(frozen=True)
class OutputColumn:
    """One column of the export: its output name and the SQL giving its text value."""

    name: str
    value: Piece


def field_column(fields: Sequence[str]) -> Callable[[str], sql.Composable]:
    """The SQL for a field's value: its column when the table has it, else ''."""
    known = frozenset(fields)

    def column(field: str) -> sql.Composable:
        return ident(column_for_field(field)) if field in known else _EMPTY

    return column


def output_columns(fields: Sequence[str], export: ExportSpec) -> list[OutputColumn]:
    """The export's columns in order: `export.fields` when given, else every field as itself."""
    column = field_column(fields)
    if export.fields is None:
        return [OutputColumn(f, Piece(column(f))) for f in fields]
    columns: list[OutputColumn] = []
    for out, value in export.fields.items():
        if "{" in value or "}" in value:
            template = parse_template(value, f"exports.{export.name}.fields.{out}")
            params: list[Any] = []
            text = template.to_sql(column, params)
            columns.append(OutputColumn(out, Piece(text, tuple(params))))
        else:
            columns.append(OutputColumn(out, Piece(column(value))))
    return columns


def where_clause(fields: Sequence[str], export: ExportSpec, table: sql.Composable | None = None) -> Piece:
    """` WHERE <condition>` for the export's filter, or nothing.

    Compiled by the rules engine's condition compiler, so an export's `where`
    reads exactly like a rule's `when`, on the items after rules (SPEC 8.17).
    `table`: the items' table, where a group_first leaf finds the groups after
    all rules, before `where` filters (P19).
    """
    condition = export.where_condition
    if condition is None:
        return sql_text("")
    # Imported here so the export package does not load the rules compiler until a filter needs it.
    from firefeed.rules.sqlgen import condition_sql

    params: list[Any] = []
    text = condition_sql(condition, field_column(fields), params, table)
    return Piece(sql.SQL(" WHERE (") + text + sql.SQL(")"), tuple(params))
