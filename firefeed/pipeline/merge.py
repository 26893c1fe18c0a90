"""MERGE: combine the staged sources by product key into the project's items table (SPEC 8.2-8.3).

The primary source defines the items, in its order. Later sources merge in
listed order: `enrich` updates every item present so far, `append` also adds
the items it alone has, after those present. A non-empty value overwrites, an
empty one never does. Keys are compared after trimming white space; an empty
key is skipped and a repeated key keeps its first occurrence, both counted.

The whole merge is set-based: one narrow aggregate per source to find each
key's first row (and the counts for the report), then one CREATE TABLE AS
joining every source (see SchemaService.rebuild_project_table for why not an
INSERT). Positions are `source_index * 2^40 + row position`, so
primary items come first and appended ones follow in their source's order.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.db.engine import raw_connection, side_work_first
from firefeed.errors import MergeError
from firefeed.pipeline.parse._lists import delimited_lists
from firefeed.rules._frag import Frag, fmt, of, val
from firefeed.rules._lists_sql import from_text
from firefeed.rules.template import FieldRef, Template
from firefeed.schema.identifiers import KEY, ORD, SRC, column_for_field, company_schema, ident
from firefeed.schema.service import SchemaService
from firefeed.textutil import WHITESPACE

if TYPE_CHECKING:
    from firefeed.spec.model import SourceSpec

SOURCE_STRIDE = 2**40


@dataclass(frozen=True)
class StagedSource:
    """A source whose rows sit in a staging table."""

    name: str
    table: str
    fields: Sequence[str]
    mode: str = "enrich"
    allowed: Sequence[str] | None = None
    #: the fields this source declares as lists: staged as text[] (SPEC 9)
    lists: frozenset[str] = frozenset()
    #: `key_from` (SPEC 9, P15): the key is this template over the source's own fields, not its key column
    key_from: Template | None = None
    #: those of `lists` staged delimited, as text (field -> separator; parse._lists)
    delimited: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, source: SourceSpec, table: str, fields: Sequence[str]) -> StagedSource:
        """`source`'s rows staged in `table` with `fields`, merged as its spec says."""
        return cls(
            source.name,
            table,
            fields,
            source.mode,
            source.fields,
            source.list_fields,
            source.key_template,
            delimited_lists(source.resolved_format, source.lists),
        )


@dataclass
class SourceKeyStats:
    rows: int = 0
    items: int = 0
    empty_key: int = 0
    duplicate_key: int = 0


@dataclass
class MergeResult:
    fields: list[str]
    rows: int
    sources: dict[str, SourceKeyStats] = field(default_factory=dict)


def trimmed(value: sql.Composable) -> sql.Composable:
    """`value` with Unicode white space trimmed; takes WHITESPACE three times as parameters.

    btrim() with the 29-character multibyte set costs ~2 us a row; keys rarely
    start or end with white space, so only those pay for it.
    """
    return sql.SQL(
        "CASE WHEN strpos(%s, left({v}, 1)) > 0 OR strpos(%s, right({v}, 1)) > 0 THEN btrim({v}, %s) ELSE {v} END"
    ).format(v=value)


def merged_fields(key_field: str, sources: Sequence[StagedSource]) -> tuple[list[str], list[list[str]]]:
    """The items' fields in first-seen order, and the fields each source contributes."""
    out: list[str] = list(dict.fromkeys(sources[0].fields))
    contrib: list[list[str]] = [[f for f in out if f != key_field]]
    seen = set(out)
    for src in sources[1:]:
        mine = contributed(key_field, src)
        contrib.append(mine)
        for f in mine:
            if f not in seen:
                seen.add(f)
                out.append(f)
    if key_field in out:
        out.remove(key_field)
    return [key_field, *out], contrib


def contributed(key_field: str, src: StagedSource) -> list[str]:
    """The fields a later source (enrich or append) contributes: its own but the key, within `allowed`."""
    allowed = set(src.allowed) if src.allowed is not None else None
    return [f for f in dict.fromkeys(src.fields) if f != key_field and (allowed is None or f in allowed)]


