"""PARSE: a fetched file into its fresh staging table, or the staged rows of an unchanged source reused."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, suppress
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

    A changed csv primary or enrich source with a kept copy of the file its staging was parsed from is
    patched (only its changed records staged again, pipeline/stage_patch.py) when that is provably what a
    full parse stages; its outcome says how (`staging`). An enrich source parsed in full keeps its staged
    rows as they stood for the delta to compare (dataplane/staged.py); a patched one needs not: the
    patch's old rows are what changed."""
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
    from firefeed.pipeline import stage_patch
    from firefeed.pipeline.fetch import file_digest

    assert fetched.path is not None
    before = ctx.control.runs.source_rows(ctx.spec.project).get(src.name)
    if not _is_enrich(ctx, index):
        _drop_previous_rows(ctx, index)  # no delta reads them
    # Staging is about to change: forget the old validators until this parse succeeds.
    ctx.control.runs.update_source(ctx.spec.project, src.name, parse_signature=None)
    sha256 = fetched.validators.get("sha256")
    identity = fetched.identity
    # A local file fetched unread (nothing to compare): its digest, the next run's validator, is taken beside.
    pending = sha256 is None and fetched.key is None
    full = ctx.control.runs.run(ctx.run_id).full
    with _fetched_file(ctx, fetched) as feed_path, _Copy(ctx, index, feed_path) as copy:
        with file_digest(Path(fetched.path)) if pending else nullcontext(None) as digest:
            staged, staging = _stage(ctx, index, copy, feed_path, table, before, full=full)
            if digest is not None:
                waited = time.monotonic()
                beside = digest()
                log.info(
                    "source %r: its digest taken beside the parse (waited %.2f s)", src.name, time.monotonic() - waited
                )
                sha256, identity = beside.sha256, beside.identity.to_json() if beside.identity else None
        if fetched.key is None:
            # A local file read in place: the digest recorded must be of the bytes staged (`_Copy.read_as_hashed`).
            sha256, identity = copy.read_as_hashed(sha256, identity)
        unkept = stage_patch.stats_reason(_stats(ctx, staged), ctx.settings.parse_max_value_chars)
        # A copy a diff read as the new file (not refused) has csv's records by their quotes; one a patch
        # would refuse (malformed rows, warnings, not UTF-8) is never kept.
        kept = copy.commit(sha256, quotes_checked=staging.get("staged") == "patched", unkept=unkept)
    if copy.not_kept is not None and copy.tmp_made:
        staging = {**staging, "not_kept": copy.not_kept}
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
            **_stats(ctx, staged),
            # The stat taken with the digest (by FETCH, or beside the parse): the next run need not read
            # the file again.
            **({FILE_IDENTITY: identity} if identity is not None else {}),
            **({parsed_copy.KEPT_COPY: kept.to_json()} if kept is not None else {}),
        },
    )
    return outcome


def _stats(ctx: RunContext, staged: StageResult) -> dict[str, Any]:
    """What a parse found, as its source's `staged_stats` keep it: what a patch of these rows must find the
    same (stage_patch.kept_reason)."""
    st = staged.stats
    return {
        "rows": staged.rows,
        "malformed": st.malformed,
        "malformed_lines": list(st.malformed_lines),
        "warnings": list(st.warnings),
        "nul_removed": st.nul_removed,
        "encoding": st.encoding,
        "max_value_chars": ctx.settings.parse_max_value_chars,
    }


