"""The delta's RULES (pipeline/delta.py, #52) at the cost of what changed.

`delta.rules_delta` ran the rules over the changed items' new rows, then over their old rows (the
report's counts are additive: the last run's, less the old rows', plus the new rows'), copied the new
rows' result to `RULED`, and counted the kept result's rows of the changed keys (the view's check), one
after the other: on the 80k-item stock delta of 1M items ~3.6 s, 0.35x of a full RULES. Here:

- **The old rows are counted from the kept result** where it tells their counts (`survivor_counts`):
  the kept result is the rules' last pass table over the last run's items, of which the old rows are
  a part, so an old row it holds was kept by every pass, and each rule counted it always (no `when`),
  never or always (an exclusion whose `then` or `else` excludes), or by its flag column (a `when`),
  which the kept row holds when the rule's pass wrote the last table. One scan of the kept result's
  tables finds those rows (their keys and TIDs: the view's count check, which it replaces), their flags
  are read by TID; only the old rows it lacks (items the last run excluded) are ruled, and must be
  excluded again. Otherwise (a flag of an earlier pass table, a kept pass view) every old row is ruled
  as before, with the count check.
- **The pieces run at once**, each on its own connection (one backend's work each: run one after the
  other they leave the second core idle), as a full run's two halves do (rule_passes.InProcessPasses).
  The new rows are one piece: in two halves they took the core the kept result's scan needs, which is
  then the longest piece (1M: 2.3-2.4 s against 1.5 s in one run).
- **`RULED` is the new rows' last pass table renamed** when it has
  the kept result's columns in its order (always, for the same rules over the same fields): its rows
  are the rules' output in `_ff_ord` order (the new rows are written in that order and every pass
  keeps it), which is what the copy made; a copy only when the columns are in another order.

Same signature and result as `delta.rules_delta`; the view, the splice and the row count check after
them are its own.
"""

from __future__ import annotations

import contextlib
import contextvars
import csv
import dataclasses
import io
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from psycopg2 import sql

from firefeed.dataplane.kept import CHANGED_ROWS, KeptChange, PreparedKeep, kept_heaps, note_changed_rows
from firefeed.dataplane.names import rules_tmp_table, run_id_of_tmp_table
from firefeed.db.engine import raw_connection
from firefeed.pipeline import delta_slice, rule_passes
from firefeed.pipeline.context import RunContext
from firefeed.pipeline.delta import NEW_ROWS_COPY, OLD_FIRST_PASS, RULED, SPLICED, DeltaTables, _patched_only
from firefeed.pipeline.merge import StagedSource
from firefeed.rules._plan import PassPlan, flag_column
from firefeed.rules.limits import check_sql_size
from firefeed.rules.model import Rule, branch_excludes
from firefeed.runs import contract
from firefeed.schema.identifiers import KEY, ORD, column_for_field, company_schema, ident
from firefeed.schema.service import relation_kind, sql_qualified

log = logging.getLogger(__name__)

T = TypeVar("T")

#: pass numbers of this module's tables (apart from delta.py's 9_000_001-9_000_005 and the PARSE patch's
#: 9_000_006 + 10 i, 9_000_007 + 10 i): the kept result's rows of the changed items (their keys, heaps and
#: TIDs: the keep's table of them, `kept.CHANGED_ROWS`, which it deletes them by after the publish), the
#: changed items' old rows the kept result lacks
FOUND, OLD_EXCLUDED = CHANGED_ROWS, CHANGED_ROWS + 1
#: the start of the rules' flag columns' names (`_plan.flag_column`)
FLAG_PREFIX = "_ff_m"
#: the keys of the records PARSE patched (a superset of the changed items' keys) and the kept result's rows of
#: them, found while MERGE runs (`EarlyFound`)
EARLY_KEYS, EARLY_FOUND = CHANGED_ROWS + 2, CHANGED_ROWS + 3
#: those keys as PARSE read them from the records' bytes (`EarlyFound.of_keys`), before it staged the records
EARLY_READ = CHANGED_ROWS + 4
#: the first pass table number of the rules over those old rows
EXCLUDED_FIRST_PASS = 6_000_001
#: a sliced delta's table of the changed items' new rows the kept result lacks; the first pass numbers of the
#: slice (pipeline/delta_slice.py) over every new row and of the rules over those
LACKING = CHANGED_ROWS + 5
SLICE_FIRST_PASS, LACKING_FIRST_PASS = 7_000_001, 8_000_001


@dataclass(frozen=True)
class SlicedRows:
    """The changed items' new rows' result made by a slice of the rules (`_sliced_rows`)."""

    the_slice: delta_slice.Slice
    #: the slice's counts over the rows the kept result holds, and the rules' over those it lacks
    matched: dict[str, int]
    lacking: contract.RulesResult | None
    ruled: str
    rows: int


@dataclass(frozen=True)
class OldCounts:
    """What the rules give on the changed items' old rows: the report's counts the delta subtracts, and
    how many of them the kept result holds (None: not counted)."""

    matched: dict[str, int]
    excluded: int
    rows_out: int
    in_kept: int | None
    #: the counts over the kept result's rows of them alone (None: not counted apart)
    kept_matched: dict[str, int] | None = None


