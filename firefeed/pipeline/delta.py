"""The delta refresh (SPEC 11 I1, #52 part 2): only the items an `enrich` source changed are merged and ruled again.

Taken (see `why_not` and incremental.decide) when the spec, the primary source, every lookup table and
every other source are what the last succeeded run read, and only `enrich` sources changed, keeping
their fields. Enrich sources add no item and move none, so the items are the same keys in the same
order: only some items' values change. Then:

- MERGE finds the candidates: the keys whose rows differ between a changed source's rows as the last
  run merged them (kept by PARSE, dataplane/staged.py) and its new ones (pipeline/_delta_keys.py); when
  PARSE patched the source from those rows (pipeline/stage_patch.py), the keys whose changed records'
  new and old rows differ (no previous staging kept, no FULL JOIN of the whole source).
  Their new rows are their items rows with the changed source's fields replaced when that is what
  MERGE gives (one changed source, the last to contribute its fields, no value another source also
  gives going empty: `_delta_keys.by_items_refusal`, `unsafe_keys`), else their merged rows again
  (the same SELECT as a full MERGE, `merge._items_select`, restricted to those keys); only those
  differing from the items table (which holds the last run's merged rows) are the changed items.
  Their old rows are copied aside, their new rows UPDATEd into the items table, both by TID. Without
  kept rows it can trust, every merged row is computed again and compared (the MERGE detail's
  `changed_by` says which way: `items rows`, `staged rows` or `merged rows`).
- RULES (pipeline/delta_rules.py) runs the project's rules on the new rows of those items and counts
  their old rows from the kept result where it can (else rules them too). Each rule reads
  one item only (groups, aggregates, lookups and lists rule the delta out, `why_not`), so the rules
  report's counts are additive: the last run's, less the old rows', plus the new rows'. The result is
  the last run's kept result with the changed items' rows replaced by the new ones: a copy in `_ff_ord`
  order when an export may need it whole (json, google-xml, gzip, channel rules: `patch.static_reason`),
  else a view, and the kept result changed in place and renamed this run's once the run has published
  (`keep_viewed`, dataplane/kept.py `keep_in_place`): no copy of every item.
- EXPORT patches the csv, tsv and jsonl exports (export/patch.py: they read only the changed items' rows)
  and writes the others in full from that result (channel rules, diagnostics and diffs as in a full run).

The primary source changed alone is a delta too when PARSE patched its staging (pipeline/stage_patch.py:
only records edited in place, each keeping its key, so the same items in the same order) from the rows
the last succeeded run merged, and that run's MERGE skipped none of the primary's rows (`primary_reason`):
the candidates are the changed records' keys, their new rows MERGE's own SELECT over the records' new
rows (the patch's run table: no scan of the primary's staging) and the other sources restricted to those
keys (`changed_by: patched rows`); RULES and EXPORT as above.

Whatever is not proven identical to a full run is `full` with a reason.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from psycopg2 import sql

from firefeed.dataplane.kept import KeptChange, PreparedKeep, keep_in_place
from firefeed.dataplane.names import RESULT_PREFIX, rules_tmp_table
from firefeed.dataplane.state import KeptRun, SourceState
from firefeed.db.engine import raw_connection
from firefeed.pipeline._delta_keys import (
    CANDIDATES,
    MERGED,
    TID,
    Kept,
    PatchedRows,
    analyze_candidates,
    by_items_refusal,
    changed_by_items,
    find_candidates,
    first_rows,
    kept_rows,
    skips_before,
    temp_table,
    unsafe_keys,
    values_changed,
)
from firefeed.pipeline.context import RunContext
from firefeed.pipeline.delta_slice import counts_unchanged, reads_across_items
from firefeed.pipeline.merge import (
    _MERGE_SETTINGS,
    MergeResult,
    StagedSource,
    _first_rows,
    _items_select,
    derived_rows,
    merged_fields,
    source_key_stats,
)
from firefeed.runs import contract
from firefeed.schema.identifiers import KEY, ORD, SRC, column_for_field, company_schema, ident
from firefeed.schema.service import SchemaService, relation_kind, view_reads
from firefeed.spec.model import ProjectSpec

log = logging.getLogger(__name__)

#: pass numbers of the delta's own tables, apart from the project's passes (1, 2, ... and p * 100 + h)
#: and the exports' own rules (from 10,000,001): the changed items' new and old rows, their keys,
#: the old rows' passes, and the spliced result
NEW_ROWS, OLD_ROWS, KEYS, SPLICED = 9_000_001, 9_000_002, 9_000_003, 9_000_004
#: the changed items' new rows after the rules, in `_ff_ord` order, which a patched export reads (export/patch.py)
RULED = 9_000_005
#: the changed items' new rows with their old rows' ctids, as MERGE found them: the new and old rows are read from
#: it, the items table's UPDATE (`ItemsUpdate`) takes it; made from the items rows, a view of two halves, each
#: from its half of the items table (`_changed_in_halves`), and the candidates those are read for
CHANGED_ROWS, CHANGED_HALVES, CANDIDATE_ROWS = 9_000_009, (9_000_010, 9_000_011), 9_000_012
#: the changed items' new rows copied from `NEW_ROWS` where that is a view and chunk jobs rule them (they cut a
#: table's heap pages: delta_rules.py)
NEW_ROWS_COPY = 9_000_013
OLD_FIRST_PASS = 5_000_001


@dataclass(frozen=True)
class DeltaTables:
    """The changed items after MERGE: their new rows, their old rows, their keys (tables of this run)."""

    new: str
    #: None where RULES needs no old row (`delta_slice.counts_unchanged`): none was read
    old: str | None
    keys: str
    changed: int
    #: the items table's UPDATE by their new rows, running beside RULES (`ItemsUpdate`)
    items_update: ItemsUpdate
    #: how MERGE found them: by comparing a changed source's kept staged rows with its new ones, their
    #: new rows made from their items rows ("items rows") or merged again ("staged rows"), or every
    #: item's merged row with the items table ("merged rows"); a patched primary's records merged again from
    #: their new rows ("patched rows"); a patched enrich source's candidates read from its patch's new and
    #: old rows, their new rows made from their items rows ("patched items rows") or merged again
    #: ("patched staged rows: <why not from the items rows>"); "merged rows: <why>" when a patch could not
    #: be used
    found_by: str = "merged rows"
    #: the fields whose values may differ between the changed items' old and new rows, where MERGE knows them
    #: (their new rows made from their items rows: the changed source's fields whose values changed); None:
    #: not known (RULES then rules every field: pipeline/delta_slice.py)
    changed_fields: frozenset[str] | None = None


def why_not(
    ctx: RunContext,
    parsed: Sequence[contract.SourceResult],
    changed: Sequence[str],
    fields_before: Sequence[str],
    kept_result: str,
) -> str | None:
    """Why a run whose only changed sources are `changed` cannot be a delta; None when it can.
    `fields_before`: the last run's MERGE fields; `kept_result`: the rules result it kept."""
    spec = ctx.spec
    index = {s.name: i for i, s in enumerate(spec.sources)}
    for name in changed:
        i = index.get(name)
        if i == 0 and patched_primary(parsed) is not None:
            continue  # only its changed records were staged again, their keys kept (`primary_reason`)
        if i is None or i == 0 or spec.sources[i].mode != "enrich":
            return f"source {name!r} is not an enrich source"
    if spec.list_fields.fields:
        return "the spec has list fields"
    for rule in spec.parsed_rules:
        if rule.enabled:
            why = reads_across_items(rule)
            if why is not None:
                return why
    if list(_staged(ctx, parsed)[1]) != list(fields_before):
        return "the items' fields changed"
    if not ctx.data.schema.table_exists(spec.company, kept_result):
        return "the last run's rules result is not kept"
    return None


