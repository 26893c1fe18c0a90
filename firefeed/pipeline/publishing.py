"""Publishing a run's exports: all of them or none, and always what the run's status says (#47).

EXPORT writes every file to a hidden partial key beside its published one (`steps.export_one`).
Publishing then takes three moves, and a driver may die in any of them:

1. record: one statement marks the run's EXPORT step SUCCEEDED and records which partial becomes
   which published key (`pipeline_runs.publishing`). This is the commit point. A run that dies
   before it has switched nothing: recovery fails it and discards its partials (`steps.cleanup`).
2. switch: each partial is moved onto its key (`Storage.move`: a rename on a local folder, a copy
   in a bucket; each file switches whole). A partial that is gone was moved already, so the switch
   can be run again from the start, by anyone, as often as needed.
3. the driver records the run SUCCEEDED.

A run found with a record and no driver (its heartbeat older than the lease) is rolled forward by
`recover_publish`: the switch again, then SUCCEEDED, since every recorded file was complete before
it was recorded. The reaper and an entry point taking a project over call it before they fail a
run. Between a driver's death and its recovery a reader may find some files of the new run and
some of the previous one (each whole): the switch is one step per file on both backends, so only
the end state is all-or-nothing, and the lease bounds how long the mix can last.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from firefeed import metrics
from firefeed.config import Settings, get_settings
from firefeed.dataplane.file_identity import FileIdentity
from firefeed.db.engine import get_engine
from firefeed.errors import RunEndedError, StorageError, UnsafePathError
from firefeed.pipeline.context import RunContext
from firefeed.runs.statements import run_statement
from firefeed.storage import export_storage
from firefeed.storage.base import Storage
from firefeed.storage.keys import partial_key
from firefeed.storage.local import LocalStorage

log = logging.getLogger(__name__)

#: How often a publish held at a test pause point looks whether it may go on.
_PAUSE_POLL_S = 0.05

Moves = list[list[str]]
"""[partial key, published key] pairs, in the spec's export order (JSON keeps them as lists)."""


def publish(
    ctx: RunContext,
    entries: Sequence[dict[str, Any]],
    *,
    rows_in: int,
    rows_out: int,
    detail: dict[str, Any],
    written: dict[str, dict[str, int]] | None = None,
) -> None:
    """Record the run's switch with its EXPORT step's success, then switch every written export into place.

    `entries` are the written exports (their `name`); `rows_in`, `rows_out` and `detail` are what the
    EXPORT step records. Nothing is switched when a cancel came before the record (RunCancelledError) or the
    run was ended meanwhile (RunEndedError). `written`: each local file's stamp as its writer left it (by
    export name, `written_stamp`), for the identities kept once they are in place.
    """
    from firefeed.pipeline.steps import export_key

    index = {exp.name: i for i, exp in enumerate(ctx.spec.exports)}
    keys = [export_key(ctx, index[e["name"]]) for e in entries]
    moves = [[partial_key(key, ctx.run_id), key] for key in keys]
    _pause(ctx.settings, "unrecorded")
    recorded = run_statement(
        ctx.control.engine,
        ctx.control.runs.held,
        "record_publishing",
        {
            "run_id": ctx.run_id,
            "moves": json.dumps(moves),
            "rows_in": rows_in,
            "rows_out": rows_out,
            "detail": json.dumps(detail),
        },
    )
    if not recorded:
        ctx.check_cancel()  # a cancel recorded first: the run is CANCELLED
        raise RunEndedError(
            f"run {ctx.run_id} ended before it could publish (its heartbeat went stale): nothing was published"
        )
    storage = export_storage(ctx.settings)
    switch(storage, moves, after=lambda done: _pause(ctx.settings, f"switched-{done}"))
    if written:
        _keep_identities(ctx, storage, entries, moves, written)


#: an export entry's stamp of its file as its writer left it (`written_stamp`), taken out before it is reported
WRITTEN_STAMP = "_written_stamp"


