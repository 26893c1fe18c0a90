"""RULES: the one loop over rule passes, and the two ways a pass can be executed.

The loop (`apply_passes`) owns everything a pass means for the run: the
cancel check before it, whether it deletes in place (a pass that only excludes,
over a pass table of this run: deleting the excluded rows costs less than copying
every kept one), the groups table a grouped pass over several parts joins (made
once from the whole pass input), dropping the tables the pass read once the next
ones are written (never the items table), and adding up the matched and excluded
counts.

Both runners cut the items into *parts* by position (`Segment`), and each part keeps
its own chain of pass tables, written by CREATE TABLE AS in feed order; the rules'
result is a view of the parts' last tables, one after the other. How a part's pass is
executed is the runner's business, and nothing else is:

- `InProcessPasses` (the batch run, and a worker that consumes the rules queue
  itself): two halves at once on two connections for big runs (a pass is one
  backend's work: the other core would idle), else one part.
- `ChunkJobPasses` (the fleet): up to FIREFEED_RULES_MAX_SLICES parts of at least
  FIREFEED_CHUNK_ROWS items, one `rules_chunk` job per part and pass through the queue.

Either way the same SQL runs (firefeed/rules/executor.py), so both give the
same rows and counts (tests/integration/test_rule_passes.py).
"""

from __future__ import annotations

import contextvars
import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import Engine

from firefeed.dataplane.passes import SEGMENT_STRIDE, part_number, result_view_number
from firefeed.dataplane.views import RunViews
from firefeed.db.engine import raw_connection
from firefeed.errors import RulesError
from firefeed.rules._plan import PassPlan, plan_passes
from firefeed.rules.executor import (
    ChunkCounts,
    count_rows,
    counts_nothing,
    make_groups,
    page_parts,
    pass_view,
    run_pass_in_place,
    run_pass_whole,
)
from firefeed.rules.limits import check_sql_size
from firefeed.rules.lookup_reports import excluded_lookup_counts, in_action_order, lookup_counts, lookup_counts_known
from firefeed.rules.lookups import LookupSet
from firefeed.rules.model import Rule
from firefeed.rules.sqlgen import deletes_only
from firefeed.runs.contract import ChunkResult, RulesChunkParams, RulesResult
from firefeed.schema.service import SchemaService

__all__ = [
    "SEGMENT_STRIDE",
    "SPLIT_MIN_ROWS",
    "ChunkJobPasses",
    "InProcessPasses",
    "PassRunner",
    "RulesResult",
    "Segment",
    "apply_passes",
    "execute_chunk",
    "pass_plan",
    "run_rules",
]

#: A batch run over at least this many items runs every pass as two halves at once, on two
#: connections (a pass is one backend's work: the other core would idle).
SPLIT_MIN_ROWS = 100_000


@dataclass
class Segment:
    """A part of the items and the table that holds it so far; `rows` its items when known. While the
    part is still in the table the rules started from, `lo`/`hi` are its heap pages [lo, hi) there
    (that table is stored in feed order; all of it when both are None); once a pass wrote the part a
    table of its own, both are None."""

    lo: int | None
    hi: int | None
    table: str
    rows: int | None = None


class PassRunner(Protocol):
    """How passes are executed; the loop decides everything else."""

    run_id: str

    def segments(self, source_table: str, rows: int | None) -> list[Segment]:
        """How the items are cut into parts for the passes (each part keeps its own chain of pass tables)."""
        ...

    def run_pass(
        self,
        plan: PassPlan,
        segments: Sequence[Segment],
        *,
        in_place: bool,
        groups: str | None,
        before: Sequence[ChunkCounts] = (),
    ) -> list[tuple[str, ChunkCounts]]:
        """Execute one pass over every part: per part, the table that now holds it and its counts.
        `in_place`: delete the excluded rows from each part's own table instead of writing a new one.
        `groups`: the groups table a grouped pass over several parts joins. `before`: the previous
        pass's counts per part, which a pass in place may count its `counts_after` from (else it
        reads its rows again)."""
        ...

    def finish(self, segments: Sequence[Segment], source_table: str, view: int) -> str:
        """The rules' result table once every pass ran; `view`: its number when it is a view of parts."""
        ...


