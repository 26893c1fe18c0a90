"""`firefeed values PROJECT FIELD` (SPEC 9, P33): a field's distinct values after the project's rules.

Read for the project's latest SUCCEEDED run: its spec version's rules are applied, in a
scratch area (as a preview's), to a copy of the project's items table and lookup tables,
then one GROUP BY counts the values, most frequent first, ties in feed order. The run's own
pass tables were dropped when it ended (SPEC 1), so this is the same computation on the
items its merge left; a later run that failed after its MERGE would have rebuilt them
(docs/decisions.md, "values"). Nothing of the project is written.
"""

from __future__ import annotations

import secrets
import time
import uuid
from dataclasses import dataclass

from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.db.engine import raw_connection
from firefeed.errors import NotFoundError, SpecError
from firefeed.pipeline.rule_passes import run_rules
from firefeed.runs.contract import RunStatus
from firefeed.runs.service import RunStore
from firefeed.schema.identifiers import ORD, column_for_field, company_schema, ident, project_table, scratch_area
from firefeed.schema.service import SchemaService


@dataclass(frozen=True)
class FieldValues:
    project: str
    field: str
    run_id: str
    items: int
    values: list[tuple[str, int]]  # (value, count), most frequent first, ties in feed order

    def to_json(self) -> dict[str, object]:
        return {
            "project": self.project,
            "field": self.field,
            "run_id": self.run_id,
            "items": self.items,
            "values": [{"value": v, "count": n} for v, n in self.values],
        }


def field_values(engine: Engine, project: str, field: str, *, company: str | None = None) -> FieldValues:
    """The distinct values of `field` after the project's rules, for its latest SUCCEEDED run.

    NotFoundError: no such project (of `company`), or no succeeded run yet; SpecError: the
    field is not one of the project's fields after its rules.
    """
    store = RunStore(engine)
    store.project(project, company=company)
    run = next((r for r in store.runs_of_project(project, limit=100) if r.status == RunStatus.SUCCEEDED), None)
    if run is None:
        raise NotFoundError(f"project {project!r} has no succeeded run yet: run it first")
    run_id = str(run.id)
    spec, _ = store.run_spec(run_id)
    merged = next(st.detail for st in store.steps(run_id) if st.step == "MERGE")
    fields = list((merged or {}).get("fields") or [])
    schema = SchemaService(engine)
    area = scratch_area(int(time.time()), secrets.token_hex(8))
    schema.create_scratch_area(area)
    try:
        items = project_table(project)
        _copy(engine, schema, spec.company, area, items)
        for table in spec.lookup_tables.values():
            _copy(engine, schema, spec.company, area, table)
        result = run_rules(
            engine,
            schema,
            company=area,
            run_id=str(uuid.uuid4()),
            source_table=items,
            fields=fields,
            rules=spec.parsed_rules,
        )
        if field not in result.fields:
            shown = ", ".join(result.fields[:20]) + (" …" if len(result.fields) > 20 else "")
            raise SpecError("FIELD", f"{field!r} is not a field of project {project!r} after its rules ({shown})")
        counted = _counted(ident(company_schema(area), result.table), field, listed=field in spec.list_fields)
        with raw_connection(engine) as conn, conn.cursor() as cur:
            cur.execute(counted)
            values = [(str(v), int(n)) for v, n in cur.fetchall()]
    finally:
        schema.drop_scratch_area(area)
    return FieldValues(project, field, run_id, result.rows_out, values)


def _counted(table: sql.Composable, field: str, *, listed: bool) -> sql.Composable:
    """Each distinct value with its items, most frequent first, ties in feed order (the first item holding it).

    A list field counts each item once for each distinct element it holds, and an item without
    elements once for "" (P33); ties are in feed order, then in the order of the first item's elements.
    """
    column, ord_ = ident(column_for_field(field)), ident(ORD)
    # The count's name is of the internal kind: a field may be called `n` (column_for_field never gives `_ff...`).
    if not listed:
        return sql.SQL("SELECT {v}, count(*) AS _ff_n FROM {t} GROUP BY {v} ORDER BY _ff_n DESC, min({o})").format(
            v=column, t=table, o=ord_
        )
    elements = sql.SQL("CASE WHEN cardinality({v}) = 0 THEN ARRAY['']::text[] ELSE {v} END").format(v=column)
    return sql.SQL(
        "SELECT _ff_e, count(DISTINCT {o}) AS _ff_n FROM {t}, unnest({e}) WITH ORDINALITY AS _ff_u(_ff_e, _ff_i) "
        "GROUP BY _ff_e ORDER BY _ff_n DESC, min(ARRAY[{o}, _ff_i])"
    ).format(e=elements, o=ord_, t=table)


def _copy(engine: Engine, schema: SchemaService, company: str, area: str, table: str) -> None:
    """The company's `table` copied into the scratch area under the same name (the rules read it there)."""
    source = ident(company_schema(company), table)
    columns = schema.table_columns(company, table)
    select = sql.SQL("SELECT * FROM {}").format(source)
    with raw_connection(engine) as conn:
        schema.rebuild_project_table(area, table, columns, select, [], conn=conn)
