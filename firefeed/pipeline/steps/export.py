"""EXPORT: one export's file written to its partial key; `publishing.publish` switches all at once."""

from __future__ import annotations

import contextlib
import logging
from array import array
from collections.abc import Sequence
from typing import Any

import psycopg2

from firefeed.db.engine import side_work_first
from firefeed.errors import ExportError
from firefeed.pipeline.context import RunContext
from firefeed.pipeline.publishing import WRITTEN_STAMP, written_stamp
from firefeed.pipeline.steps._shared import export_key
from firefeed.pipeline.steps.rules import channel_report, channel_rules
from firefeed.storage import export_storage
from firefeed.storage.keys import partial_key
from firefeed.storage.local import LocalStorage

log = logging.getLogger(__name__)


def export_one(
    ctx: RunContext, index: int, table: str, fields: Sequence[str], rows: int | None = None
) -> dict[str, Any]:
    """Write one export to the run's partial key beside its final one; `publishing.publish` switches all at once."""
    from firefeed.export import line_index, write_export
    from firefeed.export.bounds import export_bounds
    from firefeed.export.guard import export_definition
    from firefeed.export.quality import Target, measuring

    exp = ctx.spec.exports[index]
    written: str | None = None
    if _in_delta(ctx, table):
        # A delta run (#52): the last file with the changed items' lines replaced, when that is safe.
        from firefeed.export.patch import NotPatched, static_reason

        written = static_reason(exp)
        if written is None:
            try:
                return {"written": "patched"} | _patched(ctx, index, table, fields, rows)
            except NotPatched as why:
                written = str(why)
        written = f"full: {written}"
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
    # Each item's length in the file, for a later delta run's patch (export/line_index.py): a patchable export's.
    lengths = line_index.recorder() if own is None and not exclude and _patchable(exp) else None
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
            lengths=lengths,
        )
        stamp = written_stamp(local) if isinstance(storage, LocalStorage) else None
    if lengths and len(lengths) == result.rows:
        kept = line_index.LineIndex(result.sha256, result.bytes, result.bytes - sum(lengths), lengths)
        line_index.save(line_index.path(ctx.settings, ctx.spec.company, ctx.spec.project, exp.name), kept)
    entry = quality.result()
    if exclude and entry.get("diagnostics") is not None:
        entry["diagnostics"]["excluded"] = quality.excluded()
    return (
        {
            "name": exp.name,
            # The storage key (`<company>/<project>/<path>`): relative to the export folder, never a server path.
            "path": key,
            "rows": result.rows,
            "bytes": result.bytes,
            "sha256": result.sha256,
            **({"rules": channel_report(own)} if own is not None else {}),
            # What the drop guard compares with the previous run's (P31).
            "definition": export_definition(exp),
        }
        | entry
        | ({"written": written} if written is not None else {})
        | ({WRITTEN_STAMP: stamp} if stamp is not None else {})
    )


def prefill_spares(ctx: RunContext) -> None:
    """Give each published local export a spare for this run's write when it has none
    (`LocalStorage.prepare_spare`): the driver runs this beside MERGE and RULES, whose one backend at a time
    leaves a core idle, so the export then writes over pages already in the page cache. Never fails the run."""
    from firefeed.storage.local import LocalStorage

    storage = export_storage(ctx.settings)
    if not isinstance(storage, LocalStorage) or not storage.spare_min_bytes:
        return
    for index in range(len(ctx.spec.exports)):
        try:
            storage.prepare_spare(export_key(ctx, index))
        except Exception:  # the export writes a new file, as without a spare
            log.warning("no spare made for export %r", ctx.spec.exports[index].name, exc_info=True)


def _patchable(exp: Any) -> bool:
    """Whether a delta run may patch the export's file (export/patch.py `static_reason`)."""
    from firefeed.export.patch import static_reason

    return static_reason(exp) is None


def _find_changed_rows(ctx: RunContext, table: str) -> None:
    """`kept.find_changed_rows` for the delta's result `table`; never fails the export (without it the keep
    scans)."""
    from firefeed.dataplane.kept import find_changed_rows
    from firefeed.dataplane.names import rules_tmp_table
    from firefeed.pipeline.delta import KEYS

    try:
        find_changed_rows(
            ctx.data.schema, ctx.spec.company, ctx.run_id, view=table, keys=rules_tmp_table(ctx.run_id, KEYS)
        )
    except Exception:
        log.warning("the kept result's changed rows were not found beside the export; its keep scans", exc_info=True)


def _in_delta(ctx: RunContext, table: str) -> bool:
    """Whether `table` is a delta run's rules result (pipeline/delta.py), whose changed items have their keys kept."""
    from firefeed.dataplane.names import rules_tmp_table
    from firefeed.pipeline.delta import SPLICED

    return table == rules_tmp_table(ctx.run_id, SPLICED)


def _last_sha256(ctx: RunContext, name: str) -> str | None:
    """The sha256 the project's last succeeded run recorded for export `name` (the file live now), as the
    delta's decision read it (`dataplane.state.last_succeeded`)."""
    from firefeed.dataplane.state import last_succeeded

    previous = last_succeeded(ctx.control.runs, ctx.spec.project, before=ctx.run_id)
    entry = next((e for e in previous.exports if e.get("name") == name), None) if previous is not None else None
    return str(entry["sha256"]) if entry is not None and entry.get("sha256") else None


