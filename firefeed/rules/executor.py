"""Running the rules in Postgres, pass by pass (see _plan for how passes are cut).

Batch mode (`run_rules`) runs each pass whole (`run_pass_whole`, by CREATE TABLE AS), on two
halves of the items at once for big runs, and a pass that only excludes in place
(`run_pass_in_place`). A Celery driver can run one pass in chunks instead: `prepare_pass`
once, then `run_pass_chunk` per `_ff_ord` range, each in its own transaction, and add the
counts up. All DDL (CREATE TABLE AS included) goes through the SchemaService; this module
only runs the SELECTs, INSERTs and DELETEs of the passes.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.db.engine import raw_connection, render_for_binding
from firefeed.rules._plan import PassPlan, flag_column, plan_passes
from firefeed.rules.limits import check_sql_size
from firefeed.rules.model import Rule, branch_excludes
from firefeed.rules.sqlgen import count_select, deletes_only, exclusion_delete, pass_insert, pass_select
from firefeed.schema.identifiers import KEY, ORD, SRC, company_schema, ident
from firefeed.schema.service import SchemaService

__all__ = [
    "SPLIT_MIN_ROWS",
    "ChunkCounts",
    "PassPlan",
    "RulesResult",
    "plan_passes",
    "prepare_pass",
    "run_pass_chunk",
    "run_pass_in_place",
    "run_pass_whole",
    "run_rules",
]

# Rows must be written in _ff_ord order (exports read them back that way): a
# plain, non-parallel, non-synchronized sequential scan returns them in the
# order they were written. work_mem holds the RETURNING flags of a pass in memory. JIT
# off: compiling a pass's large expressions took longer than it saved (1M rows, 20
# rules: 41 s with JIT, 20 s without).
_PASS_SETTINGS = (
    "SET LOCAL max_parallel_workers_per_gather = 0",
    "SET LOCAL synchronize_seqscans = off",
    "SET LOCAL work_mem = '64MB'",
    "SET LOCAL jit = off",
)


@dataclass
class ChunkCounts:
    rows_in: int
    rows_out: int
    matched: dict[str, int] = field(default_factory=dict)  # per rule name of the pass


@dataclass
class RulesResult:
    table: str  # final table in the company schema; source_table when no rule is enabled
    fields: list[str]  # input fields, then fields created by rules in first-created order
    passes: int
    matched: dict[str, int]
    excluded: int
    rows_in: int
    rows_out: int


def prepare_pass(schema_service: SchemaService, *, company: str, run_id: str, plan: PassPlan) -> str:
    """Create the (empty) table the pass writes; returns its name in the company schema."""
    return schema_service.create_rules_tmp(company, run_id, plan.number, plan.columns(), extra=plan.extra())


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
    cur: Any, plan: PassPlan, source: Any, lo: int | None, hi: int | None, rows_in: int | None
) -> tuple[int | None, int | None]:
    """rows_in and the excluding rule's `when` matches, counted first when the pass needs them."""
    rule = plan.excluding
    both = rule is not None and rule.when is not None and branch_excludes(rule.then) and branch_excludes(rule.else_)
    if rule is not None and (rows_in is None or both):
        counted = count_select(plan, source, lo, hi)
        cur.execute(counted.sql, counted.params)
        found, when_count = cur.fetchone()
        return int(found), when_count
    return rows_in, None


def _chunk_counts(
    plan: PassPlan, rows_in: int | None, rows_out: int, flagged: dict[str, int], when_count: int | None
) -> ChunkCounts:
    if rows_in is None:
        rows_in = rows_out
    matched = {r.name: _rule_matches(plan, r, rows_in, rows_out, flagged, when_count) for r in plan.rules}
    return ChunkCounts(rows_in, rows_out, matched)


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
    prepare: bool = False,
) -> ChunkCounts:
    """Write the rows of `src_table` with _ff_ord in [lo, hi] (all when both are None) through the pass.

    `conn` is a psycopg2 connection in a transaction (the caller commits). For a
    pass that excludes, `rows_in` (the chunk's input rows, when the caller knows
    them) spares a count of the source chunk. `prepare` runs the pass as a prepared
    statement of the connection: a pass is planned once, not once per chunk.
    """
    schema = company_schema(company)
    source, target = ident(schema, src_table), ident(schema, dst_table)
    with _pass_cursor(conn) as cur:
        rows_in, when_count = _excluding_counts(cur, plan, source, lo, hi, rows_in)
        if prepare:
            _execute_prepared(cur, plan, source, target, lo, hi)
        else:
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
) -> tuple[str, ChunkCounts]:
    """Run a pass over the rows of `src_table` with _ff_ord in [lo, hi] (all by default) into a new
    pass table made by CREATE TABLE AS (numbered `number`, by default the pass's): its name, the counts.

    CREATE TABLE AS keeps the rows in the order the source yields them (INSERT
    may put a row into free space of an earlier page), so a table written in
    feed order stays in feed order and EXPORT needs no sort.
    """
    source = ident(company_schema(company), src_table)
    with _pass_cursor(conn) as cur:
        rows_in, when_count = _excluding_counts(cur, plan, source, lo, hi, rows_in)
        select = pass_select(plan, source, lo, hi)
        flags = [flag_column(r) for r in plan.flagged]
        columns = [ORD, KEY, SRC, *plan.columns(), *flags]
        table, rows_out = schema_service.create_rules_tmp_as(
            company, run_id, plan.number if number is None else number, columns, select.sql, select.params, conn=conn
        )
        flagged: dict[str, int] = {}
        if flags:
            counts = sql.SQL(", ").join(sql.SQL("count(*) FILTER (WHERE {})").format(ident(f)) for f in flags)
            cur.execute(sql.SQL("SELECT {} FROM {}").format(counts, ident(company_schema(company), table)))
            flagged = {r.name: int(n) for r, n in zip(plan.flagged, cur.fetchone(), strict=True)}
    return table, _chunk_counts(plan, rows_in, rows_out, flagged, when_count)


