"""An enrich source's previous staged rows, kept between runs for the delta to compare (#52).

When PARSE stages an enrich source again in full, the table of its rows as they stood is renamed
(`identifiers.previous_staging_table`) instead of dropped: free, where comparing the new rows with
the merged items costs a full MERGE and more. A source PARSE patches (pipeline/stage_patch.py) keeps
none: its staging is changed in place, and the patch's old rows are what the delta compares; a kept
table an earlier full parse left is dropped then. The renamed table is commented with what it holds:
the source as it was staged (its validators and parse signature, `SourceState`), its fields and
rows. A delta (pipeline/delta.py) compares it with the new rows only when that state is the one the
last succeeded run merged (its MERGE `state`): the items table is then those rows merged, and the
keys whose rows differ are the only items the change can reach. Anything else (no kept table, one
of another state, one emptied by crash recovery: the tables are UNLOGGED) and the delta finds its
changed items the slow way. The DDL is the SchemaService's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from firefeed.dataplane.state import SourceState
from firefeed.db.engine import raw_connection
from firefeed.db.models import Source
from firefeed.schema.identifiers import previous_staging_table, staging_table
from firefeed.schema.service import SchemaService

#: the first word of a kept table's comment (the JSON of `KeptStaging` follows)
_TAG = "staged "


@dataclass(frozen=True)
class KeptStaging:
    """The rows an enrich source was staged with before its last parse: their table and what they are."""

    table: str
    state: SourceState
    fields: list[str]
    rows: int


def keep_previous(schema: SchemaService, company: str, project: str, source: str, row: Source | None) -> None:
    """Before `source` is staged again: its staged table kept as its previous rows (replacing the ones kept
    before), described by `row`, its `sources` row as it stands (None: no row). When the row does not say
    the staged rows are whole (a parse that failed, or none yet), the rows kept before stay: they are
    still what they say, and a delta checks that against the last succeeded run."""
    current = staging_table(project, source)
    if (
        row is None
        or row.parse_signature is None
        or row.content_sha256 is None
        or row.staged_fields is None
        or not schema.table_exists(company, current)
    ):
        return
    previous = previous_staging_table(project, source)
    tag = {
        "state": SourceState(row.etag, row.last_modified, row.content_sha256, row.parse_signature).to_json(),
        "fields": list(row.staged_fields),
        "rows": int((row.staged_stats or {}).get("rows", 0)),
    }
    schema.drop_table(company, previous)
    with raw_connection(schema.engine) as conn:
        schema.rename_relation(company, current, previous, view=False, conn=conn)
        schema.comment_relation(company, previous, _TAG + json.dumps(tag, sort_keys=True), view=False, conn=conn)


def drop_previous(schema: SchemaService, company: str, project: str, source: str) -> None:
    """Drop the previous rows kept of `source` (it is no enrich source now: no delta reads them)."""
    schema.drop_table(company, previous_staging_table(project, source))


def previous_rows(
    schema: SchemaService, company: str, project: str, source: str, merged: SourceState | None
) -> KeptStaging | None:
    """The previous rows kept of `source` when they are the ones the last succeeded run merged (`merged`:
    the source's state that run recorded) and still all there; else None."""
    table = previous_staging_table(project, source)
    comment = schema.table_comment(company, table)
    if merged is None or merged.sha256 is None or comment is None or not comment.startswith(_TAG):
        return None
    try:
        tag = json.loads(comment[len(_TAG) :])
        state, fields = SourceState.from_json(tag["state"]), [str(f) for f in tag["fields"]]
        kept = KeptStaging(table, state, fields, int(tag["rows"]))
    except (ValueError, KeyError, TypeError):
        return None
    if kept.state != merged:
        return None
    # Crash recovery empties an UNLOGGED table and keeps it: missing rows would hide removed keys.
    if kept.rows and not schema.table_has_rows(company, table):
        return None
    return kept