def patched_primary(parsed: Sequence[contract.SourceResult]) -> str | None:
    """The run table of the primary's changed records' new rows when this run's PARSE patched its staging
    (pipeline/stage_patch.py); None when the primary was not modified or was parsed in full."""
    from firefeed.pipeline.steps.parse import STAGING

    if not parsed or parsed[0].parse.get("not_modified"):
        return None
    staging = parsed[0].parse.get(STAGING) or {}
    if staging.get("staged") != "patched":
        return None
    return str(staging["new_rows"])


def primary_reason(ctx: RunContext, parsed: Sequence[contract.SourceResult], previous: KeptRun) -> str | None:
    """Why a change of the primary alone cannot be a delta; None: it can (`why_not` checks the rest).

    Its staging must have been patched from the rows the last succeeded run merged (then only the changed
    records' items can differ), and that run's MERGE must have skipped none of its rows: every changed
    record's key (the same before and after, not empty) is then exactly one item, at its `_ff_ord`. An
    append source is left out (its items come after the primary's, by keys the primary lacks)."""
    from firefeed.pipeline.steps.parse import STAGING

    spec = ctx.spec
    staging = parsed[0].parse.get(STAGING) or {}
    if patched_primary(parsed) is None:
        return f"the primary was parsed in full ({staging.get('reason', 'not patched')})"
    merged = previous.state.sources.get(spec.sources[0].name) if previous.state is not None else None
    if merged is None or SourceState.from_json(staging.get("from") or {}) != merged:
        return "the primary's staged rows were not the ones the last succeeded run merged"
    skips = skips_before(previous).get(spec.sources[0].name)
    if skips is None or skips.empty_key or skips.duplicate_key:
        return "the last succeeded run skipped rows of the primary (an empty or repeated key)"
    if any(j > 0 and s.mode == "append" for j, s in enumerate(spec.sources)):
        return "an append source decides which items there are"
    return None