def apply_passes(
    runner: PassRunner,
    schema: SchemaService,
    *,
    company: str,
    source_table: str,
    fields: Sequence[str],
    rules: Sequence[Rule],
    rows: int | None = None,
    check_cancel: Callable[[], None] | None = None,
    first_pass: int = 1,
    path: str = "rules",
    view_last: bool = False,
    view_groups: bool = True,
) -> RulesResult:
    """Apply the enabled rules to `source_table` (`rows` items, when the caller knows), one pass at a time.

    Rules whose SQL would exceed rules_max_sql_bytes over these fields are a
    SpecError before any statement runs. On error or cancellation the pipeline
    drops what remains with RunTables.drop_rules_tmp_for_run. `first_pass`: the number of
    the first pass table (an export's channel rules number theirs apart from the
    project's, whose result they read); `path`: where the rules are in the spec.
    `view_last`: the result's readers are few and each scans it whole (the lone export's first
    channel pass, which copies it; an export's file and its diagnostics), so a last pass that
    counts nothing is a view per part (`pass_view`): its readers compute its rows as they read
    them instead of a million wide rows being written and read back. A lone such pass over a
    view of parts (an export's rules reading the project's halves) is one view over that view.
    `view_groups`: a grouped last pass may be the view (its items read their group's row by an index,
    which the export's ordered scans do not use: their readers keep `view_groups` off).
    """
    plans = check_sql_size(rules, fields, path=path)
    if first_pass != 1:
        plans = [dataclasses.replace(p, number=p.number + first_pass - 1) for p in plans]
    matched = {r.name: 0 for r in rules if r.enabled}
    if not plans:
        count = rows if rows is not None else count_rows(schema.engine, company, source_table)
        return RulesResult(source_table, list(dict.fromkeys(fields)), 0, matched, 0, count, count)

    def may_view(plan: PassPlan) -> bool:
        return view_last and counts_nothing(plan) and (view_groups or not plan.grouped)

    segments = runner.segments(source_table, rows)
    if (
        len(plans) == 1
        and may_view(plans[0])
        and rows is not None
        and len(segments) > 1
        and all(seg.rows is None and seg.lo is None and seg.hi is None for seg in segments)
    ):
        segments = [Segment(None, None, source_table, rows)]  # the parts' own rows are not known
    written: set[str] = set()  # this loop's own pass tables: the only ones it deletes from or drops
    first_in: int | None = None
    excluded = 0
    lookups: list[dict[str, Any]] = []
    later: list[tuple[Rule, LookupSet]] = []  # lookups of rules the next pass counts (PassPlan.deferred)
    written_counts: list[ChunkCounts] = []  # the parts' counts of the pass that ran `later`
    for plan in plans:
        if check_cancel is not None:
            check_cancel()
        in_place = deletes_only(plan) and all(seg.table in written for seg in segments)
        assert in_place or not plan.counts_after, "a pass counting the previous pass's rules deletes in place"
        # Viewed: its parts' rows (known from the pass before) are all it counts, and its tables stay.
        viewed = (
            plan is plans[-1]
            and may_view(plan)
            and all(seg.rows is not None and seg.lo is None and seg.hi is None for seg in segments)
        )
        # Lookups in a branch that excludes: their items leave in this pass, so read them first (P23).
        excluded_reports = excluded_lookup_counts(
            schema, company=company, run_id=runner.run_id, plan=plan, inputs=[(s.table, s.lo, s.hi) for s in segments]
        )
        groups = None
        if plan.grouped and len(segments) > 1:
            # A group's members may be in any part: each part joins the groups of the whole input.
            inputs = list(dict.fromkeys(seg.table for seg in segments))
            groups = make_groups(schema, company=company, run_id=runner.run_id, plan=plan, tables=inputs)
        if viewed:
            outcomes = [
                pass_view(
                    schema,
                    plan,
                    seg.table,
                    company=company,
                    run_id=runner.run_id,
                    rows_in=seg.rows or 0,
                    number=part_number(plan.number, h, len(segments)),
                    groups=groups,
                )
                for h, seg in enumerate(segments, 1)
            ]
        else:
            before = written_counts if in_place and len(written_counts) == len(segments) else []
            outcomes = runner.run_pass(plan, segments, in_place=in_place, groups=groups, before=before)
        if groups is not None and not viewed:
            schema.drop_table(company, groups)
        tables = [table for table, _ in outcomes]
        counted = [counts for _, counts in outcomes]
        held: list[dict[str, Any]] = []
        if later:
            # The previous pass's deferred lookups, among the rows this DELETE kept: their rules come
            # after this pass's, so they are listed after its excluded lookups (P23).
            known = lookup_counts_known(later, written_counts, counted)
            held = known if known is not None else lookup_counts(schema.engine, company, later, tables)
        deferred = {id(r) for r in plan.deferred}
        later = [(rule, part) for rule, part in plan.lookups if id(rule) in deferred]
        written_counts = counted
        now = [(rule, part) for rule, part in plan.lookups if id(rule) not in deferred]
        reports: list[dict[str, Any]] = []
        if now:
            # Read now: the next pass drops these tables.
            known = lookup_counts_known(now, counted)
            reports = known if known is not None else lookup_counts(schema.engine, company, now, tables)
        lookups.extend(in_action_order(plan, now, excluded_reports, reports))
        lookups.extend(held)
        rows_in = rows_out = 0
        for seg, (table, counts) in zip(segments, outcomes, strict=True):
            written.add(table)
            if seg.table in written and seg.table != table and not viewed:
                schema.drop_table(company, seg.table)  # at most two copies of the items exist
            seg.table, seg.rows, seg.lo, seg.hi = table, counts.rows_out, None, None
            rows_in += counts.rows_in
            rows_out += counts.rows_out
            for name, n in counts.matched.items():
                matched[name] = matched.get(name, 0) + n
        first_in = rows_in if first_in is None else first_in
        excluded += rows_in - rows_out
    assert first_in is not None
    # The project's view of parts is number 0; an export's own (first_pass > 1) one of its own.
    table = runner.finish(segments, source_table, result_view_number(first_pass))
    return RulesResult(
        table, list(plans[-1].fields_out), len(plans), matched, excluded, first_in, first_in - excluded, lookups
    )


