"""Lookup tables (SPEC 9, P21): fetched and parsed like sources, then kept as one row per key.

Each lookup is fetched and staged with the sources' own code (steps.fetch_feed and
steps.stage_feed: the same URL checks, size limits, formats and options), or, when its
rows are written in the spec (`rows:`, #53), staged from them (`InlineRows`), then
one CREATE TABLE AS keeps each trimmed, non-blank key's first row with only the
columns the rules read from it (a column the file lacks is ""). The rules join
that table (rules/sqlgen.py). It runs in the MERGE job, after the items are
merged: the table is ready before RULES starts, on whichever machine runs it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.db.engine import raw_connection
from firefeed.errors import MergeError, SourceError, UnsafePathError
from firefeed.pipeline.context import RunContext
from firefeed.pipeline.fetch import file_digest
from firefeed.pipeline.merge import has_rows, trimmed
from firefeed.pipeline.parse import ParseStats
from firefeed.pipeline.stage import stage_source
from firefeed.rules.lookups import LookupSet
from firefeed.rules.model import Rule
from firefeed.schema.identifiers import KEY, ORD, column_for_field, company_schema, ident, lookup_staging_table
from firefeed.schema.service import SchemaService
from firefeed.spec.model import LookupSpec, ProjectSpec
from firefeed.textutil import WHITESPACE


@dataclass
class LookupStats:
    """What the RunReport says of one lookup table: its file, its rows, the keys it skipped."""

    name: str
    bytes: int
    rows: int
    keys: int
    empty_key: int
    duplicate_key: int
    malformed: int
    #: SHA-256 of the file (or of the inline rows) the table was built from: what the next run compares
    #: to reuse this run's work (firefeed/dataplane/state.py). The driver moves it out of the report.
    sha256: str | None = None

    def report(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "bytes": self.bytes,
            "rows": self.rows,
            "keys": self.keys,
            "skipped": {"empty_key": self.empty_key, "duplicate_key": self.duplicate_key, "malformed": self.malformed},
            **({DIGEST_KEY: self.sha256} if self.sha256 is not None else {}),
        }


#: The key of a lookup's digest in its MERGE result entry (not a RunReport field: the driver keeps it apart).
DIGEST_KEY = "sha256"


def inline_digest(lookup: LookupSpec) -> str:
    """The digest of a lookup's `rows:` (they are part of the spec, whose version covers them too)."""
    return hashlib.sha256(json.dumps(lookup.rows or [], sort_keys=True).encode()).hexdigest()


class InlineRows:
    """A FeedReader over a lookup's `rows:`: its columns in first-seen order, a row lacking one reads ""."""

    def __init__(self, lookup: LookupSpec) -> None:
        self.source = lookup.name
        self._rows = lookup.rows or []
        self.fields: list[str] = list(dict.fromkeys(k for row in self._rows for k in row))
        self.stats = ParseStats(encoding="utf-8")

    def __iter__(self) -> Iterator[tuple[int, list[str]]]:
        self.stats.rows = 0
        for number, row in enumerate(self._rows, start=1):
            self.stats.rows += 1
            yield number, [row.get(f, "") for f in self.fields]

    @property
    def bytes(self) -> int:
        """What the rows weigh as text (the report's `bytes` of a lookup read from a file)."""
        return sum(len(k.encode()) + len(v.encode()) for row in self._rows for k, v in row.items())


def lookup_columns(spec: ProjectSpec, rules: Sequence[Rule] | None = None) -> dict[str, list[str]]:
    """Per lookup, the columns any `lookup` action reads from it (project and channel rules), in first-use order."""
    out: dict[str, list[str]] = {lk.name: [] for lk in spec.lookups}
    every = [*spec.parsed_rules, *(r for e in spec.exports for r in e.parsed_rules)] if rules is None else rules
    for rule in every:
        for action in (*rule.then, *rule.else_):
            if isinstance(action, LookupSet):
                cols = out.setdefault(action.lookup, [])
                cols.extend(c for c in action.columns if c not in cols)
    return out


