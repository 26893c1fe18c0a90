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
  of order; 0.4 s on 1M items) proves the physical order is `_ff_ord` order.

When the check fails (e.g. rows were updated in place) the COPY falls back to
`ORDER BY _ff_ord`. Both routes give the same bytes.

Placeholders. psycopg2 applies `%` formatting to the whole query text, so an
identifier that contains `%` (a field named `50% off`) would break it or be
read as a placeholder. `render()` doubles `%` inside identifiers and literals
before binding; only FireFeed's own SQL text (sql.SQL, sql.Placeholder) carries
placeholders.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg2.extensions
from psycopg2 import sql

from firefeed.db.engine import render_for_binding
from firefeed.export._atomic import Sink
from firefeed.export.select import Piece, sql_text
from firefeed.schema.identifiers import ORD, ident, tmp_table_number

_SCAN_SETTINGS = (
    "SET LOCAL synchronize_seqscans = off",
    "SET LOCAL max_parallel_workers_per_gather = 0",
    "SET LOCAL enable_indexscan = off",
    "SET LOCAL enable_indexonlyscan = off",
    "SET LOCAL enable_bitmapscan = off",
)


def render(piece: Piece, cur: Any) -> bytes:
    """The final query bytes: `%` made literal outside FireFeed's own SQL, then values bound."""
    return bytes(cur.mogrify(render_for_binding(piece.text, cur), piece.params))


def in_physical_order(cur: Any, schema: str, table: str) -> bool:
    """True when a sequential scan returns the items in `_ff_ord` order (no item out of order)."""
    query = sql.SQL(
        "SELECT NOT EXISTS (SELECT 1 FROM (SELECT {ord}, lag({ord}) OVER () AS prev FROM {t}) s WHERE prev > {ord})"
    ).format(ord=ident(ORD), t=ident(schema, table))
    cur.execute(query)
    return bool(cur.fetchone()[0])


def _halves_of_view(cur: Any, schema: str, table: str) -> list[str] | None:
    """The two pass tables, in order, when `table` is the view a split rules run made of them; else None."""
    cur.execute(
        "SELECT DISTINCT c.relname FROM pg_rewrite r JOIN pg_depend d ON d.objid = r.oid "
        "JOIN pg_class c ON c.oid = d.refobjid "
        "WHERE r.ev_class = to_regclass(%s) AND c.oid <> r.ev_class AND c.relkind = 'r'",
        (f'"{schema}"."{table}"',),
    )
    names = [r[0] for r in cur.fetchall()]
    numbers = [tmp_table_number(n) for n in names]
    if len(names) != 2 or None in numbers:
        return None
    return [n for _, n in sorted(zip(numbers, names, strict=True))]


def _ready(conn: Any) -> None:
    if conn.info.transaction_status != psycopg2.extensions.TRANSACTION_STATUS_IDLE:
        conn.rollback()  # SET TRANSACTION must be the first statement of ours
    if conn.encoding != "UTF8":
        # Values are bound and read back as UTF-8; every FireFeed database is UTF8.
        conn.set_client_encoding("UTF8")


def _begin_read(cur: Any, snapshot: str | None = None) -> None:
    """A read-only REPEATABLE READ transaction (on `snapshot` when given) scanning the heap in order."""
    cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    if snapshot is not None:
        cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot,))
    for setting in _SCAN_SETTINGS:
        cur.execute(setting)


def _copy_parts(
    cur: Any, *, schema: str, parts: list[tuple[str, Piece]], row: Piece, where: Piece, options: str, sink: Sink
) -> int:
    """COPY `SELECT row FROM heap [where] <tail>` of each (heap, tail) part in turn into `sink`; the row count.

    A tail is more of the WHERE clause (a ctid range) or an ORDER BY; UNION ALL keeps the parts' order.
    """
    query = sql_text("COPY (")
    for n, (heap, tail) in enumerate(parts):
        query = query + sql_text(" UNION ALL SELECT " if n else "SELECT ") + row
        query = query + Piece(sql.SQL(" FROM {}").format(ident(schema, heap))) + where + tail
    query = query + sql_text(f") TO STDOUT WITH ({options})")
    cur.copy_expert(render(query, cur), sink)
    return int(cur.rowcount)


def _order(ordered: bool) -> Piece:
    return sql_text("") if ordered else Piece(sql.SQL(" ORDER BY {}").format(ident(ORD)))


