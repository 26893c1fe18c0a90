"""`preview_spec`: FETCH..RULES on a sample of a spec's items, in a scratch area, touching nothing of the project.

The CLI (`firefeed preview`) and the API (`POST /api/projects/{id}/preview`)
both call it. Every step is the run's own code: `fetch_source` with the run's
safety checks (SSRF guard, local files confined as for a run of this spec),
the same readers and staging, `merge_sources`, and the rules planner and
executor. What differs is where the rows go: a throwaway schema
`scratch_<time>_<random>` that is dropped at the end whatever happens, and a
download folder under FIREFEED_DATA_DIR/previews removed likewise. No control-
plane row is read or written, no lock is taken (a preview may run beside a
run of the same project), and exports are never written.

The whole preview has a deadline (FIREFEED_PREVIEW_DEADLINE_S, see
preview/deadline.py): past it, PreviewTimeoutError names the step that was
running, and the scratch area is dropped as always. Its database work goes
through an engine of its own (`bounded_engine`), so a preview never holds a
connection of the caller's pool for longer than it takes to drop the area.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import shutil
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg2
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from firefeed.config import Settings, get_settings
from firefeed.db.engine import database_message, get_engine
from firefeed.errors import (
    ParseError,
    PreviewFailedError,
    PreviewRefusedError,
    PreviewTimeoutError,
    PreviewUnavailableError,
    SourceError,
    UnsafePathError,
)
from firefeed.pipeline.fetch import FetchResult, fetch_source
from firefeed.pipeline.merge import StagedSource, merge_sources, merged_fields
from firefeed.pipeline.parse import FeedReader, open_reader
from firefeed.pipeline.stage import stage_source
from firefeed.pipeline.steps import fetch_settings
from firefeed.pipeline.transfer import RemoteAccess
from firefeed.pipeline.transfer.host_keys import HostKeyStore
from firefeed.preview.budget import AnswerBudget
from firefeed.preview.cache import SAMPLES, Replay, SourceRows, cache_key, validator_of
from firefeed.preview.deadline import Deadline, bounded_engine
from firefeed.preview.effects import Effects, rule_effects
from firefeed.preview.grid import (
    Cells,
    Output,
    ReadBudget,
    SourceCells,
    excluded_by,
    export_output,
    item_cells,
)
from firefeed.preview.models import (
    ExportOutput,
    ExportPreview,
    FieldChange,
    ItemRuleEffect,
    Preview,
    PreviewItem,
    RuleSummary,
    Sample,
    SourceSample,
)
from firefeed.preview.sample import SampleReader
from firefeed.rules.model import Rule
from firefeed.rules.unread import spec_warnings
from firefeed.schema.identifiers import project_table, scratch_area, staging_table
from firefeed.schema.service import SchemaService
from firefeed.secrets.store import resolver_for
from firefeed.spec.model import ExportSpec, FeedSpec, ProjectSpec
from firefeed.textutil import strip_ws

log = logging.getLogger(__name__)

DEFAULT_ITEMS = 20
#: a preview is for reading: more items than this is an export, not a preview
MAX_ITEMS = 1000
#: fetch retries of a preview's sources (a run's FIREFEED_FETCH_RETRIES when lower)
PREVIEW_FETCH_RETRIES = 1


def sample_ids(ids: Sequence[str]) -> list[str]:
    """The requested ids, trimmed as keys are, in order, without repeats; ValueError naming a bad one."""
    out: dict[str, None] = {}
    for i, raw in enumerate(ids):
        key = strip_ws(raw)
        if not key:
            raise ValueError(f"item id {i + 1} is empty: an item's key is never empty")
        out[key] = None
        if len(out) > MAX_ITEMS:
            raise ValueError(f"at most {MAX_ITEMS} item ids")
    return list(out)


def refused(err: psycopg2.Error | DBAPIError) -> PreviewFailedError:
    """The preview's error for a statement the database refused, by its SQLSTATE: bad data or too big a
    statement is the spec's or the feed's doing (422), a database that cannot serve now is a 503."""
    driver = err.orig if isinstance(err, DBAPIError) else err
    message = f"the database refused the preview: {database_message(err)}"
    kind = (getattr(driver, "pgcode", None) or "")[:2]
    if kind in ("22", "54"):
        return PreviewRefusedError(message)
    if kind in ("08", "40", "53", "55", "57"):
        return PreviewUnavailableError(message)
    return PreviewFailedError(message)


@dataclass
class Detail:
    """What a preview knows besides its answer: each source's sample rows (for an item as each source brought
    it) and each export's rows with their channel findings."""

    sources: SourceCells
    outputs: list[Output]


