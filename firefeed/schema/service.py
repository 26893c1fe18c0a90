"""SchemaService: every piece of per-company DDL, and the catalog queries about those tables, go through here.

Each call is its own transaction. Calls on different companies touch different
schemas and never block each other; calls on the same company serialize through
Postgres' own catalog locks, so there is no application lock. The data tables are
UNLOGGED: they are rebuilt from the sources on every run, so skipping the WAL
halves the write cost and a crash only costs a re-run.

The fixed catalog statements are the named blocks of queries.sql (one home, also
for the fleet gauges in firefeed/metrics.py); DDL is composed here, around
identifiers from firefeed/schema/identifiers.py.

Which tables a run makes, lists, views and drops (their plan and names) is the data plane's
(firefeed/dataplane); it asks this service for the DDL and the catalog, the primitives under
"run-scoped relations" below. Company schemas, project tables and added columns stay decided here.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from typing import Any

from psycopg2 import errors as pg_errors
from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.dataplane.names import (
    export_tmp_table,
    rules_groups_table,
    rules_tmp_table,
)
from firefeed.db.engine import get_engine, raw_connection
from firefeed.db.sqlfile import load_queries
from firefeed.schema.identifiers import (
    COMPANY_SCHEMA_PREFIX,
    KEY,
    LEGACY_LOOKUP_STAGING_PREFIX,
    ORD,
    PROJECT_FILE_PREFIXES,
    SCRATCH_SCHEMA_PREFIX,
    SRC,
    company_schema,
    ident,
    is_scratch_area,
    project_file_table,
)

log = logging.getLogger(__name__)


def _sql(name: str) -> str:
    """The SQL of the named block of firefeed/schema/queries.sql (KeyError for a name that is not there)."""
    return load_queries("firefeed.schema")[name]


def _like_prefix(prefix: str) -> str:
    """A LIKE pattern for names starting with `prefix` (its `_` taken literally)."""
    return prefix.replace("_", "\\_") + "%"


#: how long a run that succeeded waits for a table its spec no longer names (`drop_unnamed_project_tables`)
UNUSED_DROP_LOCK_S = 5.0

_TEXT_COL = sql.SQL("{} text NOT NULL DEFAULT ''")
_LIST_COL = sql.SQL("{} text[] NOT NULL DEFAULT '{{}}'")


def _staged_col(column: str, lists: Container[str]) -> sql.Composed:
    """A column of items (staged or passed): text[] for a list field's, else text (never NULL either way)."""
    return (_LIST_COL if column in lists else _TEXT_COL).format(ident(column))


_CATALOG_RACES = (
    pg_errors.UniqueViolation,
    pg_errors.DuplicateObject,
    pg_errors.DuplicateTable,
    pg_errors.DuplicateSchema,
    pg_errors.DuplicateColumn,
)


@contextlib.contextmanager
def _connection(engine: Engine, conn: Any) -> Iterator[Any]:
    """The caller's connection (its transaction stays open) or a pooled one in a transaction of its own."""
    if conn is not None:
        yield conn
        return
    with raw_connection(engine) as own:
        yield own


def _create_as(
    conn: Any, target: sql.Composable, columns: Sequence[str], select: sql.Composable, params: Sequence[Any]
) -> int:
    """(Re)create `target` as an UNLOGGED table holding `select`'s rows; returns how many."""
    with conn.cursor() as cur:
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(target))
        cur.execute(
            sql.SQL("CREATE UNLOGGED TABLE {} ({}) AS ").format(target, sql.SQL(", ").join(ident(c) for c in columns))
            + select,
            list(params) or None,
        )
        return int(cur.rowcount)