class EarlyFound:
    """The kept result's rows of every key a patched source's changed records have, found on a connection and
    thread of their own while MERGE runs (its one backend leaves the second core free), where RULES found
    those of the changed items beside their rules (0.6-0.8 s of CPU of the 1M stock delta, on both cores'
    time). The changed items are among those records' keys (a patch keeps each record's key): RULES keeps
    the rows of the changed items' keys (`found_from`), after checking that every one is among them.

    Begun only when every changed source was patched (`begin`); nothing writes the kept result before
    EXPORT. A failure here is not the run's: RULES then scans the kept result as before."""

    def __init__(
        self,
        ctx: RunContext,
        keys: sql.Composable,
        params: list[Any],
        heaps: list[str],
        flags: Sequence[str] = (),
        whole: Sequence[str] = (),
        load: Callable[[Any], None] | None = None,
    ) -> None:
        from firefeed.export.patch import Beside

        self._heaps = heaps
        #: the rules' flag columns read with each row (its counts then need no second read of the kept result)
        self.flags = list(flags)
        #: every column of the kept rows, when they are read whole (a sliced RULES takes them: `_sliced_rows`);
        #: empty when only their flags are
        self.whole = list(whole)
        self._carried = [c for c in self.whole if c != KEY] if self.whole else self.flags
        self._job = Beside(lambda: self._run(ctx, keys, params, load), name="kept-rows")

    def _run(
        self, ctx: RunContext, keys: sql.Composable, params: list[Any], load: Callable[[Any], None] | None
    ) -> None:
        spec, service = ctx.spec, ctx.data.schema
        schema = company_schema(spec.company)
        with raw_connection(ctx.data.engine) as conn:
            with conn.cursor() as cur:
                cur.execute("SET LOCAL jit = off")
            if load is not None:
                load(conn)
            keys_t, _ = service.create_rules_tmp_as(
                spec.company, ctx.run_id, EARLY_KEYS, [KEY], keys, params, conn=conn
            )
            with conn.cursor() as cur:
                cur.execute(sql.SQL("ANALYZE {}").format(ident(schema, keys_t)))
            service.create_rules_tmp_as(
                spec.company,
                ctx.run_id,
                EARLY_FOUND,
                [KEY, "r", "t", *self._carried],
                _found_select(schema, self._heaps, keys_t, self._carried),
                [],
                conn=conn,
            )

    @classmethod
    def begin(
        cls, ctx: RunContext, parsed: Sequence[contract.SourceResult], kept_result: str, *, whole: bool = False
    ) -> EarlyFound | None:
        """Begun when every changed source's PARSE patched it and the kept result is a table or a view of
        parts; else None. `whole`: the rows are read whole when the rules may be sliced (`delta_slice.sliceable`)."""
        from firefeed.pipeline._delta_keys import _patch_of
        from firefeed.pipeline.delta import _staged

        changed = [j for j, r in enumerate(parsed) if not r.parse.get("not_modified")]
        patches = [_patch_of(parsed[j]) for j in changed]
        if not changed or any(p is None for p in patches):
            return None
        sources, _, _ = _staged(ctx, parsed)
        return cls.of_records(
            ctx,
            [dataclasses.replace(sources[j], table=p[1]) for j, p in zip(changed, patches, strict=True) if p],
            kept_result,
            whole=whole,
        )

    @classmethod
    def of_records(
        cls, ctx: RunContext, records: Sequence[StagedSource], kept_result: str, *, whole: bool = False
    ) -> EarlyFound | None:
        """The search for the keys of `records` (patched sources' changed records' new rows); None when the
        kept result is no table or view of parts."""
        from firefeed.pipeline.merge import derived_rows

        schema = company_schema(ctx.spec.company)
        params: list[Any] = []
        keys = sql.SQL(" UNION ").join(
            sql.SQL("SELECT n.{k} FROM {rows} n").format(
                k=ident(KEY), rows=derived_rows(schema, ctx.spec.key, rows, None, params)
            )
            for rows in records
        )
        return cls._over(ctx, kept_result, keys, params, whole=whole)

    @classmethod
    def _over(
        cls,
        ctx: RunContext,
        kept_result: str,
        keys: sql.Composable,
        params: list[Any],
        *,
        whole: bool,
        load: Callable[[Any], None] | None = None,
    ) -> EarlyFound | None:
        """The search of `kept_result` for the keys `keys` selects; None when it is no table or view of parts."""
        heaps = kept_heaps(ctx.data.schema, ctx.spec.company, kept_result)
        if heaps is None:
            return None
        kept_columns = ctx.data.schema.table_columns(ctx.spec.company, kept_result)
        flags = [c for c in kept_columns if c.startswith(FLAG_PREFIX)]
        whole_rows = kept_columns if whole and delta_slice.sliceable(ctx.spec.parsed_rules) else []
        return cls(ctx, keys, params, heaps, flags, whole_rows, load)

    @classmethod
    def of_keys(
        cls, ctx: RunContext, records: StagedSource, read: Sequence[str], kept_result: str, *, whole: bool = False
    ) -> EarlyFound | None:
        """The search for the keys `read` of a patched source's changed records as PARSE read them from their
        bytes (untrimmed; `records`: the source, whose key column they are), before it staged them: copied into
        a run table of that one column and trimmed as MERGE trims them (`merge._source_key`). None as
        `of_records`, and for a key made by a template."""
        from firefeed.pipeline.merge import _source_key

        if records.key_from is not None:
            return None
        schema = company_schema(ctx.spec.company)
        column = column_for_field(ctx.spec.key)
        table = ident(schema, rules_tmp_table(ctx.run_id, EARLY_READ))
        read = list(read)

        def load(conn: Any) -> None:
            # Every value quoted: an empty key stays an empty string, not a NULL.
            data = io.StringIO()
            csv.writer(data, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows([k] for k in read)
            data.seek(0)
            with conn.cursor() as cur:
                cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
                cur.execute(sql.SQL("CREATE UNLOGGED TABLE {} ({} text)").format(table, ident(column)))
                cur.copy_expert(
                    sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT csv)").format(table, ident(column)).as_string(cur),
                    data,
                )

        key, params = _source_key(ctx.spec.key, records, aliased=True)
        keys = sql.SQL("SELECT {key} AS {k} FROM {t} s").format(key=key, k=ident(KEY), t=table)
        return cls._over(ctx, kept_result, keys, list(params), whole=whole, load=load)

    def discard(self, ctx: RunContext) -> None:
        """Not used: waited for, and its tables dropped (a search begun again makes them anew)."""
        self.settle()
        with contextlib.suppress(Exception):
            for number in (EARLY_READ, EARLY_KEYS, EARLY_FOUND):
                ctx.data.schema.drop_table(ctx.spec.company, rules_tmp_table(ctx.run_id, number))

    def found_from(self, ctx: RunContext, keys: str, heaps: Sequence[str]) -> str | None:
        """The early rows' table when they stand for the changed items' (their keys in `keys`, the kept
        result's tables `heaps`), cut to those keys; None (RULES scans as before) when the search failed or
        a changed key is not among the ones searched."""
        try:
            self._job.result()
        except Exception:
            log.warning("the kept result's rows were not found beside MERGE: found now", exc_info=True)
            return None
        if list(heaps) != self._heaps:
            return None
        where = company_schema(ctx.spec.company)
        early_keys = ident(where, rules_tmp_table(ctx.run_id, EARLY_KEYS))
        with raw_connection(ctx.data.engine) as conn, conn.cursor() as cur:
            cur.execute(
                sql.SQL(
                    "SELECT count(*) FROM {keys} c WHERE NOT EXISTS (SELECT 1 FROM {early} e WHERE e.{k} = c.{k})"
                ).format(keys=ident(where, keys), early=early_keys, k=ident(KEY))
            )
            if int(cur.fetchone()[0]):
                return None
        return rules_tmp_table(ctx.run_id, EARLY_FOUND)

    def settle(self) -> None:
        """Wait for the search on any path (its error is not the run's)."""
        with contextlib.suppress(BaseException):
            self._job.result()


