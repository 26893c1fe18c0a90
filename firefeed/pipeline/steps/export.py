"""EXPORT: one export's file written to its partial key; `publishing.publish` switches all at once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from firefeed.db.engine import side_work_first
from firefeed.pipeline.context import RunContext
from firefeed.pipeline.steps._shared import export_key
from firefeed.pipeline.steps.rules import channel_report, channel_rules
from firefeed.storage import export_storage
from firefeed.storage.keys import partial_key


def export_one(
    ctx: RunContext, index: int, table: str, fields: Sequence[str], rows: int | None = None
) -> dict[str, Any]:
    """Write one export to the run's partial key beside its final one; `publishing.publish` switches all at once."""
    from firefeed.export import write_export
    from firefeed.export.bounds import export_bounds
    from firefeed.export.guard import export_definition
    from firefeed.export.quality import Target, measuring

    exp = ctx.spec.exports[index]
    own = channel_rules(ctx, index, table, fields, rows) if exp.rules is not None else None
    if own is not None:
        table, fields = own.table, own.fields
    storage = export_storage(ctx.settings)
    key = export_key(ctx, index)
    # What it may write, and the free space it needs first (#47): by the items the rules left, its last size.
    bounds = export_bounds(ctx.settings, own.rows_out if own is not None else rows, storage.size(key))
    # Diagnostics and diff (#9) are measured on their own connection while the file is written (first,
    # on the job's one connection, for a few items: `side_work_first`).
    target = Target(
        ctx.spec.company, ctx.spec.project, ctx.run_id, index, table, list(fields), ctx.spec.key, exp.list_fields
    )
    # `invalid_items: exclude` (C3) writes only the items the checks passed: they are checked first.
    exclude = exp.invalid_items == "exclude" and exp.resolved_channel is not None
    first = exclude or side_work_first(own.rows_out if own is not None else rows)
    # Written on this machine, then stored: the root that publishes it may run anywhere.
    with (
        measuring(ctx.data.engine, ctx.data.schema, target, exp, first=first) as quality,
        storage.writing(partial_key(key, ctx.run_id)) as local,
    ):
        result = write_export(
            ctx.control.engine,
            schema=f"company_{ctx.spec.company}",
            table=table,
            fields=list(fields),
            export=exp,
            dest=local,
            title=ctx.spec.name or ctx.spec.project,
            lists=exp.list_fields,  # the project's, and those the export's own rules make lists
            scratch=True,  # `local` is already the storage's temporary: no second one beside it
            bounds=bounds,
            only=quality.valid_only(target) if exclude else None,
        )
    entry = quality.result()
    if exclude and entry.get("diagnostics") is not None:
        entry["diagnostics"]["excluded"] = quality.excluded()
    return {
        "name": exp.name,
        # The storage key (`<company>/<project>/<path>`): relative to the export folder, never a server path.
        "path": key,
        "rows": result.rows,
        "bytes": result.bytes,
        "sha256": result.sha256,
        **({"rules": channel_report(own)} if own is not None else {}),
        # What the drop guard compares with the previous run's (P31).
        "definition": export_definition(exp),
    } | entry
