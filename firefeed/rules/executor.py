"""Executing one rule pass in Postgres (see _plan for how passes are cut, sqlgen for their SQL).

A pass over a range of `_ff_ord` positions runs as CREATE TABLE AS (`run_pass_whole`,
which keeps feed order; a run's part of the items, or a fleet's slice of them, each
in the caller's transaction), as INSERT into a table made by `prepare_pass`
(`run_pass_chunk`, the rule preview), or, for a pass that only excludes, as one
DELETE (`run_pass_in_place`). A grouped pass over parts joins the groups of its whole
input, made once by `make_groups`. The loop over
passes, and the choice between these, is firefeed/pipeline/rule_passes.py. All DDL
(CREATE TABLE AS included) goes through the SchemaService; this module only runs
the SELECTs, INSERTs and DELETEs of the passes.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.dataplane.views import RunViews
from firefeed.db.engine import raw_connection
from firefeed.db.plans import keeps_order
from firefeed.rules._frag import of
from firefeed.rules._lists_sql import from_text
from firefeed.rules._plan import PassPlan, flag_column, lookup_report_columns, lookups_of, plan_passes
from firefeed.rules.lookups import LookupSet
from firefeed.rules.model import Rule, branch_excludes
from firefeed.rules.sqlgen import count_select, exclusion_delete, groups_select, pass_insert, pass_select
from firefeed.schema.identifiers import KEY, ORD, SRC, column_for_field, company_schema, ident
from firefeed.schema.service import SchemaService, table_pages

__all__ = [
    "ChunkCounts",
    "PassPlan",
    "copy_as_lists",
    "count_rows",
    "counts_nothing",
    "make_groups",
    "page_parts",
    "pass_view",
    "plan_passes",
    "prepare_pass",
    "run_pass_chunk",
    "run_pass_in_place",
    "run_pass_whole",
]

# Rows must be written in _ff_ord order (exports read them back that way): a
# plain, non-parallel, non-synchronized sequential scan returns them in the
# order they were written. work_mem holds the RETURNING flags of a pass in memory. JIT
# off: compiling a pass's large expressions took longer than it saved (1M rows, 20
# rules: 41 s with JIT, 20 s without).
_PASS_SETTINGS = (
    "SET LOCAL max_parallel_workers_per_gather = 0",
    # A merge join sorts its sides: the groups join (sqlgen._grouped) hashes the groups instead.
    "SET LOCAL enable_mergejoin = off",
    "SET LOCAL synchronize_seqscans = off",
    "SET LOCAL work_mem = '64MB'",
    "SET LOCAL jit = off",
)


@dataclass
class ChunkCounts:
    rows_in: int
    rows_out: int
    matched: dict[str, int] = field(default_factory=dict)  # per rule name of the pass
    #: per lookup action of the pass (its tag): (items it matched, items it did not) among the rows
    #: written, when the pass's flag count read them too (`lookup_counts_known`)
    lookups: dict[str, tuple[int, int]] | None = None
    #: a DELETE pass's: the same, for the previous pass's deferred lookups, among the rows it deleted
    deleted_lookups: dict[str, tuple[int, int]] | None = None
    #: the pass's deferred rules with a `when` (the next pass counts them): their matches among the rows
    #: written, from which that DELETE pass subtracts those it deletes (`run_pass_in_place(before=...)`)
    deferred_matched: dict[str, int] | None = None


def prepare_pass(schema_service: SchemaService, *, company: str, run_id: str, plan: PassPlan) -> str:
    """Create the (empty) table the pass writes; returns its name in the company schema."""
    return schema_service.create_rules_tmp(
        company, run_id, plan.number, plan.columns(), extra=plan.extra(), list_columns=plan.list_columns()
    )


def _rule_matches(
    plan: PassPlan, rule: Rule, rows_in: int, rows_out: int, flagged: dict[str, int], when_count: int | None
) -> int:
    if rule is not plan.excluding:
        return rows_out if rule.when is None else flagged[rule.name]
    # The excluding rule is the pass's first: every input row reached it.
    if rule.when is None:
        return rows_in
    drop_then, drop_else = branch_excludes(rule.then), branch_excludes(rule.else_)
    if drop_then and drop_else:
        assert when_count is not None
        return when_count
    return rows_in - rows_out if drop_then else rows_out


@contextlib.contextmanager
def _pass_cursor(conn: Any) -> Iterator[Any]:
    """A cursor of `conn` with the pass settings applied to its transaction."""
    with conn.cursor() as cur:
        for setting in _PASS_SETTINGS:
            cur.execute(setting)
        yield cur


def _excluding_counts(
    cur: Any,
    plan: PassPlan,
    source: Any,
    lo: int | None,
    hi: int | None,
    rows_in: int | None,
    groups: sql.Composable | None = None,
    pages: bool = False,
) -> tuple[int | None, int | None]:
    """rows_in and the excluding rule's `when` matches, counted first when the pass needs them."""
    rule = plan.excluding
    both = rule is not None and rule.when is not None and branch_excludes(rule.then) and branch_excludes(rule.else_)
    if rule is not None and (rows_in is None or both):
        counted = count_select(plan, source, lo, hi, groups=groups, pages=pages)
        cur.execute(counted.sql, counted.params)
        found, when_count = cur.fetchone()
        return int(found), when_count
    return rows_in, None