def _primary_candidates(
    cur: Any,
    schema: str,
    key_field: str,
    sources: Sequence[StagedSource],
    previous: KeptRun,
    result: MergeResult,
    new_rows: str,
) -> list[bool]:
    """For a patched primary: `CANDIDATES`, the changed records' (trimmed) keys, and each source's key counts
    (the last run's: the primary kept its keys, the others did not change) and whether it is clean; the
    first-row tables of the unclean ones. `new_rows`: the records' new rows (stage_patch.PATCH_NEW)."""
    before = skips_before(previous)
    clean: list[bool] = []
    for src in sources:
        stats = before.get(src.name)
        if stats is None:
            stats = source_key_stats(cur, schema, key_field, src)
        result.sources[src.name] = stats
        clean.append(stats.empty_key == 0 and stats.duplicate_key == 0)
    assert clean[0], "primary_reason: the primary was clean"
    patched = dataclasses.replace(sources[0], table=new_rows)
    params: list[Any] = []
    keys = derived_rows(schema, key_field, patched, None, params)
    temp_table(
        cur,
        CANDIDATES,
        sql.SQL("SELECT DISTINCT r.{k} AS key FROM {rows} r").format(k=ident(KEY), rows=keys),
        params,
        analyze=True,
    )
    first_rows(cur, schema, key_field, sources, clean, [j for j in range(1, len(sources)) if not clean[j]])
    return clean


def _staged(
    ctx: RunContext, parsed: Sequence[contract.SourceResult]
) -> tuple[list[StagedSource], list[str], list[list[str]]]:
    """The sources as MERGE reads them, the items' fields and each source's contributed fields."""
    sources = [
        StagedSource.of(s, r.parsed.table, r.parsed.field_names) for r, s in zip(parsed, ctx.spec.sources, strict=True)
    ]
    fields, contrib = merged_fields(ctx.spec.key, sources)
    return sources, fields, contrib