def run_pass_in_place(conn: Any, plan: PassPlan, table: str, *, company: str, rows_in: int | None) -> ChunkCounts:
    """Run a `deletes_only` pass by deleting the rows it excludes from `table`, a pass table of this run.

    Copying the kept rows to a new table costs as much as any pass (a few seconds
    per million items); deleting the excluded ones only costs evaluating the rule.
    """
    target = ident(company_schema(company), table)
    with _pass_cursor(conn) as cur:
        rows_in, when_count = _excluding_counts(cur, plan, target, None, None, rows_in)
        statement = exclusion_delete(plan, target)
        cur.execute(statement.sql, statement.params)
        deleted = int(cur.rowcount)
    assert rows_in is not None
    return _chunk_counts(plan, rows_in, rows_in - deleted, {}, when_count)


# Stand-ins for a chunk's bounds while the statement text is made; a real bound never equals them.
_LO, _HI = -(2**63) + 1, 2**63 - 2


#: (plan, source, target) -> the pass's statement with $1/$2 for the bounds, and its prepared name
#: (None: a rule value spells a stand-in). A chunk job's worker runs hundreds of chunks of one pass:
#: building and binding the statement's text each time cost twice the chunk's own EXECUTE.
_STATEMENTS: OrderedDict[tuple[int, str, str], tuple[PassPlan, tuple[str, str] | None]] = OrderedDict()
#: the prepared names of each connection (a prepared statement lives as long as its session)
_PREPARED: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()
_CACHE_LOCK = threading.Lock()


def _prepared_text(cur: Any, plan: PassPlan, source: Any, target: Any) -> tuple[str, str] | None:
    key = (id(plan), source.as_string(cur), target.as_string(cur))
    with _CACHE_LOCK:
        cached = _STATEMENTS.get(key)
        if cached is not None and cached[0] is plan:  # the plan is kept with its entry: its id stays its own
            return cached[1]
    statement = pass_insert(plan, source, target, _LO, _HI)
    text = cur.mogrify(render_for_binding(statement.sql, cur), statement.params).decode()
    entry: tuple[str, str] | None = None
    if text.count(str(_LO)) == 1 and text.count(str(_HI)) == 1:
        text = text.replace(str(_LO), "$1").replace(str(_HI), "$2")
        entry = ("ff_pass_" + hashlib.sha256(text.encode()).hexdigest()[:24], text)
    with _CACHE_LOCK:
        _STATEMENTS[key] = (plan, entry)
        while len(_STATEMENTS) > 64:
            _STATEMENTS.popitem(last=False)
    return entry


def _execute_prepared(cur: Any, plan: PassPlan, source: Any, target: Any, lo: int | None, hi: int | None) -> None:
    """Run the pass for [lo, hi] as `EXECUTE ff_pass_<hash>(lo, hi)`, preparing it on first use.

    Planning the pass's large query costs more than a small chunk's work; with the
    bounds as the statement's only parameters, Postgres switches to a generic
    plan after a few executions and each chunk skips planning.
    """
    prepared = _prepared_text(cur, plan, source, target)
    if prepared is None:
        # A rule value spells a stand-in: plan this chunk the ordinary way.
        plain = pass_insert(plan, source, target, lo, hi)
        cur.execute(plain.sql, plain.params)
        return
    name, text = prepared
    conn = cur.connection
    with _CACHE_LOCK:
        known = name in _PREPARED.setdefault(conn, set())
    if not known:
        cur.execute("SELECT 1 FROM pg_prepared_statements WHERE name = %s", (name,))
        if cur.fetchone() is None:
            cur.execute(f"PREPARE {name}(bigint, bigint) AS {text}")
        with _CACHE_LOCK:
            _PREPARED[conn].add(name)
    cur.execute(f"EXECUTE {name}(%s, %s)", (-(2**63) if lo is None else lo, 2**63 - 1 if hi is None else hi))


def _count(engine: Engine, company: str, table: str) -> int:
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(sql.SQL("SELECT count(*) FROM {}").format(ident(company_schema(company), table)))
        return int(cur.fetchone()[0])


