"""The delta's MERGE, finding its candidates: the keys a changed enrich source's new staged rows change.

The items table holds the last succeeded run's merged rows, merged from the staged rows each source
had then. A changed enrich source's rows as they were are kept by PARSE (dataplane/staged.py); when
they are the ones that run merged, only the keys whose rows differ between the kept and the new
rows, or that one of them lacks, can have changed (pipeline/delta.py merges just those). Temporary
tables of the MERGE transaction carry what the steps pass on.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from psycopg2 import sql

from firefeed.dataplane import staged, state
from firefeed.dataplane.staged import KeptStaging
from firefeed.dataplane.state import KeptRun
from firefeed.pipeline.context import RunContext
from firefeed.pipeline.merge import (
    MergeResult,
    SourceKeyStats,
    StagedSource,
    contributed,
    derived_rows,
    first_row_table,
    source_key_stats,
)
from firefeed.runs.contract import Step
from firefeed.schema.identifiers import KEY, column_for_field, ident

log = logging.getLogger(__name__)

#: temporary tables of the delta's MERGE transaction: the keys whose kept and new staged rows differ, their
#: merged rows, and the changed items' new rows with their old rows' ctid (`TID`)
CANDIDATES, MERGED, CHANGED = "ff_delta_keys", "ff_delta_merged", "ff_delta_changed"
TID = "_ff_tid"


def temp_table(cur: Any, name: str, select: sql.Composable, params: Sequence[Any], *, analyze: bool = False) -> None:
    """A temporary table `name` of `select`'s rows (scratch of this transaction, not company DDL). Without
    `analyze` the planner sizes it by its pages, which is enough for a join (ANALYZE of 80k wide rows
    costs ~1 s); the keys' table is analyzed: narrow, and its distinct values size the semi-joins."""
    create = sql.SQL("CREATE TEMP TABLE {t} ON COMMIT DROP AS ").format(t=ident(name))
    cur.execute(create + select, list(params) or None)
    if analyze:
        cur.execute(sql.SQL("ANALYZE {t}").format(t=ident(name)))


def kept_rows(ctx: RunContext, sources: Sequence[StagedSource], previous: KeptRun) -> dict[int, KeptStaging] | None:
    """Per changed source (by index), the staged rows the last succeeded run merged, kept by its PARSE
    (dataplane/staged.py); None when one's are not kept (then the changed items are found by merging
    every item again)."""
    spec, merged = ctx.spec, previous.state
    if merged is None:
        return None
    now = state.source_states(ctx.store, spec.project, [s.name for s in sources])
    out: dict[int, KeptStaging] = {}
    for j, src in enumerate(sources):
        if now.get(src.name) == merged.sources.get(src.name):
            continue  # not changed since that run
        kept = staged.previous_rows(ctx.data.schema, spec.company, spec.project, src.name, merged.sources.get(src.name))
        if kept is None:
            log.info("delta: the rows %r was merged from are not kept; every item is merged again", src.name)
            return None
        out[j] = kept
    return out


def _skips_before(previous: KeptRun) -> dict[str, SourceKeyStats]:
    """Each source's empty and repeated keys as the last succeeded run's MERGE counted them."""
    out: dict[str, SourceKeyStats] = {}
    for entry in previous.details.get(Step.MERGE, {}).get("sources", []):
        skipped = entry.get("skipped") or {}
        out[str(entry.get("name"))] = SourceKeyStats(
            empty_key=int(skipped.get("empty_key", 0)), duplicate_key=int(skipped.get("duplicate_key", 0))
        )
    return out


def key_counts(
    cur: Any,
    schema: str,
    key_field: str,
    sources: Sequence[StagedSource],
    kept: dict[int, KeptStaging],
    previous: KeptRun,
    result: MergeResult,
) -> list[bool]:
    """Each source's key counts into `result` and whether it is clean (no empty or repeated key): a changed
    source's counted, an unchanged one's the last run's (its rows are the ones that run counted). The
    first-row tables `_items_select` reads (`ff_win_<j>`) are made only where it reads them: an unclean
    source's, and with append sources the primary's and theirs."""
    before = _skips_before(previous)
    appends = any(j > 0 and s.mode == "append" for j, s in enumerate(sources))
    clean: list[bool] = []
    for j, src in enumerate(sources):
        stats = before.get(src.name)
        if j in kept or stats is None:
            stats = source_key_stats(cur, schema, key_field, src)
        is_clean = stats.empty_key == 0 and stats.duplicate_key == 0
        if not is_clean or (appends and (j == 0 or src.mode == "append")):
            first_row_table(cur, schema, key_field, src, f"ff_win_{j}")
        result.sources[src.name] = stats
        clean.append(is_clean)
    return clean


def changed_keys(
    cur: Any,
    schema: str,
    key_field: str,
    sources: Sequence[StagedSource],
    contrib: Sequence[Sequence[str]],
    clean: Sequence[bool],
    kept: dict[int, KeptStaging],
    previous: KeptRun,
) -> None:
    """The temporary table `CANDIDATES` of the keys whose first row differs between a changed source's kept
    rows and its new ones, in what the source contributes, or that only one of them has (a key gained
    or lost turns a join miss into a hit, or back)."""
    before = _skips_before(previous)
    parts: list[sql.Composable] = []
    params: list[Any] = []
    for j, old in kept.items():
        src = sources[j]
        old_src = dataclasses.replace(src, table=old.table, fields=old.fields)
        old_contrib = contributed(key_field, old_src)
        compared = list(dict.fromkeys([*contrib[j], *old_contrib]))
        skips = before.get(src.name)
        old_win = None
        if skips is None or skips.empty_key or skips.duplicate_key:
            old_win = f"ff_old_{j}"
            first_row_table(cur, schema, key_field, old_src, old_win)
        new_win = None if clean[j] else f"ff_win_{j}"  # made by `_key_counts`

        def value(alias: str, fields: Sequence[str], f: str) -> sql.Composable:
            if f not in fields:
                return sql.SQL("''::text")
            return sql.SQL("{a}.{c}").format(a=ident(alias), c=ident(column_for_field(f)))

        differs: sql.Composable = sql.SQL("FALSE")
        if compared:
            new_row = sql.SQL(", ").join(value("n", contrib[j], f) for f in compared)
            old_row = sql.SQL(", ").join(value("o", old_contrib, f) for f in compared)
            differs = sql.SQL("ROW({}) IS DISTINCT FROM ROW({})").format(new_row, old_row)
        new_rows = derived_rows(schema, key_field, src, new_win, params)
        old_rows = derived_rows(schema, key_field, old_src, old_win, params)
        parts.append(
            sql.SQL(
                "SELECT coalesce(n.{k}, o.{k}) AS key FROM {new} n FULL JOIN {old} o ON o.{k} = n.{k} "
                "WHERE n.{k} IS NULL OR o.{k} IS NULL OR {differs}"
            ).format(k=ident(KEY), new=new_rows, old=old_rows, differs=differs)
        )
    if not parts:
        # Every source parsed again is back to the rows the last succeeded run merged (a run that failed
        # in between staged others): no key changed. An empty UNION was a syntax error and failed the run.
        parts.append(sql.SQL("SELECT NULL::text AS key WHERE FALSE"))
    temp_table(cur, CANDIDATES, sql.SQL(" UNION ").join(parts), params, analyze=True)