class PatchWatch:
    """The kept result's search (`EarlyFound`) begun while PARSE still runs, in the process that drives the run:
    as soon as PARSE has read a patched source's changed records' keys from their bytes (`keyed`, called by
    stage_patch.py), before it parses and stages them (~0.5 s of the 1M stock refresh, one core's), or else once
    it has staged their new rows (`staged`), before it finds and replaces their staged rows (on the 1M stock
    refresh PARSE left a core idle for ~1.3 s of its 2 s, and the search, ~1 s of CPU, took it from MERGE's scan).

    Watched only where a PARSE job runs in this process (a batch run; a fleet's workers call `staged` for no
    watch, a no-op). Taken (`take`) when one source changed and this run's PARSE patched it from those rows;
    else discarded, and the search begins after PARSE as before."""

    _watching: ClassVar[dict[str, PatchWatch]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, ctx: RunContext, kept_result: str, *, whole: bool) -> None:
        self._ctx, self._kept_result, self._whole = ctx, kept_result, whole
        self._begun: dict[int, tuple[str, EarlyFound]] = {}

    @classmethod
    def watch(cls, ctx: RunContext, kept_result: str, *, whole: bool) -> PatchWatch:
        watch = cls(ctx, kept_result, whole=whole)
        with cls._lock:
            cls._watching[ctx.run_id] = watch
        return watch

    @classmethod
    def staged(cls, run_id: str, index: int, records: StagedSource) -> None:
        """Source `index`'s changed records' new rows are staged (`records`): the search for their keys begun,
        when this process watches the run (its error is not the run's: the search begins after PARSE)."""
        cls._begin(
            run_id,
            index,
            records.table,
            lambda w: EarlyFound.of_records(w._ctx, [records], w._kept_result, whole=w._whole),
        )

    @classmethod
    def keyed(cls, run_id: str, index: int, records: StagedSource, keys: Sequence[str]) -> bool:
        """Source `index`'s changed records' keys are read (`keys`), their new rows to be staged in `records`: the
        search for them begun, when this process watches the run. False when it could not begin so (the caller
        then tells `staged` once the rows are staged)."""
        return cls._begin(
            run_id,
            index,
            records.table,
            lambda w: EarlyFound.of_keys(w._ctx, records, keys, w._kept_result, whole=w._whole),
        )

    @classmethod
    def _begin(cls, run_id: str, index: int, table: str, search: Callable[[PatchWatch], EarlyFound | None]) -> bool:
        """The search `search` makes begun for source `index` (its records' new rows in `table`), when this process
        watches the run, in place of one begun for it before; False when `search` gives none. A failure is
        logged, not the run's (the search then begins after PARSE)."""
        with cls._lock:
            watch = cls._watching.get(run_id)
            old = watch._begun.pop(index, None) if watch is not None else None
        if watch is None:
            return True  # nothing watches: nothing to tell later either
        if old is not None:  # the source patched again (its tables are the same names)
            old[1].discard(watch._ctx)
        try:
            early = search(watch)
        except Exception:
            log.warning("the kept result's rows were not searched beside PARSE", exc_info=True)
            return True
        if early is None:
            return False
        with cls._lock:
            watch._begun[index] = (table, early)
        return True

    def take(self, parsed: Sequence[contract.SourceResult]) -> EarlyFound | None:
        """The search begun for the one changed source, when PARSE patched it from the rows searched; else
        None, every search discarded. Stops watching."""
        from firefeed.pipeline._delta_keys import _patch_of

        with self._lock:
            self._watching.pop(self._ctx.run_id, None)
            begun, self._begun = self._begun, {}
        changed = [j for j, r in enumerate(parsed) if not r.parse.get("not_modified")]
        taken: EarlyFound | None = None
        if len(changed) == 1 and changed[0] in begun:
            patch = _patch_of(parsed[changed[0]])
            table, early = begun[changed[0]]
            if patch is not None and patch[1] == table:
                taken = early
        for _, early in begun.values():
            if early is not taken:
                early.discard(self._ctx)
        return taken

    def close(self) -> None:
        """Stop watching; every search not taken discarded."""
        self.take([])