def _chunk_counts(
    plan: PassPlan, rows_in: int | None, rows_out: int, flagged: dict[str, int], when_count: int | None
) -> ChunkCounts:
    if rows_in is None:
        rows_in = rows_out
    later = {id(r) for r in plan.deferred}  # counted by the next pass, among the rows it keeps
    matched = {
        r.name: _rule_matches(plan, r, rows_in, rows_out, flagged, when_count) for r in plan.rules if id(r) not in later
    }
    counted = [r for r in plan.deferred if r.when is not None]
    known = {r.name: flagged[r.name] for r in counted if r.name in flagged}
    return ChunkCounts(rows_in, rows_out, matched, deferred_matched=known if len(known) == len(counted) else None)


def run_pass_chunk(
    conn: Any,
    plan: PassPlan,
    src_table: str,
    dst_table: str,
    lo: int | None = None,
    hi: int | None = None,
    *,
    company: str,
    rows_in: int | None = None,
) -> ChunkCounts:
    """Insert the rows of `src_table` with _ff_ord in [lo, hi] (all when both are None) through the pass.

    `conn` is a psycopg2 connection in a transaction (the caller commits). For a
    pass that excludes, `rows_in` (the chunk's input rows, when the caller knows
    them) spares a count of the source chunk.
    """
    schema = company_schema(company)
    source, target = ident(schema, src_table), ident(schema, dst_table)
    with _pass_cursor(conn) as cur:
        rows_in, when_count = _excluding_counts(cur, plan, source, lo, hi, rows_in)
        statement = pass_insert(plan, source, target, lo, hi)
        cur.execute(statement.sql, statement.params)
        flagged: dict[str, int] = {}
        if plan.flagged:
            row = cur.fetchone()
            rows_out = int(row[0])
            flagged = {r.name: int(n) for r, n in zip(plan.flagged, row[1:], strict=True)}
        else:
            rows_out = cur.rowcount
    return _chunk_counts(plan, rows_in, rows_out, flagged, when_count)


def run_pass_whole(
    conn: Any,
    schema_service: SchemaService,
    plan: PassPlan,
    src_table: str,
    *,
    company: str,
    run_id: str,
    rows_in: int | None = None,
    lo: int | None = None,
    hi: int | None = None,
    number: int | None = None,
    groups: str | None = None,
) -> tuple[str, ChunkCounts]:
    """Run a pass over the rows on heap pages [lo, hi) of `src_table` (all by default) into a new
    pass table made by CREATE TABLE AS (numbered `number`, by default the pass's): its name, the counts.

    CREATE TABLE AS keeps the rows in the order the source yields them (INSERT
    may put a row into free space of an earlier page), so a table written in
    feed order stays in feed order and EXPORT needs no sort. `groups`: a grouped
    pass's groups table (`make_groups`), when `src_table` holds only part of the
    pass input. The pages are read by a TID range scan (a part of the items table, which
    is stored in feed order).
    """
    assert not plan.counts_after, "a pass counting the previous pass's rules runs in place"
    schema = company_schema(company)
    source = ident(schema, src_table)
    joined = ident(schema, groups) if groups is not None else None
    with _pass_cursor(conn) as cur:
        rows_in, when_count = _excluding_counts(cur, plan, source, lo, hi, rows_in, joined, pages=True)
        select = pass_select(plan, source, lo, hi, groups=joined, pages=True)
        _keep_order(cur, select)
        flags = [flag_column(r) for r in plan.flagged]
        columns = [ORD, KEY, SRC, *plan.columns(), *(c for c, _ in plan.extra())]
        table, rows_out = schema_service.create_rules_tmp_as(
            company, run_id, plan.number if number is None else number, columns, select.sql, select.params, conn=conn
        )
        flagged: dict[str, int] = {}
        lookups: dict[str, tuple[int, int]] | None = None
        if flags:
            # The scan that counts the flags counts the lookups' matches too (a lookup with nothing
            # unmatched needs no scan of its own: `lookup_counts_known`).
            counts = [_count_where(ident(f)) for f in flags]
            counts.extend(_matched_counts(plan.lookups))
            cur.execute(
                sql.SQL("SELECT {} FROM {}").format(sql.SQL(", ").join(counts), ident(company_schema(company), table))
            )
            row = cur.fetchone()
            flagged = {r.name: int(n) for r, n in zip(plan.flagged, row[: len(flags)], strict=True)}
            lookups = _lookup_pairs(plan.lookups, row[len(flags) :])
    outcome = _chunk_counts(plan, rows_in, rows_out, flagged, when_count)
    outcome.lookups = lookups
    return table, outcome


