"""What a project keeps between runs, read from where it lives today (#52, part 1).

A refresh may reuse the last succeeded run's work only when what that work read is still what the
run reads now. That state is kept in three places, and this module is the one reader of all three:

- the sources' validators and digests: the project's `sources` rows (etag, last_modified,
  content_sha256, parse_signature), which FETCH and PARSE keep already (pipeline/steps.py);
- what a succeeded run read besides its sources: its MERGE step's `state` detail (`RunState`,
  written by the driver): the sources' validators as that run left them, each lookup table's
  digest (pipeline/lookups.py measures it while staging), and the engine version;
- what a succeeded run published: its EXPORT step's entries (storage key and sha256 of each file).

The spec a run read is its spec version (`pipeline_runs.spec_version_id`, content-addressed per
project: the same document and folder is the same version). Nothing here moves that storage; the
per-item fingerprints of the delta (part 2) join it here.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from firefeed.dataplane.file_identity import FileIdentity, read_digest
from firefeed.db.models import PipelineRun
from firefeed.errors import StorageError, UnsafePathError
from firefeed.runs.contract import RunStatus, Step
from firefeed.runs.service import RunStore
from firefeed.storage.base import Storage
from firefeed.storage.local import LocalStorage

#: Bump when MERGE, RULES or EXPORT would write other bytes for the same inputs and spec: a run
#: kept by an older engine is then never reused (its files are what that engine wrote).
ENGINE_VERSION = "1"

#: How far back the last succeeded run is looked for (a project failing longer than this runs full).
LOOKBACK_RUNS = 20

_CHUNK = 1 << 20


@dataclass(frozen=True)
class SourceState:
    """One source as its staged rows were read: the validators FETCH compares and the parse settings."""

    etag: str | None
    last_modified: str | None
    sha256: str | None
    parse_signature: str | None

    def to_json(self) -> dict[str, str | None]:
        return {
            "etag": self.etag,
            "last_modified": self.last_modified,
            "sha256": self.sha256,
            "parse_signature": self.parse_signature,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> SourceState:
        return cls(doc.get("etag"), doc.get("last_modified"), doc.get("sha256"), doc.get("parse_signature"))


@dataclass(frozen=True)
class RunState:
    """What a run read: its sources' state, its lookup tables' digests and the engine that read them."""

    sources: dict[str, SourceState]
    lookups: dict[str, str] = field(default_factory=dict)
    engine: str = ENGINE_VERSION

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "sources": {name: s.to_json() for name, s in self.sources.items()},
            "lookups": dict(self.lookups),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> RunState:
        return cls(
            sources={str(n): SourceState.from_json(s) for n, s in (doc.get("sources") or {}).items()},
            lookups={str(n): str(d) for n, d in (doc.get("lookups") or {}).items()},
            engine=str(doc.get("engine")),
        )


@dataclass(frozen=True)
class KeptRun:
    """The project's last succeeded run and what it kept: its row, its steps' details, its state."""

    run: PipelineRun
    details: dict[str, dict[str, Any]]
    rows: dict[str, tuple[int, int]]  # per step: (rows_in, rows_out)
    state: RunState | None
    #: runs requested after it (none succeeded) that reached MERGE: they rebuilt the project's tables
    rebuilt_since: list[str]

    @property
    def run_id(self) -> str:
        return str(self.run.id)

    @property
    def exports(self) -> list[dict[str, Any]]:
        return list(self.details.get(Step.EXPORT, {}).get("exports", []))


def source_states(store: RunStore, project: str, names: Sequence[str]) -> dict[str, SourceState]:
    """The project's sources as their staged rows stand now (after this run's PARSE)."""
    rows = store.source_rows(project)
    out: dict[str, SourceState] = {}
    for name in names:
        row = rows.get(name)
        if row is not None:
            out[name] = SourceState(row.etag, row.last_modified, row.content_sha256, row.parse_signature)
    return out


def last_succeeded(store: RunStore, project: str, *, before: str) -> KeptRun | None:
    """The project's last SUCCEEDED run other than `before` (the run asking), and what it kept."""
    rebuilt: list[str] = []
    for run in store.runs_of_project(project, limit=LOOKBACK_RUNS + 1):
        run_id = str(run.id)
        if run_id == before:
            continue
        steps = store.steps(run_id)
        if run.status != RunStatus.SUCCEEDED:
            if any(st.step == Step.MERGE for st in steps):
                rebuilt.append(run_id)
            continue
        details = {st.step: dict(st.detail or {}) for st in steps}
        rows = {st.step: (int(st.rows_in or 0), int(st.rows_out or 0)) for st in steps}
        kept = details.get(Step.MERGE, {}).get("state")
        state = RunState.from_json(kept) if isinstance(kept, dict) else None
        return KeptRun(run, details, rows, state, rebuilt)
    return None