def copy_items(conn: Any, *, schema: str, table: str, row: Piece, where: Piece, options: str, sink: Sink) -> int:
    """COPY `SELECT row FROM schema.table [where]` in `_ff_ord` order into `sink`; the row count."""
    _ready(conn)
    with conn.cursor() as cur:
        _begin_read(cur)
        tail = _order(in_physical_order(cur, schema, table))
        return _copy_parts(cur, schema=schema, parts=[(table, tail)], row=row, where=where, options=options, sink=sink)


# Below this many heap pages (~8 MB) a second connection costs more than it saves.
_SPLIT_MIN_PAGES = 1000
#: The first connection's share of the pages. Its rows are hashed and written by the caller as they
#: come, the second's are spooled and appended after: with 40% the caller is done with the first part
#: while the second backend still works, and catches up behind it (1M items, google-xml: the export
#: ended 0.7-1 s sooner than with a 50/50 split, which left a ~1.2 s serial tail).
_FIRST_SHARE = 0.4


def copy_items_split(
    conn: Any,
    second: Any,
    *,
    schema: str,
    table: str,
    row: Piece,
    where: Piece,
    options: str,
    sink: Sink,
    second_sink: Any,
    after_first: Callable[[], None] = lambda: None,
    second_done: Callable[[], None] = lambda: None,
) -> tuple[int, bool]:
    """Like copy_items, but the second half of the heap is read by `second` at the same time.

    For exports whose rows cost real CPU to build in SQL (google-xml): two
    backends build the two halves in parallel. Both read one snapshot (exported
    from `conn`), and it is used only when the table is stored in `_ff_ord`
    order, so "first half, then second half" is item order. `second_sink` is a
    RowStream whose `finish()` the second half's thread calls when its rows are
    all written; `after_first` runs in the caller's thread once the first half
    is written, while the second may still be running (to start appending it);
    `second_done` runs in the second half's thread when it ends, whatever the outcome.
    Returns the row count and whether the split was used (False: everything
    went to `sink`, the caller must not append `second_sink`'s output).
    """
    import functools
    import threading

    _ready(conn)
    _ready(second)
    with conn.cursor() as cur:
        _begin_read(cur)
        # The rules may have left two tables (a view of both): their heaps, in order, are the items.
        heaps = _halves_of_view(cur, schema, table) or [table]
        sizes = []
        for heap in heaps:
            cur.execute(
                "SELECT pg_relation_size(%s::regclass) / current_setting('block_size')::int",
                (sql.Identifier(schema, heap).as_string(cur),),
            )
            sizes.append(int(cur.fetchone()[0]))
        ordered = in_physical_order(cur, schema, table)
        copy = functools.partial(_copy_parts, row=row, where=where, options=options, schema=schema)
        if sum(sizes) < _SPLIT_MIN_PAGES or not ordered:
            return copy(cur, parts=[(table, _order(ordered))], sink=sink), False
        cur.execute("SELECT pg_export_snapshot()")
        snapshot = cur.fetchone()[0]
        glue = " AND " if where.text.as_string(cur).strip() else " WHERE "
        # The cut: page `cut` of heap `at`; the first part is everything before it, the rest after.
        cut, at = int(sum(sizes) * _FIRST_SHARE), 0
        while cut >= sizes[at] and at + 1 < len(heaps):
            cut, at = cut - sizes[at], at + 1
        whole = sql_text("")
        before = [(h, whole) for h in heaps[:at]] + [(heaps[at], sql_text(f"{glue}ctid < '({cut},0)'::tid"))]
        after = [(heaps[at], sql_text(f"{glue}ctid >= '({cut},0)'::tid"))] + [(h, whole) for h in heaps[at + 1 :]]
        first = functools.partial(copy, parts=before)
        rest = functools.partial(copy, parts=after)
        counts: dict[str, int] = {}
        errors: list[BaseException] = []

        def read_second() -> None:
            try:
                with second.cursor() as cur2:
                    _begin_read(cur2, snapshot)
                    counts["second"] = rest(cur2, sink=second_sink)
                second_sink.finish()
            except BaseException as exc:  # re-raised in the caller's thread
                errors.append(exc)
            finally:
                second_done()

        worker = threading.Thread(target=read_second, name="export-second-half")
        worker.start()
        try:
            counts["first"] = first(cur, sink=sink)
            after_first()
        finally:
            worker.join()
        if errors:
            raise errors[0]
        return counts["first"] + counts["second"], True