class _Copy:
    """The copy of a csv primary's file PARSE reads and then keeps (dataplane/parsed_copy.py), or none.

    The file is copied first and the copy parsed (not copied beside the parse): the staged rows are then
    the kept bytes whatever happens to a local source file meanwhile. `path` is what to parse. The copy is
    an optimisation for the next run: one that cannot be written (a full disk) is dropped, and the file
    itself parsed. The file's stat before and after its copy (or its parse in place, `read_as_hashed`)
    tells whether FETCH's digest is of the bytes staged."""

    def __init__(self, ctx: RunContext, index: int, feed: Path) -> None:
        self.ctx, self.index, self.feed = ctx, index, feed
        self.tmp: Path | None = None
        self.tmp_made = False
        self.why_not: str | None = None
        #: why a copy made is not kept (`commit`)
        self.not_kept: str | None = None
        self.stat_before: tuple[int, int, int, int, int] | None = None
        self.stat_after: tuple[int, int, int, int, int] | None = None

    @property
    def path(self) -> Path:
        return self.tmp if self.tmp is not None else self.feed

    def __enter__(self) -> _Copy:
        from firefeed.pipeline import stage_patch

        ctx, src = self.ctx, self.ctx.spec.sources[self.index]
        minimum = ctx.settings.parse_keep_copy_min_bytes
        self.stat_before = _stat_key(self.feed)
        self.why_not = "an append source is not patched" if self.index and not _is_enrich(ctx, self.index) else None
        if self.why_not is None:
            self.why_not = stage_patch.copy_reason(src, minimum, self.feed.stat().st_size)
        if self.why_not is None:
            settings, spec, started = ctx.settings, ctx.spec, time.monotonic()
            try:
                self.tmp = parsed_copy.start(settings, spec.company, spec.project, src.name, self.feed, ctx.run_id)
            except OSError as exc:
                self.why_not = f"the file could not be copied to be kept ({exc.strerror or type(exc).__name__})"
                log.warning("source %r: %s; its file is parsed in place", src.name, self.why_not)
            else:
                self.tmp_made = True
                self.stat_after = _stat_key(self.feed)
                log.info("source %r: its file copied to be kept in %.2f s", src.name, time.monotonic() - started)
        if self.tmp is None:
            self._drop_kept()
        return self

    def _drop_kept(self) -> None:
        """The kept copy removed: the staging will not be its bytes (left, it is refused: no row names it)."""
        ctx = self.ctx
        with suppress(OSError):
            parsed_copy.drop(ctx.settings, ctx.spec.company, ctx.spec.project, ctx.spec.sources[self.index].name)

    def read_as_hashed(self, sha256: str | None, identity: dict[str, Any] | None) -> tuple[str | None, Any]:
        """The digest (and stat identity) to record for the bytes staged from a local file read in place.

        FETCH's digest (or the one taken beside the parse) is of the bytes staged only when the file's stat
        is its identity's before the copy (or parse) and after it: a file edited between FETCH and the copy
        would otherwise be recorded as FETCH's bytes, and a writer putting those back would make the next
        refresh `unchanged`, keeping the edit's rows for good. When the file moved, the copy's own digest is
        recorded (it is what was parsed), with no identity; without a copy, no digest (the next run parses)."""
        from firefeed.dataplane.file_identity import FileIdentity, read_digest

        now = _stat_key(self.feed) if self.tmp is None else self.stat_after
        known = FileIdentity.from_json(identity)
        held = (
            sha256 is not None
            and known is not None
            and known.sha256 == sha256
            and self.stat_before == now == known.stat_key
        )
        if held:
            return sha256, identity
        src = self.ctx.spec.sources[self.index].name
        if self.tmp is None:
            log.warning("source %r: its file changed while it was read; no digest is kept for it", src)
            return None, None
        log.warning("source %r: its file changed since it was fetched; the digest of its copy is kept", src)
        with self.tmp.open("rb") as f:
            copied, _size, _identity = read_digest(f)
        return copied, None

    def commit(
        self, sha256: str | None, *, quotes_checked: bool, unkept: str | None = None
    ) -> parsed_copy.KeptCopy | None:
        """The copy kept as the file the staging was parsed from (None: none kept, and the one kept before
        removed). `unkept`: why a patch would refuse this parse's staging (stage_patch.stats_reason)."""
        if self.tmp is None:
            return None
        if sha256 is None or unkept is not None:
            self.not_kept = unkept or "the file's digest is not known"
            self._drop_kept()
            return None
        ctx, name = self.ctx, self.ctx.spec.sources[self.index].name
        try:
            kept = parsed_copy.commit(
                ctx.settings, ctx.spec.company, ctx.spec.project, name, self.tmp, sha256, quotes_checked=quotes_checked
            )
        except OSError as exc:
            self.not_kept = f"the copy could not be kept ({exc.strerror or type(exc).__name__})"
            self._drop_kept()
            return None
        self.tmp = None
        return kept

    def __exit__(self, *exc: object) -> None:
        parsed_copy.discard(self.tmp)
        self.tmp = None


def _stat_key(path: Path) -> tuple[int, int, int, int, int] | None:
    from firefeed.dataplane.file_identity import stat_key

    try:
        return stat_key(os.stat(path))
    except OSError:
        return None


def _stage(
    ctx: RunContext, index: int, copy: _Copy, feed: Path, table: str, before: Source | None, *, full: bool
) -> tuple[StageResult, dict[str, Any]]:
    """The source staged by patch when it may be (stage_patch.py), else in full; and how (`staging`).
    `--full` (`full`) parses in full: the way out of any patch's fault."""
    from firefeed.pipeline import stage_patch
    from firefeed.pipeline.parse import ParseStats

    src = ctx.spec.sources[index]
    why = copy.why_not
    if why is None and full:
        why = "--full asked"
    if why is None:
        why = stage_patch.patchable(src, before)
    if why is None:
        assert before is not None
        try:
            patched = stage_patch.patch_staging(ctx, src, before, table, copy.path, index)
        except stage_patch.Refused as refused:
            why = str(refused)
        else:
            if _is_enrich(ctx, index):
                # The delta reads the patch's old rows: rows kept from an earlier full parse are stale now.
                _drop_previous_rows(ctx, index)
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
                "found_by": patched.found_by,
            }
        log.info("source %r is parsed in full: %s", src.name, why)
    if _is_enrich(ctx, index):
        # Only now (a patch refused leaves the staging as it was): a patched source keeps no previous rows.
        _keep_previous_rows(ctx, index, before)
    return stage_path(ctx, src, copy.path, table), {"staged": "full", "reason": why}


def _is_enrich(ctx: RunContext, index: int) -> bool:
    """Whether source `index` is an enrich source: its changes may be a delta (pipeline/delta.py)."""
    return index > 0 and ctx.spec.sources[index].mode == "enrich"


def _keep_previous_rows(ctx: RunContext, index: int, row: Source | None) -> None:
    """Before an enrich source is parsed again in full, its rows as they stood are kept for a delta to
    compare (dataplane/staged.py), described by `row` (its `sources` row as it stands)."""
    from firefeed.dataplane import staged

    src, spec = ctx.spec.sources[index], ctx.spec
    staged.keep_previous(ctx.data.schema, spec.company, spec.project, src.name, row)


def _drop_previous_rows(ctx: RunContext, index: int) -> None:
    """The previous rows kept of source `index` dropped: another source than an enrich one (no delta reads
    them), or an enrich source patched (the delta reads the patch's old rows)."""
    from firefeed.dataplane import staged

    src, spec = ctx.spec.sources[index], ctx.spec
    staged.drop_previous(ctx.data.schema, spec.company, spec.project, src.name)