def _patched(ctx: RunContext, index: int, table: str, fields: Sequence[str], rows: int | None) -> dict[str, Any]:
    """The export written as the last file with the changed items' lines replaced (export/patch.py); NotPatched
    (nothing published, no run table left) when it cannot be."""
    from firefeed.errors import StorageError
    from firefeed.export import line_index
    from firefeed.export.bounds import export_bounds
    from firefeed.export.guard import export_definition
    from firefeed.export.patch import (
        Beside,
        ChangedLines,
        NotPatched,
        baseline_ords,
        changed_rows,
        complete,
        drop_run_table,
        find_places,
        left_the_export,
        new_lines,
        patch_file,
        places_of,
    )
    from firefeed.export.quality import Target

    exp = ctx.spec.exports[index]
    storage = export_storage(ctx.settings)
    key = export_key(ctx, index)
    engine = ctx.data.engine
    target = Target(
        ctx.spec.company, ctx.spec.project, ctx.run_id, index, table, list(fields), ctx.spec.key, exp.list_fields
    )
    title = ctx.spec.name or ctx.spec.project
    last_file = _last_sha256(ctx, exp.name)
    kept_at = line_index.path(ctx.settings, ctx.spec.company, ctx.spec.project, exp.name)
    last_size = storage.size(key)
    # The last file's item lengths, when this machine kept them for it (else its lines are cut): then the
    # changed lines are written while their COPY renders them, else they are rendered first.
    kept = line_index.load(kept_at, last_file, last_size) if last_file and last_size is not None else None
    rendered: Beside | ChangedLines
    if kept is not None:
        rendered = ChangedLines(engine, target, exp, title)
    else:
        rendered = Beside(lambda: new_lines(engine, target, exp, title))
    try:
        changed = changed_rows(engine, ctx.data.schema, target, exp, last_file)
    except BaseException:
        with contextlib.suppress(BaseException):  # the first error is the one to report
            rendered.result()
        raise
    side: Beside | None = None
    found: Beside | None = None
    left: Beside | None = None
    try:
        # The run table's rows, the diff and the findings on their own connection while the changed items'
        # places are found and the file is written.
        # With the last file's item positions (`kept`), a changed item leaving the export is found by them.
        side = Beside(lambda: complete(engine, target, exp, changed, count_left=kept is None))
        ords = None
        if kept is not None:
            # Every item's position: kept with the lengths by an earlier patch, else read once (and kept).
            ords = kept.ords if kept.ords is not None else baseline_ords(engine, target, changed)
            places, old_rows = places_of(ords, changed.ords), len(ords)
            # Whether a changed item left the export, asked while the file is written (0.1-0.16 s of the 1M stock
            # delta's EXPORT, before the first byte was written) and answered before the file is kept.
            last_ords = ords
            left = Beside(lambda: left_the_export(engine, target, changed, last_ords), name="export-left")
        else:
            places, old_rows = find_places(engine, target, changed)
        # While the file is written: where the kept result holds the changed items' rows, so that keeping this
        # run's result after the publish deletes them by TID (`dataplane.kept`); once a run.
        found = Beside(lambda: _find_changed_rows(ctx, table)) if index == 0 else None
        lines: Sequence[bytes] | ChangedLines
        if isinstance(rendered, ChangedLines):
            head, lines = rendered.head, rendered
        else:
            head, listed = rendered.result()
            if len(listed) != len(places):
                raise NotPatched("a changed item's value holds a newline")
            lines = listed
        bounds = export_bounds(ctx.settings, rows, last_size)
        try:
            with storage.reading(key) as old, storage.writing(partial_key(key, ctx.run_id)) as local:
                written, size, sha256 = patch_file(
                    old,
                    local,
                    export=exp,
                    head=head,
                    rows=old_rows,
                    places=places,
                    lines=lines,
                    bounds=bounds,
                    index=kept,
                )
                if left is not None:
                    left.result()  # NotPatched: the partial file goes with the block
                stamp = written_stamp(local) if isinstance(storage, LocalStorage) else None
        except StorageError as err:
            raise NotPatched("the last file is not in the storage") from err
        rendered.result()
        try:
            quality = side.result()
        except psycopg2.Error as err:
            message = (err.pgerror or str(err)).strip()
            raise ExportError(exp.name, f"checking the items failed: {message}") from err
    except BaseException:
        for job in (rendered, side, found, left):
            if job is not None:
                with contextlib.suppress(BaseException):  # the first error is the one to report
                    job.result()
        drop_run_table(engine, ctx.spec.company, changed.run_table)
        raise
    if found is not None:
        found.result()
    if kept is not None and isinstance(rendered, ChangedLines):
        # The new file's lengths: the last one's with the changed items' replaced; its items where they were.
        lengths = array("Q", kept.lengths)
        for place, length in zip(places, rendered.lengths, strict=True):
            lengths[place] = length
        line_index.save(kept_at, line_index.LineIndex(sha256, size, len(head), lengths, ords))
    return (
        {
            "name": exp.name,
            "path": key,
            "rows": written,
            "bytes": size,
            "sha256": sha256,
            "definition": export_definition(exp),
        }
        | quality
        | ({WRITTEN_STAMP: stamp} if stamp is not None else {})
    )