def _found_select(schema: str, heaps: Sequence[str], keys: str, flags: Sequence[str] = ()) -> sql.Composable:
    """The kept result's rows (in `heaps`) of the keys in table `keys`: their key, heap and TID (and `flags`)."""
    carried = sql.SQL("").join(sql.SQL(", h.{}").format(ident(c)) for c in flags)
    return sql.SQL(" UNION ALL ").join(
        sql.SQL(
            "SELECT h.{key}, h.tableoid, h.ctid{carried} FROM {heap} h"
            " WHERE EXISTS (SELECT 1 FROM {keys} c WHERE c.{key} = h.{key})"
        ).format(heap=ident(schema, heap), keys=ident(schema, keys), key=ident(KEY), carried=carried)
        for heap in heaps
    )


def rules_delta(
    ctx: RunContext,
    tables: DeltaTables,
    item_fields: Sequence[str],
    kept_result: str,
    previous: dict[str, Any],
    rows: tuple[int, int],
    *,
    run_chunks: rule_passes.RunChunks | None = None,
    early: EarlyFound | None = None,
    notes: dict[str, Any] | None = None,
    keep_begun: Callable[[PreparedKeep], None] | None = None,
) -> contract.RulesResult:
    """RULES for the changed items only (see pipeline/delta.py): their new rows ruled and made `RULED`,
    their old rows' counts taken from the kept result or ruled (then the kept rows of their keys counted),
    at once; then the counts adjusted and the result viewed or spliced as `delta.rules_delta` does.
    `item_fields`: MERGE's fields; `previous`: the last run's RULES detail; `rows`: its (rows_in, rows_out).

    `notes` (the RULES step's detail) is given `ruled_by`: how the changed items' new rows were ruled.

    `run_chunks` (a fleet's driver, whose RULES fans out): the new rows, when more than a chunk, are ruled
    as `rules_chunk` jobs over them alone, as a full run's items are (`ChunkJobPasses`): the chunk jobs of a
    delta cover only the changed items. The rest stays in the driver: SQL over the changed items (their old
    rows the kept result lacks: those the last run excluded) or a scan of the kept result, as in a batch run.

    `keep_begun` is handed the kept result's change (dataplane/kept.py `PreparedKeep`) where this RULES begins
    it: where the result will be a view over the kept result and no count changes, as soon as the kept rows of
    the changed items are found, while their ruled rows are still being made (the 1M stock delta's DELETE of
    80k kept rows, ~0.2-0.3 s, on the core RULES leaves idle then instead of beside EXPORT). The caller owns it
    from then on (commits or abandons it), whether or not RULES succeeds."""
    spec, service = ctx.spec, ctx.data.schema
    schema = company_schema(spec.company)
    columns = service.table_columns(spec.company, kept_result)
    heaps = kept_heaps(service, spec.company, kept_result)
    viewed = _patched_only(spec) and heaps is not None
    # The old rows' counts from the kept result when it holds every flag they need (`survivor_counts`).
    by_kept = survivor_counts(check_sql_size(spec.parsed_rules, item_fields), columns) if heaps is not None else None
    seconds: dict[str, float] = {}

    def ruled(
        table: str,
        first_pass: int,
        rows_in: int = tables.changed,
        rules: Sequence[Rule] | None = None,
        fields: Sequence[str] | None = None,
    ) -> contract.RulesResult:
        return rule_passes.run_rules(
            ctx.data.engine,
            service,
            company=spec.company,
            run_id=ctx.run_id,
            source_table=table,
            fields=list(item_fields if fields is None else fields),
            rules=spec.parsed_rules if rules is None else rules,
            cancel_check=ctx.check_cancel,
            rows=rows_in,
            split_min_rows=2**62,  # one piece: the pieces of the delta are the ones run at once
            first_pass=first_pass,
            path="rules",
        )

    def fanned_out(table: str) -> contract.RulesResult:
        assert run_chunks is not None
        return rule_passes.run_rules_as_chunks(
            ctx.data.engine,
            service,
            company=spec.company,
            run_id=ctx.run_id,
            source_table=_stored(ctx, table),
            fields=list(item_fields),
            rules=spec.parsed_rules,
            chunk_rows=ctx.settings.chunk_rows,
            max_slices=ctx.settings.rules_max_slices,
            run_chunks=run_chunks,
            rows=tables.changed,
            cancel_check=ctx.check_cancel,
        )

    # MERGE read no old row where no count can change (`delta_slice.counts_unchanged`): each changed item is
    # kept or excluded as before, and counted as before; of the old side only where the kept result holds them.
    unchanged_counts = tables.old is None
    # The changed items' new rows through only the rules their changed fields reach (pipeline/delta_slice.py):
    # decided before the pieces start, on the kept rows of their keys found beside MERGE (`searched`).
    the_slice: delta_slice.Slice | None = None
    searched: str | None = None
    if (
        (by_kept is not None or unchanged_counts)
        and heaps is not None
        and early is not None
        and early.whole
        and tables.changed_fields is not None
        and run_chunks is None
        and previous.get("fields")
    ):
        the_slice = delta_slice.reach(spec.parsed_rules, tables.changed_fields)
        if the_slice is not None:
            searched = early.found_from(ctx, tables.keys, heaps)
            if searched is None or sorted(early.whole) != sorted(columns):
                the_slice = None
    recounted = the_slice is not None and bool(the_slice.counted)

    def new_rows() -> tuple[contract.RulesResult, str, int] | SlicedRows:
        if the_slice is not None:
            assert searched is not None
            sliced = _timed(
                seconds,
                "new rows sliced",
                lambda: _sliced_rows(ctx, tables, item_fields, columns, searched, the_slice, ruled, recounted),
            )
            if sliced is not None:
                return sliced
            if not recounted:
                raise RuntimeError("the rules slice lacks a column of the kept result")
        if run_chunks is not None and tables.changed > ctx.settings.chunk_rows:
            new_r = _timed(seconds, "new rows ruled as chunk jobs", lambda: fanned_out(tables.new))
        else:
            new_r = _timed(seconds, "new rows ruled", lambda: ruled(tables.new, 1))
        if sorted(columns) != sorted(service.table_columns(spec.company, new_r.table)):
            raise RuntimeError("the changed items' rules result has other columns than the kept result")
        ruled_rows, ruled_n = _timed(seconds, "RULED", lambda: _as_ruled(ctx, tables, new_r, columns))
        return new_r, ruled_rows, ruled_n

    keeping: list[PreparedKeep] = []

    def old_rows() -> OldCounts:
        if unchanged_counts:
            places = _timed(seconds, "old rows found", lambda: _kept_places(ctx, tables, kept_result, heaps, searched))
            if viewed and keep_begun is not None:
                change = KeptChange(kept_result, tables.keys, rules_tmp_table(ctx.run_id, RULED), list(columns))
                keeping.append(PreparedKeep(service, spec.company, ctx.run_id, change, rows_ready=False))
                keep_begun(keeping[0])
            return places
        assert tables.old is not None
        old_table = tables.old
        if by_kept is not None:
            assert heaps is not None
            return _old_from_kept(ctx, tables, heaps, by_kept, ruled, seconds, early, searched)
        old_r = _timed(seconds, "old rows ruled", lambda: ruled(old_table, OLD_FIRST_PASS))
        return OldCounts(old_r.matched, old_r.excluded, old_r.rows_out, None)

    counted = viewed and by_kept is None and not unchanged_counts
    with ThreadPoolExecutor(max_workers=3 if counted else 2) as pool:
        new_f = _submit(pool, new_rows)
        old_f = _submit(pool, old_rows)
        count_f = (
            _submit(pool, lambda: _timed(seconds, "count check", lambda: _kept_of_changed(ctx, kept_result, tables)))
            if counted
            else None
        )
        new_side, old_r = new_f.result(), old_f.result()
        in_kept = count_f.result() if count_f is not None else old_r.in_kept
    for keep in keeping:
        keep.rows_ready()  # `RULED` is made (committed)
    if isinstance(new_side, SlicedRows):
        new_r, ruled_rows, ruled_n = (
            _as_result(new_side, old_r, previous, tables.changed, recounted),
            new_side.ruled,
            new_side.rows,
        )
    else:
        new_r, ruled_rows, ruled_n = new_side
        if unchanged_counts:
            # Ruled in full (no slice): the old rows count as the new ones, and are as many as the kept ones.
            if new_r.rows_out != old_r.rows_out:
                raise RuntimeError(f"the rules keep {new_r.rows_out} changed items, the kept result {old_r.rows_out}")
            old_r = OldCounts(new_r.matched, new_r.excluded, old_r.rows_out, old_r.in_kept)
    if notes is not None:
        how = new_side.the_slice.describe() if isinstance(new_side, SlicedRows) else "every rule"
        notes["ruled_by"] = how + ("; no count changes (no old row read)" if unchanged_counts else "")

    matched_before = {str(name): int(n) for name, n in previous.get("matched", [])}
    matched = {
        name: matched_before.get(name, 0) - old_r.matched.get(name, 0) + new_r.matched.get(name, 0)
        for name in matched_before
    }
    excluded = int(previous.get("excluded", 0)) - old_r.excluded + new_r.excluded
    rows_out = rows[1] - old_r.rows_out + new_r.rows_out
    cols = sql.SQL(", ").join(ident(c) for c in columns)
    unchanged = sql.SQL(
        "SELECT {cols} FROM {kept} k WHERE NOT EXISTS (SELECT 1 FROM {keys} c WHERE c.{key} = k.{key})"
    ).format(cols=cols, kept=ident(schema, kept_result), keys=ident(schema, tables.keys), key=ident(KEY))
    started = time.perf_counter()
    if viewed:
        assert in_kept is not None
        # Every export will be patched from `RULED` and `KEYS`, and nothing else reads the result before it
        # is kept: a view, kept by changing the kept result in place once the run has published
        # (`delta.keep_viewed`). An export that falls back to full reads the view, sorting it.
        written = rows[1] - in_kept + ruled_n
        table = ctx.data.views.pass_view(
            spec.company,
            ctx.run_id,
            SPLICED,
            columns,
            unchanged + sql.SQL(" UNION ALL SELECT {cols} FROM {new}").format(cols=cols, new=ident(schema, ruled_rows)),
            [],
        )
    else:
        spliced = sql.SQL(
            "SELECT {cols} FROM ({unchanged} UNION ALL SELECT {cols} FROM {new}) u ORDER BY {ord}"
        ).format(cols=cols, unchanged=unchanged, new=ident(schema, ruled_rows), ord=ident(ORD))
        with raw_connection(ctx.data.engine) as conn:
            table, written = service.create_rules_tmp_as(
                spec.company, ctx.run_id, SPLICED, columns, spliced, [], conn=conn
            )
    seconds["viewed" if viewed else "spliced"] = time.perf_counter() - started
    log.debug("delta rules: %s", {k: round(v, 3) for k, v in seconds.items()})
    if written != rows_out:
        raise RuntimeError(f"the spliced rules result holds {written} items, the counts say {rows_out}")
    return contract.RulesResult(
        table=table,
        fields=list(previous.get("fields") or new_r.fields),
        passes=int(previous.get("passes", new_r.passes)),
        matched=matched,
        excluded=excluded,
        rows_in=rows[0],
        rows_out=rows_out,
        lookups=list(previous.get("lookups", [])),
    )


