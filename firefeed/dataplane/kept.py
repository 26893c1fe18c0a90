"""What a succeeded run keeps of its rules' result for `firefeed values` (SPEC P33), and its drop.

The run's pass tables are renamed (`names.kept_result_table` / `kept_part_table`) instead of dropped
when it ends: free, where copying a million items is not. The next succeeded run of the project drops
the earlier ones. The DDL is the SchemaService's.
"""

from __future__ import annotations

import contextvars
import logging
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg2 import sql

from firefeed.dataplane.names import (
    RESULT_PREFIX,
    RULES_TMP_PREFIX,
    kept_part_table,
    kept_result_table,
    rules_tmp_table,
    run_id_of_tmp_table,
)
from firefeed.dataplane.views import relations_read
from firefeed.db.engine import raw_connection
from firefeed.schema.identifiers import KEY, company_schema, ident
from firefeed.schema.service import (
    UNUSED_DROP_LOCK_S,
    SchemaService,
    relation_kind,
    sql_qualified,
    table_comment_in,
    view_reads,
)

log = logging.getLogger(__name__)

#: the pass number of a delta run's table of the kept result's rows of its changed items (`find_changed_rows`)
CHANGED_ROWS = 9_000_101
_ROWS_COMMENT = "rows "


def keep_rules_result(schema: SchemaService, company: str, project: str, run_id: str, result: str) -> str | None:
    """Keep run `run_id`'s rules result `result` as `kept_result_table(run_id)`: its pass tables renamed
    instead of dropped when the run ends (free, where copying a million items is not). Returns the
    kept name; None, keeping nothing, when the result is or reads a relation that is not one of the
    run's pass tables (the items table, a lookup table: the next run rebuilds those, and a view
    kept over them would stop its DROP).

    The kept relation is commented `project <id>`, which `drop_kept_results` finds it by.
    """
    kept = kept_result_table(run_id)
    with raw_connection(schema.engine) as conn, conn.cursor() as cur:
        relations = relations_read(cur, company_schema(company), result)
        if any(run_id_of_tmp_table(name) != run_id or not name.startswith(RULES_TMP_PREFIX) for name in relations):
            return None
        for name, kind in relations.items():
            new = kept if name == result else kept_part_table(name)
            schema.rename_relation(company, name, new, view=kind == "v", conn=conn)
        schema.comment_relation(company, kept, f"project {project}", view=relations[result] == "v", conn=conn)
    return kept


def kept_heaps(schema: SchemaService, company: str, kept: str) -> list[str] | None:
    """The tables holding kept result `kept`'s rows when it computes none of them: itself when it is a
    table, the parts of a kept view of parts; None for a kept pass view (its rows are computed from
    a pass before the last, which the changed items' ruled rows are not)."""
    with raw_connection(schema.engine) as conn, conn.cursor() as cur:
        return _heaps(cur, company_schema(company), kept)


def _heaps(cur: Any, schema: str, kept: str) -> list[str] | None:
    kind = relation_kind(cur, schema, kept)
    if kind == "r":
        return [kept]
    if kind != "v":
        return None
    # A view of parts reads two or more of its run's pass tables (kept as `<kept>_<number>`), nothing
    # else; a pass view reads one pass table (and maybe a groups table, `..._g`).
    found = view_reads(cur, schema, kept)
    part = re.compile(rf"^{re.escape(kept)}_\d+$")
    if len(found) < 2 or any(k != "r" or not part.match(name) for name, k in found):
        return None
    return [name for name, _ in found]


def note_changed_rows(schema: SchemaService, company: str, run_id: str, rows: int, *, conn: Any) -> None:
    """Mark the run's table `CHANGED_ROWS` (made by its caller with the columns `r`, the heap, and `t`, the
    TID, of the kept result's rows of the changed items: all of them) as holding `rows` rows, in `conn`'s
    transaction: the delta's RULES finds those rows for its counts (pipeline/delta_rules.py), and noting them
    spares `find_changed_rows` a second scan of the kept result."""
    schema.comment_relation(
        company, rules_tmp_table(run_id, CHANGED_ROWS), f"{_ROWS_COMMENT}{rows}", view=False, conn=conn
    )


def find_changed_rows(schema: SchemaService, company: str, run_id: str, *, view: str, keys: str) -> int | None:
    """Where the kept result that a delta run's result `view` reads holds the rows of the run's changed items
    (their keys in `keys`): their heap and TID, in the run's table `CHANGED_ROWS`, commented with their
    count. `keep_in_place` then deletes them by TID instead of scanning every heap after the publish, when
    nothing else runs; this scan runs while the run's EXPORT leaves a core free. Returns the count; None
    (nothing made) when `view` reads no kept table or view of parts. A table the run's RULES already noted
    (`note_changed_rows`) is taken as it is, with no scan."""
    where = company_schema(company)
    with raw_connection(schema.engine) as conn, conn.cursor() as cur:
        noted = _noted_rows(cur, where, run_id)
        if noted is not None:
            return noted
        if relation_kind(cur, where, view) != "v":
            return None
        kept = [name for name, _ in view_reads(cur, where, view) if name.startswith(RESULT_PREFIX)]
        heaps = _heaps(cur, where, kept[0]) if len(kept) == 1 else None
        if heaps is None:
            return None
        rows = sql.SQL(" UNION ALL ").join(
            sql.SQL(
                "SELECT h.tableoid AS r, h.ctid AS t FROM {heap} h"
                " WHERE EXISTS (SELECT 1 FROM {keys} c WHERE c.{key} = h.{key})"
            ).format(heap=ident(where, heap), keys=ident(where, keys), key=ident(KEY))
            for heap in heaps
        )
        table, found = schema.create_rules_tmp_as(company, run_id, CHANGED_ROWS, ["r", "t"], rows, [], conn=conn)
        # Its count beside its rows: crash recovery empties an UNLOGGED table, not its comment.
        schema.comment_relation(company, table, f"{_ROWS_COMMENT}{found}", view=False, conn=conn)
    return found


