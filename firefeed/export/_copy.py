"""Stream items out of Postgres with COPY, in `_ff_ord` order, without sorting when we can.

Order. Exports list items in `_ff_ord` order. `ORDER BY _ff_ord` over a wide
table is an external sort: on 1M items x 21 fields (760 MB) it cost the server
+1.5 s CPU (+58 %) on a 2.7 s csv export, plus ~250 MB of temp files. The
final items table is normally written in `_ff_ord` order, so a sequential scan
already returns that order; we use it only where it is guaranteed:

* the transaction is REPEATABLE READ, so the check and the COPY see the same
  snapshot, and our ACCESS SHARE lock keeps VACUUM FULL / CLUSTER out;
* `synchronize_seqscans = off` (a scan starts at block 0, not where another
  scan happens to be), no parallel workers (they interleave blocks), no index
  or bitmap scan (a `where` could otherwise pick an index order);
* a check (one scan of the `_ff_ord` column that stops at the first item out
  of order; 0.4 s on 1M items) proves the physical order is `_ff_ord` order;
* the COPY's own plan is read first (`firefeed.db.plans.ordered_scans`): when
  the table is a view that joins (an export's channel rules viewed over the
  project's grouped last pass), every join must be driven by the items' scan
  and hash the groups in one batch, else the rows are sorted; and the check
  reads the heaps that drive it, one after the other, not the view (whose
  group value and joins it does not need: 0.4 s of 1M catalog items).

When the check fails (chunk jobs that ran side by side, rows updated in place)
the COPY reads by `_ff_ord`: through an `_ff_ord` index when the table has one
(chunked rules runs build it), else by sorting. Every route gives the same bytes.

Placeholders. psycopg2 applies `%` formatting to the whole query text, so an
identifier that contains `%` (a field named `50% off`) would break it or be
read as a placeholder. `render()` doubles `%` inside identifiers and literals
before binding; only FireFeed's own SQL text (sql.SQL, sql.Placeholder) carries
placeholders.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg2.extensions
from psycopg2 import sql

from firefeed.dataplane.views import parts_of_view
from firefeed.db.engine import render_for_binding
from firefeed.db.plans import ORDER_SETTINGS, keeps_order, ordered_scans
from firefeed.export._atomic import Sink
from firefeed.export.select import Piece, sql_text
from firefeed.schema.identifiers import ORD, ident
from firefeed.schema.service import table_pages

_SCAN_SETTINGS = (
    "SET LOCAL synchronize_seqscans = off",
    "SET LOCAL max_parallel_workers_per_gather = 0",
    "SET LOCAL enable_indexscan = off",
    "SET LOCAL enable_indexonlyscan = off",
    "SET LOCAL enable_bitmapscan = off",
    # As in the rules' passes: compiling a 1M-row scan's expressions costs more than it saves.
    "SET LOCAL jit = off",
)


def render(piece: Piece, cur: Any) -> bytes:
    """The final query bytes: `%` made literal outside FireFeed's own SQL, then values bound."""
    return bytes(cur.mogrify(render_for_binding(piece.text, cur), piece.params))


def in_physical_order(cur: Any, schema: str, table: str) -> bool:
    """True when a sequential scan returns the items in `_ff_ord` order (no item out of order)."""
    return heaps_in_order(cur, [(schema, table)])


def heaps_in_order(cur: Any, tables: Sequence[tuple[str, str]]) -> bool:
    """True when sequential scans of `tables` (schema, name), one after the other, return `_ff_ord` ascending."""
    heaps = sql.SQL(" UNION ALL ").join(
        sql.SQL("SELECT {ord} FROM {t}").format(ord=ident(ORD), t=ident(schema, name)) for schema, name in tables
    )
    query = sql.SQL(
        "SELECT NOT EXISTS (SELECT 1 FROM (SELECT {ord}, lag({ord}) OVER () AS prev FROM ({heaps}) h) s"
        " WHERE prev > {ord})"
    ).format(ord=ident(ORD), heaps=heaps)
    cur.execute(query)
    return bool(cur.fetchone()[0])


def reads_in_order(conn: Any, schema: str, table: str) -> bool:
    """Whether `copy_items` would read all of `table` (a view computing its rows) in order without sorting.

    An export's channel rules are a view over the project's result only when this holds: their
    readers then compute the project's last pass as they read (`firefeed.pipeline.steps.channel_rules`).
    """
    _ready(conn)
    with conn.cursor() as cur:
        _begin_ordered_read(cur)
        ordered = keeps_order(cur, sql.SQL("SELECT * FROM {}").format(ident(schema, table)))
        conn.rollback()
        return ordered