def survivor_counts(plans: Sequence[PassPlan], kept_columns: Sequence[str]) -> dict[str, bool | str] | None:
    """How the rules count an item that no pass excluded, per rule: True (it matched), False (it did not),
    or the name of its flag column (it matched when that holds true); None when the kept result, whose
    columns are `kept_columns`, does not tell it for some rule.

    Each rule's count is a sum over items (the delta's rules read one item each), and an item kept by
    every pass is counted, for a rule without an exclusion, by every pass or DELETE that counts it
    (`executor._rule_matches`, `run_pass_in_place`): always without a `when`, else where its flag is true.
    The kept result is the last pass table of the rules over the last run's items, of which the changed
    items' old rows are a part: it holds the flags of its last written pass only, so a rule flagged in an
    earlier pass is not known (None). An excluding rule (a pass's first) matched the items it kept only
    when its `else` is the branch that excludes."""
    known: dict[str, bool | str] = {}
    for plan in plans:
        for rule in plan.rules:
            if rule is plan.excluding:
                drop_then, drop_else = branch_excludes(rule.then), branch_excludes(rule.else_)
                if rule.when is None or drop_then == drop_else:
                    return None  # it keeps no item, or it is no exclusion: not this case
                known[rule.name] = drop_else
            elif rule.when is None:
                known[rule.name] = True
            elif flag_column(rule) in kept_columns:
                known[rule.name] = flag_column(rule)
            else:
                return None
    return known


