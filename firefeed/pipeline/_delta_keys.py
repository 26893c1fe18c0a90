"""The delta's MERGE, finding its candidates: the keys a changed enrich source's new staged rows change.

The items table holds the last succeeded run's merged rows, merged from the staged rows each source
had then. A changed enrich source's rows as they were are kept by PARSE (dataplane/staged.py); when
they are the ones that run merged, only the keys whose rows differ between the kept and the new
rows, or that one of them lacks, can have changed (pipeline/delta.py merges just those). When PARSE
patched the source from those rows (pipeline/stage_patch.py), its changed records' new and old rows
are all that differ (`PatchedRows`): each keeps its key, so no key is gained or lost, the source's
key counts are the last run's, and the candidates are read from the two small tables, not from a
FULL JOIN of the whole kept and new staging. Temporary tables of the MERGE transaction carry what
the steps pass on.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeAlias

from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.dataplane import staged, state
from firefeed.dataplane.staged import KeptStaging
from firefeed.dataplane.state import KeptRun
from firefeed.db.engine import side_work_first
from firefeed.pipeline.context import RunContext
from firefeed.pipeline.merge import (
    MergeResult,
    SourceKeyStats,
    StagedSource,
    _key_stats,
    contributed,
    derived_rows,
    field_providers,
    first_row_table,
    source_key_stats,
)
from firefeed.runs import contract
from firefeed.runs.contract import Step
from firefeed.schema.identifiers import KEY, ORD, column_for_field, ident

log = logging.getLogger(__name__)

#: temporary tables of the delta's MERGE transaction: the keys whose kept and new staged rows differ, and their
#: merged rows; `TID`: the column of an old row's ctid beside the changed items' new rows
CANDIDATES, MERGED = "ff_delta_keys", "ff_delta_merged"
TID = "_ff_tid"


def new_value(i: int) -> str:
    """The `CANDIDATES` column of the changed source's new value of its i-th contributed field."""
    return f"n{i}"


def old_value(i: int) -> str:
    """The `CANDIDATES` column of its value in the kept rows (the one the items table merged)."""
    return f"o{i}"


def temp_table(cur: Any, name: str, select: sql.Composable, params: Sequence[Any], *, analyze: bool = False) -> None:
    """A temporary table `name` of `select`'s rows (scratch of this transaction, not company DDL). Without
    `analyze` the planner sizes it by its pages, which is enough for a join (ANALYZE of 80k wide rows
    costs ~1 s); the keys' table is analyzed: narrow, and its distinct values size the semi-joins."""
    create = sql.SQL("CREATE TEMP TABLE {t} ON COMMIT DROP AS ").format(t=ident(name))
    cur.execute(create + select, list(params) or None)
    if analyze:
        cur.execute(sql.SQL("ANALYZE {t}").format(t=ident(name)))


@dataclasses.dataclass(frozen=True)
class PatchedRows:
    """A changed enrich source PARSE patched from the rows the last succeeded run merged: its changed
    records' old rows (`table`, as `KeptStaging.table` is the kept rows') and new rows (`new`), run tables
    of stage_patch.py with the staged rows' `_ff_ord`; `fields`, the staged fields (the header did not
    change). Every other record is the same bytes, so the same staged row."""

    table: str
    new: str
    fields: list[str]


#: what a changed source is compared with: its kept previous staging, or its patch's old rows
Kept: TypeAlias = KeptStaging | PatchedRows