class CheckStopped(Exception):
    """`moved_files` stopped by its caller (`stop` set): nobody will read its answer."""


class _Stoppable:
    """A file read in chunks that raises CheckStopped at the next read once `stop` is set."""

    def __init__(self, f: BinaryIO, stop: threading.Event | None) -> None:
        self._f, self._stop = f, stop

    def read(self, n: int = -1) -> bytes:
        if self._stop is not None and self._stop.is_set():
            raise CheckStopped
        return self._f.read(n)

    def fileno(self) -> int:
        return self._f.fileno()

    @property
    def name(self) -> str:
        return str(self._f.name)


def file_sha256(storage: Storage, key: str, stop: threading.Event | None = None) -> str | None:
    """The SHA-256 of the stored file `key`; None when it is gone."""
    if not storage.exists(key):
        return None
    digest = hashlib.sha256()
    with storage.reading(key) as path, path.open("rb") as f:
        read = _Stoppable(f, stop)
        while chunk := read.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def moved_files(
    storage: Storage,
    exports: Sequence[Mapping[str, Any]],
    *,
    store: RunStore | None = None,
    project: str | None = None,
    stop: threading.Event | None = None,
) -> list[str]:
    """The names of the published exports whose file is gone or holds other bytes than recorded
    (CheckStopped once `stop` is set: a check begun on a thread that the run no longer needs).

    With `store` and `project`, a local file whose stat is the identity kept for it (`published_files`,
    taken by an earlier check that read it) is not read; a file read and found unchanged keeps the
    identity of that read for the next check. A file FireFeed has just published is read once: its
    stamps are too fresh to vouch for it (file_identity.RACY_MARGIN_NS).
    """
    kept = store.published_identities(project) if store is not None and project is not None else {}
    moved = []
    for entry in exports:
        key, recorded, name = entry.get("path"), entry.get("sha256"), str(entry.get("name"))
        if not isinstance(key, str) or not isinstance(recorded, str):
            moved.append(name)
            continue
        # The size first, where the backend says it: a file of another size differs without reading it.
        size = storage.size(key)
        if size is not None and size != entry.get("bytes"):
            moved.append(name)
            continue
        if isinstance(storage, LocalStorage):
            if not _local_file_holds(storage, key, recorded, name, kept, store, project, stop):
                moved.append(name)
        elif file_sha256(storage, key, stop) != recorded:
            moved.append(name)
    return moved


def _local_file_holds(
    storage: LocalStorage,
    key: str,
    recorded: str,
    name: str,
    kept: Mapping[str, tuple[str, dict[str, Any]]],
    store: RunStore | None,
    project: str | None,
    stop: threading.Event | None = None,
) -> bool:
    """Whether the local file `key` holds the bytes of `recorded`, by its kept identity or by reading it."""
    try:
        path = storage.path(key)
        with path.open("rb") as f:
            known = kept.get(name)
            identity = FileIdentity.from_json(known[1]) if known is not None and known[0] == key else None
            if identity is not None and identity.vouches_for(os.fstat(f.fileno()), recorded):
                return True
            sha256, _, taken = read_digest(_Stoppable(f, stop))  # type: ignore[arg-type]
    except (OSError, StorageError, UnsafePathError):
        return False
    if sha256 != recorded:
        return False
    if taken is not None and store is not None and project is not None and taken != identity:
        store.keep_published_identity(project, name, key, taken.to_json())
    return True