def field_providers(contrib: Sequence[Sequence[str]]) -> dict[str, list[int]]:
    """Per field, the sources that contribute it, in source order: the last one with a non-empty value wins."""
    providers: dict[str, list[int]] = {}
    for j, mine in enumerate(contrib):
        for f in mine:
            providers.setdefault(f, []).append(j)
    return providers


def _check_keys(engine: Engine, schema: str, key_field: str, sources: Sequence[StagedSource]) -> None:
    """A source with items but no key field fails the run; one with no items (an empty file, `[]`, a
    header only) changes nothing, whatever fields it has (P36): its key reads "" (`_source_key`)."""
    for src in sources:
        if key_field not in src.fields and src.key_from is None and has_rows(engine, schema, src.table):
            shown = ", ".join(list(src.fields)[:12]) + (" …" if len(src.fields) > 12 else "")
            raise MergeError(
                f"source {src.name!r} has no key field {key_field!r} (its fields: {shown or 'none'}); "
                "set `key:` in the spec or fix the feed's header"
            )


def has_rows(engine: Engine, schema: str, table: str) -> bool:
    """Whether a staging table holds any row: one without its key field is then an error (P36)."""
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(ident(schema, table)))
        return bool(cur.fetchone()[0])


def merge_sources(
    engine: Engine,
    schema_service: SchemaService,
    *,
    company: str,
    table: str,
    key_field: str,
    sources: Sequence[StagedSource],
    list_fields: frozenset[str] = frozenset(),
    staged_rows: int | None = None,
) -> MergeResult:
    """Rebuild the project's items table from the staged sources, in one transaction.

    `list_fields` (SPEC 9) become text[] columns: a declaring source's staged
    text[] is taken as it is, another source's text is a one-element list, and a
    later source's non-empty value replaces the whole list (P14). `staged_rows`: the
    sources' rows, when known; for a few (`side_work_first`) the keys are counted first, on
    the connection that then writes the items.
    """
    if not sources:
        raise MergeError("a project needs at least one source")
    schema = company_schema(company)
    _check_keys(engine, schema, key_field, sources)
    fields, contrib = merged_fields(key_field, sources)

    result = MergeResult(fields=fields, rows=0)
    appends = any(j > 0 and s.mode == "append" for j, s in enumerate(sources))
    with ThreadPoolExecutor(max_workers=1) as pool:
        # Most feeds have unique, non-empty keys: count the keys on a second connection (the other
        # core) while this one writes the items as if every key were clean; redo the write with the
        # first-row-per-key tables only when the counts say otherwise.
        counted: Future[list[SourceKeyStats]] | None = None
        if not appends:
            if side_work_first(staged_rows):
                counted = Future()
                counted.set_result(_key_stats(engine, schema, key_field, sources))
            else:
                counted = pool.submit(contextvars.copy_context().run, _key_stats, engine, schema, key_field, sources)
        with raw_connection(engine) as conn, conn.cursor() as cur:
            for setting in _MERGE_SETTINGS:
                cur.execute(setting)

            def write(clean: Sequence[bool]) -> int:
                columns, select, params = _items_select(schema, key_field, fields, contrib, sources, clean, list_fields)
                return schema_service.rebuild_project_table(company, table, columns, select, params, conn=conn)

            if counted is not None:
                result.rows = write([True] * len(sources))
                stats = counted.result()
                result.sources = dict(zip((s.name for s in sources), stats, strict=True))
                if all(st.rows == st.items for st in stats):
                    return result
            result.rows = write(_first_rows(cur, schema, key_field, sources, result))
    return result


#: Hash joins and aggregates: a million keys fit in work_mem. Never a merge join: without
#: statistics on fresh staging tables the planner may pick one, which sorts the whole primary
#: on disk (10 s on 1M items) and writes the items in key order instead of feed order.
#: JIT compilation costs more than it saves on these simple expressions.
_MERGE_SETTINGS = (
    "SET LOCAL work_mem = '256MB'",
    "SET LOCAL jit = off",
    "SET LOCAL enable_mergejoin = off",
    "SET LOCAL max_parallel_workers_per_gather = 0",
    "SET LOCAL synchronize_seqscans = off",
)