#: A batch run over at least this many items runs every pass as two halves at once, on two
#: connections (a pass is one backend's work: the other core would idle).
SPLIT_MIN_ROWS = 100_000
#: the pass tables of half h (1, 2) of pass p are numbered p * SEGMENT_STRIDE + h; the view over the
#: last ones (the rules' result) is number 0
SEGMENT_STRIDE = 10


@dataclass
class _Segment:
    """One half of the items (_ff_ord in [lo, hi]) and the pass table that holds it so far."""

    lo: int | None
    hi: int | None
    table: str
    rows: int | None = None


def _middle(engine: Engine, company: str, table: str) -> int | None:
    """The _ff_ord that splits `table` into two halves of (almost) the same size."""
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(
            sql.SQL("SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY {}) FROM {}").format(
                ident(ORD), ident(company_schema(company), table)
            )
        )
        mid = cur.fetchone()[0]
    return None if mid is None else int(mid)


def _segment_pass(
    engine: Engine,
    schema_service: SchemaService,
    plan: PassPlan,
    seg: _Segment,
    source_table: str,
    *,
    company: str,
    run_id: str,
    number: int,
) -> tuple[str, ChunkCounts]:
    """One pass over one segment, in its own transaction; drops the segment's previous pass table."""
    src = seg.table
    with raw_connection(engine) as conn:
        if src != source_table and deletes_only(plan):
            return src, run_pass_in_place(conn, plan, src, company=company, rows_in=seg.rows)
        first = src == source_table
        dst, counts = run_pass_whole(
            conn,
            schema_service,
            plan,
            src,
            company=company,
            run_id=run_id,
            rows_in=seg.rows,
            lo=seg.lo if first else None,
            hi=seg.hi if first else None,
            number=number,
        )
    if not first:
        schema_service.drop_table(company, src)
    return dst, counts


def run_rules(
    engine: Engine,
    schema_service: SchemaService,
    *,
    company: str,
    run_id: str,
    source_table: str,
    fields: Sequence[str],
    rules: Sequence[Rule],
    cancel_check: Callable[[], None] | None = None,
    rows: int | None = None,
    split_min_rows: int | None = None,
) -> RulesResult:
    """Apply the enabled rules to `source_table` (`rows` items, when the caller knows), one pass at a time.

    Each pass is its own transaction per segment. With at least `split_min_rows`
    (default SPLIT_MIN_ROWS) items the items are cut into two halves by position, each pass runs on both
    at once, and the result is a view of the two last tables, first half first
    (so still in feed order). The previous pass table is dropped once the next
    one is written (never the source table), so at most two copies exist; a
    pass that only excludes deletes from the previous pass table instead (never
    from the source table); on error or cancellation the pipeline drops what
    remains with drop_rules_tmp_for_run. Rules whose SQL would exceed rules_max_sql_bytes
    over these fields are a SpecError before any statement runs.
    """
    plans = check_sql_size(rules, fields)
    if not plans:
        count = _count(engine, company, source_table)
        return RulesResult(source_table, list(dict.fromkeys(fields)), 0, {}, 0, count, count)
    threshold = SPLIT_MIN_ROWS if split_min_rows is None else split_min_rows
    mid = _middle(engine, company, source_table) if rows is not None and rows >= threshold else None
    if mid is None:
        segments = [_Segment(None, None, source_table)]
    else:
        segments = [_Segment(None, mid, source_table), _Segment(mid + 1, None, source_table)]
    split = len(segments) > 1
    matched = {r.name: 0 for r in rules if r.enabled}
    first_in: int | None = None
    excluded = 0
    with ThreadPoolExecutor(max_workers=len(segments)) as pool:
        for plan in plans:
            if cancel_check is not None:
                cancel_check()
            futures = [
                pool.submit(
                    # In a copy of this thread's context: the run's connection name (a cancel finds it) and log fields.
                    contextvars.copy_context().run,
                    _segment_pass,
                    engine,
                    schema_service,
                    plan,
                    seg,
                    source_table,
                    company=company,
                    run_id=run_id,
                    number=plan.number * SEGMENT_STRIDE + h if split else plan.number,
                )
                for h, seg in enumerate(segments, start=1)
            ]
            outcomes = [f.result() for f in futures]
            rows_in = rows_out = 0
            for seg, (dst, counts) in zip(segments, outcomes, strict=True):
                seg.table, seg.rows = dst, counts.rows_out
                rows_in += counts.rows_in
                rows_out += counts.rows_out
                for name, n in counts.matched.items():
                    matched[name] += n
            first_in = rows_in if first_in is None else first_in
            excluded += rows_in - rows_out
    assert first_in is not None
    result = segments[0].table
    if split:
        result = schema_service.create_rules_tmp_view(company, run_id, 0, [seg.table for seg in segments])
    return RulesResult(result, list(plans[-1].fields_out), len(plans), matched, excluded, first_in, first_in - excluded)