class SchemaService:
    """Creates and alters the per-company tables; the only place dynamic DDL is written."""

    def __init__(self, engine: Engine | None = None) -> None:
        self.engine = engine or get_engine()

    # -- plumbing ---------------------------------------------------------
    def _ddl(self, statement: sql.Composable, params: Sequence[Any] = ()) -> None:
        """Run one DDL statement in its own transaction.

        Two `CREATE ... IF NOT EXISTS` on the same name can still race in the
        catalog (unique violation on pg_namespace/pg_type); the loser retries once
        and then finds the object there.
        """
        for attempt in (1, 2):
            try:
                with raw_connection(self.engine) as conn, conn.cursor() as cur:
                    cur.execute(statement, params or None)
                return
            except _CATALOG_RACES:
                if attempt == 2:
                    raise

    def _query(
        self, statement: sql.Composable | str, params: Sequence[Any] | dict[str, Any] = (), *, conn: Any = None
    ) -> list[tuple[Any, ...]]:
        with _connection(self.engine, conn) as c, c.cursor() as cur:
            cur.execute(statement, params or None)
            return list(cur.fetchall())

    # -- schemas and tables -----------------------------------------------
    def create_company_schema(self, company: str) -> str:
        schema = company_schema(company)
        self._ddl(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident(schema)))
        return schema

    def create_project_table(self, company: str, table: str) -> None:
        """The merged items of a project: position, trimmed key, origin source, then one text column per field."""
        schema = company_schema(company)
        self._ddl(
            sql.SQL(
                "CREATE UNLOGGED TABLE IF NOT EXISTS {} ({} bigint NOT NULL, {} text NOT NULL, {} integer NOT NULL)"
            ).format(ident(schema, table), ident(ORD), ident(KEY), ident(SRC))
        )

    def rebuild_project_table(
        self,
        company: str,
        table: str,
        columns: Sequence[str],
        select: sql.Composable,
        params: Sequence[Any],
        *,
        conn: Any,
    ) -> int:
        """Replace a project's items table by `select` (CREATE TABLE AS), in the caller's transaction.

        CREATE TABLE AS appends its rows in the order the SELECT yields them (it never
        reuses free space as INSERT does), so the items keep feed order and EXPORT
        reads them without sorting. Returns the number of rows.
        """
        target = ident(company_schema(company), table)
        return _create_as(conn, target, columns, select, params)

    def rebuild_lookup_table(
        self,
        company: str,
        table: str,
        columns: Sequence[str],
        select: sql.Composable,
        params: Sequence[Any],
        *,
        conn: Any,
    ) -> int:
        """Replace a lookup's table (one row per key, SPEC 9) by `select`, with a hash index on the key
        and fresh statistics: the planner then hashes the small lookup, not the items it is joined to,
        and a list `match` probes the index per element.

        A hash index, not a unique btree: a btree entry holds the key and refuses one over ~2.7 KB
        ("index row size exceeds"), which failed the run on a company's long key; a hash index
        holds 4 bytes per key, whatever its length. `select` already keeps one row per key."""
        target = ident(company_schema(company), table)
        rows = _create_as(conn, target, columns, select, params)
        with conn.cursor() as cur:
            cur.execute(sql.SQL("CREATE INDEX ON {} USING hash ({})").format(target, ident(columns[0])))
            cur.execute(sql.SQL("ANALYZE {}").format(target))
        return rows

    def create_staging_table(
        self, company: str, table: str, columns: Iterable[str], *, lists: Container[str] = (), conn: Any = None
    ) -> None:
        """A fresh staging table for one source's rows (dropped and recreated on each parse).

        With `conn`, the DDL joins the caller's open transaction: the loader creates the
        table and COPYs into it in one transaction, so Postgres appends rows in feed
        order (no free-space reuse) and can freeze them as they are written. `lists`: the
        columns of the source's list fields (SPEC 9), text[] (their COPY parses the readers'
        array literals); every other column is text.
        """
        schema = company_schema(company)
        cols = [
            sql.SQL("{} bigint NOT NULL").format(ident(ORD)),
            sql.SQL("{} integer NOT NULL").format(ident("_ff_line")),
        ]
        cols += [_staged_col(c, lists) for c in columns]
        with _connection(self.engine, conn) as c, c.cursor() as cur:
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(schema, table)))
            cur.execute(sql.SQL("CREATE UNLOGGED TABLE {} ({})").format(ident(schema, table), sql.SQL(", ").join(cols)))

    def add_columns(
        self, company: str, table: str, columns: Iterable[str], *, lists: Container[str] = (), conn: Any = None
    ) -> list[str]:
        """Add text columns that are missing (addColumn semantics: never a rebuild). Returns the added ones.

        With `conn`, in the caller's open transaction (which may have created the table); `lists`
        are text[] columns (`create_staging_table`).
        """
        schema = company_schema(company)
        existing = set(self.table_columns(company, table, conn=conn))
        missing = [c for c in dict.fromkeys(columns) if c not in existing]
        if not missing:
            return []
        adds = sql.SQL(", ").join(sql.SQL("ADD COLUMN IF NOT EXISTS ") + _staged_col(c, lists) for c in missing)
        # A constant default makes ADD COLUMN a catalog-only change in Postgres 11+.
        statement = sql.SQL("ALTER TABLE {} ").format(ident(schema, table)) + adds
        if conn is None:
            self._ddl(statement)
        else:
            with conn.cursor() as cur:
                cur.execute(statement)
        return missing

    def add_column(self, company: str, table: str, column: str) -> bool:
        return bool(self.add_columns(company, table, [column]))

    def table_columns(self, company: str, table: str, *, conn: Any = None) -> list[str]:
        rows = self._query(_sql("table_columns"), {"schema": company_schema(company), "table": table}, conn=conn)
        return [r[0] for r in rows]

    def table_exists(self, company: str, table: str) -> bool:
        rows = self._query(_sql("table_exists"), {"qualified": sql_qualified(company_schema(company), table)})
        return bool(rows[0][0])

    def table_has_rows(self, company: str, table: str) -> bool:
        """False for a missing or empty table (an UNLOGGED table is emptied by crash recovery)."""
        if not self.table_exists(company, table):
            return False
        rows = self._query(sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(ident(company_schema(company), table)))
        return bool(rows[0][0])

    def drop_table(self, company: str, table: str) -> None:
        self._ddl(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(company_schema(company), table)))

    def drop_unnamed_project_tables(
        self,
        company: str,
        project: str,
        keep: Iterable[str],
        *,
        former: Iterable[str] = (),
        legacy_lookup_staging: bool = False,
    ) -> list[str]:
        """Drop `project`'s staging and lookup tables (`project_file_table`) that are not in `keep`, the
        ones its spec names now: a source or lookup renamed or removed left its table behind, holding
        a whole feed. `former`: the exact names of such tables of the project's recent specs, dropped
        where they exist even at the identifier limit (where `project_file_table` claims nothing).
        `legacy_lookup_staging`: also the `stg_lkp_<project>_*` lookup staging tables of before `stgl_`
        (only when no project `lkp_<project>` exists, whose sources' they could be).
        Returns the names dropped. The project's runs are one at a time, so none is being written."""
        kept = set(keep)
        prefixes = [*PROJECT_FILE_PREFIXES, *([LEGACY_LOOKUP_STAGING_PREFIX] if legacy_lookup_staging else [])]
        found = [table for prefix in prefixes for _, table in self.relations(prefix + project, company)]
        # `stg_lkp_<project>_<digest>` reads as the staging of project `lkp_<project>`'s source.
        claimed = [table for table in found if project_file_table(table, project, prefixes)]
        gone = sorted(set(former) - kept)
        if gone:
            schema = company_schema(company)
            claimed += [r[0] for r in self._query(_sql("tables_named"), {"schema": schema, "tables": gone})]
        dropped: list[str] = []
        for table in dict.fromkeys(claimed):
            if table not in kept and self._drop_unless_busy(company, table):
                dropped.append(table)
        if dropped:
            log.info("dropped %d tables the spec no longer names", len(dropped), extra={"tables": dropped})
        return dropped

    def _drop_unless_busy(self, company: str, table: str) -> bool:
        """DROP TABLE, unless someone holds it for more than UNUSED_DROP_LOCK_S (`firefeed values` copying
        a lookup table of the previous spec): waiting would keep a run whose files are published RUNNING
        and queue every later reader of the table behind the DROP. The next run tries again."""
        if self.drop_unless_busy(company, [table]):
            return True
        log.info("table %s is in use: left for the next run to drop", table)
        return False

    def drop_unless_busy(self, company: str, tables: Sequence[str], *, cascade: bool = False) -> bool:
        """DROP `tables` (IF EXISTS) in one transaction, unless one is held for more than UNUSED_DROP_LOCK_S;
        False, dropping none, when one is (the caller leaves them for the next run)."""
        schema = company_schema(company)
        how = sql.SQL(" CASCADE" if cascade else "")
        try:
            with raw_connection(self.engine) as conn, conn.cursor() as cur:
                cur.execute("SET LOCAL lock_timeout = %s", (f"{int(UNUSED_DROP_LOCK_S * 1000)}ms",))
                for table in tables:
                    cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(schema, table)) + how)
            return True
        except pg_errors.LockNotAvailable:
            return False

    def index_order(self, company: str, table: str, *, analyze: bool = True) -> None:
        """Index item positions so chunks and exports read items by position without sorting the whole table.

        `analyze=False` skips the statistics (0.3-0.8 s on 1M items) for a table only an
        export reads next: it forces the index when the table is out of order (`export._copy`).
        """
        schema = company_schema(company)
        self._ddl(
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} ({})").format(
                ident(_order_index_name(table)), ident(schema, table), ident(ORD)
            )
        )
        if analyze:
            self._ddl(sql.SQL("ANALYZE {}").format(ident(schema, table)))

    # -- scratch areas (rule previews) ------------------------------------
    def create_scratch_area(self, area: str) -> str:
        """Create the schema of a scratch area (see identifiers.scratch_area); returns its name."""
        if not is_scratch_area(area):
            raise ValueError(f"not a scratch area id: {area!r}")
        schema = company_schema(area)
        self._ddl(sql.SQL("CREATE SCHEMA {}").format(ident(schema)))
        return schema

    def drop_scratch_area(self, area: str) -> None:
        """Drop a scratch area with everything in it; refuses anything else, so a company schema is never cascaded."""
        if not is_scratch_area(area):
            raise ValueError(f"not a scratch area id: {area!r}")
        self._ddl(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(ident(company_schema(area))))

    def drop_stale_scratch_areas(self, older_than_s: float) -> list[str]:
        """Drop scratch areas created more than `older_than_s` ago (a preview that crashed); returns their schemas."""
        rows = self._query(_sql("schemas_like"), {"pattern": _like_prefix(SCRATCH_SCHEMA_PREFIX)})
        now = self._query(_sql("database_epoch"))[0][0]
        dropped = []
        for (schema,) in rows:
            area = "scratch:" + schema[len(SCRATCH_SCHEMA_PREFIX) :]
            if is_scratch_area(area) and int(schema.split("_")[1]) < float(now) - older_than_s:
                self.drop_scratch_area(area)
                dropped.append(schema)
        if dropped:
            log.info("janitor dropped %d stale scratch areas", len(dropped), extra={"schemas": dropped})
        return dropped

    # -- rules pass tables ----------------------------------------------
    def create_rules_tmp(
        self,
        company: str,
        run_id: str,
        pass_no: int,
        columns: Sequence[str],
        extra: Sequence[tuple[str, str]] = (),
        list_columns: Sequence[str] = (),
    ) -> str:
        """Create the table one rules pass writes: internal columns, field columns, then `extra` (name, type).

        The `list_columns` among `columns` hold list fields (text[], SPEC 9).
        """
        schema = company_schema(company)
        table = rules_tmp_table(run_id, pass_no)
        cols = [
            sql.SQL("{} bigint NOT NULL").format(ident(ORD)),
            sql.SQL("{} text NOT NULL").format(ident(KEY)),
            sql.SQL("{} integer NOT NULL").format(ident(SRC)),
        ]
        lists = set(list_columns)
        cols += [_staged_col(c, lists) for c in columns]
        cols += [sql.SQL("{} " + typ).format(ident(name)) for name, typ in extra]
        with raw_connection(self.engine) as conn, conn.cursor() as cur:
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(schema, table)))
            cur.execute(sql.SQL("CREATE UNLOGGED TABLE {} ({})").format(ident(schema, table), sql.SQL(", ").join(cols)))
        return table

    def create_rules_tmp_as(
        self,
        company: str,
        run_id: str,
        pass_no: int,
        columns: Sequence[str],
        select: sql.Composable,
        params: Sequence[Any],
        *,
        conn: Any,
    ) -> tuple[str, int]:
        """Create and fill one pass table by CREATE TABLE AS in the caller's transaction: (table, rows).

        Used when a pass runs whole (batch mode): unlike INSERT, CREATE TABLE AS
        appends rows in the order they come, so the items stay in feed order.
        """
        table = rules_tmp_table(run_id, pass_no)
        target = ident(company_schema(company), table)
        return table, _create_as(conn, target, columns, select, params)

    def create_rules_groups_as(
        self, company: str, run_id: str, pass_no: int, select: sql.Composable, params: Sequence[Any]
    ) -> str:
        """Create and fill the groups table of grouped pass `pass_no` (sqlgen.groups_select); its name.

        Indexed by its keys (`_ff_gk`, `_ff_gk2`), unique: each item of the pass may read its group's row
        by them, and a reader of a pass view that uses none of the group's values has the join removed.
        The work_mem of a pass lets the (parallel) aggregate hash its groups instead of sorting every
        item by group (250k groups of 1M items: 1.7 s -> 1.1 s a half).
        """
        table = rules_groups_table(run_id, pass_no)
        target = ident(company_schema(company), table)
        with raw_connection(self.engine) as conn, conn.cursor() as cur:
            cur.execute("SET LOCAL work_mem = '64MB'")
            # As in the passes: compiling the aggregate's expressions (JIT) cost more than it saved (60 ms).
            cur.execute("SET LOCAL jit = off")
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(target))
            cur.execute(sql.SQL("CREATE UNLOGGED TABLE {} AS ").format(target) + select, list(params) or None)
            # Unique (one row per group): a reader that uses none of a group's values drops the join.
            cur.execute(sql.SQL("CREATE UNIQUE INDEX {} ON {} (_ff_gk, _ff_gk2)").format(ident(f"{table}_k"), target))
        return table

    # -- run-scoped relations (the data plane decides which: firefeed/dataplane) --
    def relations(self, prefix: str, company: str | None = None, *, views: bool = False) -> list[tuple[str, str]]:
        """(schema, name) of the tables (or, with `views`, the views) named `prefix`*, of one company or all."""
        pattern = _like_prefix(prefix)
        if company is None:
            everyone = _like_prefix(COMPANY_SCHEMA_PREFIX)
            if views:
                rows = self._query(_sql("run_views"), {"schemas": everyone, "views": pattern})
            else:
                rows = self._query(_sql("run_tables"), {"schemas": everyone, "tables": pattern})
        else:
            schema = company_schema(company)
            if views:
                rows = self._query(_sql("run_views_of_schema"), {"schema": schema, "views": pattern})
            else:
                rows = self._query(_sql("run_tables_of_schema"), {"schema": schema, "tables": pattern})
        return [(r[0], r[1]) for r in rows]

    def count_relations(self, prefix: str, *, conn: Any = None) -> int:
        """How many tables named `prefix`* every company has. With `conn`, in the caller's transaction."""
        params = {"schemas": _like_prefix(COMPANY_SCHEMA_PREFIX), "tables": _like_prefix(prefix)}
        return int(self._query(_sql("count_run_tables"), params, conn=conn)[0][0])

    def create_view(
        self,
        company: str,
        view: str,
        select: sql.Composable,
        params: Sequence[Any] = (),
        *,
        columns: Sequence[str] | None = None,
    ) -> None:
        """CREATE VIEW `view` AS `select` in the company schema (named `columns` when given)."""
        target = ident(company_schema(company), view)
        if columns is None:
            head = sql.SQL("CREATE VIEW {} AS ").format(target)
        else:
            head = sql.SQL("CREATE VIEW {} ({}) AS ").format(target, sql.SQL(", ").join(ident(c) for c in columns))
        self._ddl(head + select, params)

    def drop_relation(self, schema: str, name: str, *, view: bool = False, cascade: bool = False) -> None:
        """DROP TABLE (or VIEW) IF EXISTS `schema`.`name`, in its own transaction."""
        what = sql.SQL("VIEW" if view else "TABLE")
        how = sql.SQL(" CASCADE" if cascade else "")
        self._ddl(sql.SQL("DROP {} IF EXISTS {}").format(what, ident(schema, name)) + how)

    def drop_unless_live(self, schema: str, name: str, *, view: bool, run_id: str | None) -> bool:
        """DROP ... CASCADE `schema`.`name` unless run `run_id` is PENDING or RUNNING; whether it was dropped.

        The live-run check and the drop happen in one transaction holding a share lock on the run row,
        so a run that is still going never loses its table. No IF EXISTS: a relation its own run dropped
        since the caller listed it is not dropped here (False).
        """
        try:
            with raw_connection(self.engine) as conn, conn.cursor() as cur:
                if run_id is not None:
                    cur.execute(_sql("run_is_live"), {"run_id": run_id})
                    if cur.fetchone() is not None:
                        return False
                what = sql.SQL("VIEW" if view else "TABLE")
                cur.execute(sql.SQL("DROP {} {} CASCADE").format(what, ident(schema, name)))
        except pg_errors.UndefinedTable:
            return False
        return True

    def rename_relation(self, company: str, name: str, new: str, *, view: bool, conn: Any) -> None:
        """ALTER TABLE (or VIEW) ... RENAME TO `new`, in the caller's transaction."""
        what = sql.SQL("VIEW" if view else "TABLE")
        with conn.cursor() as cur:
            cur.execute(
                sql.SQL("ALTER {} {} RENAME TO {}").format(what, ident(company_schema(company), name), ident(new))
            )

    def comment_relation(self, company: str, name: str, comment: str, *, view: bool, conn: Any) -> None:
        """COMMENT ON TABLE (or VIEW) `name` IS `comment`, in the caller's transaction."""
        what = sql.SQL("VIEW" if view else "TABLE")
        with conn.cursor() as cur:
            cur.execute(
                sql.SQL("COMMENT ON {} {} IS %s").format(what, ident(company_schema(company), name)), (comment,)
            )

    def table_comment(self, company: str, table: str) -> str | None:
        """The comment of a table of the company schema (`comment_relation`); None when none or no table."""
        rows = self._query(_sql("table_comment"), {"qualified": sql_qualified(company_schema(company), table)})
        return None if rows[0][0] is None else str(rows[0][0])

    def kept_relations(self, company: str, prefix: str, comment: str) -> list[tuple[str, str]]:
        """(name, kind) of the relations named `prefix`* of the company schema commented `comment`."""
        params = {"schema": company_schema(company), "pattern": _like_prefix(prefix), "comment": comment}
        return [(r[0], r[1]) for r in self._query(_sql("kept_results"), params)]

    # -- export diff tables (feed quality, #9) ----------------------------
    def create_export_tmp(
        self,
        company: str,
        run_id: str,
        index: int,
        *,
        with_id: bool,
        checks: str | None = None,
        conn: Any = None,
        with_payload: bool = False,
        with_baseline_tid: bool = False,
    ) -> str:
        """The table one export of a run fills with its diff and check rows (`quality` names the columns).

        `checks` labels the table with the fingerprint of the channel checks its
        flags come from (a table comment, which survives the rename): the next
        run reuses an unchanged item's flags only when its checks are the same.
        After the fingerprint, the comment may carry a JSON document (`quality.label`):
        what each flag bit means, so the findings list can read the table alone.
        `with_payload` adds `j`, the item's output values, for an export with `sync` (only those pay for it).
        Dropped by `RunTables.drop_export_tmp_for_run` when the run ends, or renamed into the
        published one by `promote_export_keys`; a crashed run's is the janitor's.

        Unlike the other run tables it is LOGGED from the start: a published one is the drop guard's
        baseline and must survive a crash, and writing its WAL here, while the export's file is
        written beside it, costs nothing on the run's path (an `ALTER TABLE ... SET LOGGED` at
        publish time rewrote every row there and then: +2.7 s on 1M items).
        """
        schema = company_schema(company)
        table = export_tmp_table(run_id, index)
        cols = [
            sql.SQL("k text NOT NULL"),
            sql.SQL("kh bigint NOT NULL"),
            sql.SQL("h bigint NOT NULL"),
            sql.SQL("f bigint NOT NULL"),
            sql.SQL("o bigint NOT NULL"),
            sql.SQL("d smallint NOT NULL"),
        ]
        if with_id:
            cols.append(sql.SQL("i text NOT NULL"))
        # A flagged item's checked values, for the findings list (#49), its variant hash (`variants`) and, for
        # a changed item, its published one (the group it left is judged again).
        cols += [sql.SQL("fv text[]"), sql.SQL("v bigint"), sql.SQL("w bigint")]
        if with_payload:
            # SPEC 10 C9: an export with `sync` keeps each item's output values, what the sync engine sends
            # (firefeed/sync): a JSON array in the export's column order, NULL for an item the file leaves out.
            cols.append(sql.SQL("j jsonb"))
        if with_baseline_tid:
            # A delta's taken-over run table: each row's published row, deleted by it at the take-over.
            cols.append(sql.SQL("{} tid").format(ident(BASELINE_TID)))
        with _connection(self.engine, conn) as c, c.cursor() as cur:
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(schema, table)))
            cur.execute(sql.SQL("CREATE TABLE {} ({})").format(ident(schema, table), sql.SQL(", ").join(cols)))
            if checks is not None:
                cur.execute(sql.SQL("COMMENT ON TABLE {} IS %s").format(ident(schema, table)), (f"checks {checks}",))
        return table

    def create_sync_ledger(self, company: str, table: str, conn: Any = None) -> None:
        """An export's sync ledger (SPEC 10 C10, firefeed/sync/ledger.py), if it is not there yet.

        LOGGED: it is the memory of what the channel holds; a crash must not make FireFeed forget it.
        `op`/`status` are text checked by the table, so a reader of a row never meets another word.
        """
        schema = company_schema(company)
        with _connection(self.engine, conn) as c, c.cursor() as cur:
            cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident(schema)))
            cur.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} ("
                    "k text PRIMARY KEY, kh bigint, h bigint, "
                    "op text NOT NULL CHECK (op IN ('insert', 'delete')), "
                    "kind text NOT NULL CHECK (kind IN ('new', 'changed', 'resend', 'repair', 'delete')), "
                    "status text NOT NULL CHECK (status IN ('pending', 'sending', 'acked', 'failed')), "
                    "attempts integer NOT NULL DEFAULT 0, code text, message text, "
                    "planned_at timestamptz NOT NULL DEFAULT now(), sent_at timestamptz, acked_at timestamptz, "
                    "inserted_at timestamptz, issues jsonb, issues_at timestamptz, left_out jsonb, cid text)"
                ).format(ident(schema, table))
            )
            # Columns added since (#51), to a ledger made before them, empty: `left_out`, the optional attributes
            # the last acked insert went without (none then: such an item was not sent at all); `cid`, the channel
            # id its operation sends (NULL: the key, what every item was sent under then).
            cur.execute(_sql("table_columns"), {"schema": schema, "table": table})
            present = {r[0] for r in cur.fetchall()}
            for name, kind in (("left_out", "jsonb"), ("cid", "text")):
                if name not in present:  # asked first: the ALTER would lock the ledger at every sync
                    cur.execute(
                        sql.SQL("ALTER TABLE {} ADD COLUMN {} {}").format(
                            ident(schema, table), ident(name), sql.SQL(kind)
                        )
                    )
            # the channel's answers (its listing, repair) name items by channel id
            cur.execute(
                sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} ((coalesce(cid, k)))").format(
                    ident(table[:55] + "_cid"), ident(schema, table)
                )
            )
            cur.execute(
                sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (status) WHERE status IN ('pending', 'sending')").format(
                    ident(table[:55] + "_todo"), ident(schema, table)
                )
            )

    def drop_sync_ledger(self, company: str, table: str) -> None:
        """Forget what a channel holds (the export's sync now points at another account or catalog)."""
        with raw_connection(self.engine) as conn, conn.cursor() as cur:
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(company_schema(company), table)))

    def promote_export_keys(
        self,
        company: str,
        renames: Sequence[tuple[str, str]],
        drop: Sequence[str] = (),
        key_comments: Mapping[str, str] | None = None,
        baselines: Mapping[str, str] | None = None,
    ) -> None:
        """Make each run table (first) the published one (second), all in one transaction; drop `drop`.

        `key_comments`: published table -> the comment its key column gets in the same transaction (the file it
        describes, `diff.FILE_TAG`), so the tag and the rows can only change together.

        The same move keeps a blocked run's tables as the exports' checked ones (`checked_keys_table`),
        and a publish drops those (`drop`): the published rows are then the newer findings.

        The run table is LOGGED already (`create_export_tmp`), so `SET LOGGED` is a no-op; it stays for
        a run table an older release created UNLOGGED during an upgrade, since crash recovery would
        empty an UNLOGGED baseline and silently disarm the guard for the next run.

        A run table holding only a delta's changed rows (its key column commented `TAKE_OVER` and the tag of the
        baseline it was made over, export/patch.py) is not renamed: the published table takes its rows in place
        (`_take_over`), in the same transaction, when it is still that baseline; else it is left as it was (the
        new file's tag is then not its own, so the next delta writes in full) and the run table dropped. Such a
        run table kept under another name (a blocked run's checked table, whose findings are read alone) is made
        whole first from its baseline (`baselines`: run table -> the published table it was made over).
        """
        if not renames and not drop:
            return
        schema = company_schema(company)
        with raw_connection(self.engine) as conn, conn.cursor() as cur:
            for name in drop:
                cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(schema, name)))
            for run_table, published in renames:
                marker = key_comment(cur, schema, run_table)
                if marker is not None and marker.startswith(TAKE_OVER):
                    tag, base = marker[len(TAKE_OVER) :], (baselines or {}).get(run_table, published)
                    if base == published:
                        if _take_over(cur, schema, run_table, published, tag):
                            # The new file's tag, or none (as a renamed run table has): never the last file's.
                            cur.execute(
                                sql.SQL("COMMENT ON COLUMN {}.k IS %s").format(ident(schema, published)),
                                ((key_comments or {}).get(published),),
                            )
                        cur.execute(sql.SQL("DROP TABLE {}").format(ident(schema, run_table)))
                        continue
                    if not _fill_whole(cur, schema, run_table, base, tag):
                        cur.execute(sql.SQL("DROP TABLE {}").format(ident(schema, run_table)))
                        continue
                cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(schema, published)))
                cur.execute(sql.SQL("ALTER TABLE {} SET LOGGED").format(ident(schema, run_table)))
                cur.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(ident(schema, run_table), ident(published)))
                comment = (key_comments or {}).get(published)
                if comment is not None:
                    cur.execute(sql.SQL("COMMENT ON COLUMN {}.k IS %s").format(ident(schema, published)), (comment,))