def _ready(conn: Any) -> None:
    if conn.info.transaction_status != psycopg2.extensions.TRANSACTION_STATUS_IDLE:
        conn.rollback()  # SET TRANSACTION must be the first statement of ours
    if conn.encoding != "UTF8":
        # Values are bound and read back as UTF-8; every FireFeed database is UTF8.
        conn.set_client_encoding("UTF8")


def _begin_read(cur: Any) -> None:
    """A read-only REPEATABLE READ transaction scanning the heap in order."""
    cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    for setting in _SCAN_SETTINGS:
        cur.execute(setting)


def _begin_ordered_read(cur: Any) -> None:
    """`_begin_read` for a statement that may join (a view): joins hashed in one batch, as `plans` checks."""
    _begin_read(cur)
    for setting in ORDER_SETTINGS:
        cur.execute(setting)


def _has_order_index(cur: Any, schema: str, table: str) -> bool:
    """True when an index of `table` starts with `_ff_ord` (chunked rules runs leave one on their result)."""
    cur.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a"
        " ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] WHERE i.indrelid = to_regclass(%s) AND a.attname = %s)",
        (sql.Identifier(schema, table).as_string(cur), ORD),
    )
    return bool(cur.fetchone()[0])


def _read_in_index_order(cur: Any) -> None:
    """Let the planner read a table that is not stored in order through its `_ff_ord` index.

    Rows written by chunk jobs running side by side are stored chunk by chunk, out
    of order: an index scan then reads the heap almost sequentially, where
    `ORDER BY _ff_ord` sorted every row (1M items: 2.5 s against 4.3 s of
    backend, and no temporary files).
    """
    cur.execute("SET LOCAL enable_indexscan = on")
    cur.execute("SET LOCAL enable_indexonlyscan = on")
    # The index wins whenever there is one: chunked runs index their result without ANALYZE, and
    # with no statistics the planner would guess the heap random and sort instead.
    cur.execute("SET LOCAL enable_sort = off")


def copy_items(conn: Any, *, schema: str, table: str, row: Piece, where: Piece, options: str, sink: Sink) -> int:
    """COPY `SELECT row FROM schema.table [where]` in `_ff_ord` order into `sink`; the row count.

    `table` may be a view that computes its rows from the pass tables (an export's channel rules over
    the project's last pass, joining its groups): the COPY's plan is read first and must keep the order
    of the heaps it scans (`plans.ordered_scans`: the groups hashed in one batch, each item probing them
    as it is read), else the rows are sorted; then those heaps are checked as a table is.
    """
    _ready(conn)
    with conn.cursor() as cur:
        _begin_ordered_read(cur)
        select = sql_text("SELECT ") + row + Piece(sql.SQL(" FROM {}").format(ident(schema, table))) + where
        scans = ordered_scans(cur, render(select, cur))
        if scans is None:
            select = select + Piece(sql.SQL(" ORDER BY {}").format(ident(ORD)))  # its plan would reorder
        elif not (
            heaps_in_order(cur, scans) if all(name for _, name in scans) else in_physical_order(cur, schema, table)
        ):
            _read_in_index_order(cur)
            select = select + Piece(sql.SQL(" ORDER BY {}").format(ident(ORD)))
        query = sql_text("COPY (") + select + sql_text(f") TO STDOUT WITH ({options})")
        cur.copy_expert(render(query, cur), sink)
        return int(cur.rowcount)


#: google-xml's groups: heap pages per COPY row when the table is in `_ff_ord` order (~400 KB of
#: lines for typical items, a few thousand rows per 1M items), else items per row. A group is one
#: bytea in the backend, so it must stay under 1 GB: items averaging over ~300 KB across thousands
#: in a row would not.
_GROUP_PAGES = 32
_GROUP_ITEMS = 256
_MAX_BLOCK = 4294967295


def _and_where(cur: Any, where: Piece, condition: sql.Composable) -> Piece:
    """`condition` added to the export's `where` (` WHERE (...)` or nothing)."""
    return Piece((sql.SQL(" AND") if where.text.as_string(cur).strip() else sql.SQL(" WHERE")) + condition)