def preview_spec(
    spec: ProjectSpec,
    *,
    spec_dir: Path | None,
    items: int = DEFAULT_ITEMS,
    ids: Sequence[str] | None = None,
    engine: Engine | None = None,
    settings: Settings | None = None,
    deadline: Deadline | None = None,
) -> Preview:
    """What the spec's rules do to a sample (see `preview_detail`)."""
    return preview_detail(
        spec, spec_dir=spec_dir, items=items, ids=ids, engine=engine, settings=settings, deadline=deadline
    )[0]


def preview_detail(
    spec: ProjectSpec,
    *,
    spec_dir: Path | None,
    items: int = DEFAULT_ITEMS,
    ids: Sequence[str] | None = None,
    engine: Engine | None = None,
    settings: Settings | None = None,
    deadline: Deadline | None = None,
    checks: bool = False,
) -> tuple[Preview, Detail]:
    """What the spec's rules do to a sample: the first `items` items of the primary, or the items `ids`.

    `spec_dir` is the spec's folder (relative source paths); None for a spec sent
    over the API, whose local sources are confined as a run's would be. Source
    problems raise the run's errors (FetchError, ParseError, MergeError); not
    finishing by `deadline` (default: FIREFEED_PREVIEW_DEADLINE_S from now)
    raises PreviewTimeoutError. Items that would take the answer past
    FIREFEED_PREVIEW_MAX_ANSWER_BYTES are left out, and its `cut` says so.
    `checks`: the exports' rows also get their channel findings (in the detail).
    """
    if not 1 <= items <= MAX_ITEMS:
        raise ValueError(f"items must be between 1 and {MAX_ITEMS}, got {items}")
    wanted = sample_ids(ids) if ids else None
    engine = engine or get_engine()
    settings = settings or get_settings()
    started = time.perf_counter()
    preview_id = str(uuid.uuid4())
    area = scratch_area(int(time.time()), secrets.token_hex(8))
    work_dir = settings.data_dir / "previews" / preview_id
    deadline = deadline or Deadline(settings.preview_deadline_s)
    try:
        with deadline.armed(), bounded_engine(engine, deadline) as work:
            schema = SchemaService(work)
            deadline.check("creating its scratch schema")
            schema.create_scratch_area(area)
            sources, staged, rows = _sample_sources(
                spec, spec_dir, settings, work, schema, area, work_dir, items, wanted, deadline
            )
            deadline.check("merging the sources")
            merged = merge_sources(
                work,
                schema,
                company=area,
                table=project_table(spec.project),
                key_field=spec.key,
                sources=staged,
                list_fields=spec.list_fields.fields,
            )
            _stage_lookups(spec, spec_dir, settings, work, schema, area, work_dir, deadline)
            effects = rule_effects(
                work,
                schema,
                area=area,
                preview_id=preview_id,
                table=project_table(spec.project),
                fields=merged.fields,
                rules=spec.parsed_rules,
                deadline=deadline,
            )
            channels = [
                (exp, _channel_effects(spec, exp, work, schema, area, effects, deadline))
                for exp in spec.exports
                if exp.rules is not None
            ]
            deadline.check("reading the exports' rows")
            outputs = _outputs(
                spec,
                work,
                area,
                effects,
                {exp.name: e for exp, e in channels},
                checks=checks,
                budget=ReadBudget(settings.preview_max_answer_bytes),
            )
    except Exception as err:
        # Whatever failed once time was up (a shut connection, a cancelled statement) failed for the deadline.
        if deadline.expired() and not isinstance(err, PreviewTimeoutError):
            raise deadline.error() from err
        if isinstance(err, psycopg2.Error | DBAPIError):
            raise refused(err) from err
        raise
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
        try:
            # On the caller's engine: the preview's own is disposed, and its statement timeout is spent.
            SchemaService(engine).drop_scratch_area(area)
        except Exception:
            log.exception("could not drop the preview's scratch area %s; the janitor will", area)
    origins = SourceCells([s.name for s in spec.sources], rows, merged_fields(spec.key, staged)[1])
    found = {row[0] for row in effects.start.values()}
    answer = Preview(
        company=spec.company,
        project=spec.project,
        sample=Sample(
            items=None if wanted else items,
            ids=wanted,
            missing_ids=[k for k in wanted if k not in found] if wanted else [],
        ),
        fields=effects.fields,
        sources=sources,
        rules=_summaries(spec.parsed_rules, effects),
        items=[],
        exports=[
            ExportPreview(name=exp.name, fields=e.fields, rules=_summaries(exp.parsed_rules, e), items=[])
            for exp, e in channels
        ],
        warnings=_warnings(spec, merged.fields, effects.fields),
        duration_s=round(time.perf_counter() - started, 3),
    )
    # The answer is measured without items, then items are measured as they are made: past the bound
    # none is made (FIREFEED_PREVIEW_MAX_ANSWER_BYTES, preview/budget.py).
    # The export outputs' rows are measured like items: a bare output (columns, excluded) is in the bare answer.
    answer.outputs = [
        ExportOutput(export=exp.name, columns=out.columns, rows=[], total=out.total, excluded=out.excluded)
        for exp, out in zip(spec.exports, outputs, strict=True)
    ]
    budget = AnswerBudget(settings.preview_max_answer_bytes, answer, lists=1 + len(channels) + len(outputs))
    project_cells = item_cells(effects, spec.list_fields, origins)
    answer.items = budget.take("the sample", _items(spec, effects, project_cells), len(effects.start))
    for export, (exp, e) in zip(answer.exports, channels, strict=True):
        cells = _channel_cells(e, exp, effects, project_cells)
        export.items = budget.take(f"export {exp.name!r}", _items(spec, e, cells), len(e.start))
    for shown, out in zip(answer.outputs, outputs, strict=True):
        shown.rows = budget.take(shown.export, out.rows, out.total, noted=False)
    answer.cut = budget.note()
    return answer, Detail(origins, outputs)