def _counts(cur: Any) -> SourceKeyStats:
    rows, empty, dup, items = cur.fetchone()
    return SourceKeyStats(rows=int(rows), items=int(items), empty_key=int(empty), duplicate_key=int(dup))


#: rows, empty keys, repeated keys and items of one source, from its keys grouped with their counts
_COUNTS = (
    "SELECT coalesce(sum(n), 0), coalesce(sum(n) FILTER (WHERE key = ''), 0), "
    "coalesce(sum(n - 1) FILTER (WHERE key <> ''), 0), count(*) FILTER (WHERE key <> '') FROM {keys}"
)


def _source_key(key_field: str, src: StagedSource, *, aliased: bool = False) -> tuple[sql.Composable, list[Any]]:
    """A source's trimmed key and its parameters: its key column, or its `key_from` rendered over its row.

    `key_from` (P15) reads the source's own fields only: a field it lacks renders "". The
    rendered text is always trimmed with btrim (unlike a key column, it is usually built from
    several cells, so the cheap first/last-character test of `trimmed` would rarely spare it).
    `aliased`: the staging table is `s` in the query.
    """
    prefix = sql.SQL("s.{}" if aliased else "{}")

    def column(name: str) -> sql.Composable:
        if name not in src.fields:
            return sql.SQL("''::text")
        return prefix.format(ident(column_for_field(name)))

    if src.key_from is None:  # a source without the key field has no rows (_check_keys): "" for each
        return trimmed(column(key_field)), [WHITESPACE] * 3
    params: list[Any] = []
    refs = [p for p in src.key_from.parts if isinstance(p, FieldRef)]
    if any(r.index is not None or r.name in src.lists for r in refs):
        frag = _list_key_from(src, column)
        rendered, params = frag.sql, list(frag.params)
    else:
        rendered = src.key_from.to_sql(column, params)
    return sql.SQL("btrim({}, %s)").format(rendered), [*params, WHITESPACE]


def _list_key_from(src: StagedSource, column: Callable[[str], sql.Composable]) -> Frag:
    """`key_from` reading elements (`{images[0]}`) or a list field of its source (`{images}`: the
    elements joined with ","), rendered as the rules render templates (SPEC 9, P9)."""
    from firefeed.rules._conditions_sql import template_frag
    from firefeed.rules.lists import ListFields

    assert src.key_from is not None
    declared = frozenset(src.lists)

    def value(name: str) -> Frag:
        col = column(name)
        if name in declared and name in src.fields:
            return staged_list(of(col), src.delimited.get(name))
        return of(sql.SQL("'{}'::text[]")) if name in declared else of(col)

    return template_frag(src.key_from, value, ListFields(declared, declared))


def staged_list(column: Frag, separator: str | None) -> Frag:
    """A declared list's staged column as text[]: itself, or split when staged delimited (`separator`)."""
    return column if separator is None else fmt("string_to_array({0}, {1})", column, val(separator, "text"))


def _key_stats(engine: Engine, schema: str, key_field: str, sources: Sequence[StagedSource]) -> list[SourceKeyStats]:
    """Each source's key counts, read on a connection of its own (nothing is written)."""
    out = []
    with raw_connection(engine) as conn, conn.cursor() as cur:
        for setting in _MERGE_SETTINGS:
            cur.execute(setting)
        for src in sources:
            out.append(source_key_stats(cur, schema, key_field, src))
    return out


def _first_rows(
    cur: Any, schema: str, key_field: str, sources: Sequence[StagedSource], result: MergeResult
) -> list[bool]:
    """Per source, a temporary table of each non-empty key's first row (`ff_win_<j>`); whether it was clean."""
    clean: list[bool] = []
    for j, src in enumerate(sources):
        stats = result.sources[src.name] = first_row_table(cur, schema, key_field, src, f"ff_win_{j}")
        clean.append(stats.rows == stats.items)
    return clean


