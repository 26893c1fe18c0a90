"""`firefeed values PROJECT FIELD` (SPEC 9, P33): a field's distinct values after the project's rules.

Read for the project's latest SUCCEEDED run, from the rules' result that run kept (issue #47):
when a run has published its files, its result's pass tables are renamed instead of dropped
(`keep_result`: free, where counting every field's values or copying the items is not), so a
call is one GROUP BY on them, most frequent first, ties in feed order. A project keeps one
result: the next succeeded run's replaces it. Applying every rule again on each call, as
before, took the API's connections for seconds per call and stalled every other company.

Two cases are read otherwise, as before:
- no enabled rule: the result was the items table itself, which is counted in place;
- nothing kept (a run of an earlier release, a result computed by a view over the items or
  a lookup table, which cannot outlive its run): the rules are applied again, in a scratch
  area (as a preview's), to copies of the items and lookup tables.
Both read the items the latest MERGE left: a later run that failed after its MERGE would have
rebuilt them (docs/decisions.md, "values"). Nothing of the project is written.

A call is bounded (`values_within`): a total deadline (FIREFEED_VALUES_DEADLINE_S) over an
engine of its own whose statements end by it; the API runs calls in a pool of their own.
"""

from __future__ import annotations

import logging
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from psycopg2 import errors as pg_errors
from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.dataplane.kept import PreparedKeep, drop_kept_results, keep_rules_result
from firefeed.dataplane.names import kept_result_table
from firefeed.db.engine import raw_connection
from firefeed.errors import NotFoundError, SpecError, ValuesTimeoutError
from firefeed.pipeline.rule_passes import run_rules
from firefeed.runs.contract import RunStatus, Step
from firefeed.runs.service import RunStore
from firefeed.schema.identifiers import ORD, column_for_field, company_schema, ident, project_table, scratch_area
from firefeed.schema.service import SchemaService
from firefeed.spec.model import ProjectSpec

if TYPE_CHECKING:
    from firefeed.preview.deadline import Deadline

log = logging.getLogger(__name__)

#: how a values call's connections show in pg_stat_activity
VALUES_APPLICATION_NAME = "firefeed-values"


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


def keep_result(
    schema: SchemaService,
    *,
    company: str,
    project: str,
    run_id: str,
    table: str,
    prepared: PreparedKeep | None = None,
) -> None:
    """Once a run has published its files: keep its rules' result `table` for values, and drop the
    result an earlier run kept (`prepared`: a delta's change of the kept result begun beside EXPORT, to
    commit). Never fails the run (values then applies the rules again)."""
    try:
        from firefeed.pipeline.delta import keep_viewed

        kept = keep_viewed(schema, company, run_id, table, prepared) or keep_rules_result(
            schema, company, project, run_id, table
        )
        drop_kept_results(schema, company, project, keep=kept)
    except Exception:
        log.exception("could not keep the run's rules result; `firefeed values` applies the rules again")


def values_within(
    engine: Engine, project: str, field: str, *, deadline: Deadline, company: str | None = None
) -> FieldValues:
    """`field_values` by `deadline`, on an engine of its own (none of the caller's connections): past it
    the deadline's error (ValuesTimeoutError), its statements cancelled."""
    from firefeed.preview.deadline import bounded_engine

    try:
        with deadline.armed(), bounded_engine(engine, deadline, application_name=VALUES_APPLICATION_NAME) as work:
            return field_values(work, project, field, company=company, check=deadline.check)
    except Exception as err:
        # Whatever failed once time was up (a cancelled statement, a shut connection) failed for the deadline.
        if deadline.expired() and not isinstance(err, ValuesTimeoutError):
            raise deadline.error() from err
        raise


def field_values(
    engine: Engine,
    project: str,
    field: str,
    *,
    company: str | None = None,
    check: Callable[[str], None] | None = None,
) -> FieldValues:
    """The distinct values of `field` after the project's rules, for its latest SUCCEEDED run.

    NotFoundError: no such project (of `company`), or no succeeded run yet; SpecError: the
    field is not one of the project's fields after its rules. `check(step)` is called before
    each step (a deadline's check: it raises once time is up).
    """
    step = check or (lambda _: None)
    try:
        return _field_values(engine, project, field, company, step)
    except pg_errors.UndefinedTable:
        # A newer run succeeded while this call read, and dropped the result it had found: read that run's.
        return _field_values(engine, project, field, company, step)