def merge_delta(
    ctx: RunContext, parsed: Sequence[contract.SourceResult], previous: KeptRun
) -> tuple[contract.MergeResult, DeltaTables]:
    """MERGE for the changed items only (see the module); `why_not` said the items' fields are the last run's.
    `previous`: the last succeeded run (its MERGE state says which staged rows the items table merged)."""
    spec = ctx.spec
    sources, fields, contrib = _staged(ctx, parsed)
    schema = company_schema(spec.company)
    service, run_id = ctx.data.schema, ctx.run_id
    result = MergeResult(fields=fields, rows=0)
    changed_fields: frozenset[str] | None = None
    #: the run table of the candidates whose items rows make the changed rows (`_changed_in_halves`), when they do
    halves_of: str | None = None
    primary = patched_primary(parsed)
    kept, unusable = (None, None) if primary is not None else kept_rows(ctx, sources, previous, parsed)
    # The changed items' new rows from their items rows, without the primary's staging (_delta_keys.py
    # says when that is what MERGE gives); else MERGE's own SELECT for the candidate keys.
    refused = None if kept is None else by_items_refusal(spec.key, sources, contrib, kept, previous)
    with raw_connection(ctx.data.engine) as conn, conn.cursor() as cur:
        for setting in _MERGE_SETTINGS:
            cur.execute(setting)
        if primary is not None:
            # Only the changed records' items can differ: their new rows stand for the primary's staging.
            clean = _primary_candidates(cur, schema, spec.key, sources, previous, result, primary)
            sources = [dataclasses.replace(sources[0], table=primary), *sources[1:]]
        elif kept is None:
            clean = _first_rows(cur, schema, spec.key, sources, result)
        else:
            rows = [r.parsed.rows for r in parsed]
            by_items = refused is None
            clean = find_candidates(
                ctx.data.engine,
                cur,
                schema,
                spec.key,
                sources,
                contrib,
                kept,
                previous,
                result,
                rows,
                by_items=by_items,
            )
            if refused is None:
                refused = unsafe_keys(cur, contrib, next(iter(kept)))
                if refused is not None:
                    analyze_candidates(cur)
                    first_rows(cur, schema, spec.key, sources, clean, [j for j in range(len(sources)) if j not in kept])
        items = ident(schema, ctx.items_table)
        columns = [ORD, KEY, SRC] + [column_for_field(f) for f in fields]
        if kept is not None and refused is None:
            # The changed items' new rows, with where their old row is (its ctid: no index on the items
            # table, and no run but this one writes it): the old rows are then read and updated in place
            # by TID instead of two more scans of the whole table.
            contributed = contrib[next(iter(kept))]
            changed_fields = values_changed(cur, contributed)
            # The candidates in a run table: the items table is then scanned for them in two halves at once.
            cur.execute(sql.SQL("SELECT * FROM {} LIMIT 0").format(ident(CANDIDATES)))
            halves_of, _ = service.create_rules_tmp_as(
                spec.company,
                run_id,
                CANDIDATE_ROWS,
                [d.name for d in cur.description],
                sql.SQL("SELECT * FROM {}").format(ident(CANDIDATES)),
                [],
                conn=conn,
            )
        else:
            if kept is not None:
                log.info("delta: the changed items are merged again from every source: %s", refused)
            candidates = kept is not None or primary is not None
            changed_select, changed_params = _changed_by_merging(
                cur, schema, spec.key, sources, fields, contrib, clean, items, candidates
            )
            # A run table, committed: the new rows and the old ones are then read from it on a connection each.
            changed_name, _ = service.create_rules_tmp_as(
                spec.company, run_id, CHANGED_ROWS, [TID, *columns], changed_select, changed_params, conn=conn
            )
    if halves_of is not None:
        changed_name = _changed_in_halves(ctx, items, columns, contributed, ident(schema, halves_of))
    changed_t = ident(schema, changed_name)
    cols = sql.SQL(", ").join(ident(c) for c in columns)

    def made(conn: Any, number: int, names: Sequence[str], select: sql.Composable) -> tuple[str, int]:
        return service.create_rules_tmp_as(spec.company, run_id, number, names, select, [], conn=conn)

    def new_rows(*, viewed: bool = False) -> tuple[str, int, str]:
        sorted_rows = sql.SQL("SELECT {cols} FROM {t} ORDER BY {ord}").format(cols=cols, t=changed_t, ord=ident(ORD))
        # The keys with their positions: EXPORT reads the positions of every changed item from this narrow table
        # (`patch.left_the_export`), not from the new rows (a view over the wide changed rows, where no old row
        # is read).
        keys_select = sql.SQL("SELECT {k}, {ord} FROM {t}").format(k=ident(KEY), ord=ident(ORD), t=changed_t)
        with _merging(ctx.data.engine) as conn:
            keys, changed = made(conn, KEYS, [KEY, ORD], keys_select)
            if viewed:
                new = ctx.data.views.pass_view(spec.company, run_id, NEW_ROWS, columns, sorted_rows, [])
            else:
                new, _ = made(conn, NEW_ROWS, columns, sorted_rows)
        return new, changed, keys

    def old_rows() -> str:
        old_cols = sql.SQL(", ").join(sql.SQL("i.{}").format(ident(c)) for c in columns)
        tids = sql.SQL("i.ctid = ANY(ARRAY(SELECT {tid} FROM {t}))").format(tid=ident(TID), t=changed_t)
        with _merging(ctx.data.engine) as conn:
            old, _ = made(
                conn,
                OLD_ROWS,
                columns,
                sql.SQL("SELECT {old_cols} FROM {items} i WHERE {tids} ORDER BY i.{ord}").format(
                    old_cols=old_cols, items=items, tids=tids, ord=ident(ORD)
                ),
            )
        return old

    # The changed items' old rows are read only where RULES counts them: not when no rule decides on a changed
    # field (delta_slice.counts_unchanged: on the 1M stock delta 0.3-0.8 s of reading 80k wide rows by TID).
    # The items table's UPDATE, from the changed rows' table (their new rows and old rows' ctids), on a
    # connection of its own: begun once nothing reads the old rows any more, while RULES runs (or now).
    old: str | None = None
    if changed_fields is not None and counts_unchanged(spec.parsed_rules, changed_fields):
        update = ItemsUpdate(ctx, items, columns, changed_t)
        try:
            # The new rows a view of the changed rows: RULES' slice reads only its few fields of them, where a
            # sorted copy of every column (80k wide rows of the stock delta: 0.2-0.65 s) held up MERGE's end.
            new, changed, keys = new_rows(viewed=True)
        except BaseException:
            update.settle()  # the run fails only once it is done: the project is not free while it writes
            raise
    else:
        # The new rows sorted and the old ones read by TID at once (each one backend's work, 0.2-0.55 s of the
        # 1M stock delta's 80k rows, one after the other before), both before the UPDATE begins.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="merge-old") as pool:
            old_f = pool.submit(contextvars.copy_context().run, old_rows)
            new, changed, keys = new_rows()
            old = old_f.result()
        update = ItemsUpdate(ctx, items, columns, changed_t)
    merged = contract.MergeResult(
        fields=list(fields),
        rows=0,  # the caller's: the last run's items, as an enrich source adds none
        rows_in=sum(r.parsed.rows for r in parsed),
        skipped={name: contract.SourceSkips(s.empty_key, s.duplicate_key) for name, s in result.sources.items()},
    )
    return merged, DeltaTables(
        new=new,
        old=old,
        keys=keys,
        changed=changed,
        found_by=_found_by(primary, kept, refused, unusable),
        items_update=update,
        changed_fields=changed_fields,
    )