#: A delta's taken-over run table's column of each row's published row (its TID; never a published column).
BASELINE_TID = "pt"

#: the start of a delta run table's key column comment: it holds only the changed items' rows, over the baseline
#: whose key column tag follows (export/patch.py); `promote_export_keys` changes that baseline in place
TAKE_OVER = "over "


def table_comment_in(cur: Any, schema: str, table: str) -> str | None:
    """The comment of `table` read on the caller's cursor (its transaction); None: no table, no comment."""
    return _comment(cur, _sql("table_comment"), schema, table)


def key_comment(cur: Any, schema: str, table: str) -> str | None:
    """The comment on `table`'s key column `k` (None: no table, no comment)."""
    return _comment(cur, _sql("key_comment"), schema, table)


def _comment(cur: Any, query: str, schema: str, table: str) -> str | None:
    cur.execute(query, {"qualified": sql_qualified(schema, table)})
    row = cur.fetchone()
    return row[0] if row is not None else None


def _take_over(cur: Any, schema: str, run_table: str, published: str, tag: str) -> bool:
    """The published table made what the delta's run table stands for, in the caller's transaction: the baseline
    (tagged `tag`) less the changed items' rows, with those of `run_table`, the previous run's duplicate bits
    reset as a full run's copy of an unchanged row resets them; its table comment (the checks' fingerprint and
    label) the run table's. False, changing nothing, when `published` is no longer that baseline or its rows at
    the changed items' positions are not theirs (the savepoint undoes a partial change)."""
    from firefeed.export.quality import DUPLICATE_BIT

    run, pub = ident(schema, run_table), ident(schema, published)
    cur.execute(_sql("table_exists"), {"qualified": sql_qualified(schema, published)})
    if not cur.fetchone()[0]:
        log.warning("the baseline %s is gone: the delta's run table %s is dropped", published, run_table)
        return False
    cur.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(pub))
    if key_comment(cur, schema, published) != tag:
        log.warning("the baseline %s is not the one the delta's run table %s was made over", published, run_table)
        return False
    started = time.perf_counter()
    cur.execute("SAVEPOINT take_over")
    # The changed rows hashed and probed by the baseline's scan: without statistics (the run tables are never
    # analyzed) the planner may sort the whole baseline for a merge join.
    cur.execute("SET LOCAL enable_mergejoin = off")
    cur.execute("SET LOCAL enable_nestloop = off")
    cur.execute(sql.SQL("SELECT count(*) FROM {}").format(run))
    expected = int(cur.fetchone()[0])
    names = _columns_of(cur, schema, run_table)
    if BASELINE_TID in names:
        # By the TID of each changed item's published row, read where EXPORT joined them (`quality._insert`):
        # no scan of the baseline (1M: 0.4-0.7 s). Each deleted row checked to be its item's, where it was.
        cur.execute(
            sql.SQL(
                "WITH gone AS (DELETE FROM {pub} p USING {run} r"
                " WHERE p.ctid = ANY(ARRAY(SELECT {pt} FROM {run})) AND p.ctid = r.{pt}"
                " RETURNING p.k AS k, r.k AS rk, p.o AS o, r.o AS ro)"
                " SELECT count(*), count(*) FILTER (WHERE k <> rk OR o <> ro) FROM gone"
            ).format(pub=pub, run=run, pt=ident(BASELINE_TID))
        )
    else:
        # By position (a hash of bigints, not of keys), each deleted row checked to be its changed item's.
        cur.execute(
            sql.SQL(
                "WITH gone AS (DELETE FROM {pub} p USING {run} r WHERE p.o = r.o RETURNING p.k AS k, r.k AS rk)"
                " SELECT count(*), count(*) FILTER (WHERE k <> rk) FROM gone"
            ).format(pub=pub, run=run)
        )
    deleted, wrong = (int(v) for v in cur.fetchone())
    if deleted != expected or wrong:
        cur.execute("ROLLBACK TO SAVEPOINT take_over")
        log.warning("the baseline %s does not hold the delta's changed items where it should: left", published)
        return False
    # The duplicate bit, which the findings read from the published table, reset as `unchanged_values` resets
    # it. The state `d` and the variant hash `w` are left: they are the working values of the run that wrote
    # each row, and no reader takes them from a published table (the next run's diff reads `h`, `k`, `kh`,
    # `o`; a copy of its rows goes through `unchanged_values`). Resetting them rewrote every row of a table
    # a first run published (all `added`): ~1 s of a 1M-item first delta.
    # A table without the channel id `i` never had the bit set (`quality._duplicates` marks by it): not scanned.
    if "i" in _columns_of(cur, schema, published):
        cur.execute(
            sql.SQL("UPDATE {pub} SET f = f & {keep} WHERE (f & {dup}) <> 0").format(
                pub=pub, keep=sql.Literal(~DUPLICATE_BIT), dup=sql.Literal(DUPLICATE_BIT)
            )
        )
    columns = sql.SQL(", ").join(ident(c) for c in names if c != BASELINE_TID)
    cur.execute(sql.SQL("INSERT INTO {pub} ({c}) SELECT {c} FROM {run}").format(pub=pub, c=columns, run=run))
    cur.execute(sql.SQL("COMMENT ON TABLE {} IS %s").format(pub), (table_comment_in(cur, schema, run_table),))
    cur.execute("RELEASE SAVEPOINT take_over")
    # On the run's serial path after the publish (EXPORT's recorded time ends before it): logged to be measured.
    log.info(
        "the baseline %s took %d changed rows in place in %.3f s",
        published,
        expected,
        time.perf_counter() - started,
        extra={"rows": expected},
    )
    return True