class _Parts:
    """What both runners share: the rules' result is the view of the parts' last tables, in order."""

    schema: SchemaService
    company: str
    run_id: str

    def finish(self, segments: Sequence[Segment], source_table: str, view: int) -> str:
        if len(segments) == 1:
            return segments[0].table
        # First part first: the view is in feed order.
        return RunViews(self.schema).parts_view(self.company, self.run_id, view, [seg.table for seg in segments])


# -- in this process ---------------------------------------------------------------------
class InProcessPasses(_Parts):
    """Each pass in this process by CREATE TABLE AS, or one DELETE; two halves at once for big runs."""

    def __init__(
        self, engine: Engine, schema: SchemaService, *, company: str, run_id: str, split_min_rows: int | None = None
    ) -> None:
        self.engine, self.schema, self.company, self.run_id = engine, schema, company, run_id
        self.split_min_rows = split_min_rows

    def segments(self, source_table: str, rows: int | None) -> list[Segment]:
        threshold = SPLIT_MIN_ROWS if self.split_min_rows is None else self.split_min_rows
        if rows is None or rows < threshold:
            return [Segment(None, None, source_table, rows)]
        # An export's own rules read the project's result: when that is a view of two halves, theirs.
        parts = RunViews(self.schema).view_parts(self.company, source_table)
        if parts is not None and len(parts) == 2:
            return [Segment(None, None, part) for part in parts]
        halves = page_parts(self.engine, self.company, source_table, 2)
        if len(halves) < 2:
            return [Segment(None, None, source_table, rows)]
        return [Segment(lo, hi, source_table) for lo, hi in halves]

    def run_pass(
        self,
        plan: PassPlan,
        segments: Sequence[Segment],
        *,
        in_place: bool,
        groups: str | None,
        before: Sequence[ChunkCounts] = (),
    ) -> list[tuple[str, ChunkCounts]]:
        def one(h: int, seg: Segment) -> tuple[str, ChunkCounts]:
            with raw_connection(self.engine) as conn:
                if in_place:
                    known = before[h - 1].deferred_matched if before else None
                    counts = run_pass_in_place(
                        conn, plan, seg.table, company=self.company, rows_in=seg.rows, before=known
                    )
                    return seg.table, counts
                return run_pass_whole(
                    conn,
                    self.schema,
                    plan,
                    seg.table,
                    company=self.company,
                    run_id=self.run_id,
                    rows_in=seg.rows,
                    lo=seg.lo,
                    hi=seg.hi,
                    number=part_number(plan.number, h, len(segments)),
                    groups=groups,
                )

        if len(segments) == 1:
            return [one(1, segments[0])]
        with ThreadPoolExecutor(max_workers=len(segments)) as pool:
            # Each in a copy of this thread's context: the run's connection name (a cancel finds it) and log fields.
            futures = [pool.submit(contextvars.copy_context().run, one, h, seg) for h, seg in enumerate(segments, 1)]
            return [f.result() for f in futures]


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
    first_pass: int = 1,
    path: str = "rules",
    view_last: bool = False,
    view_groups: bool = True,
) -> RulesResult:
    """The rules applied in this process (`InProcessPasses` through `apply_passes`)."""
    runner = InProcessPasses(engine, schema_service, company=company, run_id=run_id, split_min_rows=split_min_rows)
    return apply_passes(
        runner,
        schema_service,
        company=company,
        source_table=source_table,
        fields=fields,
        rules=rules,
        rows=rows,
        check_cancel=cancel_check,
        first_pass=first_pass,
        path=path,
        view_last=view_last,
        view_groups=view_groups,
    )


