"""What a succeeded run keeps of its rules' result for `firefeed values` (SPEC P33), and its drop.

The run's pass tables are renamed (`names.kept_result_table` / `kept_part_table`) instead of dropped
when it ends: free, where copying a million items is not. The next succeeded run of the project drops
the earlier ones. The DDL is the SchemaService's.
"""

from __future__ import annotations

import logging

from firefeed.dataplane.names import (
    RESULT_PREFIX,
    RULES_TMP_PREFIX,
    kept_part_table,
    kept_result_table,
    run_id_of_tmp_table,
)
from firefeed.dataplane.views import relations_read
from firefeed.db.engine import raw_connection
from firefeed.schema.identifiers import company_schema
from firefeed.schema.service import SchemaService

log = logging.getLogger(__name__)


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