def kept_rows(
    ctx: RunContext, sources: Sequence[StagedSource], previous: KeptRun, parsed: Sequence[contract.SourceResult]
) -> tuple[dict[int, Kept] | None, str | None]:
    """Per changed source (by index), what its new rows are compared with: its patch's rows when PARSE patched
    it from the staged rows the last succeeded run merged, else those rows kept by its PARSE
    (dataplane/staged.py). (None, why) when one has neither (then the changed items are found by merging
    every item again); `why` says so when a patch could not be used (None when nothing was patched)."""
    spec, merged = ctx.spec, previous.state
    if merged is None:
        return None, None
    now = state.source_states(ctx.store, spec.project, [s.name for s in sources])
    out: dict[int, Kept] = {}
    unusable: str | None = None
    for j, src in enumerate(sources):
        if now.get(src.name) == merged.sources.get(src.name):
            continue  # not changed since that run
        patch = _patch_of(parsed[j])
        if patch is not None:
            old_rows, new_rows, patched_from = patch
            if patched_from == merged.sources.get(src.name):
                out[j] = PatchedRows(old_rows, new_rows, list(src.fields))
                continue
            # A run that failed after patching it: the patch is from rows the items table never merged.
            unusable = f"source {src.name!r} was patched from staged rows the last succeeded run did not merge"
        kept = staged.previous_rows(ctx.data.schema, spec.company, spec.project, src.name, merged.sources.get(src.name))
        if kept is None:
            log.info("delta: the rows %r was merged from are not kept; every item is merged again", src.name)
            return None, unusable
        out[j] = kept
    return out, None


def _patch_of(parsed: contract.SourceResult) -> tuple[str, str, state.SourceState] | None:
    """(old rows, new rows, the state patched from) when this run's PARSE patched the source's staging."""
    from firefeed.pipeline.steps.parse import STAGING

    if parsed.parse.get("not_modified"):
        return None
    staging = parsed.parse.get(STAGING) or {}
    if staging.get("staged") != "patched":
        return None
    return str(staging["old_rows"]), str(staging["new_rows"]), state.SourceState.from_json(staging.get("from") or {})


def skips_before(previous: KeptRun) -> dict[str, SourceKeyStats]:
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
    kept: Mapping[int, Kept],
    previous: KeptRun,
    result: MergeResult,
    *,
    changed_only: bool = False,
    beside: Collection[int] = (),
) -> list[bool]:
    """Each source's key counts into `result` and whether it is clean (no empty or repeated key): a changed
    source's counted, an unchanged one's the last run's (its rows are the ones that run counted). The
    first-row tables `_items_select` reads (`ff_win_<j>`) are made only where it reads them: an unclean
    source's, and with append sources the primary's and theirs. `changed_only`: only the changed
    sources' (the new rows are made from the items rows, delta.py's `_by_items`; `first_rows` makes the
    others should that be refused). `beside`: changed sources counted on another connection
    (`find_candidates`), taken as clean here. A patched source's are the last run's too: each changed
    record kept its key, not empty (stage_patch.py), so its keys are the ones that run counted."""
    before = skips_before(previous)
    clean: list[bool] = []
    for j, src in enumerate(sources):
        if j in beside:
            clean.append(True)
            continue
        stats = before.get(src.name)
        if (j in kept and not isinstance(kept[j], PatchedRows)) or stats is None:
            stats = source_key_stats(cur, schema, key_field, src)
        result.sources[src.name] = stats
        clean.append(stats.empty_key == 0 and stats.duplicate_key == 0)
    first_rows(cur, schema, key_field, sources, clean, kept if changed_only else range(len(sources)))
    return clean


def first_rows(
    cur: Any,
    schema: str,
    key_field: str,
    sources: Sequence[StagedSource],
    clean: Sequence[bool],
    which: Collection[int],
) -> None:
    """The first-row tables `_items_select` reads (`ff_win_<j>`), of the sources `which`: an unclean
    source's, and with append sources the primary's and theirs."""
    appends = any(j > 0 and s.mode == "append" for j, s in enumerate(sources))
    for j, src in enumerate(sources):
        if j in which and (not clean[j] or (appends and (j == 0 or src.mode == "append"))):
            first_row_table(cur, schema, key_field, src, f"ff_win_{j}")


