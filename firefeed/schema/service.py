"""SchemaService: every piece of per-company DDL goes through here.

Each call is its own transaction. Calls on different companies touch different
schemas and never block each other; calls on the same company serialize through
Postgres' own catalog locks, so there is no application lock. The data tables are
UNLOGGED: they are rebuilt from the sources on every run, so skipping the WAL
halves the write cost and a crash only costs a re-run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from psycopg2 import errors as pg_errors
from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.db.engine import get_engine, raw_connection
from firefeed.schema.identifiers import (
    KEY,
    ORD,
    RULES_TMP_PREFIX,
    SRC,
    company_schema,
    ident,
    rules_tmp_table,
    run_id_of_tmp_table,
)

log = logging.getLogger(__name__)

_TEXT_COL = sql.SQL("{} text NOT NULL DEFAULT ''")
_CATALOG_RACES = (
    pg_errors.UniqueViolation,
    pg_errors.DuplicateObject,
    pg_errors.DuplicateTable,
    pg_errors.DuplicateSchema,
    pg_errors.DuplicateColumn,
)


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

    def _query(self, statement: sql.Composable | str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with raw_connection(self.engine) as conn, conn.cursor() as cur:
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

    def create_staging_table(self, company: str, table: str, columns: Iterable[str]) -> None:
        """A fresh staging table for one source's rows (dropped and recreated on each parse)."""
        schema = company_schema(company)
        cols = [
            sql.SQL("{} bigint NOT NULL").format(ident(ORD)),
            sql.SQL("{} integer NOT NULL").format(ident("_ff_line")),
        ]
        cols += [_TEXT_COL.format(ident(c)) for c in columns]
        with raw_connection(self.engine) as conn, conn.cursor() as cur:
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(schema, table)))
            cur.execute(sql.SQL("CREATE UNLOGGED TABLE {} ({})").format(ident(schema, table), sql.SQL(", ").join(cols)))

    def add_columns(self, company: str, table: str, columns: Iterable[str]) -> list[str]:
        """Add text columns that are missing (addColumn semantics: never a rebuild). Returns the added ones."""
        schema = company_schema(company)
        existing = set(self.table_columns(company, table))
        missing = [c for c in dict.fromkeys(columns) if c not in existing]
        if not missing:
            return []
        adds = sql.SQL(", ").join(sql.SQL("ADD COLUMN IF NOT EXISTS ") + _TEXT_COL.format(ident(c)) for c in missing)
        # A constant default makes ADD COLUMN a catalog-only change in Postgres 11+.
        self._ddl(sql.SQL("ALTER TABLE {} ").format(ident(schema, table)) + adds)
        return missing

    def add_column(self, company: str, table: str, column: str) -> bool:
        return bool(self.add_columns(company, table, [column]))

    def table_columns(self, company: str, table: str) -> list[str]:
        rows = self._query(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
            (company_schema(company), table),
        )
        return [r[0] for r in rows]

    def table_exists(self, company: str, table: str) -> bool:
        rows = self._query("SELECT to_regclass(%s) IS NOT NULL", (sql_qualified(company_schema(company), table),))
        return bool(rows[0][0])

    def table_has_rows(self, company: str, table: str) -> bool:
        """False for a missing or empty table (an UNLOGGED table is emptied by crash recovery)."""
        if not self.table_exists(company, table):
            return False
        rows = self._query(sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(ident(company_schema(company), table)))
        return bool(rows[0][0])

    def drop_table(self, company: str, table: str) -> None:
        self._ddl(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(company_schema(company), table)))

    def index_order(self, company: str, table: str) -> None:
        """Index item positions so exports read items in order without sorting the whole table."""
        schema = company_schema(company)
        self._ddl(
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} ({})").format(
                ident(_order_index_name(table)), ident(schema, table), ident(ORD)
            )
        )
        self._ddl(sql.SQL("ANALYZE {}").format(ident(schema, table)))

    # -- rules pass tables ----------------------------------------------
    def create_rules_tmp(
        self, company: str, run_id: str, pass_no: int, columns: Sequence[str], extra: Sequence[tuple[str, str]] = ()
    ) -> str:
        """Create the table one rules pass writes: internal columns, field columns, then `extra` (name, type)."""
        schema = company_schema(company)
        table = rules_tmp_table(run_id, pass_no)
        cols = [
            sql.SQL("{} bigint NOT NULL").format(ident(ORD)),
            sql.SQL("{} text NOT NULL").format(ident(KEY)),
            sql.SQL("{} integer NOT NULL").format(ident(SRC)),
        ]
        cols += [_TEXT_COL.format(ident(c)) for c in columns]
        cols += [sql.SQL("{} " + typ).format(ident(name)) for name, typ in extra]
        with raw_connection(self.engine) as conn, conn.cursor() as cur:
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(schema, table)))
            cur.execute(sql.SQL("CREATE UNLOGGED TABLE {} ({})").format(ident(schema, table), sql.SQL(", ").join(cols)))
        return table

    def list_rules_tmp(self, company: str | None = None) -> list[tuple[str, str]]:
        """(schema, table) of every rules pass table, of one company or all."""
        if company is None:
            rows = self._query(
                "SELECT schemaname, tablename FROM pg_tables "
                "WHERE schemaname LIKE 'company\\_%%' AND tablename LIKE %s",
                (RULES_TMP_PREFIX.replace("_", "\\_") + "%",),
            )
        else:
            rows = self._query(
                "SELECT schemaname, tablename FROM pg_tables WHERE schemaname = %s AND tablename LIKE %s",
                (company_schema(company), RULES_TMP_PREFIX.replace("_", "\\_") + "%"),
            )
        return [(r[0], r[1]) for r in rows]

    def drop_rules_tmp_for_run(self, company: str, run_id: str) -> int:
        """Drop every pass table of one run; called when the run ends, whatever the outcome."""
        dropped = 0
        for schema, table in self.list_rules_tmp(company):
            if run_id_of_tmp_table(table) == run_id:
                self._ddl(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(schema, table)))
                dropped += 1
        return dropped

    def drop_orphan_tmp_tables(self) -> list[str]:
        """Drop pass tables whose run is not PENDING or RUNNING (a crashed run's leftovers).

        The live-run check and the drop happen in one transaction holding a share
        lock on the run row, so a run that is still going never loses its table.
        """
        dropped: list[str] = []
        for schema, table in self.list_rules_tmp():
            run_id = run_id_of_tmp_table(table)
            with raw_connection(self.engine) as conn, conn.cursor() as cur:
                live = False
                if run_id is not None:
                    cur.execute(
                        "SELECT 1 FROM pipeline_runs WHERE id = %s AND status IN ('PENDING', 'RUNNING') FOR SHARE",
                        (run_id,),
                    )
                    live = cur.fetchone() is not None
                if live:
                    continue
                cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(schema, table)))
                dropped.append(f"{schema}.{table}")
        if dropped:
            log.info("janitor dropped %d orphan rules_tmp tables", len(dropped), extra={"tables": dropped})
        return dropped


def sql_qualified(schema: str, table: str) -> str:
    """`schema.table` quoted as text, for to_regclass()."""
    return '"' + schema.replace('"', '""') + '"."' + table.replace('"', '""') + '"'


def _order_index_name(table: str) -> str:
    return "ix_" + table[: 63 - 7] + "_ord"