def _fill_whole(cur: Any, schema: str, run_table: str, baseline: str, tag: str) -> bool:
    """A delta's run table (only the changed items' rows) made the whole it stands for, in the caller's
    transaction: the rows of `baseline` (tagged `tag`) at no changed item's position added (`unchanged_values`)
    and its mark cleared. False, adding nothing, when `baseline` is no longer that baseline."""
    cur.execute(_sql("table_exists"), {"qualified": sql_qualified(schema, baseline)})
    if not cur.fetchone()[0]:
        return False
    cur.execute(sql.SQL("LOCK TABLE {} IN SHARE MODE").format(ident(schema, baseline)))
    if key_comment(cur, schema, baseline) != tag:
        return False
    run = ident(schema, run_table)
    names = [n for n in _columns_of(cur, schema, run_table) if n != BASELINE_TID]
    cur.execute(
        sql.SQL(
            "INSERT INTO {run} ({cols}) SELECT {values} FROM {old} b"
            " WHERE NOT EXISTS (SELECT 1 FROM {run} r WHERE r.o = b.o)"
        ).format(
            run=run,
            cols=sql.SQL(", ").join(ident(n) for n in names),
            values=unchanged_values(names),
            old=ident(schema, baseline),
        )
    )
    cur.execute(sql.SQL("COMMENT ON COLUMN {}.k IS NULL").format(run))
    # Whole now, it is kept as a full run's table is: the published rows' TIDs are no column of those.
    cur.execute(sql.SQL("ALTER TABLE {} DROP COLUMN IF EXISTS {}").format(run, ident(BASELINE_TID)))
    return True


