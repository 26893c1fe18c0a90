"""PARSE: a fetched file into its fresh staging table, or the staged rows of an unchanged source reused."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from firefeed.errors import ParseError
from firefeed.pipeline.context import RunContext
from firefeed.pipeline.stage import StageResult
from firefeed.pipeline.steps._shared import parse_signature
from firefeed.pipeline.steps.fetch import FILE_IDENTITY, FetchOutcome
from firefeed.schema.identifiers import staging_table
from firefeed.spec.model import FeedSpec, SourceSpec
from firefeed.storage import run_storage


@dataclass
class ParseOutcome:
    name: str
    table: str
    fields: list[str]
    rows: int
    malformed: int = 0
    malformed_lines: list[int] = field(default_factory=list)
    nul_removed: int = 0
    warnings: list[str] = field(default_factory=list)
    not_modified: bool = False

    def report(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "rows": self.rows,
            "fields": len(self.fields),
            "not_modified": self.not_modified,
            "skipped": {"malformed": self.malformed},
            "malformed_lines": self.malformed_lines,
            "nul_removed": self.nul_removed,
        }


def stage_feed(ctx: RunContext, src: FeedSpec, fetched: FetchOutcome, table: str) -> StageResult:
    """PARSE a fetched file of the spec into a fresh staging table `table` (sources and lookups alike)."""
    from firefeed.pipeline.parse import open_reader
    from firefeed.pipeline.stage import stage_source

    assert fetched.path is not None
    feed = run_storage(ctx.settings).reading(fetched.key) if fetched.key else nullcontext(Path(fetched.path))
    with feed as feed_path:
        reader = open_reader(
            feed_path,
            source=src.name,
            format=src.resolved_format,
            encoding=src.encoding,
            delimiter=src.delimiter,
            item_path=src.item_path,
            lists=src.lists if isinstance(src, SourceSpec) else None,  # a lookup's columns are text
            preset=src.preset if isinstance(src, SourceSpec) else None,
        )
        staged = stage_source(
            ctx.data.engine,
            ctx.data.schema,
            company=ctx.spec.company,
            table=table,
            reader=reader,
            chunk_rows=ctx.settings.chunk_rows,
        )
    if fetched.key:
        run_storage(ctx.settings).delete(fetched.key)
    return staged


def parse_one(ctx: RunContext, index: int, fetched: FetchOutcome) -> ParseOutcome:
    """PARSE one source into its staging table, or reuse the staged rows of an unchanged source."""
    src = ctx.spec.sources[index]
    table = staging_table(ctx.spec.project, src.name)
    if fetched.not_modified:
        row = ctx.control.runs.source_rows(ctx.spec.project)[src.name]
        stats = row.staged_stats or {}
        return ParseOutcome(
            name=src.name,
            table=table,
            fields=list(row.staged_fields or []),
            rows=int(stats.get("rows", 0)),
            malformed=int(stats.get("malformed", 0)),
            # What the parse that staged these rows found (a list keeps its order through JSONB).
            malformed_lines=[int(n) for n in stats.get("malformed_lines", [])],
            warnings=[str(w) for w in stats.get("warnings", [])],
            not_modified=True,
        )
    from firefeed.pipeline.fetch import file_digest

    assert fetched.path is not None
    _keep_previous_rows(ctx, index)
    # Staging is about to change: forget the old validators until this parse succeeds.
    ctx.control.runs.update_source(ctx.spec.project, src.name, parse_signature=None)
    sha256 = fetched.validators.get("sha256")
    # A local file fetched unread (nothing to compare): its digest, the next run's validator, is taken beside.
    pending = sha256 is None and fetched.key is None
    with file_digest(Path(fetched.path)) if pending else nullcontext(None) as digest:
        staged = stage_feed(ctx, src, fetched, table)
        if digest is not None:
            sha256 = digest()
    st = staged.stats
    if index == 0 and staged.rows == 0:
        what = "the file is empty" if not staged.fields else "the file has a header but no items"
        raise ParseError(src.name, f"the primary source has no items: {what}")
    outcome = ParseOutcome(
        name=src.name,
        table=table,
        fields=list(staged.fields),
        rows=staged.rows,
        malformed=st.malformed,
        malformed_lines=list(st.malformed_lines),
        nul_removed=st.nul_removed,
        warnings=list(st.warnings),
    )
    ctx.control.runs.update_source(
        ctx.spec.project,
        src.name,
        etag=fetched.validators.get("etag"),
        last_modified=fetched.validators.get("last_modified"),
        content_sha256=sha256,
        parse_signature=parse_signature(src),
        staged_fields=outcome.fields,
        staged_stats={
            "rows": outcome.rows,
            "malformed": outcome.malformed,
            "malformed_lines": outcome.malformed_lines,
            "warnings": outcome.warnings,
            # The stat FETCH took with the digest it read: the next run need not read the file again.
            **({FILE_IDENTITY: fetched.identity} if fetched.identity is not None and not pending else {}),
        },
    )
    return outcome


def _keep_previous_rows(ctx: RunContext, index: int) -> None:
    """Before an enrich source is staged again, its rows as they stood are kept for a delta to compare
    (dataplane/staged.py); another source keeps none (no delta reads it)."""
    from firefeed.dataplane import staged

    src, spec, schema = ctx.spec.sources[index], ctx.spec, ctx.data.schema
    if index > 0 and src.mode == "enrich":
        row = ctx.control.runs.source_rows(spec.project).get(src.name)
        staged.keep_previous(schema, spec.company, spec.project, src.name, row)
    else:
        staged.drop_previous(schema, spec.company, spec.project, src.name)
