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

from firefeed.rules.lists import NO_LISTS, ListFields
from firefeed.rules.template import FieldRef, Template, parse_template
from firefeed.schema.identifiers import column_for_field, ident

if TYPE_CHECKING:
    from firefeed.rules._frag import Frag
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
    """One column of the export: its output name and the SQL giving its text value.

    A column naming a list field (SPEC 9) also has `elements`, the SQL of its
    text[]: its `value` is the elements joined with ",", which templates,
    filters and checks read; the formats write the elements themselves.
    """

    name: str
    value: Piece
    elements: Piece | None = None
    #: a parent of sub-attributes (`shipping.country` in `fields`, SPEC 9): its sub-columns, in order;
    #: its `value` is their text form (sub-values joined with ":", "" when all are empty)
    parts: tuple[OutputColumn, ...] = ()


def field_column(fields: Sequence[str]) -> Callable[[str], sql.Composable]:
    """The SQL for a field's value: its column when the table has it, else ''."""
    known = frozenset(fields)

    def column(field: str) -> sql.Composable:
        return ident(column_for_field(field)) if field in known else _EMPTY

    return column


def _named(name: str, field: str, column: Callable[[str], sql.Composable], lists: ListFields) -> OutputColumn:
    if field not in lists:
        return OutputColumn(name, Piece(column(field)))
    elements = Piece(column(field) if column(field) is not _EMPTY else sql.SQL("'{}'::text[]"))
    return OutputColumn(name, sql_text("array_to_string(") + elements + sql_text(", ',')"), elements)


def output_columns(fields: Sequence[str], export: ExportSpec, lists: ListFields = NO_LISTS) -> list[OutputColumn]:
    """The export's columns in order: `export.fields` when given, else every field as itself.

    `lists`: the project's list fields (their columns are text[]).
    """
    column = field_column(fields)
    if export.fields is None:
        return [_named(f, f, column, lists) for f in fields]
    columns: list[OutputColumn] = []
    for out, value in export.fields.items():
        if not isinstance(value, str):  # C1: a fixed text, a bound value, never a name or a template
            columns.append(OutputColumn(out, bound(value.value)))
        elif "{" in value or "}" in value:
            template = parse_template(value, f"exports.{export.name}.fields.{out}")
            if lists or any(isinstance(p, FieldRef) and p.index is not None for p in template.parts):
                columns.append(OutputColumn(out, _template_piece(template, column, lists)))
                continue
            params: list[Any] = []
            text = template.to_sql(column, params)
            columns.append(OutputColumn(out, Piece(text, tuple(params))))
        else:
            columns.append(_named(out, value, column, lists))
    return nest(columns) if any("." in c.name for c in columns) else columns


def nested_parent(name: str) -> str | None:
    """The parent of an output name written with a dot (it splits at its first dot, P25)."""
    return name.split(".", 1)[0] if "." in name else None


def nest(columns: Sequence[OutputColumn]) -> list[OutputColumn]:
    """Dotted output names as sub-columns of their parent, which sits where its first sub-attribute is (P25)."""
    order: list[OutputColumn | str] = []  # a flat column, or the name of a parent
    groups: dict[str, list[OutputColumn]] = {}
    for c in columns:
        parent = nested_parent(c.name)
        if parent is None:
            order.append(c)
            continue
        if parent not in groups:
            groups[parent] = []
            order.append(parent)
        groups[parent].append(OutputColumn(c.name.split(".", 1)[1], c.value))  # a sub-value is a text (P26)
    return [
        c if isinstance(c, OutputColumn) else OutputColumn(c, _joined(groups[c]), parts=tuple(groups[c])) for c in order
    ]


def _joined(parts: Sequence[OutputColumn]) -> Piece:
    """Google's text form: the sub-values joined with ":", empty ones kept; "" when all are empty (P27)."""
    all_empty = join(" AND ", (sql_text("(") + p.value + sql_text(") = ''") for p in parts))
    text = join(" || ':' || ", (p.value for p in parts))
    return sql_text("(CASE WHEN ") + all_empty + sql_text(" THEN ''::text ELSE ") + text + sql_text(" END)")


def _template_piece(template: Template, column: Callable[[str], sql.Composable], lists: ListFields) -> Piece:
    """A template reading list fields or elements (`{images[0]}`), compiled as the rules compile it."""
    from firefeed.rules._conditions_sql import template_frag
    from firefeed.rules._frag import of

    def value(name: str) -> Frag:
        col = column(name)
        return of(sql.SQL("'{}'::text[]")) if name in lists and col is _EMPTY else of(col)

    frag = template_frag(template, value, lists)
    return Piece(frag.sql, frag.params)


def where_clause(
    fields: Sequence[str], export: ExportSpec, lists: ListFields = NO_LISTS, table: sql.Composable | None = None
) -> Piece:
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
    column = field_column(fields)

    def value(name: str) -> sql.Composable:
        col = column(name)
        return sql.SQL("'{}'::text[]") if name in lists and col is _EMPTY else col

    text = condition_sql(condition, value, params, lists, table)
    return Piece(sql.SQL(" WHERE (") + text + sql.SQL(")"), tuple(params))
