"""The steps' work as plain functions, which the jobs (firefeed/pipeline/jobs.py) call.

Nothing here knows about Celery or job rows. Each function takes the run's
context, does one step's work (or one source's, or one export's) and returns
what the next step and the RunReport need. RULES is firefeed/pipeline/rule_passes.py.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from firefeed.config import Settings
from firefeed.db.engine import side_work_first
from firefeed.errors import MergeError, NotFoundError, ParseError, UnsafePathError
from firefeed.pipeline.context import RunContext
from firefeed.pipeline.merge import MergeResult, StagedSource, merge_sources
from firefeed.pipeline.stage import StageResult
from firefeed.runs.contract import RulesResult
from firefeed.schema.identifiers import company_schema, lookup_staging_table, lookup_table, staging_table
from firefeed.spec.model import FeedSpec, ProjectSpec, SourceSpec
from firefeed.storage import export_storage, run_storage
from firefeed.storage.keys import download_key, partial_key, run_prefix

log = logging.getLogger(__name__)

#: Bump when parsing changes in a way that makes old staging tables stale.
PARSER_VERSION = "1"


@dataclass
class FetchOutcome:
    name: str
    bytes: int
    not_modified: bool
    path: str | None
    owned: bool
    validators: dict[str, str | None]
    #: The download's key in the runs storage (None: a local source read in place, or not modified).
    key: str | None = None

    def report(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.bytes, "not_modified": self.not_modified}


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


def parse_signature(src: SourceSpec) -> str:
    """What the staged rows of a source depend on besides the bytes of the file."""
    # Credentials and the pinned key (SPEC 10 C6) change how a file is fetched, not how it is parsed.
    doc = src.model_dump(
        mode="json",
        exclude={"headers", "mode", "fields", "name", "key_from", "password", "private_key", "host_key"},
    )
    if doc.get("lists") is None:
        doc.pop("lists", None)  # a source without lists keeps the signature it always had
    else:
        # Lists staged otherwise by an earlier version (all as text, or all as text[]) are parsed again.
        doc["_lists_staged"] = "text[]; csv one-character separator: delimited text"
    doc["_parser"] = PARSER_VERSION
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def fetch_settings(settings: Settings, company: str, spec_dir: Path | None) -> Settings:
    """The settings a spec's sources are fetched with (runs and previews alike).

    A spec without a folder (sent over the API) may read local files only in its own
    company's folder under FIREFEED_LOCAL_SOURCES_ROOT.
    """
    if spec_dir is None and settings.local_sources_root is not None:
        return settings.model_copy(update={"local_sources_root": settings.local_sources_root / company})
    return settings


def fetch_one(ctx: RunContext, index: int) -> FetchOutcome:
    """FETCH one source; an unchanged source (same validators, same parse settings) is not_modified."""
    from firefeed.pipeline.fetch import Validators

    src = ctx.spec.sources[index]
    row = ctx.store.source_rows(ctx.spec.project).get(src.name)
    previous = None
    reusable = row is not None and row.parse_signature == parse_signature(src) and row.staged_fields is not None
    if reusable and row is not None:
        # The staging rows must still be there: crash recovery empties UNLOGGED tables but keeps them.
        expected = int((row.staged_stats or {}).get("rows", 0))
        table = staging_table(ctx.spec.project, src.name)
        staged = (
            ctx.schema.table_has_rows(ctx.spec.company, table)
            if expected
            else ctx.schema.table_exists(ctx.spec.company, table)
        )
        if staged:
            previous = Validators(etag=row.etag, last_modified=row.last_modified, sha256=row.content_sha256)
    return fetch_feed(ctx, src, previous=previous)


def fetch_feed(ctx: RunContext, src: FeedSpec, *, previous: Any = None, scope: str = "") -> FetchOutcome:
    """FETCH a file of the spec (a source, or a lookup table: the same URL checks, limits and secrets).

    `previous`: the validators of the staged copy (a conditional request); `scope` keeps the
    download folders of lookups apart from the sources' (their names may be equal).
    """
    from firefeed.pipeline.fetch import fetch_source
    from firefeed.pipeline.transfer import RemoteAccess
    from firefeed.pipeline.transfer.host_keys import HostKeyStore
    from firefeed.secrets.store import resolver_for

    settings = fetch_settings(ctx.settings, ctx.spec.company, ctx.spec_dir)
    dest = ctx.work_dir / "fetch" / hashlib.sha256((scope + src.name).encode()).hexdigest()[:12]
    result = fetch_source(
        source=src.name,
        url=src.url,
        dest_dir=dest,
        base_dir=ctx.spec_dir,
        headers=src.headers,
        compression=src.compression,
        previous=previous,
        settings=settings,
        # The run's own company's secrets; the environment only for a spec the CLI applied.
        references=resolver_for(ctx.spec.company, ctx.spec_dir, settings=ctx.settings, engine=ctx.engine),
        access=RemoteAccess.of(src),
        host_keys=HostKeyStore(ctx.engine, ctx.spec.company),
    )
    path = str(result.path) if result.path is not None else None
    owned = path is not None and Path(path).resolve().is_relative_to(ctx.work_dir.resolve())
    key = None
    if owned and result.path is not None:
        # PARSE may run on another machine: the download goes to the run's storage, not this disk.
        key = download_key(ctx.run_id, dest.name, result.path.name)
        runs = run_storage(ctx.settings)
        runs.put_file(result.path, key)
        path = runs.url(key)
    return FetchOutcome(
        name=src.name,
        bytes=result.bytes,
        not_modified=result.not_modified,
        path=path,
        owned=owned,
        key=key,
        validators={
            "etag": result.validators.etag,
            "last_modified": result.validators.last_modified,
            "sha256": result.validators.sha256,
        },
    )


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
            ctx.engine,
            ctx.schema,
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
        row = ctx.store.source_rows(ctx.spec.project)[src.name]
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
    # Staging is about to change: forget the old validators until this parse succeeds.
    ctx.store.update_source(ctx.spec.project, src.name, parse_signature=None)
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
    ctx.store.update_source(
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
        },
    )
    return outcome


def merge(ctx: RunContext, parsed: Sequence[ParseOutcome]) -> MergeResult:
    """MERGE the staged sources into the project's items table."""
    staged = [StagedSource.of(s, p.table, p.fields) for p, s in zip(parsed, ctx.spec.sources, strict=True)]
    merged = merge_sources(
        ctx.engine,
        ctx.schema,
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
        measuring(ctx.engine, ctx.schema, target, exp, first=first) as quality,
        storage.writing(partial_key(key, ctx.run_id)) as local,
    ):
        result = write_export(
            ctx.engine,
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


#: an export's channel-rule pass tables are numbered from (export index + 1) * this, apart from the
#: project's passes (1, 2, ... and p * 100 + h for a run's parts), whose result they read
CHANNEL_PASS_STRIDE = 10_000_000


def read_once(spec: ProjectSpec) -> bool:
    """Whether the project's rules' result is read once, by a pass that copies it: the spec's lone export
    has rules of its own (their first pass copies whatever it reads), so nothing else reads the result."""
    return len(spec.exports) == 1 and any(r.enabled for r in spec.exports[0].parsed_rules)


def channel_rules(
    ctx: RunContext, index: int, table: str, fields: Sequence[str], rows: int | None = None
) -> RulesResult:
    """An export's own rules (P29) on its copy of the items: new pass tables read from the project's result,
    which the other exports read unchanged. In one piece when the spec has several exports (their jobs
    already run side by side); a lone export's rules run in halves like the project's, reading the
    project's two halves when its result is their view (`InProcessPasses.segments`)."""
    from firefeed.export import reads_rows, view_reads_in_order
    from firefeed.pipeline.rule_passes import run_rules
    from firefeed.rules.executor import copy_as_lists

    exp = ctx.spec.exports[index]
    schema = company_schema(ctx.spec.company)
    first_pass = (index + 1) * CHANNEL_PASS_STRIDE + 1
    # Fields the export's rules make lists that the project's leave as text: its copy holds them as lists.
    into_lists = [f for f in fields if f in exp.list_fields and f not in ctx.spec.list_fields]
    if into_lists:
        table = copy_as_lists(
            ctx.engine,
            ctx.schema,
            company=ctx.spec.company,
            run_id=ctx.run_id,
            number=first_pass - 1,
            src_table=table,
            fields=fields,
            into_lists=into_lists,
        )
    holds_rows = ctx.schema.holds_rows(ctx.spec.company, table)
    return run_rules(
        ctx.engine,
        ctx.schema,
        company=ctx.spec.company,
        run_id=ctx.run_id,
        source_table=table,
        fields=fields,
        rules=exp.parsed_rules,
        cancel_check=ctx.check_cancel,
        # With several exports, their jobs already run side by side; a lone export's rules use both halves.
        split_min_rows=None if len(ctx.spec.exports) == 1 else 2**62,
        rows=rows,
        first_pass=first_pass,
        path=f"exports[{index}].rules",
        # Read whole by the file and the diagnostics, once each: a last pass counting nothing is a view
        # (no second write of every item), unless it joins groups of its own (see apply_passes). What it
        # reads may itself be computed (the project's last pass viewed, joining its groups) when the file
        # would still read it in order, hashing the groups: else its rows are written.
        view_last=reads_rows(exp) and (holds_rows or view_reads_in_order(ctx.engine, schema, table)),
        view_groups=False,
    )


def channel_report(result: RulesResult) -> dict[str, Any]:
    """`exports[i].rules` (P29): the export's own rules' passes, matches, exclusions and lookups."""
    # Pairs, as RulesResult stores them: JSONB would reorder an object's keys (the report turns them back).
    matched = [[name, n] for name, n in result.matched.items()]
    doc: dict[str, Any] = {"passes": result.passes, "matched": matched, "excluded": result.excluded}
    if result.lookups:
        doc["lookups"] = result.lookups
    return doc


def export_key(ctx: RunContext, index: int) -> str:
    """The storage key an export publishes to; UnsafePathError when its path leaves the project's folder."""
    from firefeed.export.paths import export_key as checked_key

    exp = ctx.spec.exports[index]
    try:
        return checked_key(export_storage(ctx.settings), ctx.spec.company, ctx.spec.project, exp.path, gzip=exp.gzip)
    except UnsafePathError as err:
        raise err.for_export(exp.name) from err


def drop_unnamed_tables(ctx: RunContext) -> None:
    """After a run that succeeded: drop the project's staging and lookup tables its spec no longer names
    (a source or lookup renamed or removed). Never fails the run: the files are published."""
    spec = ctx.spec
    keep = _file_tables(spec.project, {src.name for src in spec.sources}, {lk.name for lk in spec.lookups})
    try:
        former = _file_tables(spec.project, *ctx.store.former_names(spec.project))
    except Exception:  # the names of former specs only add to what the names' pattern finds
        log.exception("could not read the names of the project's former specs")
        former = set()
    try:
        try:
            ctx.store.project("lkp_" + spec.project)
            legacy = False  # its sources' staging tables are named like our old lookup staging
        except NotFoundError:
            legacy = True
        ctx.schema.drop_unnamed_project_tables(
            spec.company, spec.project, keep, former=former - keep, legacy_lookup_staging=legacy
        )
    except Exception:
        log.exception("could not drop the tables of sources and lookups the spec no longer names")


def _file_tables(project: str, sources: Iterable[str], lookups: Iterable[str]) -> set[str]:
    """The staging and lookup tables of these sources and lookups of `project`."""
    tables = {staging_table(project, name) for name in sources}
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
        ctx.schema.drop_rules_tmp_for_run(ctx.spec.company, ctx.run_id)
        ctx.schema.drop_export_tmp_for_run(ctx.spec.company, ctx.run_id)
    except Exception:
        log.exception("could not drop the run's rules_tmp / export_tmp tables; the janitor will")
    try:
        discard_partials(ctx)
        run_storage(ctx.settings).delete_tree(run_prefix(ctx.run_id))
    except Exception:
        log.exception("could not remove the run's unpublished exports or downloads from storage")
    shutil.rmtree(ctx.work_dir, ignore_errors=True)  # this machine's scratch copy of the downloads