def find_candidates(
    engine: Engine,
    cur: Any,
    schema: str,
    key_field: str,
    sources: Sequence[StagedSource],
    contrib: Sequence[Sequence[str]],
    kept: Mapping[int, Kept],
    previous: KeptRun,
    result: MergeResult,
    rows: Sequence[int],
    *,
    by_items: bool,
) -> list[bool]:
    """`key_counts` then `changed_keys` (`with_values` when `by_items`); whether each source is clean.

    A changed source the last run found clean, of more rows than `side_work_first` keeps on one
    connection, has its keys counted on a second connection while the candidates are found as if it
    still were (a full MERGE does the same beside its write: the count cost the delta 0.8-1.9 s); should
    the count find an empty or repeated key, its first-row table is made and the candidates found again.
    """
    before = skips_before(previous)
    beside = [
        j
        for j, old in kept.items()
        if not isinstance(old, PatchedRows)  # its keys are the last run's (`key_counts`)
        and (st := before.get(sources[j].name)) is not None
        and st.empty_key == 0
        and st.duplicate_key == 0
        and not side_work_first(rows[j])
    ]
    with ThreadPoolExecutor(max_workers=1) as pool:
        counting = None
        if beside:
            counted = [sources[j] for j in beside]
            counting = pool.submit(contextvars.copy_context().run, _key_stats, engine, schema, key_field, counted)
        clean = key_counts(
            cur, schema, key_field, sources, kept, previous, result, changed_only=by_items, beside=beside
        )
        changed_keys(cur, schema, key_field, sources, contrib, clean, kept, previous, with_values=by_items)
        if counting is None:
            return clean
        unclean = []
        for j, stats in zip(beside, counting.result(), strict=True):
            result.sources[sources[j].name] = stats
            if stats.empty_key or stats.duplicate_key:
                clean[j] = False
                unclean.append(j)
    if unclean:
        first_rows(cur, schema, key_field, sources, clean, unclean)
        cur.execute(sql.SQL("DROP TABLE {t}").format(t=ident(CANDIDATES)))
        changed_keys(cur, schema, key_field, sources, contrib, clean, kept, previous, with_values=by_items, again=True)
    # `result.sources` in the sources' order, as a full MERGE reports them
    ordered = {s.name: result.sources[s.name] for s in sources}
    result.sources.clear()
    result.sources.update(ordered)
    return clean


def changed_keys(
    cur: Any,
    schema: str,
    key_field: str,
    sources: Sequence[StagedSource],
    contrib: Sequence[Sequence[str]],
    clean: Sequence[bool],
    kept: Mapping[int, Kept],
    previous: KeptRun,
    *,
    with_values: bool = False,
    again: bool = False,
) -> None:
    """The temporary table `CANDIDATES` of the keys whose first row differs between a changed source's kept
    rows and its new ones, in what the source contributes, or that only one of them has (a key gained
    or lost turns a join miss into a hit, or back). `with_values` (one changed source, whose kept and
    new rows contribute the same fields): beside each key, the new and the old first row's value of
    each contributed field, in `contrib` order (`new_value(i)`, `old_value(i)`; NULL where that side
    has no row), for `by_items`. `again`: the candidates are found a second time (`find_candidates`); the
    kept rows' first-row tables (`ff_old_<j>`) are the first time's (a second CREATE failed the run).

    A patched source (`PatchedRows`) is compared record for record: its changed records' new and old rows,
    joined on their `_ff_ord`, are all the rows that differ, each keeping its key. When the last run found
    its keys clean, each is its key's first and only row, so the keys whose rows differ in what it
    contributes are the candidates, with their values; else (`by_items_refusal` refuses the values) the
    keys of every record that differs (its key's first row may be another, unchanged: merged again, it
    stays as it was)."""
    assert not with_values or len(kept) == 1
    before = skips_before(previous)
    parts: list[sql.Composable] = []
    params: list[Any] = []
    for j, old in kept.items():
        src = sources[j]
        old_src = dataclasses.replace(src, table=old.table, fields=old.fields)
        old_contrib = contributed(key_field, old_src)
        compared = list(dict.fromkeys([*contrib[j], *old_contrib]))
        skips = before.get(src.name)
        was_clean = skips is not None and not skips.empty_key and not skips.duplicate_key
        old_win = None
        if not was_clean and not isinstance(old, PatchedRows):
            old_win = f"ff_old_{j}"
            if not again:
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
        carried: sql.Composable = sql.SQL("")
        if with_values:
            assert list(contrib[j]) == list(old_contrib)
            carried = sql.SQL("").join(
                sql.SQL(", n.{c} AS {nv}, o.{c} AS {ov}").format(
                    c=ident(column_for_field(f)), nv=ident(new_value(i)), ov=ident(old_value(i))
                )
                for i, f in enumerate(contrib[j])
            )
        if isinstance(old, PatchedRows):
            # Every record's own row (`win` None), its key trimmed; two records of one key when it was not clean.
            new_rows = derived_rows(schema, key_field, dataclasses.replace(src, table=old.new), None, params)
            parts.append(
                sql.SQL(
                    "SELECT {distinct}n.{k} AS key{carried} FROM {new} n JOIN {old} o ON o.{ord} = n.{ord} "
                    "WHERE {differs}"
                ).format(
                    distinct=sql.SQL("" if was_clean else "DISTINCT "),
                    k=ident(KEY),
                    carried=carried,
                    new=new_rows,
                    old=ident(schema, old.table),
                    ord=ident(ORD),
                    differs=differs,
                )
            )
            continue
        new_rows = derived_rows(schema, key_field, src, new_win, params)
        old_rows = derived_rows(schema, key_field, old_src, old_win, params)
        parts.append(
            sql.SQL(
                "SELECT coalesce(n.{k}, o.{k}) AS key{carried} FROM {new} n FULL JOIN {old} o ON o.{k} = n.{k} "
                "WHERE n.{k} IS NULL OR o.{k} IS NULL OR {differs}"
            ).format(k=ident(KEY), carried=carried, new=new_rows, old=old_rows, differs=differs)
        )
    if not parts:
        # Every source parsed again is back to the rows the last succeeded run merged (a run that failed
        # in between staged others): no key changed. An empty UNION was a syntax error and failed the run.
        parts.append(sql.SQL("SELECT NULL::text AS key WHERE FALSE"))
    # Analyzed where it is joined (its distinct values size the semi-joins); the values' table (`with_values`) is
    # read whole, copied for `changed_by_items` (delta.py), and analyzed only if the changed items are merged
    # again after all (`analyze_candidates`).
    temp_table(cur, CANDIDATES, sql.SQL(" UNION ").join(parts), params, analyze=not with_values)


