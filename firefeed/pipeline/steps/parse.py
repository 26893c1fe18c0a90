"""PARSE: a fetched file into its fresh staging table, or the staged rows of an unchanged source reused."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from firefeed.dataplane import parsed_copy
from firefeed.dataplane.state import SourceState
from firefeed.db.models import Source
from firefeed.errors import ParseError
from firefeed.pipeline.context import RunContext
from firefeed.pipeline.stage import StageResult
from firefeed.pipeline.steps._shared import parse_signature
from firefeed.pipeline.steps.fetch import FILE_IDENTITY, FetchOutcome
from firefeed.schema.identifiers import staging_table
from firefeed.spec.model import FeedSpec, SourceSpec
from firefeed.storage import run_storage

log = logging.getLogger(__name__)


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
    #: how a changed source was staged (`STAGING`): `{"staged": "patched", "changed": n, ...}` or
    #: `{"staged": "full", "reason": ...}`; the PARSE step's detail, not the report's source entry
    staging: dict[str, Any] | None = None

    def report(self) -> dict[str, Any]:
        doc = {
            "name": self.name,
            "rows": self.rows,
            "fields": len(self.fields),
            "not_modified": self.not_modified,
            "skipped": {"malformed": self.malformed},
            "malformed_lines": self.malformed_lines,
            "nul_removed": self.nul_removed,
        }
        if self.staging is not None:
            doc[STAGING] = self.staging
        return doc


#: the key of a source's PARSE part saying how it was staged (the driver moves it out of the report's entry)
STAGING = "staging"


def stage_feed(ctx: RunContext, src: FeedSpec, fetched: FetchOutcome, table: str) -> StageResult:
    """PARSE a fetched file of the spec into a fresh staging table `table` (sources and lookups alike)."""
    with _fetched_file(ctx, fetched) as feed_path:
        return stage_path(ctx, src, feed_path, table)


@contextmanager
def _fetched_file(ctx: RunContext, fetched: FetchOutcome) -> Iterator[Path]:
    """The fetched file as a local path while the block runs; a download is deleted after it."""
    assert fetched.path is not None
    feed = run_storage(ctx.settings).reading(fetched.key) if fetched.key else nullcontext(Path(fetched.path))
    with feed as feed_path:
        yield feed_path
    if fetched.key:
        run_storage(ctx.settings).delete(fetched.key)


def stage_path(ctx: RunContext, src: FeedSpec, path: Path, table: str) -> StageResult:
    """PARSE the local file `path` as `src` says into a fresh staging table `table` (a patch's records too:
    the same reader settings and COPY, so the same staged text)."""
    from firefeed.pipeline.parse import open_reader
    from firefeed.pipeline.stage import stage_source

    reader = open_reader(
        path,
        source=src.name,
        format=src.resolved_format,
        encoding=src.encoding,
        delimiter=src.delimiter,
        item_path=src.item_path,
        lists=src.lists if isinstance(src, SourceSpec) else None,  # a lookup's columns are text
        preset=src.preset if isinstance(src, SourceSpec) else None,
    )
    return stage_source(
        ctx.data.engine,
        ctx.data.schema,
        company=ctx.spec.company,
        table=table,
        reader=reader,
        chunk_rows=ctx.settings.chunk_rows,
    )


def parse_one(ctx: RunContext, index: int, fetched: FetchOutcome) -> ParseOutcome:
    """PARSE one source into its staging table, or reuse the staged rows of an unchanged source.

    A changed csv primary with a kept copy of the file its staging was parsed from is patched (only its
    changed records staged again, pipeline/stage_patch.py) when that is provably what a full parse
    stages; its outcome says how (`staging`)."""
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
    before = ctx.control.runs.source_rows(ctx.spec.project).get(src.name)
    _keep_previous_rows(ctx, index)
    # Staging is about to change: forget the old validators until this parse succeeds.
    ctx.control.runs.update_source(ctx.spec.project, src.name, parse_signature=None)
    sha256 = fetched.validators.get("sha256")
    identity = fetched.identity
    # A local file fetched unread (nothing to compare): its digest, the next run's validator, is taken beside.
    pending = sha256 is None and fetched.key is None
    with _fetched_file(ctx, fetched) as feed_path, _Copy(ctx, index, feed_path) as copy:
        with file_digest(Path(fetched.path)) if pending else nullcontext(None) as digest:
            staged, staging = _stage(ctx, index, copy, feed_path, table, before)
            if digest is not None:
                beside = digest()
                sha256, identity = beside.sha256, beside.identity.to_json() if beside.identity else None
        # A copy a diff read as the new file (not refused) has csv's records by their quotes.
        kept = copy.commit(sha256, quotes_checked=staging.get("staged") == "patched")
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
        staging=staging,
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
            # What a patch of these rows must find the same (stage_patch.kept_reason).
            "nul_removed": outcome.nul_removed,
            "encoding": st.encoding,
            "max_value_chars": ctx.settings.parse_max_value_chars,
            # The stat taken with the digest (by FETCH, or beside the parse): the next run need not read
            # the file again.
            **({FILE_IDENTITY: identity} if identity is not None else {}),
            **({parsed_copy.KEPT_COPY: kept.to_json()} if kept is not None else {}),
        },
    )
    return outcome


class _Copy:
    """The copy of a csv primary's file PARSE reads and then keeps (dataplane/parsed_copy.py), or none.

    The file is copied first and the copy parsed (not copied beside the parse): the staged rows are then
    the kept bytes whatever happens to a local source file meanwhile. `path` is what to parse."""

    def __init__(self, ctx: RunContext, index: int, feed: Path) -> None:
        self.ctx, self.index, self.feed = ctx, index, feed
        self.tmp: Path | None = None
        self.why_not: str | None = None

    @property
    def path(self) -> Path:
        return self.tmp if self.tmp is not None else self.feed

    def __enter__(self) -> _Copy:
        from firefeed.pipeline import stage_patch

        ctx, src = self.ctx, self.ctx.spec.sources[self.index]
        minimum = ctx.settings.parse_keep_copy_min_bytes
        self.why_not = "only the primary source is patched" if self.index else None
        if self.why_not is None:
            self.why_not = stage_patch.copy_reason(src, minimum, self.feed.stat().st_size)
        if self.why_not is None:
            settings, spec, started = ctx.settings, ctx.spec, time.monotonic()
            self.tmp = parsed_copy.start(settings, spec.company, spec.project, src.name, self.feed, ctx.run_id)
            log.info("source %r: its file copied to be kept in %.2f s", src.name, time.monotonic() - started)
        else:
            parsed_copy.drop(ctx.settings, ctx.spec.company, ctx.spec.project, src.name)
        return self

    def commit(self, sha256: str | None, *, quotes_checked: bool) -> parsed_copy.KeptCopy | None:
        """The copy kept as the file the staging was parsed from (None: none kept)."""
        if self.tmp is None or sha256 is None:
            return None
        ctx, name = self.ctx, self.ctx.spec.sources[self.index].name
        kept = parsed_copy.commit(
            ctx.settings, ctx.spec.company, ctx.spec.project, name, self.tmp, sha256, quotes_checked=quotes_checked
        )
        self.tmp = None
        return kept

    def __exit__(self, *exc: object) -> None:
        parsed_copy.discard(self.tmp)
        self.tmp = None


def _stage(
    ctx: RunContext, index: int, copy: _Copy, feed: Path, table: str, before: Source | None
) -> tuple[StageResult, dict[str, Any]]:
    """The source staged by patch when it may be (stage_patch.py), else in full; and how (`staging`)."""
    from firefeed.pipeline import stage_patch
    from firefeed.pipeline.parse import ParseStats

    src = ctx.spec.sources[index]
    why = copy.why_not
    if why is None:
        why = stage_patch.patchable(src, before)
    if why is None:
        assert before is not None
        try:
            patched = stage_patch.patch_staging(ctx, src, before, table, copy.path)
        except stage_patch.Refused as refused:
            why = str(refused)
        else:
            stats = before.staged_stats or {}
            kept = ParseStats(rows=int(stats["rows"]), encoding=str(stats["encoding"]))
            staged = StageResult(fields=list(before.staged_fields or []), rows=kept.rows, stats=kept)
            return staged, {
                "staged": "patched",
                "changed": patched.changed,
                "from": SourceState(
                    before.etag, before.last_modified, before.content_sha256, before.parse_signature
                ).to_json(),
                "new_rows": patched.new_rows,
                "old_rows": patched.old_rows,
            }
        log.info("source %r is parsed in full: %s", src.name, why)
    return stage_path(ctx, src, copy.path, table), {"staged": "full", "reason": why}


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