def _field_values(
    engine: Engine, project: str, field: str, company: str | None, step: Callable[[str], None]
) -> FieldValues:
    step("reading the project's latest succeeded run")
    store = RunStore(engine)
    store.project(project, company=company)
    run = next((r for r in store.runs_of_project(project, limit=100) if r.status == RunStatus.SUCCEEDED), None)
    if run is None:
        raise NotFoundError(f"project {project!r} has no succeeded run yet: run it first")
    run_id = str(run.id)
    spec, _ = store.run_spec(run_id)
    steps = {st.step: st for st in store.steps(run_id)}
    merge, rules = steps.get(Step.MERGE), steps.get(Step.RULES)
    merged_fields = list(((merge.detail if merge else None) or {}).get("fields") or [])
    fields = list(((rules.detail if rules else None) or {}).get("fields") or merged_fields)
    schema = SchemaService(engine)
    listed = field in spec.list_fields
    # An unchanged run (SPEC 11 I2) kept no result of its own: it shows the one of the run it reused.
    kept = kept_result_table(str(((rules.detail if rules else None) or {}).get("reused_from") or run_id))
    step("counting the values its run kept")
    # Kept tables are UNLOGGED, as every data table: crash recovery empties them, and values then has no rows.
    if rules is not None and (schema.table_has_rows if rules.rows_out else schema.table_exists)(spec.company, kept):
        _check_field(project, field, fields)
        values = _count(engine, ident(company_schema(spec.company), kept), field, listed=listed)
        return FieldValues(project, field, run_id, rules.rows_out, values)
    if rules is not None and not any(r.enabled for r in spec.parsed_rules):
        # No rule ran: the result was the items table, which the next MERGE rebuilds.
        _check_field(project, field, fields)
        step("counting the values of its items")
        values = _count(engine, ident(company_schema(spec.company), project_table(project)), field, listed=listed)
        return FieldValues(project, field, run_id, rules.rows_out, values)
    return _recomputed(engine, schema, spec, run_id, merged_fields, field, step)


def _recomputed(
    engine: Engine,
    schema: SchemaService,
    spec: ProjectSpec,
    run_id: str,
    fields: list[str],
    field: str,
    step: Callable[[str], None],
) -> FieldValues:
    """The rules applied again to copies of the items and lookup tables, for a run that kept no result."""
    doing = "applying the rules again (its run kept no result: run the project again to keep one)"
    step(doing)
    area = scratch_area(int(time.time()), secrets.token_hex(8))
    schema.create_scratch_area(area)
    try:
        items = project_table(spec.project)
        _copy(engine, schema, spec.company, area, items)
        for table in spec.lookup_tables.values():
            _copy(engine, schema, spec.company, area, table, lookup=True)
        result = run_rules(
            engine,
            schema,
            company=area,
            run_id=str(uuid.uuid4()),
            source_table=items,
            fields=fields,
            rules=spec.parsed_rules,
            cancel_check=lambda: step(doing),
        )
        _check_field(spec.project, field, result.fields)
        step("counting the values")
        table = ident(company_schema(area), result.table)
        values = _count(engine, table, field, listed=field in spec.list_fields)
    finally:
        schema.drop_scratch_area(area)
    return FieldValues(spec.project, field, run_id, result.rows_out, values)


def _check_field(project: str, field: str, fields: list[str]) -> None:
    if field not in fields:
        shown = ", ".join(fields[:20]) + (" …" if len(fields) > 20 else "")
        raise SpecError("FIELD", f"{field!r} is not a field of project {project!r} after its rules ({shown})")


def _count(engine: Engine, table: sql.Composable, field: str, *, listed: bool) -> list[tuple[str, int]]:
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(_counted(table, field, listed=listed))
        return [(str(v), int(n)) for v, n in cur.fetchall()]


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


def _copy(engine: Engine, schema: SchemaService, company: str, area: str, table: str, *, lookup: bool = False) -> None:
    """The company's `table` copied into the scratch area under the same name (the rules read it there);
    a `lookup` table with its index (a list `match` probes it per element, else reads the table per item)."""
    source = ident(company_schema(company), table)
    columns = schema.table_columns(company, table)
    select = sql.SQL("SELECT * FROM {}").format(source)
    rebuild = schema.rebuild_lookup_table if lookup else schema.rebuild_project_table
    with raw_connection(engine) as conn:
        rebuild(area, table, columns, select, [], conn=conn)