def _old_from_kept(
    ctx: RunContext,
    tables: DeltaTables,
    heaps: Sequence[str],
    by_kept: dict[str, bool | str],
    ruled: Callable[[str, int, int], contract.RulesResult],
    seconds: dict[str, float],
    early: EarlyFound | None = None,
    searched: str | None = None,
) -> OldCounts:
    """The rules' counts on the changed items' old rows without ruling those the kept result holds: their
    counts read from its rows (`survivor_counts`), the others (the items the last run excluded) ruled,
    which must exclude them again. One scan of the kept result's tables `heaps`, as the view's count check was,
    unless `early` found their rows beside MERGE (`searched`: their table, when RULES already asked)."""
    spec, service = ctx.spec, ctx.data.schema
    schema = company_schema(spec.company)
    flags = sorted({c for c in by_kept.values() if isinstance(c, str)})
    started = time.perf_counter()
    with raw_connection(ctx.data.engine) as conn:
        with conn.cursor() as cur:
            cur.execute("SET LOCAL jit = off")  # as for a pass: compiling its scan costs more than it saves
        # Their keys and places: the scan reads the key only (near the row's start); the flags (at its end)
        # are then read from the found rows by TID, not taken apart from every row of the kept result.
        if searched is None and early is not None:
            searched = early.found_from(ctx, tables.keys, heaps)
        select = _of_changed(schema, searched, tables.keys) if searched is not None else None
        found, in_kept = _found_rows(ctx, conn, select or _found_select(schema, heaps, tables.keys))
        flagged = dict.fromkeys(flags, 0)
        # The flags came with the rows found beside MERGE: counted from them, no second read of the kept result.
        carried = searched is not None and early is not None and set(flags) <= set(early.flags)
        counts = _flag_counts(flags)
        with conn.cursor() as cur:
            if carried and flags:
                assert searched is not None
                cur.execute(
                    sql.SQL(
                        "SELECT {counts} FROM {early} e WHERE EXISTS (SELECT 1 FROM {keys} c WHERE c.{key} = e.{key})"
                    ).format(
                        counts=counts,
                        early=ident(schema, searched),
                        keys=ident(schema, tables.keys),
                        key=ident(KEY),
                    )
                )
                for c, n in zip(flags, cur.fetchone(), strict=True):
                    flagged[c] += int(n)
            for heap in heaps if flags and not carried else []:
                cur.execute(
                    sql.SQL(
                        "SELECT {counts} FROM {heap} h"
                        " WHERE h.ctid = ANY(ARRAY(SELECT t FROM {found} WHERE r = %s::regclass))"
                    ).format(
                        counts=counts,
                        heap=ident(schema, heap),
                        found=ident(schema, found),
                    ),
                    (sql_qualified(schema, heap),),
                )
                for c, n in zip(flags, cur.fetchone(), strict=True):
                    flagged[c] += int(n)
        if tables.old is None:
            raise RuntimeError("MERGE read no old row of the changed items")
        old_columns = service.table_columns(spec.company, tables.old, conn=conn)
        cols = sql.SQL(", ").join(ident(c) for c in old_columns)
        excluded, lacked = service.create_rules_tmp_as(
            spec.company,
            ctx.run_id,
            OLD_EXCLUDED,
            old_columns,
            sql.SQL(
                "SELECT {cols} FROM {old} o WHERE NOT EXISTS (SELECT 1 FROM {found} f WHERE f.{key} = o.{key})"
                " ORDER BY {ord}"
            ).format(
                cols=cols, old=ident(schema, tables.old), found=ident(schema, found), key=ident(KEY), ord=ident(ORD)
            ),
            [],
            conn=conn,
        )
    seconds["old rows found in the kept result"] = time.perf_counter() - started
    # Every found row has a changed key and the lacked rows are the changed keys none has: a key found twice
    # (the kept result holding an item twice) makes more than the changed items.
    if in_kept + lacked != tables.changed:
        raise RuntimeError(f"the kept result holds {in_kept + lacked - tables.changed} changed items twice")
    matched = {
        name: in_kept if how is True else 0 if how is False else flagged[str(how)] for name, how in by_kept.items()
    }
    if not lacked:
        return OldCounts(matched, 0, in_kept, in_kept, dict(matched))
    kept_matched = dict(matched)
    rest = _timed(seconds, "old rows the kept result lacks ruled", lambda: ruled(excluded, EXCLUDED_FIRST_PASS, lacked))
    if rest.rows_out:
        raise RuntimeError(f"the kept result lacks {rest.rows_out} changed items the rules keep")
    for name, n in rest.matched.items():
        matched[name] = matched.get(name, 0) + n
    return OldCounts(matched, rest.excluded, in_kept, in_kept, kept_matched)