def load_lookups(ctx: RunContext) -> list[LookupStats]:
    """Fetch, parse and key every lookup of the spec into the table the rules join."""
    from firefeed.pipeline import steps

    columns = lookup_columns(ctx.spec)
    tables = ctx.spec.lookup_tables
    out = []
    for lk in ctx.spec.lookups:
        ctx.check_cancel()
        staging = lookup_staging_table(ctx.spec.project, lk.name)
        if lk.inline:
            inline = InlineRows(lk)
            staged = stage_source(
                ctx.data.engine,
                ctx.data.schema,
                company=ctx.spec.company,
                table=staging,
                reader=inline,
                chunk_rows=ctx.settings.chunk_rows,
            )
            size = inline.bytes
            digest: str | None = inline_digest(lk)
        else:
            try:
                fetched = steps.fetch_feed(ctx, lk, scope="lookup:")
                digest = fetched.validators.get("sha256")
                # A local file read in place is not hashed by FETCH: its digest is taken beside the parse.
                pending = digest is None and fetched.key is None and fetched.path is not None
                with file_digest(Path(str(fetched.path))) if pending else nullcontext(None) as beside:
                    staged = steps.stage_feed(ctx, lk, fetched, staging)
                    if beside is not None:
                        digest = beside().sha256
            except (SourceError, UnsafePathError) as err:
                # The sources' own code raised it: the message names the lookup, not a source of that name.
                raise err.as_lookup() from err
            size = fetched.bytes
        stats = build_lookup_table(
            ctx.data.engine,
            ctx.data.schema,
            company=ctx.spec.company,
            lookup=lk,
            staging=staging,
            table=tables[lk.name],
            fields=staged.fields,
            wanted=columns.get(lk.name, []),
        )
        stats.bytes, stats.rows, stats.malformed = size, staged.rows, staged.stats.malformed
        stats.sha256 = digest
        ctx.data.schema.drop_table(ctx.spec.company, staging)
        out.append(stats)
    return out


def build_lookup_table(
    engine: Engine,
    schema_service: SchemaService,
    *,
    company: str,
    lookup: LookupSpec,
    staging: str,
    table: str,
    fields: Sequence[str],
    wanted: Sequence[str],
) -> LookupStats:
    """(Re)create `table` as the first row of each non-blank trimmed key of `staging` with the `wanted`
    columns; its key counts. `fields`: the staged file's fields."""
    lk = lookup
    schema = company_schema(company)
    key = trimmed(sql.SQL("{}").format(ident(column_for_field(lk.key))))
    if lk.key not in fields:
        if has_rows(engine, schema, staging):
            shown = ", ".join(list(fields)[:12]) + (" …" if len(fields) > 12 else "")
            raise MergeError(f"lookup {lk.name!r} has no key column {lk.key!r} (its fields: {shown or 'none'})")
        key = trimmed(sql.SQL("''::text"))  # a table with no items matches nothing (P36)
    present = set(fields)
    picked = [
        sql.SQL("{} AS {}").format(
            ident(column_for_field(c)) if c in present else sql.SQL("''::text"), ident(column_for_field(c))
        )
        for c in wanted
    ]
    # Working names of the internal kind (`_ff...`): no column of the table can be called so (column_for_field).
    keyed = sql.SQL("SELECT {key} AS _ff_k, {ord} AS _ff_o{more} FROM {stg}").format(
        key=key,
        ord=ident(ORD),
        more=sql.SQL("").join(sql.SQL(", ") + p for p in picked),
        stg=ident(schema, staging),
    )
    # The first row (in file order) of each key; DISTINCT ON keeps the row ORDER BY puts first.
    select = sql.SQL(
        "SELECT DISTINCT ON (_ff_k) _ff_k{more} FROM ({keyed}) s WHERE _ff_k <> '' ORDER BY _ff_k, _ff_o"
    ).format(more=sql.SQL("").join(sql.SQL(", ") + ident(column_for_field(c)) for c in wanted), keyed=keyed)
    params = [WHITESPACE] * 3
    with raw_connection(engine) as conn:
        keys = schema_service.rebuild_lookup_table(
            company, table, [KEY, *(column_for_field(c) for c in wanted)], select, params, conn=conn
        )
        with conn.cursor() as cur:
            cur.execute(
                sql.SQL(
                    "SELECT count(*), count(*) FILTER (WHERE _ff_k = '') FROM (SELECT {key} AS _ff_k FROM {stg}) s"
                ).format(key=key, stg=ident(schema, staging)),
                params,
            )
            rows, empty = cur.fetchone()
    return LookupStats(lk.name, 0, int(rows), keys, int(empty), int(rows) - int(empty) - keys, 0)