def by_tid(cur: Any) -> None:
    """The transaction's joins on a row's TID made nested loops, each outer row's match fetched by a TID scan
    (no other way is left open): the page of each row is read when its row is changed, not once to hash the
    TIDs and again to change them."""
    for setting in ("enable_hashjoin", "enable_mergejoin", "enable_seqscan"):
        cur.execute(f"SET LOCAL {setting} = off")


@contextlib.contextmanager
def _merging(engine: Any) -> Iterator[Any]:
    """A connection (in a transaction: `raw_connection`) with MERGE's settings, for a piece of the delta's MERGE
    on a connection of its own."""
    with raw_connection(engine) as conn:
        with conn.cursor() as cur:
            for setting in _MERGE_SETTINGS:
                cur.execute(setting)
        yield conn


def _changed_in_halves(
    ctx: RunContext, items: sql.Composable, columns: Sequence[str], contrib: Sequence[str], candidates: sql.Composable
) -> str:
    """`CHANGED_ROWS` from the items rows of the candidates (`changed_by_items`), as a view of two tables, each
    read from half of the items table's pages (`page_parts`) on a connection of its own (one scan of 1M rows,
    ~0.95 s of the stock delta, was MERGE's longest piece, one backend's). Returns its name."""
    from firefeed.rules.executor import page_parts

    spec, service = ctx.spec, ctx.data.schema
    schema = company_schema(spec.company)

    def scan(number: int, bounds: tuple[int | None, int | None]) -> str:
        lo, hi = bounds
        cuts = []
        if lo is not None:
            cuts.append(sql.SQL("i.ctid >= {}::tid").format(sql.Literal(f"({lo},0)")))
        if hi is not None:
            cuts.append(sql.SQL("i.ctid < {}::tid").format(sql.Literal(f"({hi},0)")))
        part = sql.SQL(" AND ").join(cuts) if cuts else None
        with _merging(ctx.data.engine) as conn:
            table, _ = service.create_rules_tmp_as(
                spec.company,
                ctx.run_id,
                number,
                [TID, *columns],
                changed_by_items(items, columns, contrib, candidates, part),
                [],
                conn=conn,
            )
        return table

    # The items table's pages in two runs (one when it has a single page), as the rules' passes cut it.
    parts = page_parts(ctx.data.engine, spec.company, ctx.items_table, len(CHANGED_HALVES))
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="merge-half") as pool:
        rest = [
            pool.submit(contextvars.copy_context().run, scan, number, bounds)
            for number, bounds in zip(CHANGED_HALVES[1:], parts[1:], strict=False)
        ]
        tables = [scan(CHANGED_HALVES[0], parts[0]), *(f.result() for f in rest)]
    cols = sql.SQL(", ").join(ident(c) for c in [TID, *columns])
    return ctx.data.views.pass_view(
        spec.company,
        ctx.run_id,
        CHANGED_ROWS,
        [TID, *columns],
        sql.SQL(" UNION ALL ").join(
            sql.SQL("SELECT {cols} FROM {t}").format(cols=cols, t=ident(schema, t)) for t in tables
        ),
        [],
    )