def _kept_of_changed(ctx: RunContext, kept_result: str, tables: DeltaTables, conn: Any = None) -> int:
    """The kept result's rows of the changed keys (one semi-join scan of it), on `conn` or a connection of its own."""
    schema = company_schema(ctx.spec.company)
    count = sql.SQL(
        "SELECT count(*) FROM {kept} k WHERE EXISTS (SELECT 1 FROM {keys} c WHERE c.{key} = k.{key})"
    ).format(kept=ident(schema, kept_result), keys=ident(schema, tables.keys), key=ident(KEY))
    with contextlib.ExitStack() as stack:
        if conn is None:
            conn = stack.enter_context(raw_connection(ctx.data.engine))
        with conn.cursor() as cur:
            cur.execute(count)
            return int(cur.fetchone()[0])


def _flag_counts(flags: Sequence[str]) -> sql.Composable:
    """The select list counting the rows where each of the flag columns `flags` holds."""
    return sql.SQL(", ").join(sql.SQL("count(*) FILTER (WHERE {})").format(ident(c)) for c in flags)


def _of_changed(schema: str, early: str, keys: str) -> sql.Composable:
    """The SELECT of the rows found beside MERGE (table `early`, for the patched records' keys) of the changed
    items' keys (`keys`): their key, heap and TID."""
    return sql.SQL(
        "SELECT e.{key}, e.r, e.t FROM {early} e WHERE EXISTS (SELECT 1 FROM {keys} c WHERE c.{key} = e.{key})"
    ).format(early=ident(schema, early), keys=ident(schema, keys), key=ident(KEY))


def _found_rows(ctx: RunContext, conn: Any, select: sql.Composable) -> tuple[str, int]:
    """`FOUND`, the kept result's rows of the changed items by `select` (their key, heap and TID), noted for the
    keep, which deletes them by it after the publish: (its name, its rows)."""
    service = ctx.data.schema
    found, in_kept = service.create_rules_tmp_as(
        ctx.spec.company, ctx.run_id, FOUND, [KEY, "r", "t"], select, [], conn=conn
    )
    note_changed_rows(service, ctx.spec.company, ctx.run_id, in_kept, conn=conn)
    return found, in_kept


def _kept_places(
    ctx: RunContext, tables: DeltaTables, kept_result: str, heaps: Sequence[str] | None, searched: str | None
) -> OldCounts:
    """The old side where no count changes (`delta_slice.counts_unchanged`): only where the kept result holds
    the changed items (`FOUND`, which the keep deletes by: from the rows found beside MERGE, `searched`, else
    a scan of its `heaps`), and how many; their counts are the new rows'."""
    schema = company_schema(ctx.spec.company)
    with raw_connection(ctx.data.engine) as conn:
        with conn.cursor() as cur:
            cur.execute("SET LOCAL jit = off")
        if heaps is None:
            held = _kept_of_changed(ctx, kept_result, tables, conn)
            return OldCounts({}, 0, held, held)
        select = _of_changed(schema, searched, tables.keys) if searched is not None else None
        found, in_kept = _found_rows(ctx, conn, select or _found_select(schema, heaps, tables.keys))
        with conn.cursor() as cur:
            # The changed keys found (each once: `KEYS` is unique), by a semi-join: no sort of the text keys.
            cur.execute(
                sql.SQL(
                    "SELECT count(*) FROM {keys} c WHERE EXISTS (SELECT 1 FROM {found} f WHERE f.{key} = c.{key})"
                ).format(keys=ident(schema, tables.keys), key=ident(KEY), found=ident(schema, found))
            )
            if int(cur.fetchone()[0]) != in_kept:
                raise RuntimeError("the kept result holds a changed item twice")
    return OldCounts({}, 0, in_kept, in_kept)


def _sliced_rows(
    ctx: RunContext,
    tables: DeltaTables,
    item_fields: Sequence[str],
    columns: Sequence[str],
    kept_rows: str,
    the_slice: delta_slice.Slice,
    ruled: Callable[..., contract.RulesResult],
    recounted: bool,
) -> SlicedRows | None:
    """The changed items' new rows' result by `the_slice` of the rules (pipeline/delta_slice.py), as `RULED` in
    the kept result's `columns`, from their kept rows (the table `kept_rows`, read whole beside MERGE); None
    (the rules then run in full) when a flag the kept result holds is not the slice's. `recounted`: some rule
    decides on a reached field: the rows the kept result lacks are ruled (their counts), and the slice's
    counts of the rows it holds are read from its flags."""
    spec, service = ctx.spec, ctx.data.schema
    schema = company_schema(spec.company)
    # The slice reads and writes few fields: its tables hold those alone.
    fields = [f for f in item_fields if f in the_slice.fields]
    sliced = ruled(tables.new, SLICE_FIRST_PASS, tables.changed, the_slice.rules, fields)
    out = service.table_columns(spec.company, sliced.table)
    if any(the_slice.from_slice(c) and c not in out for c in columns):
        return None
    rest = _lacking_ruled(ctx, tables, kept_rows, ruled) if recounted else None
    # The counted rules' new counts over the rows the kept result holds: their flags in `RULED` are the slice's.
    flags = the_slice.counted_flags
    matched: dict[str, int] = {}
    with raw_connection(ctx.data.engine) as conn:
        _join_settings(conn)
        table, rows = service.create_rules_tmp_as(
            spec.company,
            ctx.run_id,
            RULED,
            columns,
            delta_slice.assembled_select(schema, kept_rows, sliced.table, columns, the_slice),
            [],
            conn=conn,
        )
        if flags:
            with conn.cursor() as cur:
                cur.execute(
                    sql.SQL("SELECT {counts} FROM {t}").format(
                        counts=_flag_counts([f for _, f in flags]), t=ident(schema, table)
                    )
                )
                matched = {name: int(n) for (name, _), n in zip(flags, cur.fetchone(), strict=True)}
    log.debug("delta rules sliced: %s changed, %d of the rules", sorted(the_slice.changed), len(the_slice.rules))
    return SlicedRows(the_slice, matched, rest, table, rows)