def written_stamp(path: Path) -> dict[str, int] | None:
    """The stamp of the file an export's writer just wrote at `path` (a local file, its last byte written):
    what `FileIdentity.written_by_us` compares once the publish moved it into place. None when it cannot be
    read (the next run then reads the published file)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return {"dev": st.st_dev, "ino": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _keep_identities(
    ctx: RunContext,
    storage: Storage,
    entries: Sequence[dict[str, Any]],
    moves: Moves,
    written: dict[str, dict[str, int]],
) -> None:
    """Keep the identity of each local file just moved into place (`FileIdentity.written_by_us`), by its stamp as
    its writer left it (`written`, by export name): the next run's check of the published files
    (dataplane/state.py `moved_files`) then vouches for it by its stat instead of reading it once (the 1M export:
    690 MB, ~0.65 s of CPU beside the next refresh's PARSE). Never fails the publish: without it the next check
    reads the file, as before."""
    if not isinstance(storage, LocalStorage):
        return
    kept: dict[str, tuple[str, dict[str, Any]]] = {}
    for entry, (_, key) in zip(entries, moves, strict=True):
        stamp, sha256 = written.get(str(entry.get("name"))), entry.get("sha256")
        if stamp is None or not isinstance(sha256, str):
            continue
        try:
            identity = FileIdentity.written_by_us(stamp, os.stat(storage.path(key)), sha256)
        except (OSError, StorageError, UnsafePathError):
            log.warning("the published %s could not be stat'ed: the next run reads it", key, exc_info=True)
            continue
        if identity is not None:
            kept[str(entry["name"])] = (key, identity.to_json())
    try:
        ctx.store.keep_published_identities(ctx.spec.project, kept)  # one transaction for all the files
    except Exception:
        log.warning("the published files' identities were not kept: the next run reads them", exc_info=True)


def switch(storage: Storage, moves: Moves, *, after: Callable[[int], None] | None = None) -> None:
    """Move each partial onto its published key; one already moved (by a driver or recovery) is skipped.

    `after(n)` is called once n files are switched (n = 0 before the first).
    """
    if after is not None:
        after(0)
    for done, (partial, key) in enumerate(moves, start=1):
        if storage.exists(partial):
            try:
                storage.move(partial, key)
            except StorageError:
                if storage.exists(partial):
                    raise
                # Another recovery moved it between our look and our move.
        if after is not None:
            after(done)


def recorded(engine: Engine, run_id: str) -> bool:
    """Whether the RUNNING run recorded its switch: past its commit point, it publishes, it never fails."""
    return bool(run_statement(engine, None, "recorded_publishing", {"run_id": run_id, "stale": None}))


def recover_publish(
    run_id: str,
    *,
    stale_after_s: float | None = None,
    settings: Settings | None = None,
    engine: Engine | None = None,
) -> bool:
    """Finish the publish of a RUNNING run whose driver is gone; True when the run is now SUCCEEDED.

    Call it before failing a run whose heartbeat went stale (the reaper, an entry point's takeover).
    False: the run recorded no switch (so none of its files is published: fail it and discard its
    partials as before), has ended, or beat within `stale_after_s` (None: whatever its age). A
    StorageError means a file could not be switched: leave the run RUNNING and try again later;
    failing it would leave some of its files published under a FAILED status.
    """
    from firefeed.pipeline.context import load_context
    from firefeed.pipeline.steps import cleanup, drop_unnamed_tables
    from firefeed.runs.report import build_report
    from firefeed.runs.service import RunStore

    settings = settings or get_settings()
    engine = engine or get_engine()
    rows = run_statement(engine, None, "recorded_publishing", {"run_id": run_id, "stale": stale_after_s})
    if not rows:
        return False
    switch(export_storage(settings), rows[0].publishing)
    try:
        ctx: RunContext | None = load_context(run_id, settings, engine)
    except Exception:  # the files are switched: the run's tables are left to the janitor
        log.warning("could not load the run's context to tidy up after its publish", exc_info=True)
        ctx = None
    if ctx is not None:
        _promote(ctx)
    finished = run_statement(engine, None, "finish_published", {"run_id": run_id})
    if ctx is not None:
        drop_unnamed_tables(ctx)
        cleanup(ctx)
    if finished:
        trigger, started_at, finished_at = finished[0]
        metrics.run_finished(trigger, "SUCCEEDED", started_at, finished_at)
        store = RunStore(engine)
        store.save_report(run_id, build_report(store, run_id))
        log.warning("finished the publish of run %s, which its driver had recorded but not completed", run_id)
    return True


def _promote(ctx: RunContext) -> None:
    """The published exports' diff rows become the next run's baseline, unless the driver did it already."""
    from firefeed.dataplane.names import export_tmp_table
    from firefeed.export.guard import promote
    from firefeed.runs.contract import Step

    step = next((s for s in ctx.control.runs.steps(ctx.run_id) if s.step == Step.EXPORT), None)
    entries = (step.detail or {}).get("exports", []) if step is not None else []
    index = {e.name: i for i, e in enumerate(ctx.spec.exports)}
    pending = [
        e
        for e in entries
        if e.get("name") in index
        and ctx.data.schema.table_exists(ctx.spec.company, export_tmp_table(ctx.run_id, index[e["name"]]))
    ]
    try:
        promote(ctx.data.schema, ctx.spec, ctx.run_id, pending)
    except Exception:  # the files are published; only the next run's diff baseline is older
        log.exception("could not keep the published exports' diff rows; the next run diffs against older ones")


def _pause(settings: Settings, moment: str) -> None:
    """Tests only: mark `moment` reached and wait while its hold file exists (FIREFEED_TEST_PUBLISH_PAUSE_DIR).

    Moments: `unrecorded` (before the commit point), then `switched-<n>` once n files are switched.
    """
    folder = settings.test_publish_pause_dir
    if folder is None:
        return
    (folder / f"{moment}.reached").touch()
    while (folder / f"{moment}.hold").exists():
        time.sleep(_PAUSE_POLL_S)