class ItemsUpdate:
    """The changed items' new rows UPDATEd into the items table by their old rows' ctid, on a connection and
    a thread of their own, begun once MERGE has committed them and read their old rows (when it reads none,
    `delta_slice.counts_unchanged`, while it sorts the new rows).

    Nothing of this run reads the items table after MERGE (RULES reads the new and old rows' tables and the
    kept result, EXPORT the rules result), and the next run reads it only after this one: the UPDATE (0.6-1.25 s
    of 80k rows of the 1M stock delta) runs beside RULES and EXPORT, whose driver waits for it before the
    publish (`result`), so a failed UPDATE fails the run before anything is published, and a run that fails
    meanwhile still waits for it (the project is not free while it writes). A run that fails after it makes the
    next run full, as any failure after MERGE does."""

    def __init__(self, ctx: RunContext, items: sql.Composable, columns: Sequence[str], changed: sql.Composable) -> None:
        from firefeed.export.patch import Beside

        engine = ctx.data.engine
        assignments = sql.SQL(", ").join(sql.SQL("{c} = n.{c}").format(c=ident(c)) for c in columns if c != KEY)
        # `changed`: the changed items' new rows with their old rows' ctids (`TID`), as MERGE found them, in the
        # items table's order (its halves were read in it). Each old row fetched by its TID as its new row comes
        # (`by_tid`), so its page is read once and updated at once: a hash of the old rows' TIDs, fetched first,
        # read each page twice through shared buffers the table does not fit in (100k rows of 1M: 0.8-0.95 s
        # against 0.56-0.6 s).
        statement = sql.SQL("UPDATE {items} i SET {assignments} FROM {changed} n WHERE i.ctid = n.{tid}").format(
            items=items, assignments=assignments, changed=changed, tid=ident(TID)
        )

        self._job = Beside(lambda: self._run(engine, statement), name="items-update")

    @staticmethod
    def _run(engine: Any, statement: sql.Composable) -> int:
        with _merging(engine) as conn, conn.cursor() as cur:
            by_tid(cur)
            cur.execute(statement)
            return int(cur.rowcount)

    def result(self) -> int:
        """Wait for the UPDATE; the rows it changed (its error re-raised)."""
        return int(self._job.result())

    def settle(self) -> None:
        """Wait for the UPDATE on a path that already failed (the first error is the one to report)."""
        with contextlib.suppress(BaseException):
            self._job.result()


def _found_by(primary: str | None, kept: Mapping[int, Kept] | None, refused: str | None, unusable: str | None) -> str:
    """How MERGE found the changed items (the MERGE detail's `changed_by`, `DeltaTables.found_by`); a patch
    of an enrich source that was not used, or whose values were not, says why."""
    if primary is not None:
        return "patched rows"
    if kept is None:
        return "merged rows" if unusable is None else f"merged rows: {unusable}"
    if not any(isinstance(k, PatchedRows) for k in kept.values()):
        return "staged rows" if refused is not None else "items rows"
    return "patched items rows" if refused is None else f"patched staged rows: {refused}"