def first_row_table(cur: Any, schema: str, key_field: str, src: StagedSource, win: str) -> SourceKeyStats:
    """A temporary table `win` of each non-empty key's first row of `src` (key, ord, n); the key counts."""
    key, params = _source_key(key_field, src)
    # Temporary scratch of this transaction (session-local, not company DDL).
    cur.execute(
        sql.SQL(
            "CREATE TEMP TABLE {win} ON COMMIT DROP AS "
            "SELECT {key} AS key, min({ord}) AS ord, count(*) AS n FROM {stg} GROUP BY 1"
        ).format(win=ident(win), key=key, ord=ident(ORD), stg=ident(schema, src.table)),
        params,
    )
    cur.execute(sql.SQL(_COUNTS).format(keys=ident(win)))
    stats = _counts(cur)
    cur.execute(sql.SQL("DELETE FROM {win} WHERE key = ''").format(win=ident(win)))
    cur.execute(sql.SQL("ANALYZE {win}").format(win=ident(win)))
    return stats


def source_key_stats(cur: Any, schema: str, key_field: str, src: StagedSource) -> SourceKeyStats:
    """`src`'s key counts (one aggregate, nothing written), on the caller's cursor."""
    key, params = _source_key(key_field, src)
    keys = sql.SQL("(SELECT {key} AS key, count(*) AS n FROM {stg} GROUP BY 1) k").format(
        key=key, stg=ident(schema, src.table)
    )
    cur.execute(sql.SQL(_COUNTS).format(keys=keys), params)
    return _counts(cur)


def derived_rows(schema: str, key_field: str, src: StagedSource, win: str | None, params: list[Any]) -> sql.Composable:
    """`src`'s first row per key with the trimmed key beside it (as `_ff_key`): every row when the source is
    clean (`win` None: no empty or repeated key), else through its first-row table `win`. Appends the
    query's parameters to `params`."""
    stg = ident(schema, src.table)
    if win is None:
        # No empty or repeated key: every row is its key's first, skip the dedup join.
        key, key_params = _source_key(key_field, src, aliased=True)
        params.extend(key_params)
        return sql.SQL("(SELECT {key} AS {k}, s.* FROM {stg} s)").format(key=key, k=ident(KEY), stg=stg)
    return sql.SQL("(SELECT w.key AS {k}, s.* FROM {win} w JOIN {stg} s ON s.{ord} = w.ord)").format(
        k=ident(KEY), win=ident(win), stg=stg, ord=ident(ORD)
    )