def _page_groups(cur: Any, schema: str, heap: str, number: int, line: Piece, where: Piece) -> Piece:
    """(position, items, lines) per run of `_GROUP_PAGES` pages of `heap`, in page order.

    A TID range scan per group reads just its pages; the lateral join runs the
    groups in generate_series order, and string_agg takes a group's rows in
    scan (page) order. Positions are `number` * 2^32 + the first page.
    """
    pages = table_pages(cur, schema, heap)
    within = sql.SQL(
        " ctid >= ('(' || p.start || ',0)')::tid AND ctid < ('(' || least(p.start + {n}, {max}) || ',0)')::tid"
    ).format(n=sql.Literal(_GROUP_PAGES), max=sql.Literal(_MAX_BLOCK))
    condition = _and_where(cur, where, within)
    return (
        Piece(
            sql.SQL(
                "SELECT {base} + p.start, s.n, s.lines FROM generate_series(0::bigint, {last}, {n}) AS p(start)"
                " CROSS JOIN LATERAL (SELECT count(*) AS n, string_agg("
            ).format(base=sql.Literal(number << 32), last=sql.Literal(pages), n=sql.Literal(_GROUP_PAGES))
        )
        + line
        + Piece(sql.SQL(", ''::bytea) AS lines FROM {}").format(ident(schema, heap)))
        + where
        + condition
        + sql_text(") AS s WHERE s.n > 0")
    )


def _ord_groups(schema: str, table: str, line: Piece, where: Piece) -> Piece:
    """(position, items, lines) per `_GROUP_ITEMS` of `_ff_ord`, sorted: for a table not stored in order."""
    return (
        sql_text("SELECT min(o), count(*), string_agg(l, ''::bytea ORDER BY o) FROM (SELECT ")
        + line
        + Piece(sql.SQL(" AS l, {ord} AS o FROM {t}").format(ord=ident(ORD), t=ident(schema, table)))
        + where
        + sql_text(f") AS s GROUP BY o / {_GROUP_ITEMS} ORDER BY o / {_GROUP_ITEMS}")
    )


def _indexed_groups(cur: Any, schema: str, table: str, line: Piece, where: Piece) -> Piece:
    """(position, items, lines) per `_GROUP_ITEMS` items in `_ff_ord` order, each read by an index range scan.

    For a table not stored in order that has an `_ff_ord` index: the group bounds
    are every `_GROUP_ITEMS`-th position (positions have gaps: append sources
    start theirs far apart), then each group sorts only its own items.
    """
    bounds = sql.SQL(
        "WITH starts AS (SELECT o AS lo, lead(o) OVER (ORDER BY o) AS hi FROM"
        " (SELECT {ord} AS o, row_number() OVER (ORDER BY {ord}) AS n FROM {t}) AS s WHERE n %% {k} = 1)"
        " SELECT st.lo, g.n, g.lines FROM starts AS st CROSS JOIN LATERAL"
        " (SELECT count(*) AS n, string_agg(l, ''::bytea ORDER BY o) AS lines FROM (SELECT "
    ).format(ord=ident(ORD), t=ident(schema, table), k=sql.Literal(_GROUP_ITEMS))
    within = sql.SQL(" {ord} >= st.lo AND {ord} < coalesce(st.hi, {max})").format(
        ord=ident(ORD), max=sql.Literal(2**63 - 1)
    )
    condition = _and_where(cur, where, within)
    return (
        Piece(bounds)
        + line
        + Piece(sql.SQL(" AS l, {ord} AS o FROM {t}").format(ord=ident(ORD), t=ident(schema, table)))
        + where
        + condition
        + sql_text(") AS q) AS g WHERE g.n > 0")
    )


def copy_item_groups(conn: Any, *, schema: str, table: str, line: Piece, where: Piece, sink: Sink) -> None:
    """COPY the items' `line`s (bytea) concatenated by groups, in `_ff_ord` order, as binary rows into `sink`.

    Each row is (position, items, lines), positions growing. For exports whose
    lines Python finishes on whole chunks (google-xml): a COPY row per item
    costs ~1 s of backend and more of Python per 1M items. In `_ff_ord` order
    (the usual case) the groups are runs of heap pages, read with TID range
    scans, no sort; else groups of `_GROUP_ITEMS` items are read through an
    `_ff_ord` index when there is one, or all items are sorted and cut.
    When the rules left a table per part (a view of them), their heaps are read in turn.
    """
    _ready(conn)
    with conn.cursor() as cur:
        _begin_read(cur)
        if in_physical_order(cur, schema, table):
            heaps = parts_of_view(cur, schema, table) or [table]
            parts = [_page_groups(cur, schema, heap, n, line, where) for n, heap in enumerate(heaps)]
        elif _has_order_index(cur, schema, table):
            _read_in_index_order(cur)
            parts = [_indexed_groups(cur, schema, table, line, where)]
        else:
            cur.execute("SET LOCAL enable_hashagg = off")  # sorted groups, not all of them in memory at once
            parts = [_ord_groups(schema, table, line, where)]
        query = sql_text("COPY (")
        for n, part in enumerate(parts):
            query = query + sql_text(" UNION ALL (" if n else "(") + part + sql_text(")")
        query = query + sql_text(") TO STDOUT WITH (FORMAT binary)")
        cur.copy_expert(render(query, cur), sink)