def _changed_by_merging(
    cur: Any,
    schema: str,
    key_field: str,
    sources: Sequence[StagedSource],
    fields: list[str],
    contrib: list[list[str]],
    clean: Sequence[bool],
    items: sql.Composable,
    candidates: bool,
) -> tuple[sql.Composable, list[Any]]:
    """The SELECT of the changed items' new rows (and their old rows' ctid) from MERGE's own SELECT
    (`merge._items_select`): of the `CANDIDATES` keys (`candidates`), else of every item; its rows compared
    with the items table's. With its parameters."""
    only = CANDIDATES if candidates else None
    columns, select, params = _items_select(schema, key_field, fields, contrib, sources, clean, frozenset(), only)
    cols = sql.SQL(", ").join(ident(c) for c in columns)
    if candidates:
        # Only the keys whose staged rows differ can have changed (the items table merged the kept
        # rows): their merged rows, made apart, so the planner sizes the join with the items table by
        # a table's pages (its guess over the unanalyzed staging tables, 12e9 rows, spilled to disk).
        select = sql.SQL("SELECT * FROM ({select}) AS m ({cols}) WHERE m.{key} IN (SELECT key FROM {keys})").format(
            select=select, cols=cols, key=ident(KEY), keys=ident(CANDIDATES)
        )
        temp_table(cur, MERGED, select, params)
        select, params = sql.SQL("SELECT {cols} FROM {t}").format(cols=cols, t=ident(MERGED)), []
    new_cols = sql.SQL(", ").join(sql.SQL("n.{}").format(ident(c)) for c in columns)
    old_cols = sql.SQL(", ").join(sql.SQL("i.{}").format(ident(c)) for c in columns)
    changed = sql.SQL(
        "SELECT i.ctid AS {tid}, {new_cols} FROM ({select}) AS n ({cols}) JOIN {items} i ON i.{key} = n.{key} "
        "WHERE ({new_cols}) IS DISTINCT FROM ({old_cols})"
    ).format(
        tid=ident(TID),
        new_cols=new_cols,
        old_cols=old_cols,
        select=select,
        cols=cols,
        items=items,
        key=ident(KEY),
    )
    return changed, list(params)


def _patched_only(spec: ProjectSpec) -> bool:
    """Whether every export of the spec may be patched (export/patch.py) as far as the spec tells: then
    no export needs the whole result in order unless it falls back at EXPORT."""
    from firefeed.export.patch import static_reason

    return all(static_reason(exp) is None for exp in spec.exports)


def keep_viewed(
    schema: SchemaService, company: str, run_id: str, table: str, prepared: PreparedKeep | None = None
) -> str | None:
    """Keep this delta run's result when `delta_rules.rules_delta` made it a view over the kept result
    (`keep_in_place`, or the change `prepare_keep` began beside EXPORT committed); returns the kept name, or
    None when `table` is no such view (a full run's result, a spliced table)."""
    if prepared is not None:
        return prepared.commit()
    where = _kept_viewed(schema, company, run_id, table)
    return None if where is None else keep_in_place(schema, company, run_id, where)


def prepare_keep(
    schema: SchemaService, company: str, run_id: str, table: str, begun: PreparedKeep | None = None
) -> PreparedKeep | None:
    """`keep_viewed`'s change of the kept result begun while EXPORT runs (dataplane/kept.py `PreparedKeep`);
    None when `table` is no view over the kept result (nothing to prepare), or when that cannot be told (the
    keep after the publish then says why: keeping the result never fails the run). `begun`: the change RULES
    began already (`delta_rules.rules_delta`), taken when it is the one `table` needs, else abandoned."""
    try:
        where = _kept_viewed(schema, company, run_id, table)
    except Exception:
        log.warning("the kept result's change was not begun beside EXPORT", exc_info=True)
        where = None
    if begun is not None:
        if where is not None and begun.change == where:
            return begun
        begun.abandon()
    return None if where is None else PreparedKeep(schema, company, run_id, where)


def _kept_viewed(schema: SchemaService, company: str, run_id: str, table: str) -> KeptChange | None:
    """What `keep_in_place` takes to keep the run's result `table`, a view over the kept result; None when it
    is no such view."""
    if table != rules_tmp_table(run_id, SPLICED):
        return None
    where = company_schema(company)
    with raw_connection(schema.engine) as conn, conn.cursor() as cur:
        if relation_kind(cur, where, table) != "v":
            return None
        kept = [name for name, _ in view_reads(cur, where, table) if name.startswith(RESULT_PREFIX)]
    if len(kept) != 1:
        raise RuntimeError(f"the delta's result {table} reads {len(kept)} kept results")
    return KeptChange(
        kept[0], rules_tmp_table(run_id, KEYS), rules_tmp_table(run_id, RULED), schema.table_columns(company, table)
    )