def _sample_sources(
    spec: ProjectSpec,
    spec_dir: Path | None,
    settings: Settings,
    engine: Engine,
    schema: SchemaService,
    area: str,
    work_dir: Path,
    items: int,
    wanted: list[str] | None,
    deadline: Deadline,
) -> tuple[list[SourceSample], list[StagedSource], list[SourceRows]]:
    """FETCH and PARSE every source, staging only the sample's rows in the scratch area.

    The primary decides the sample (its first `items` keys, or the `wanted` ones it
    has); later sources contribute only rows of the sample's keys, and an append
    source adds a wanted id the primary lacks, as a run would. A source whose file
    is the one an earlier preview of the same sample read is not parsed again: its
    kept rows are replayed (preview/cache.py); it is fetched all the same, with
    every check of a fetch, to know that.
    """
    confined = _preview_fetch_settings(spec, spec_dir, settings)
    reports: list[SourceSample] = []
    staged: list[StagedSource] = []
    kept_rows: list[SourceRows] = []
    keys: frozenset[str] | None = frozenset(wanted) if wanted else None
    for index, src in enumerate(spec.sources):
        key = cache_key(
            spec.company,
            src.model_dump(mode="json"),
            primary=index == 0,
            sample=[items, wanted],
            extra=[spec.key, str(spec_dir or ""), sorted(spec.list_fields.fields), sorted(keys or ())],
        )
        kept = SAMPLES.get(spec.company, key)
        fetched = _fetch(
            src, "source", work_dir / "fetch", spec, spec_dir, confined, settings, engine, deadline, kept=kept
        )
        validator = validator_of(fetched, kept)
        table = staging_table(spec.project, src.name)
        hit = kept is not None and validator is not None and validator == kept.validator
        SAMPLES.counted(hit)
        if kept is not None and hit:
            replay = Replay(src.name, kept)
            result = stage_source(
                engine, schema, company=area, table=table, reader=replay, chunk_rows=settings.chunk_rows
            )
            rows, sample_keys, rows_read, size = kept, kept.keys, kept.rows_read, kept.bytes
        else:
            reader = _open(src, "source", fetched, deadline, lists=src.lists)
            key_from = src.key_template
            lists = src.list_fields
            sample = (
                SampleReader(reader, spec.key, keys=keys, check=deadline.check, key_from=key_from, lists=lists)
                if keys is not None
                else SampleReader(reader, spec.key, first=items, check=deadline.check, key_from=key_from, lists=lists)
            )
            result = stage_source(
                engine, schema, company=area, table=table, reader=sample, chunk_rows=settings.chunk_rows
            )
            rows = SourceRows(
                fields=list(sample.fields),
                rows=sample.taken,
                keys=list(sample.kept),
                stats=result.stats,
                lists=sample.lists,
                delimited=sample.delimited,
                lists_filled=sample.lists_filled,
                bytes=fetched.bytes,
                rows_read=sample.rows_read,
                validator=validator or (),
                http=fetched.validators if fetched.validators.etag or fetched.validators.last_modified else None,
            )
            if validator is not None:
                SAMPLES.put(spec.company, key, rows)
            sample_keys, rows_read, size = rows.keys, sample.rows_read, fetched.bytes
        if index == 0:
            if result.rows == 0 and keys is None:
                raise ParseError(src.name, "the primary source has no items")
            if keys is None:
                keys = frozenset(sample_keys)
        reports.append(
            SourceSample(
                name=src.name,
                bytes=size,
                rows_read=rows_read,
                rows_kept=result.rows,
                malformed=result.stats.malformed,
            )
        )
        staged.append(StagedSource.of(src, table, result.fields))
        kept_rows.append(rows)
    return reports, staged, kept_rows