# -- as chunk jobs -----------------------------------------------------------------------
RunChunks = Callable[[int, list[RulesChunkParams]], list[ChunkResult]]
"""Runs one pass's parts (pass number, parts) somewhere and returns their tables and counts in order."""


class ChunkJobPasses(_Parts):
    """Each pass as one `rules_chunk` job per part, run by `run_chunks` (the driver: as jobs).

    A part holds at least `chunk_rows` items, and there are at most `max_slices` of them: a job costs
    10-20 ms of its own (a message, a claim, a transaction, a notification), and a million items in
    parts of 2,000 would make 500 of them per pass, seconds of overhead for parallelism no fleet has.
    With 16 parts a pass still spreads over 16 rules slots, and a lost worker loses a sixteenth of a
    pass. The items table is cut once, by runs of heap pages (it is stored in feed order) read by TID
    range scans; from then on each part's job reads its own pass table whole and writes the next by
    CREATE TABLE AS, in feed order, so no index, no statistics and no shared table are needed.
    """

    def __init__(
        self,
        engine: Engine,
        schema: SchemaService,
        *,
        company: str,
        run_id: str,
        fields: Sequence[str],
        chunk_rows: int,
        run_chunks: RunChunks,
        max_slices: int = 16,
    ) -> None:
        self.engine, self.schema, self.company, self.run_id = engine, schema, company, run_id
        self.fields, self.chunk_rows, self.run_chunks = list(fields), chunk_rows, run_chunks
        self.max_slices = min(max_slices, SEGMENT_STRIDE - 1)

    def slice_rows(self, rows: int) -> int:
        """Items per part for a run of `rows` items."""
        return max(self.chunk_rows, -(-rows // self.max_slices))

    def segments(self, source_table: str, rows: int | None) -> list[Segment]:
        if rows is None:
            rows = count_rows(self.engine, self.company, source_table)
        slices = -(-rows // self.slice_rows(rows))
        parts = page_parts(self.engine, self.company, source_table, slices) if slices > 1 else []
        if len(parts) < 2:
            return [Segment(None, None, source_table, rows)]
        return [Segment(lo, hi, source_table) for lo, hi in parts]

    def run_pass(
        self,
        plan: PassPlan,
        segments: Sequence[Segment],
        *,
        in_place: bool,
        groups: str | None,
        before: Sequence[ChunkCounts] = (),
    ) -> list[tuple[str, ChunkCounts]]:
        # `before` is not sent: a chunk job's result does not carry the counts it would need (ChunkResult),
        # so a job in place counts its `counts_after` among the kept rows by reading them.
        parts = []
        for h, seg in enumerate(segments, 1):
            if in_place:
                parts.append(RulesChunkParams(fields=self.fields, src=seg.table, rows=seg.rows, in_place=True))
                continue
            parts.append(
                RulesChunkParams(
                    fields=self.fields,
                    src=seg.table,
                    rows=seg.rows,
                    number=part_number(plan.number, h, len(segments)),
                    lo=seg.lo,
                    hi=seg.hi,
                    groups=groups,
                )
            )
        results = self.run_chunks(plan.number, parts)
        return [(r.table, ChunkCounts(r.rows_in, r.rows_out, dict(r.matched))) for r in results]


def run_rules_as_chunks(
    engine: Engine,
    schema_service: SchemaService,
    *,
    company: str,
    run_id: str,
    source_table: str,
    fields: Sequence[str],
    rules: Sequence[Rule],
    chunk_rows: int,
    max_slices: int,
    run_chunks: RunChunks,
    rows: int | None = None,
    cancel_check: Callable[[], None] | None = None,
    view_last: bool = False,
) -> RulesResult:
    """The rules applied as `rules_chunk` jobs run by `run_chunks` (`ChunkJobPasses` through `apply_passes`):
    a fleet's full run over its items, a delta's over its changed items' new rows."""
    runner = ChunkJobPasses(
        engine,
        schema_service,
        company=company,
        run_id=run_id,
        fields=fields,
        chunk_rows=chunk_rows,
        run_chunks=run_chunks,
        max_slices=max_slices,
    )
    return apply_passes(
        runner,
        schema_service,
        company=company,
        source_table=source_table,
        fields=fields,
        rules=rules,
        rows=rows,
        check_cancel=cancel_check,
        view_last=view_last,
    )


def execute_chunk(
    conn: Any, schema: SchemaService, plan: PassPlan, chunk: RulesChunkParams, *, company: str, run_id: str
) -> ChunkResult:
    """One part of one pass on `conn` (the caller's transaction): what a `rules_chunk` job does."""
    if chunk.in_place:
        counts = run_pass_in_place(conn, plan, chunk.src, company=company, rows_in=chunk.rows)
        return ChunkResult(chunk.src, counts.rows_in, counts.rows_out, dict(counts.matched))
    if chunk.dst is not None:
        # From a driver of the previous release (a deploy in progress), which cut the rules into passes
        # by its own plan: running its pass number by this release's plan could write other rules.
        raise RulesError(
            f"rules_chunk job of pass {plan.number} comes from a driver of an earlier FireFeed release;"
            " start the run again once every worker and driver runs the same release"
        )
    assert chunk.number is not None
    table, counts = run_pass_whole(
        conn,
        schema,
        plan,
        chunk.src,
        company=company,
        run_id=run_id,
        rows_in=chunk.rows,
        lo=chunk.lo,
        hi=chunk.hi,
        number=chunk.number,
        groups=chunk.groups,
    )
    return ChunkResult(table, counts.rows_in, counts.rows_out, dict(counts.matched))


_PLANS: OrderedDict[tuple[str, int, tuple[str, ...]], PassPlan] = OrderedDict()
_PLANS_LOCK = threading.Lock()


def pass_plan(run_id: str, rules: Sequence[Rule], fields: Sequence[str], pass_no: int) -> PassPlan:
    """The plan of one pass of a run, computed once per process and run (for its chunk jobs)."""
    key = (run_id, pass_no, tuple(fields))
    with _PLANS_LOCK:
        if key in _PLANS:
            return _PLANS[key]
    plan = plan_passes(rules, list(fields))[pass_no - 1]
    with _PLANS_LOCK:
        _PLANS[key] = plan
        while len(_PLANS) > 64:
            _PLANS.popitem(last=False)
    return plan
