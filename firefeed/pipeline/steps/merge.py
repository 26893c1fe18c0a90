"""MERGE: the staged sources into the project's items table."""

from __future__ import annotations

from collections.abc import Sequence

from firefeed.errors import MergeError
from firefeed.pipeline.context import RunContext
from firefeed.pipeline.merge import MergeResult, StagedSource, merge_sources
from firefeed.pipeline.steps.parse import ParseOutcome


def merge(ctx: RunContext, parsed: Sequence[ParseOutcome]) -> MergeResult:
    """MERGE the staged sources into the project's items table."""
    staged = [StagedSource.of(s, p.table, p.fields) for p, s in zip(parsed, ctx.spec.sources, strict=True)]
    merged = merge_sources(
        ctx.data.engine,
        ctx.data.schema,
        company=ctx.spec.company,
        table=ctx.items_table,
        key_field=ctx.spec.key,
        sources=staged,
        list_fields=ctx.spec.list_fields.fields,
        staged_rows=sum(p.rows for p in parsed),
    )
    if merged.rows == 0:
        # Whatever the cause (every key empty, or staged rows that vanished), never publish an empty feed.
        raise MergeError(f"no items: the primary source {staged[0].name!r} gave no item with a non-empty key")
    return merged
