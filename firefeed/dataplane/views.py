"""The views a run makes over its pass tables, and what a reader learns from them.

Two kinds, both named like a pass table (`names.rules_tmp_table`) and dropped with the run's tables:
a pass computed on read (`pass_view`: a pass whose rows one copying pass reads once, never written),
and a view of parts (`parts_view`: a run split in parts, whose result is its parts' last tables one
after the other). A reader that scans heaps (EXPORT, the next split) asks which tables a view of parts
reads (`parts_of_view`). The DDL itself is the SchemaService's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg2 import sql

from firefeed.dataplane.names import rules_tmp_table, tmp_table_number
from firefeed.db.engine import raw_connection
from firefeed.schema.identifiers import company_schema, ident
from firefeed.schema.service import SchemaService, relation_kind, view_reads


class RunViews:
    """The views of a run's pass tables in the company schema, made through the SchemaService."""

    def __init__(self, schema: SchemaService) -> None:
        self.schema = schema

    def pass_view(
        self,
        company: str,
        run_id: str,
        number: int,
        columns: Sequence[str],
        select: sql.Composable,
        params: Sequence[Any],
    ) -> str:
        """A pass whose rows are read once, by a pass that copies them, as a view (numbered like its table
        would be) instead of a table written and read back; returns its name.

        Dropped with the tables it reads (CASCADE), like the view of parts.
        """
        view = rules_tmp_table(run_id, number)
        self.schema.create_view(company, view, select, params, columns=columns)
        return view

    def parts_view(self, company: str, run_id: str, number: int, tables: Sequence[str]) -> str:
        """A view of pass tables of a run, one after the other (UNION ALL keeps their order); returns its name.

        Dropping any of the tables drops it too (drop_rules_tmp_for_run and the janitor use CASCADE).
        """
        schema = company_schema(company)
        view = rules_tmp_table(run_id, number)
        parts = sql.SQL(" UNION ALL ").join(sql.SQL("SELECT * FROM {}").format(ident(schema, t)) for t in tables)
        self.schema.create_view(company, view, parts)
        return view

    def holds_rows(self, company: str, name: str) -> bool:
        """Whether `name` (of the company schema) is a table or a rules run's view of part tables: reading
        it scans heaps and computes nothing, unlike a pass view (`pass_view`)."""
        schema = company_schema(company)
        with raw_connection(self.schema.engine) as conn, conn.cursor() as cur:
            kind = relation_kind(cur, schema, name)
            return kind == "r" or (kind == "v" and parts_of_view(cur, schema, name) is not None)

    def view_parts(self, company: str, view: str) -> list[str] | None:
        """`parts_of_view` of a table of the company schema (None: not a view of parts); a part may be a
        pass view (`pass_view`): the rules read it like a table."""
        with raw_connection(self.schema.engine) as conn, conn.cursor() as cur:
            return parts_of_view(cur, company_schema(company), view, views=True)


def parts_of_view(cur: Any, schema: str, view: str, *, views: bool = False) -> list[str] | None:
    """The pass tables, in part order, when `view` is the view a rules run in parts made of them; else None.

    On the caller's cursor: EXPORT asks inside its own read transaction, and reads the parts' heaps, so
    only tables count as parts unless `views` (pass views, which only the rules read).
    """
    found = view_reads(cur, schema, view)
    if not views and any(kind != "r" for _, kind in found):
        return None
    names = [name for name, _ in found]
    numbers = [tmp_table_number(n) for n in names]
    if len(names) < 2 or None in numbers:
        return None
    return [n for _, n in sorted(zip(numbers, names, strict=True))]


def relations_read(cur: Any, schema: str, name: str) -> dict[str, str]:
    """`name` and every relation of `schema` it reads, directly or through views: {name: kind ('r', 'v')}.
    A relation of another schema is listed by its own name, which is then no pass table of the run."""
    found: dict[str, str] = {name: relation_kind(cur, schema, name)}
    todo = [name] if found[name] == "v" else []
    while todo:
        for read, kind in view_reads(cur, schema, todo.pop()):
            if read not in found:
                found[read] = kind
                if kind == "v":
                    todo.append(read)
    return found
