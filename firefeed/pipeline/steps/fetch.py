"""FETCH: one source's file (or a lookup's) into the run's storage, or not_modified when the staged copy
still holds."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from firefeed.config import Settings
from firefeed.pipeline.context import RunContext
from firefeed.pipeline.steps._shared import parse_signature
from firefeed.schema.identifiers import staging_table
from firefeed.spec.model import FeedSpec
from firefeed.storage import run_storage
from firefeed.storage.keys import download_key

#: the key of a local file's stat identity in its `sources` row's `staged_stats`
FILE_IDENTITY = "file_identity"


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
    #: a local file's stat identity when its digest was taken, or the kept one that vouched for it
    #: (`FileIdentity.to_json`: the outcome travels as JSON between a fleet's jobs)
    identity: dict[str, int | str] | None = None

    def report(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.bytes, "not_modified": self.not_modified}


def fetch_settings(settings: Settings, company: str, spec_dir: Path | None) -> Settings:
    """The settings a spec's sources are fetched with (runs and previews alike).

    A spec without a folder (sent over the API) may read local files only in its own
    company's folder under FIREFEED_LOCAL_SOURCES_ROOT.
    """
    if spec_dir is None and settings.local_sources_root is not None:
        return settings.model_copy(update={"local_sources_root": settings.local_sources_root / company})
    return settings


def fetch_one(ctx: RunContext, index: int) -> FetchOutcome:
    """FETCH one source; an unchanged source (same validators, same parse settings) is not_modified.

    A local file's stat identity (`FileIdentity`) is kept in its `sources` row's `staged_stats`
    (`FILE_IDENTITY`), bound to the digest it vouches for; it is written when a not modified fetch
    took the digest again, and by PARSE with the digest FETCH read for it (`parse_one`).
    """
    from firefeed.pipeline.fetch import FileIdentity, Validators

    src = ctx.spec.sources[index]
    row = ctx.control.runs.source_rows(ctx.spec.project).get(src.name)
    previous = None
    reusable = row is not None and row.parse_signature == parse_signature(src) and row.staged_fields is not None
    if reusable and row is not None:
        # The staging rows must still be there: crash recovery empties UNLOGGED tables but keeps them.
        expected = int((row.staged_stats or {}).get("rows", 0))
        table = staging_table(ctx.spec.project, src.name)
        staged = (
            ctx.data.schema.table_has_rows(ctx.spec.company, table)
            if expected
            else ctx.data.schema.table_exists(ctx.spec.company, table)
        )
        if staged:
            identity = FileIdentity.from_json((row.staged_stats or {}).get(FILE_IDENTITY))
            previous = Validators(
                etag=row.etag, last_modified=row.last_modified, sha256=row.content_sha256, identity=identity
            )
    outcome = fetch_feed(ctx, src, previous=previous)
    found = outcome.identity
    if (
        row is not None
        and previous is not None
        and outcome.not_modified
        and found != (row.staged_stats or {}).get(FILE_IDENTITY)
    ):
        stats = dict(row.staged_stats or {})
        stats[FILE_IDENTITY] = found
        ctx.control.runs.update_source(ctx.spec.project, src.name, staged_stats=stats)
    return outcome


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
        references=resolver_for(ctx.spec.company, ctx.spec_dir, settings=ctx.settings, engine=ctx.control.engine),
        access=RemoteAccess.of(src),
        host_keys=HostKeyStore(ctx.control.engine, ctx.spec.company),
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
        identity=result.validators.identity.to_json() if result.validators.identity is not None else None,
        validators={
            "etag": result.validators.etag,
            "last_modified": result.validators.last_modified,
            "sha256": result.validators.sha256,
        },
    )