def _matched_counts(actions: Sequence[tuple[Rule, LookupSet]]) -> list[sql.Composable]:
    """Per lookup action: how many items it matched, how many it did not (NULL: it did not run)."""
    out: list[sql.Composable] = []
    for _, part in actions:
        matched = _matched_column(part)
        out.append(_count_where(matched))
        out.append(sql.SQL("count(*) FILTER (WHERE NOT {})").format(matched))
    return out


def _count_where(flag: sql.Composable) -> sql.Composable:
    """How many rows hold true in boolean column `flag` (a rule's flag, a lookup's matched column)."""
    return sql.SQL("count(*) FILTER (WHERE {})").format(flag)


def _matched_column(part: LookupSet) -> sql.Identifier:
    """A lookup action's matched flag column (`lookup_report_columns`)."""
    return ident(lookup_report_columns(part.tag)[1][0])


def _lookup_pairs(actions: Sequence[tuple[Rule, LookupSet]], row: Sequence[Any]) -> dict[str, tuple[int, int]]:
    return {part.tag: (int(row[2 * k]), int(row[2 * k + 1])) for k, (_, part) in enumerate(actions)}


def _keep_order(cur: Any, select: Any) -> None:
    """Plan `select` with hash joins rather than nested loops (the planner would probe the groups' index
    per item), as `keeps_order` wants it, in the caller's transaction; else without hash joins (the
    groups are then read by their index, per item). A plan that still reorders runs as it is: the
    export's order check finds its rows out of order and reads them sorted."""
    cur.execute("SET LOCAL enable_nestloop = off")
    if not keeps_order(cur, select.sql, select.params):
        cur.execute("SET LOCAL enable_nestloop = on")
        cur.execute("SET LOCAL enable_hashjoin = off")


def counts_nothing(plan: PassPlan) -> bool:
    """The pass's counts are known without reading its rows: no `when`, no exclusion, no lookup and
    nothing of an earlier pass to count (every rule matches every row it reads, all of which it keeps)."""
    return not (plan.flagged or plan.excluding or plan.lookups or plan.counts_after or plan.deferred)


def pass_view(
    schema_service: SchemaService,
    plan: PassPlan,
    src_table: str,
    *,
    company: str,
    run_id: str,
    rows_in: int,
    number: int,
    groups: str | None = None,
) -> tuple[str, ChunkCounts]:
    """A `counts_nothing` pass over all of `src_table` (`rows_in` rows) as a view, for a result that one
    pass copying it reads once (`apply_passes(read_once=...)`): its rows are computed as that pass reads
    them, instead of written and read back (a million wide rows: seconds). The view reads `src_table`
    and `groups`, which must outlive it."""
    assert counts_nothing(plan)
    schema = company_schema(company)
    joined = ident(schema, groups) if groups is not None else None
    select = pass_select(plan, ident(schema, src_table), groups=joined)
    columns = [ORD, KEY, SRC, *plan.columns()]
    view = RunViews(schema_service).pass_view(company, run_id, number, columns, select.sql, list(select.params))
    return view, ChunkCounts(rows_in, rows_in, {r.name: rows_in for r in plan.rules})


def copy_as_lists(
    engine: Engine,
    schema_service: SchemaService,
    *,
    company: str,
    run_id: str,
    number: int,
    src_table: str,
    fields: Sequence[str],
    into_lists: Sequence[str],
) -> str:
    """A pass table copying `src_table` with the text columns of `into_lists` made lists (a text is one
    element, "" none), in feed order; returns its name.

    An export's own rules may make a list of a field the project's rules leave as text (a `split`);
    their passes read it as the text[] every pass table holds for a list field (SPEC 9).
    """
    names = list(dict.fromkeys(fields))
    picked = [ident(c) for c in (ORD, KEY, SRC)]
    for f in names:
        col = ident(column_for_field(f))
        picked.append(sql.SQL("{} AS {}").format(from_text(of(col)).sql, col) if f in into_lists else col)
    select = sql.SQL("SELECT {} FROM {}").format(sql.SQL(", ").join(picked), ident(company_schema(company), src_table))
    columns = [ORD, KEY, SRC, *(column_for_field(f) for f in names)]
    with raw_connection(engine) as conn:
        table, _ = schema_service.create_rules_tmp_as(company, run_id, number, columns, select, [], conn=conn)
    return table