def analyze_candidates(cur: Any) -> None:
    """`CANDIDATES` analyzed, made with its values, before a join reads it (`changed_keys`)."""
    cur.execute(sql.SQL("ANALYZE {t}").format(t=ident(CANDIDATES)))


# -- the changed items' new rows from their items rows (no scan of the primary's staging) ---------------
#
# MERGE gives field f, for an item, the value of the last source contributing f whose first row for the
# item's key has a non-empty f (`merge._items_select`). Let source j be the one changed source, and the
# last to contribute each of its fields: its new value for the item is then
#   new.f                   when its new row has a non-empty f;
#   X                       else, X being what the sources before j give (none of them changed).
# The items row holds old.f when the kept row had a non-empty f, else X. So X is the items row's value
# when the kept row's f is empty or missing, and '' when no source before j contributes f; the one case
# left, a non-empty old.f going empty (or its key lost) where an earlier source contributes f, needs
# the earlier sources' rows: `unsafe_keys` says so and the delta merges as before. Every other field is
# the items row's own. Keys are the trimmed first rows' (`derived_rows`), as the candidates are; a key
# no item has finds no items row (enrich adds no item).


def by_items_refusal(
    key_field: str,
    sources: Sequence[StagedSource],
    contrib: Sequence[Sequence[str]],
    kept: Mapping[int, Kept],
    previous: KeptRun,
) -> str | None:
    """Why the changed items' new rows cannot be made from their items rows (see above); None: they can,
    but for `unsafe_keys`. A patched source's candidates carry their records' values, which are their
    keys' first rows only when the last run found its keys clean (`changed_keys`)."""
    if len(kept) != 1:
        return "more than one source changed"
    if any(j > 0 and s.mode == "append" for j, s in enumerate(sources)):
        return "an append source decides which items there are"
    if any(s.lists for s in sources):
        return "a source has list fields"
    ((j, old),) = kept.items()
    src = sources[j]
    skips = skips_before(previous).get(src.name)
    if isinstance(old, PatchedRows) and (skips is None or skips.empty_key or skips.duplicate_key):
        return f"the last succeeded run found an empty or repeated key in {src.name!r}"
    if contributed(key_field, dataclasses.replace(src, table=old.table, fields=old.fields)) != list(contrib[j]):
        return f"source {src.name!r} contributes other fields than its kept rows"
    later = {f for mine in contrib[j + 1 :] for f in mine}
    overridden = [f for f in contrib[j] if f in later]
    if overridden:
        return f"a later source also contributes {overridden[0]!r}"
    return None