def _preview_fetch_settings(spec: ProjectSpec, spec_dir: Path | None, settings: Settings) -> Settings:
    """The run's fetch settings for this company, but someone is waiting for the answer: one retry of a
    failing server, not a run's patient backoff."""
    confined = fetch_settings(settings, spec.company, spec_dir)
    return confined.model_copy(update={"fetch_retries": min(confined.fetch_retries, PREVIEW_FETCH_RETRIES)})


def _fetch(
    feed: FeedSpec,
    kind: str,
    folder: Path,
    spec: ProjectSpec,
    spec_dir: Path | None,
    confined: Settings,
    settings: Settings,
    engine: Engine,
    deadline: Deadline,
    *,
    kept: SourceRows | None = None,
) -> FetchResult:
    """Fetch one source or lookup table of the preview (under the deadline); `kept`: the rows an earlier
    preview kept of it, whose HTTP validators make the server answer 304 when the file is the same."""
    deadline.check(f"fetching {kind} {feed.name!r}")
    return fetch_source(
        source=feed.name,
        url=feed.url,
        dest_dir=folder / hashlib.sha256(feed.name.encode()).hexdigest()[:12],
        base_dir=spec_dir,
        headers=feed.headers,
        compression=feed.compression,
        previous=kept.http if kept is not None else None,
        settings=confined,
        deadline=deadline.at,
        references=resolver_for(spec.company, spec_dir, settings=settings, engine=engine),
        access=RemoteAccess.of(feed),
        host_keys=HostKeyStore(engine, spec.company),
    )