@dataclass(frozen=True)
class KeptChange:
    """What keeping a delta's result changes: the kept result `kept` gets the rows of the changed items (their
    keys in table `keys`) replaced by their ruled rows (table `ruled`, with the result's `columns`)."""

    kept: str
    keys: str
    ruled: str
    columns: list[str]


class PreparedKeep:
    """`keep_in_place`'s DELETE and INSERT done while the run's EXPORT runs, in a transaction left open on a
    connection and thread of its own, then committed with the renames once the run has published (`commit`),
    or rolled back (`abandon`): the same change, one transaction, but no longer after the publish, one step
    after the other (the 1M stock delta's first keep: 0.5 s; ~0.16 s later). Until the commit every other
    reader sees `kept` as it was (the DELETE and INSERT take row locks only: a `values` call or an export
    reading the result's view is not held); the renames, which lock `kept`, wait for the commit.

    A failure while preparing is not the run's: `commit` then keeps the result in place as before.

    Begun before the ruled rows are made (`rows_ready` False: the delta's RULES begins it once it has found where
    the kept result holds the changed items, pipeline/delta_rules.py), it deletes them at once, while RULES still
    makes the ruled rows with a core to spare, and inserts those once told they are made (`rows_ready`)."""

    def __init__(
        self, schema: SchemaService, company: str, run_id: str, change: KeptChange, *, rows_ready: bool = True
    ) -> None:
        self._args = (schema, company, run_id)
        self._change = change
        self._decided = threading.Event()
        self._rows = threading.Event()
        if rows_ready:
            self._rows.set()
        self._commit = False
        self._kept: str | None = None
        self._error: BaseException | None = None
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._run,), name="keep-in-place", daemon=True)
        self._thread.start()

    @property
    def change(self) -> KeptChange:
        return self._change

    def rows_ready(self) -> None:
        """The ruled rows (`change.ruled`) are made and committed: the INSERT may run."""
        self._rows.set()

    def _wait_rows(self) -> None:
        self._rows.wait()
        if self._decided.is_set() and not self._commit:
            raise _Abandoned

    def _run(self) -> None:
        schema, company, run_id = self._args
        try:
            with raw_connection(schema.engine) as conn, conn.cursor() as cur:
                heaps = _replace_rows(cur, company, run_id, self._change, before_insert=self._wait_rows)
                self._decided.wait()
                if not self._commit:
                    raise _Abandoned
                self._kept = _rename_kept(schema, cur, conn, company, run_id, self._change.kept, heaps)
        except _Abandoned:
            pass
        except BaseException as exc:  # kept for `commit`, which keeps in place as before
            self._error = exc

    def commit(self) -> str | None:
        """Once the run has published: the prepared change committed with the renames; the kept name (None:
        `kept` is no longer a table or a view of parts). Prepared in vain (an error), kept in place now."""
        self._commit = True
        self._decided.set()
        self._rows.set()
        self._thread.join()
        if self._error is None:
            return self._kept
        log.warning("keeping the result beside EXPORT failed (%s): kept in place after the publish", self._error)
        schema, company, run_id = self._args
        return keep_in_place(schema, company, run_id, self._change)

    def abandon(self) -> None:
        """The run did not publish: the prepared change rolled back."""
        self._decided.set()
        self._rows.set()
        self._thread.join()


class _Abandoned(Exception):
    """The run did not publish: the prepared keep rolls back."""