def _items_select(
    schema: str,
    key_field: str,
    fields: list[str],
    contrib: list[list[str]],
    sources: Sequence[StagedSource],
    clean: Sequence[bool],
    list_fields: frozenset[str] = frozenset(),
    only_keys: str | None = None,
) -> tuple[list[str], sql.Composable, list[Any]]:
    """The items table's columns, and the SELECT of its rows in item order. `only_keys`: a temporary table
    of keys (`key`); every source's rows are restricted to them (the delta's changed keys), so the
    joins are of those few rows (the items of other keys come out incomplete: the caller keeps only
    the items of those keys)."""
    params: list[Any] = []
    appends = [j for j, s in enumerate(sources) if j > 0 and s.mode == "append"]

    def derived(j: int) -> sql.Composable:
        """Source j's first row per key, with the trimmed key beside it."""
        rows = derived_rows(schema, key_field, sources[j], None if clean[j] else f"ff_win_{j}", params)
        if only_keys is None:
            return rows
        return sql.SQL("(SELECT * FROM {rows} d WHERE d.{k} IN (SELECT key FROM {keys}))").format(
            rows=rows, k=ident(KEY), keys=ident(only_keys)
        )

    alias = [ident(f"s{j}") for j in range(len(sources))]
    if not appends:
        # Every item comes from the primary: no origin bookkeeping needed.
        items = sql.SQL("{d} {a}").format(d=derived(0), a=alias[0])
        ord_expr = sql.SQL("{a}.{ord}").format(a=alias[0], ord=ident(ORD))
        key_expr = sql.SQL("{a}.{k}").format(a=alias[0], k=ident(KEY))
        src_expr = sql.SQL("0")
        joins = [
            sql.SQL(" LEFT JOIN {d} {a} ON {a}.{k} = {a0}.{k}").format(
                d=derived(j), a=alias[j], k=ident(KEY), a0=alias[0]
            )
            for j in range(1, len(sources))
        ]
        origin_ok = [sql.SQL("TRUE")] * len(sources)
    else:
        # Items: the primary's keys, then each append source's new keys, in source order.
        parts = [sql.SQL("SELECT key, ord, 0 AS src FROM {w}").format(w=ident("ff_win_0"))]
        earlier = [0]
        for j in appends:
            not_seen = sql.SQL(" AND ").join(
                sql.SQL("NOT EXISTS (SELECT 1 FROM {e} x WHERE x.key = w.key)").format(e=ident(f"ff_win_{e}"))
                for e in earlier
            )
            parts.append(
                sql.SQL("SELECT w.key, w.ord, {j} AS src FROM {w} w WHERE ").format(
                    j=sql.Literal(j), w=ident(f"ff_win_{j}")
                )
                + not_seen
            )
            earlier.append(j)
        items = sql.SQL("(") + sql.SQL(" UNION ALL ").join(parts) + sql.SQL(") i")
        ord_expr = sql.SQL("i.src::bigint * {stride} + i.ord").format(stride=sql.Literal(SOURCE_STRIDE))
        key_expr = sql.SQL("i.key")
        src_expr = sql.SQL("i.src")
        joins = [
            sql.SQL(" LEFT JOIN {d} {a} ON {a}.{k} = i.key").format(d=derived(j), a=alias[j], k=ident(KEY))
            for j in range(len(sources))
        ]
        origin_ok = [sql.SQL("i.src <= {j}").format(j=sql.Literal(j)) for j in range(len(sources))]

    providers = field_providers(contrib)
    select_cols: list[sql.Composable] = [ord_expr, key_expr, src_expr, key_expr]
    select_params: list[Any] = []  # the columns' values, bound before the FROM's
    for f in fields[1:]:
        if f in list_fields:
            listed = _list_expr(f, providers.get(f, []), alias, sources, origin_ok, not appends)
            select_cols.append(listed.sql)
            select_params.extend(listed.params)
            continue
        expr: sql.Composable = sql.SQL("''")
        for j in providers.get(f, []):
            col = sql.SQL("{a}.{c}").format(a=alias[j], c=ident(column_for_field(f)))
            if j == 0 and not appends:
                expr = col
                continue
            expr = sql.SQL("CASE WHEN {ok} AND {col} <> '' THEN {col} ELSE {prev} END").format(
                ok=origin_ok[j], col=col, prev=expr
            )
        select_cols.append(expr)

    columns = [ORD, KEY, SRC] + [column_for_field(f) for f in fields]
    select = sql.SQL("SELECT ") + sql.SQL(", ").join(select_cols) + sql.SQL(" FROM ") + items + sql.SQL("").join(joins)
    return columns, select, [*select_params, *params]


def _list_expr(
    field: str,
    providers: Sequence[int],
    alias: Sequence[sql.Composable],
    sources: Sequence[StagedSource],
    origin_ok: Sequence[sql.Composable],
    only_primary: bool,
) -> Frag:
    """A list field's text[] value: the last source with a non-empty value wins (P14)."""
    expr = of(sql.SQL("'{}'::text[]"))
    for j in providers:
        col = of(sql.SQL("{a}.{c}").format(a=alias[j], c=ident(column_for_field(field))))
        if field in sources[j].delimited:
            # Staged delimited: "" exactly when no element was kept (parse._lists).
            present, value = fmt("{0} <> ''", col), staged_list(col, sources[j].delimited[field])
        elif field in sources[j].lists:
            # A declaring source staged an array (text[]; a text's starts at 0, `[0:0]={...}`, P4).
            present, value = fmt("cardinality({0}) > 0", col), col
        else:
            # Any other source's text is a text (P14), an array from 0 (rules/_lists_sql.from_text).
            present, value = fmt("{0} <> ''", col), from_text(col)
        if j == 0 and only_primary and len(providers) == 1 and field in sources[j].lists:
            expr = value  # every item is the primary's, and its list as staged is the value (`{}` if none)
            continue
        expr = fmt("CASE WHEN {0} AND {1} THEN {2} ELSE {3} END", of(origin_ok[j]), present, value, expr)
    return expr