def run_pass_in_place(
    conn: Any,
    plan: PassPlan,
    table: str,
    *,
    company: str,
    rows_in: int | None,
    before: Mapping[str, int] | None = None,
) -> ChunkCounts:
    """Run a `deletes_only` pass by deleting the rows it excludes from `table`, a pass table of this run.

    Copying the kept rows to a new table costs as much as any pass (a few seconds
    per million items); deleting the excluded ones only costs evaluating the rule.

    The previous pass's rules it counts (`counts_after`) are counted among the rows it keeps. With
    `before` (those with a `when`: their matches in `table` before the DELETE, the previous pass's
    `deferred_matched`), the DELETE returns the flags of the rows it deletes and their counts are a
    subtraction; without, the kept rows are read again (a scan of the whole table).
    """
    target = ident(company_schema(company), table)
    flagged = [r for r in plan.counts_after if r.when is not None]
    subtract = before is not None and all(r.name in before for r in flagged)
    with _pass_cursor(conn) as cur:
        rows_in, when_count = _excluding_counts(cur, plan, target, None, None, rows_in)
        statement = exclusion_delete(plan, target)
        deferred = lookups_of(plan.counts_after)
        returned = flagged if subtract else []
        deleted_lookups = None
        deleted_flags: list[int] = []
        if deferred or returned:
            # What the deleted rows held of the previous pass's deferred lookups and flags, so that their
            # counts among the kept ones are known without a scan (`lookup_counts_known`, `before`).
            flags = [ident(flag_column(r)) for r in returned]
            returning = sql.SQL(", ").join([*(_matched_column(part) for _, part in deferred), *flags])
            counts_sql = [*_matched_counts(deferred), *(_count_where(f) for f in flags)]
            cur.execute(
                sql.SQL("WITH d AS ({} RETURNING {}) SELECT count(*), {} FROM d").format(
                    statement.sql, returning, sql.SQL(", ").join(counts_sql)
                ),
                statement.params,
            )
            row = cur.fetchone()
            deleted = int(row[0])
            if deferred:
                deleted_lookups = _lookup_pairs(deferred, row[1 : 1 + 2 * len(deferred)])
            deleted_flags = [int(n) for n in row[1 + 2 * len(deferred) :]]
        else:
            cur.execute(statement.sql, statement.params)
            deleted = int(cur.rowcount)
        assert rows_in is not None
        counts = _chunk_counts(plan, rows_in, rows_in - deleted, {}, when_count)
        counts.deleted_lookups = deleted_lookups
        if returned:
            assert before is not None
            counts.matched.update((r.name, before[r.name] - n) for r, n in zip(returned, deleted_flags, strict=True))
        elif flagged:
            # The previous pass's rules that ran before this DELETE: their matches among the kept rows.
            filters = sql.SQL(", ").join(_count_where(ident(flag_column(r))) for r in flagged)
            cur.execute(sql.SQL("SELECT {} FROM {}").format(filters, target))
            counts.matched.update((r.name, int(n)) for r, n in zip(flagged, cur.fetchone(), strict=True))
        counts.matched.update((r.name, counts.rows_out) for r in plan.counts_after if r.when is None)
    return counts


def make_groups(
    schema_service: SchemaService, *, company: str, run_id: str, plan: PassPlan, tables: Sequence[str]
) -> str:
    """The groups table of grouped pass `plan` over its whole input, held by `tables` in order; its name."""
    schema = company_schema(company)
    select = groups_select(plan, [ident(schema, t) for t in tables])
    return schema_service.create_rules_groups_as(company, run_id, plan.number, select.sql, select.params)


def count_rows(engine: Engine, company: str, table: str) -> int:
    """The items of a table of the company schema."""
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(sql.SQL("SELECT count(*) FROM {}").format(ident(company_schema(company), table)))
        return int(cur.fetchone()[0])


def page_parts(engine: Engine, company: str, table: str, parts: int) -> list[tuple[int | None, int | None]]:
    """`table` cut into at most `parts` runs of heap pages of the same length: [lo, hi) each, in order,
    the first open below and the last above (one part when the table has fewer pages).

    No scan, no index and no statistics: the size of the table is all it reads. A table stored in
    feed order (MERGE's items table is) gives parts in feed order.
    """
    with raw_connection(engine) as conn, conn.cursor() as cur:
        pages = table_pages(cur, company_schema(company), table)
    n = max(1, min(parts, pages))
    cuts = [pages * k // n for k in range(1, n)]
    bounds: list[int | None] = [None, *cuts, None]
    return list(itertools.pairwise(bounds))
