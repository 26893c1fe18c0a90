"""The tables a run makes, listed and dropped: its pass tables (`rules_tmp_*`, with their groups tables and
views) and its export diff tables (`export_tmp_*`).

A run drops its own when it ends, whatever the outcome (`drop_for_run`); a crashed run's are the
janitor's (`drop_orphans`), never a live run's. Every name carries its run id (firefeed/dataplane/names.py),
so the listing alone tells a table's owner. The DDL and the catalog queries are the SchemaService's.
"""

from __future__ import annotations

import logging
from typing import Any

from firefeed.dataplane.names import EXPORT_TMP_PREFIX, RULES_TMP_PREFIX, run_id_of_tmp_table
from firefeed.schema.service import SchemaService

log = logging.getLogger(__name__)


class RunTables:
    """The run-scoped tables and views of every company schema, through the SchemaService."""

    def __init__(self, schema: SchemaService) -> None:
        self.schema = schema

    def list_rules_tmp(self, company: str | None = None) -> list[tuple[str, str]]:
        """(schema, table) of every rules pass table, of one company or all."""
        return self.schema.relations(RULES_TMP_PREFIX, company)

    def list_rules_tmp_views(self, company: str | None = None) -> list[tuple[str, str]]:
        """(schema, view) of every rules pass view and view of parts, of one company or all.

        Dropping the run's tables (CASCADE) does not reach a view that reads none of them: a pass
        computed on read over the items table or the rules' kept result. Left, such a view would stop
        the next MERGE's DROP of the items table (and hold the kept result)."""
        return self.schema.relations(RULES_TMP_PREFIX, company, views=True)

    def list_export_tmp(self, company: str | None = None) -> list[tuple[str, str]]:
        """(schema, table) of every run-scoped export diff table, of one company or all."""
        return self.schema.relations(EXPORT_TMP_PREFIX, company)

    def count_rules_tmp(self, *, conn: Any = None) -> int:
        """How many rules pass tables of every company are alive (live runs' and orphans not yet dropped).

        With `conn`, in the caller's transaction (the metrics scrape runs it under its own statement timeout).
        """
        return self.schema.count_relations(RULES_TMP_PREFIX, conn=conn)

    def drop_rules_tmp_for_run(self, company: str, run_id: str) -> int:
        """Drop every pass table and view of one run; called when the run ends, whatever the outcome."""
        for schema, view in self.list_rules_tmp_views(company):
            if run_id_of_tmp_table(view) == run_id:
                self.schema.drop_relation(schema, view, view=True, cascade=True)
        dropped = 0
        for schema, table in self.list_rules_tmp(company):
            if run_id_of_tmp_table(table) == run_id:
                # CASCADE: a split run's result view goes with its tables.
                self.schema.drop_relation(schema, table, cascade=True)
                dropped += 1
        return dropped

    def drop_export_tmp_for_run(self, company: str, run_id: str) -> int:
        """Drop the export diff tables a run still has (published ones were renamed away already)."""
        dropped = 0
        for schema, table in self.list_export_tmp(company):
            if run_id_of_tmp_table(table) == run_id:
                self.schema.drop_relation(schema, table)
                dropped += 1
        return dropped

    def drop_for_run(self, company: str, run_id: str) -> None:
        """Everything run-scoped a run still has: its pass tables and views, then its export diff tables."""
        self.drop_rules_tmp_for_run(company, run_id)
        self.drop_export_tmp_for_run(company, run_id)

    def drop_orphan_tmp_tables(self) -> list[str]:
        """Drop pass tables whose run is not PENDING or RUNNING (a crashed run's leftovers).

        The live-run check and the drop happen in one transaction holding a share
        lock on the run row (`SchemaService.drop_unless_live`), so a run that is still
        going never loses its table.
        """
        dropped: list[str] = []
        views = [(schema, view, True) for schema, view in self.list_rules_tmp_views()]
        tables = [(schema, table, False) for schema, table in self.list_rules_tmp() + self.list_export_tmp()]
        for schema, name, is_view in views + tables:
            if self.schema.drop_unless_live(schema, name, view=is_view, run_id=run_id_of_tmp_table(name)):
                dropped.append(f"{schema}.{name}")
        if dropped:
            log.info("janitor dropped %d orphan rules_tmp tables", len(dropped), extra={"tables": dropped})
        return dropped