def _open(
    feed: FeedSpec, kind: str, fetched: FetchResult, deadline: Deadline, *, lists: Mapping[str, str] | None = None
) -> FeedReader:
    """The reader of a fetched file."""
    assert fetched.path is not None  # without validators a fetch always returns the file
    deadline.check(f"parsing {kind} {feed.name!r}")
    return open_reader(
        fetched.path,
        source=feed.name,
        format=feed.resolved_format,
        encoding=feed.encoding,
        delimiter=feed.delimiter,
        item_path=feed.item_path,
        lists=lists,
        preset=getattr(feed, "preset", None),  # a lookup has none
    )


def _stage_lookups(
    spec: ProjectSpec,
    spec_dir: Path | None,
    settings: Settings,
    engine: Engine,
    schema: SchemaService,
    area: str,
    work_dir: Path,
    deadline: Deadline,
) -> None:
    """Every lookup table, whole, keyed in the scratch area as a run keys it (the rules join it there)."""
    from firefeed.pipeline.lookups import InlineRows, build_lookup_table, lookup_columns
    from firefeed.schema.identifiers import lookup_staging_table

    confined = _preview_fetch_settings(spec, spec_dir, settings)
    columns = lookup_columns(spec)
    for lk in spec.lookups:
        staging = lookup_staging_table(spec.project, lk.name)
        try:
            if lk.inline:
                reader: FeedReader = InlineRows(lk)  # its rows are in the spec: nothing to fetch
            else:
                fetched = _fetch(
                    lk, "lookup", work_dir / "lookups", spec, spec_dir, confined, settings, engine, deadline
                )
                reader = _open(lk, "lookup", fetched, deadline)
            result = stage_source(
                engine, schema, company=area, table=staging, reader=reader, chunk_rows=settings.chunk_rows
            )
        except (SourceError, UnsafePathError) as err:
            raise err.as_lookup() from err  # as a run says it: the lookup, not a source of that name
        build_lookup_table(
            engine,
            schema,
            company=area,
            lookup=lk,
            staging=staging,
            table=spec.lookup_tables[lk.name],
            fields=result.fields,
            wanted=columns.get(lk.name, []),
        )


def _summaries(rules: Sequence[Rule], effects: Effects) -> list[RuleSummary]:
    by_rule = {e.rule.index: e for e in effects.rules}
    out = []
    for rule in rules:
        e = by_rule.get(rule.index)
        if e is None:
            out.append(
                RuleSummary(
                    rule=rule.name,
                    index=rule.index,
                    enabled=False,
                    items_in=0,
                    matched=0,
                    not_matched=0,
                    changed=0,
                    excluded=0,
                )
            )
            continue
        out.append(
            RuleSummary(
                rule=rule.name,
                index=rule.index,
                enabled=True,
                items_in=e.items_in,
                matched=e.matched_count,
                not_matched=e.items_in - e.matched_count,
                changed=len(e.changes),
                excluded=len(e.excluded),
            )
        )
    return out


def _channel_effects(
    spec: ProjectSpec,
    exp: ExportSpec,
    engine: Engine,
    schema: SchemaService,
    area: str,
    project: Effects,
    deadline: Deadline,
) -> Effects:
    """An export's own rules over its copy of the sample after the project's rules, as a run applies them."""
    from firefeed.rules.executor import copy_as_lists

    # pass tables are named by rule number: each export's apart from the project's
    preview_id = str(uuid.uuid4())
    table = project.table
    into_lists = [f for f in project.fields if f in exp.list_fields and f not in spec.list_fields]
    if into_lists:
        # fields its rules make lists that the project's leave as text are lists in its copy (steps.channel_rules)
        table = copy_as_lists(
            engine,
            schema,
            company=area,
            run_id=preview_id,
            number=0,
            src_table=table,
            fields=project.fields,
            into_lists=into_lists,
        )
    return rule_effects(
        engine,
        schema,
        area=area,
        preview_id=preview_id,
        table=table,
        fields=project.fields,
        rules=exp.parsed_rules,
        deadline=deadline,
    )