def _replace_rows(
    cur: Any, company: str, run_id: str, change: KeptChange, before_insert: Callable[[], None] | None = None
) -> list[str] | None:
    """In `cur`'s transaction: the changed items' rows of `change.kept` deleted and their ruled rows inserted
    (after `before_insert`, which may wait for them); the heaps (None, nothing changed: `kept` is no table or
    view of parts)."""
    where = company_schema(company)
    kept, keys, ruled = change.kept, change.keys, change.ruled
    cols = sql.SQL(", ").join(ident(c) for c in change.columns)
    # A `values` call counting `kept` holds it: leave it then, as drop_unless_busy leaves a table.
    cur.execute("SET LOCAL lock_timeout = %s", (f"{int(UNUSED_DROP_LOCK_S * 1000)}ms",))
    heaps = _heaps(cur, where, kept)
    if heaps is None:
        return None
    changed = sql.SQL("EXISTS (SELECT 1 FROM {keys} c WHERE c.{key} = h.{key})").format(
        keys=ident(where, keys), key=ident(KEY)
    )
    if not _delete_by_tid(cur, where, run_id, heaps, changed):
        for heap in heaps:
            cur.execute(
                sql.SQL("DELETE FROM {heap} h WHERE {changed}").format(heap=ident(where, heap), changed=changed)
            )
    if before_insert is not None:
        before_insert()
    cur.execute(
        sql.SQL("INSERT INTO {heap} ({cols}) SELECT {cols} FROM {ruled}").format(
            heap=ident(where, heaps[-1]), cols=cols, ruled=ident(where, ruled)
        )
    )
    return heaps


def _rename_kept(
    schema: SchemaService, cur: Any, conn: Any, company: str, run_id: str, kept: str, heaps: list[str] | None
) -> str | None:
    """`kept` and its parts renamed this run's, in `conn`'s transaction; the new name (None: no heaps)."""
    if heaps is None:
        return None
    new = kept_result_table(run_id)
    for name in heaps if heaps != [kept] else []:
        schema.rename_relation(company, name, new + name[len(kept) :], view=False, conn=conn)
    # The comment (`project <id>`, which drop_kept_results finds it by) goes with it.
    schema.rename_relation(company, kept, new, view=heaps != [kept], conn=conn)
    return new


def keep_in_place(schema: SchemaService, company: str, run_id: str, change: KeptChange) -> str | None:
    """Keep a delta run's result (pipeline/delta.py) without copying it: the kept result `kept` it was
    made from gets the changed items' rows (their keys in `keys`) replaced by their ruled rows (`ruled`)
    (`change`) and is renamed this run's, with its parts, in one transaction (a run dying before the commit
    leaves `kept` as it was). Only once the run has published: until then `kept` is the last
    succeeded run's, which `values` reads. Returns the kept name; None, changing nothing, when `kept`
    is no longer a table or a view of parts.

    The changed items' rows are deleted by the TIDs `find_changed_rows` kept, when it ran and they are
    all of them (as many deleted as it found, each with a changed key: nothing else writes `kept`
    meanwhile); else, or for the rest, by a scan of each heap.

    Its rows are then no longer in `_ff_ord` order: a later reader that needs the order sorts (the
    export's COPY checks the order before it trusts a scan).
    """
    with raw_connection(schema.engine) as conn, conn.cursor() as cur:
        heaps = _replace_rows(cur, company, run_id, change)
        return _rename_kept(schema, cur, conn, company, run_id, change.kept, heaps)


def _noted_rows(cur: Any, where: str, run_id: str) -> int | None:
    """How many rows the run's `CHANGED_ROWS` table holds, by its comment; None when it has none."""
    comment = table_comment_in(cur, where, rules_tmp_table(run_id, CHANGED_ROWS))
    if not isinstance(comment, str) or not comment.startswith(_ROWS_COMMENT):
        return None
    return int(comment[len(_ROWS_COMMENT) :])


def _delete_by_tid(cur: Any, where: str, run_id: str, heaps: Sequence[str], changed: sql.Composable) -> bool:
    """Delete the changed items' rows of `heaps` by the TIDs `find_changed_rows` kept; whether that deleted
    all of them (False: none kept, or some no longer where they were: the caller scans for the rest)."""
    expected = _noted_rows(cur, where, run_id)
    if expected is None:
        return False
    table = ident(where, rules_tmp_table(run_id, CHANGED_ROWS))
    cur.execute(sql.SQL("SELECT count(*) FROM {}").format(table))
    if int(cur.fetchone()[0]) != expected:  # emptied by crash recovery
        return False
    deleted = 0
    for heap in heaps:
        cur.execute(
            sql.SQL(
                "DELETE FROM {heap} h"
                " WHERE h.ctid = ANY(ARRAY(SELECT t FROM {table} WHERE r = %s::regclass)) AND {changed}"
            ).format(heap=ident(where, heap), table=table, changed=changed),
            (sql_qualified(where, heap),),
        )
        deleted += int(cur.rowcount)
    return deleted == expected


def drop_kept_results(schema: SchemaService, company: str, project: str, *, keep: str | None = None) -> list[str]:
    """Drop the rules results `project`'s earlier runs kept (all but `keep`), each with the tables it
    reads; returns the names dropped. One in use for more than UNUSED_DROP_LOCK_S (a values call
    counting it) is left for the next run to drop, as `SchemaService.drop_unless_busy` leaves a table."""
    dropped: list[str] = []
    for name, _ in schema.kept_relations(company, RESULT_PREFIX, f"project {project}"):
        if name == keep:
            continue
        # Its own tables are named `<name>_...` (`kept_part_table`): CASCADE takes the views over them.
        tables = [t for _, t in schema.relations(name, company)]
        if not schema.drop_unless_busy(company, tables, cascade=True):
            log.info("kept result %s is in use: left for the next run to drop", name)
            continue
        dropped.append(name)
    return dropped