def unchanged_values(names: Sequence[str]) -> sql.Composable:
    """The run table's values (`names`, in order) of an item whose content hash is its published one, `b` its
    published row, as a full run writes them: its flags less the duplicate bit (the run's own: `diagnose` finds
    the duplicate ids again over all rows), the unchanged state, no published variant hash (`w`)."""
    from firefeed.export.diff import UNCHANGED
    from firefeed.export.quality import DUPLICATE_BIT

    values = {"f": sql.SQL("b.f & {}").format(sql.Literal(~DUPLICATE_BIT)), "d": sql.Literal(UNCHANGED)}
    values["w"] = sql.SQL("NULL::bigint")
    return sql.SQL(", ").join(values.get(n, sql.SQL("b.{}").format(ident(n))) for n in names)


def _columns_of(cur: Any, schema: str, table: str) -> list[str]:
    cur.execute(_sql("table_columns"), {"schema": schema, "table": table})
    return [r[0] for r in cur.fetchall()]


def table_pages(cur: Any, schema: str, table: str) -> int:
    """The heap pages of `table`, on the caller's cursor (EXPORT asks inside its own read transaction)."""
    cur.execute(_sql("table_pages"), {"qualified": sql_qualified(schema, table)})
    return int(cur.fetchone()[0])


def view_reads(cur: Any, schema: str, view: str) -> list[tuple[str, str]]:
    """(name, kind 'r' or 'v') of the tables and views `view` reads, on the caller's cursor."""
    cur.execute(_sql("view_tables"), {"qualified": sql_qualified(schema, view)})
    return [(r[0], r[1]) for r in cur.fetchall()]


def relation_kind(cur: Any, schema: str, name: str) -> str:
    """'r' (a table), 'v' (a view), or '' when `schema`.`name` is no relation; on the caller's cursor."""
    cur.execute(_sql("relation_kind"), {"qualified": sql_qualified(schema, name)})
    return str((cur.fetchone() or ("",))[0] or "")


def sql_qualified(schema: str, table: str) -> str:
    """`schema.table` quoted as text, for to_regclass()."""
    return '"' + schema.replace('"', '""') + '"."' + table.replace('"', '""') + '"'


def _order_index_name(table: str) -> str:
    return "ix_" + table[: 63 - 7] + "_ord"