def _items(spec: ProjectSpec, effects: Effects, cells: dict[int, Cells]) -> Iterator[PreviewItem]:
    """Each sample item, what the rules did to it and its cells after them, in feed order, one at a time."""
    names = [s.name for s in spec.sources]
    for pos, (key, src, _values) in effects.start.items():
        reached: list[ItemRuleEffect] = []
        excluded_by = None
        for e in effects.rules:
            if pos not in e.matched:
                break  # excluded by an earlier rule
            changes = [FieldChange(field=f, before=b, after=a) for f, b, a in e.changes.get(pos, [])]
            excluded = pos in e.excluded
            reached.append(ItemRuleEffect(rule=e.rule.name, matched=e.matched[pos], excluded=excluded, changes=changes))
            if excluded:
                excluded_by = e.rule.name
                break
        c = cells[pos]
        yield PreviewItem(
            key=key,
            source=names[src],
            excluded_by=excluded_by,
            rules=reached,
            values=c.values,
            origin=c.origin,
            changed=c.changed,
        )


def _channel_cells(effects: Effects, exp: ExportSpec, project: Effects, before: dict[int, Cells]) -> dict[int, Cells]:
    """An export's items' cells: its own rules' changes over the project's result, whose origins stand for
    the cells its rules left alone. Positions are the sample's: the export's copy keeps them."""
    own = item_cells(effects, exp.list_fields, None)
    fields = effects.fields
    out: dict[int, Cells] = {}
    for pos, c in own.items():
        theirs = before.get(pos)
        origin_of = dict(zip(project.fields, theirs.origin, strict=True)) if theirs is not None else {}
        was = {project.fields[i] for i in theirs.changed} if theirs is not None else set()
        origin = [o or origin_of.get(f, "") for f, o in zip(fields, c.origin, strict=True)]
        changed = sorted(set(c.changed) | {i for i, f in enumerate(fields) if f in was})
        out[pos] = Cells(values=c.values, origin=origin, changed=changed)
    return out


def _outputs(
    spec: ProjectSpec,
    engine: Engine,
    area: str,
    effects: Effects,
    channels: dict[str, Effects],
    *,
    checks: bool,
    budget: ReadBudget,
) -> list[Output]:
    """Every export's rows for the sample, in spec order, read while `budget` lasts (preview/grid.py)."""
    keys = {pos: row[0] for pos, row in effects.start.items()}
    by_project = excluded_by(effects)
    out = []
    for exp in spec.exports:
        own = channels.get(exp.name)
        gone = dict(by_project)
        if own is not None:
            for pos, rule in excluded_by(own).items():
                gone.setdefault(pos, rule)
        out.append(
            export_output(
                engine,
                area=area,
                export=exp,
                effects=own or effects,
                keys=keys,
                excluded=gone,
                checks=checks,
                budget=budget,
            )
        )
    return out


#: what a preview's field warning adds when a source's fields are found item by item
SAMPLED = " (the preview read only the sample of a JSON or XML source: its later items may have the field)"


def _warnings(spec: ProjectSpec, merged: Sequence[str], result: Sequence[str]) -> list[str]:
    """A run's field warnings. A csv/tsv header names all its fields, but a JSON or XML source's fields
    are those of the items read, so there the warning says it may be the sample's."""
    warnings = spec_warnings(spec, merged, result)
    if any(src.resolved_format not in ("csv", "tsv") for src in spec.sources):
        warnings = [w + SAMPLED for w in warnings]
    return warnings
