"""The run's end: drop its run tables, partials and downloads (whatever the outcome), and after a
success the project's tables its spec no longer names."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable

from firefeed.dataplane import parsed_copy
from firefeed.errors import NotFoundError
from firefeed.export import line_index
from firefeed.pipeline.context import RunContext
from firefeed.pipeline.steps._shared import export_key
from firefeed.schema.identifiers import lookup_staging_table, lookup_table, previous_staging_table, staging_table
from firefeed.storage import export_storage, retire, run_storage
from firefeed.storage.keys import partial_key, run_prefix

log = logging.getLogger(__name__)


def drop_unnamed_tables(ctx: RunContext) -> None:
    """After a run that succeeded: drop the project's staging and lookup tables its spec no longer names
    (a source or lookup renamed or removed), and those sources' kept copies (dataplane/parsed_copy.py).
    Never fails the run: the files are published."""
    spec = ctx.spec
    keep = _file_tables(spec.project, {src.name for src in spec.sources}, {lk.name for lk in spec.lookups})
    try:
        former = _file_tables(spec.project, *ctx.control.runs.former_names(spec.project))
    except Exception:  # the names of former specs only add to what the names' pattern finds
        log.exception("could not read the names of the project's former specs")
        former = set()
    try:
        try:
            ctx.control.runs.project("lkp_" + spec.project)
            legacy = False  # its sources' staging tables are named like our old lookup staging
        except NotFoundError:
            legacy = True
        ctx.data.schema.drop_unnamed_project_tables(
            spec.company, spec.project, keep, former=former - keep, legacy_lookup_staging=legacy
        )
    except Exception:
        log.exception("could not drop the tables of sources and lookups the spec no longer names")
    try:
        parsed_copy.drop_unnamed(ctx.settings, spec.company, spec.project, [src.name for src in spec.sources])
        line_index.drop_unnamed(ctx.settings, spec.company, spec.project, [exp.name for exp in spec.exports])
    except OSError:
        log.exception("could not remove the kept copies of sources or line indexes of exports the spec no longer names")


def _file_tables(project: str, sources: Iterable[str], lookups: Iterable[str]) -> set[str]:
    """The staging and lookup tables of these sources and lookups of `project` (a source's previous rows too)."""
    tables: set[str] = set()
    for name in sources:
        tables |= {staging_table(project, name), previous_staging_table(project, name)}
    for name in lookups:
        tables |= {lookup_staging_table(project, name), lookup_table(project, name)}
    return tables


def discard_partials(ctx: RunContext) -> None:
    """Remove export files a failed run wrote but never published."""
    storage = export_storage(ctx.settings)
    for index in range(len(ctx.spec.exports)):
        try:
            key = export_key(ctx, index)
        except Exception:  # an unsafe path never got written
            continue
        storage.delete(partial_key(key, ctx.run_id))


def cleanup(ctx: RunContext) -> None:
    """Whatever the outcome: drop the run's pass tables and its downloads."""
    try:
        ctx.data.tables.drop_for_run(ctx.spec.company, ctx.run_id)
    except Exception:
        log.exception("could not drop the run's rules_tmp / export_tmp tables; the janitor will")
    try:
        discard_partials(ctx)
        run_storage(ctx.settings).delete_tree(run_prefix(ctx.run_id))
    except Exception:
        log.exception("could not remove the run's unpublished exports or downloads from storage")
    shutil.rmtree(ctx.work_dir, ignore_errors=True)  # this machine's scratch copy of the downloads
    # The files this run's publish and kept copies replaced, freed beside its later steps: gone before it ends.
    retire.drain()