def _lacking_ruled(
    ctx: RunContext, tables: DeltaTables, kept_rows: str, ruled: Callable[..., contract.RulesResult]
) -> contract.RulesResult | None:
    """The rules over the changed items' new rows the kept result lacks (the items the last run excluded, which
    the slice leaves excluded): their counts; None when there are none."""
    spec, service = ctx.spec, ctx.data.schema
    schema = company_schema(spec.company)
    with raw_connection(ctx.data.engine) as conn:
        _join_settings(conn)
        new_columns = service.table_columns(spec.company, tables.new, conn=conn)
        lacking, lacked = service.create_rules_tmp_as(
            spec.company,
            ctx.run_id,
            LACKING,
            new_columns,
            sql.SQL(
                "SELECT {cols} FROM {new} n WHERE NOT EXISTS (SELECT 1 FROM {kept} e WHERE e.{key} = n.{key})"
                " ORDER BY {ord}"
            ).format(
                cols=sql.SQL(", ").join(ident(c) for c in new_columns),
                new=ident(schema, tables.new),
                kept=ident(schema, kept_rows),
                key=ident(KEY),
                ord=ident(ORD),
            ),
            [],
            conn=conn,
        )
    if not lacked:
        return None
    rest = ruled(lacking, LACKING_FIRST_PASS, lacked)
    if rest.rows_out:
        raise RuntimeError(f"the rules keep {rest.rows_out} changed items the kept result lacks")
    return rest


def _stored(ctx: RunContext, table: str) -> str:
    """`table`, or a table of its rows in their order when it is a view (MERGE's `NEW_ROWS` where no old row was
    read): chunk jobs cut their source by its heap pages, which a view has none of."""
    spec, service = ctx.spec, ctx.data.schema
    schema = company_schema(spec.company)
    with raw_connection(ctx.data.engine) as conn:
        with conn.cursor() as cur:
            if relation_kind(cur, schema, table) != "v":
                return table
        columns = service.table_columns(spec.company, table, conn=conn)
        copy, _ = service.create_rules_tmp_as(
            spec.company,
            ctx.run_id,
            NEW_ROWS_COPY,
            columns,
            sql.SQL("SELECT {cols} FROM {t}").format(
                cols=sql.SQL(", ").join(ident(c) for c in columns), t=ident(schema, table)
            ),
            [],
            conn=conn,
        )
    return copy


def _join_settings(conn: Any) -> None:
    """A hash join of the changed items' rows by key, sorted in memory: on the 1M stock delta's 80k wide rows a
    merge join sorted both sides by their text keys and the result on disk (0.64-0.77 s, against ~0.3 s)."""
    with conn.cursor() as cur:
        cur.execute("SET LOCAL work_mem = '128MB'")
        cur.execute("SET LOCAL enable_mergejoin = off")
        cur.execute("SET LOCAL jit = off")


def _as_result(
    sliced: SlicedRows, old: OldCounts, previous: dict[str, Any], rows_in: int, recounted: bool
) -> contract.RulesResult:
    """A sliced new side's counts as the rules' result over the changed items' new rows: the kept rows'
    own counts where the slice did not count (`OldCounts.kept_matched`), the slice's where it did, plus
    those of the rows the kept result lacks; none changed unless `recounted` (the old side's are none too)."""
    rest = sliced.lacking
    matched: dict[str, int] = {}
    if recounted:
        if old.kept_matched is None:
            raise RuntimeError("the kept rows' counts were not read apart")
        matched = delta_slice.replace_counts(
            old.kept_matched, sliced.the_slice, sliced.matched, rest.matched if rest else {}
        )
    return contract.RulesResult(
        table=sliced.ruled,
        fields=list(previous["fields"]),
        passes=int(previous.get("passes", 0)),
        matched=matched,
        excluded=rest.excluded if rest else 0,
        rows_in=rows_in,
        rows_out=sliced.rows,
        lookups=[],
    )


def _as_ruled(
    ctx: RunContext, tables: DeltaTables, new_r: contract.RulesResult, columns: Sequence[str]
) -> tuple[str, int]:
    """The new rows' rules result as `RULED` (the name a patched export finds), in `_ff_ord` order with the
    kept result's columns in its order: the last pass table renamed when it is this run's with those
    columns in that order, else a copy."""
    spec, service = ctx.spec, ctx.data.schema
    schema = company_schema(spec.company)
    ruled = rules_tmp_table(ctx.run_id, RULED)
    with raw_connection(ctx.data.engine) as conn:
        with conn.cursor() as cur:
            kind = relation_kind(cur, schema, new_r.table)
        own = new_r.table not in (tables.new, tables.old) and run_id_of_tmp_table(new_r.table) == ctx.run_id
        if own and kind == "r" and service.table_columns(spec.company, new_r.table, conn=conn) == list(columns):
            service.rename_relation(spec.company, new_r.table, ruled, view=False, conn=conn)
            return ruled, new_r.rows_out
        cols = sql.SQL(", ").join(ident(c) for c in columns)
        return service.create_rules_tmp_as(
            spec.company,
            ctx.run_id,
            RULED,
            columns,
            sql.SQL("SELECT {cols} FROM {new} ORDER BY {ord}").format(
                cols=cols, new=ident(schema, new_r.table), ord=ident(ORD)
            ),
            [],
            conn=conn,
        )


def _submit(pool: ThreadPoolExecutor, task: Callable[[], T]) -> Future[T]:
    """`task` on `pool` in a copy of this thread's context (the run's connection name, which a cancel
    finds, and its log fields), as rule_passes runs a run's halves."""
    return pool.submit(contextvars.copy_context().run, task)


def _timed(seconds: dict[str, float], label: str, task: Callable[[], T]) -> T:
    started = time.perf_counter()
    try:
        return task()
    finally:
        seconds[label] = time.perf_counter() - started