def unsafe_keys(cur: Any, contrib: Sequence[Sequence[str]], changed: int) -> str | None:
    """Why a candidate (`CANDIDATES` with its values) cannot take `changed_by_items`' rows: a field an
    earlier source also contributes went from non-empty to empty, or its key was lost. None: none did."""
    providers = field_providers(contrib)
    shadowing = [i for i, f in enumerate(contrib[changed]) if providers[f][0] < changed]
    if not shadowing:
        return None
    emptied = sql.SQL(" OR ").join(
        sql.SQL("(coalesce({n}, '') = '' AND coalesce({o}, '') <> '')").format(
            n=ident(new_value(i)), o=ident(old_value(i))
        )
        for i in shadowing
    )
    cur.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {t} WHERE {e})").format(t=ident(CANDIDATES), e=emptied))
    if cur.fetchone()[0]:
        return "a value an earlier source also gives went empty"
    return None


def values_changed(cur: Any, contrib: Sequence[str]) -> frozenset[str]:
    """The fields of `contrib` (the changed source's, `CANDIDATES` with their values) whose new value differs
    from the old for some candidate: `changed_by_items` gives every other field of a changed item its items
    row's value, and one whose new and old values are the same its items row's too."""
    if not contrib:
        return frozenset()
    differs = sql.SQL(", ").join(
        sql.SQL("coalesce(bool_or({n} IS DISTINCT FROM {o}), false)").format(
            n=ident(new_value(i)), o=ident(old_value(i))
        )
        for i in range(len(contrib))
    )
    cur.execute(sql.SQL("SELECT {d} FROM {t}").format(d=differs, t=ident(CANDIDATES)))
    return frozenset(f for f, d in zip(contrib, cur.fetchone(), strict=True) if d)


def changed_by_items(
    items: sql.Composable,
    columns: Sequence[str],
    contrib: Sequence[str],
    candidates: sql.Composable | None = None,
    part: sql.Composable | None = None,
) -> sql.Composable:
    """The SELECT of the changed rows (delta.py `CHANGED_ROWS`) from the candidates (with their values) and
    their items rows: each changed item's new row (its items row with the changed source's fields, `contrib`,
    as MERGE would give them: see above) and its old row's ctid (`TID`). `columns`: the items table's;
    `candidates`: where the candidates are (`CANDIDATES` by default); `part`: a condition on the items rows
    read (`i`)."""
    replaced = {column_for_field(f): i for i, f in enumerate(contrib)}

    def value(c: str) -> sql.Composable:
        if c not in replaced:
            return sql.SQL("i.{c}").format(c=ident(c))
        i = replaced[c]
        # An empty new value leaves what the sources before give: the items row's when the kept one was
        # empty too, '' when no earlier source contributes the field (`unsafe_keys` refused the rest).
        return sql.SQL("CASE WHEN c.{n} <> '' THEN c.{n} WHEN coalesce(c.{o}, '') = '' THEN i.{c} ELSE '' END").format(
            n=ident(new_value(i)), o=ident(old_value(i)), c=ident(c)
        )

    assert all(c in columns for c in replaced)
    new_row = sql.SQL(", ").join(sql.SQL("{v} AS {c}").format(v=value(c), c=ident(c)) for c in columns)
    differs: sql.Composable = sql.SQL("FALSE")
    if replaced:
        differs = sql.SQL("ROW({new}) IS DISTINCT FROM ROW({old})").format(
            new=sql.SQL(", ").join(value(c) for c in replaced),
            old=sql.SQL(", ").join(sql.SQL("i.{c}").format(c=ident(c)) for c in replaced),
        )
    if part is not None:
        differs = sql.SQL("({}) AND ({})").format(differs, part)
    return sql.SQL(
        "SELECT i.ctid AS {tid}, {new_row} FROM {t} c JOIN {items} i ON i.{k} = c.key WHERE {differs}"
    ).format(
        tid=ident(TID),
        new_row=new_row,
        t=candidates if candidates is not None else ident(CANDIDATES),
        items=items,
        k=ident(KEY),
        differs=differs,
    )
