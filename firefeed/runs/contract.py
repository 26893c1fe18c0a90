"""The job contract between a run's driver and the workers that run its jobs, as types.

A job row (`pipeline_jobs`) carries a kind, a status, and JSON params and result.
What each kind takes and returns is one dataclass here, turned to and from that
JSON in one place, so a driver and a worker on another machine agree on the
shape and a misspelt field fails mypy instead of a run. The enums are
str-valued: the database keeps the same strings it always had.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class Step(StrEnum):
    """The five steps of a run, in order (SPEC section 4)."""

    FETCH = "FETCH"
    PARSE = "PARSE"
    MERGE = "MERGE"
    RULES = "RULES"
    EXPORT = "EXPORT"


class RunStatus(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class JobStatus(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class JobKind(StrEnum):
    """What a job does; each kind has its own Celery task (firefeed/tasks/routing.py)."""

    SOURCE = "source"  # FETCH then PARSE of one source
    MERGE = "merge"
    RULES = "rules"  # every rule pass, in the worker's process
    RULES_CHUNK = "rules_chunk"  # one slice of one rule pass
    EXPORT = "export"  # one export, written beside its published name
    DELIVER = "deliver"  # one published export handed to one delivery target (SPEC 10 C7)
    SYNC = "sync"  # one published export's changes sent to its channel's API (SPEC 10 C9-C10)

    @property
    def step(self) -> Step:
        """The step a job of this kind belongs to (a source job is recorded under PARSE)."""
        return _STEP_OF[self]


_STEP_OF = {
    JobKind.SOURCE: Step.PARSE,
    JobKind.MERGE: Step.MERGE,
    JobKind.RULES: Step.RULES,
    JobKind.RULES_CHUNK: Step.RULES,
    JobKind.EXPORT: Step.EXPORT,
    JobKind.DELIVER: Step.EXPORT,  # after the publish, on EXPORT's line of the timeline
    JobKind.SYNC: Step.EXPORT,  # after the publish and the deliveries, on EXPORT's line too
}


# -- params: what a job takes ----------------------------------------------------------
@dataclass(frozen=True)
class ParsedSource:
    """A staged source as MERGE needs it."""

    name: str
    table: str
    field_names: list[str]
    rows: int


@dataclass(frozen=True)
class MergeParams:
    sources: list[ParsedSource]

    def to_json(self) -> dict[str, Any]:
        return {
            "parsed": [
                {"name": p.name, "table": p.table, "field_names": p.field_names, "rows": p.rows} for p in self.sources
            ]
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> MergeParams:
        return cls([ParsedSource(p["name"], p["table"], list(p["field_names"]), int(p["rows"])) for p in doc["parsed"]])


@dataclass(frozen=True)
class RulesParams:
    """The merged items table's fields and rows (the table itself is the project's)."""

    fields: list[str]
    rows: int

    def to_json(self) -> dict[str, Any]:
        return {"fields": self.fields, "rows": self.rows}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> RulesParams:
        return cls(list(doc["fields"]), int(doc["rows"]))


@dataclass(frozen=True)
class RulesChunkParams:
    """One part of one pass. Written by CREATE TABLE AS into pass table number `number`: the rows of
    `src`, or, when `lo`/`hi` are set, those on its heap pages [lo, hi) (the items table, cut by pages).
    `in_place`: a DELETE in `src`, a pass table of this run. `groups`: the groups table a grouped pass
    joins. `rows`: the part's input rows, when known (a part of the items table is counted as it is
    read). `dst`: what a driver of the previous release sent instead of `number` (a table made up
    front to INSERT into): read, so the worker can refuse it by name (its passes were cut by that
    release's plan)."""

    fields: list[str]
    src: str
    rows: int | None
    number: int | None = None
    dst: str | None = None
    lo: int | None = None
    hi: int | None = None
    in_place: bool = False
    groups: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.in_place:
            return {"fields": self.fields, "src": self.src, "in_place": True, "rows": self.rows}
        doc: dict[str, Any] = {"fields": self.fields, "src": self.src, "rows": self.rows}
        doc |= {"dst": self.dst} if self.dst is not None else {"number": self.number}
        if self.lo is not None or self.hi is not None:
            doc |= {"lo": self.lo, "hi": self.hi}
        if self.groups is not None:
            doc["groups"] = self.groups
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> RulesChunkParams:
        return cls(
            fields=list(doc["fields"]),
            src=doc["src"],
            rows=None if doc.get("rows") is None else int(doc["rows"]),
            number=doc.get("number"),
            dst=doc.get("dst"),
            lo=doc.get("lo"),
            hi=doc.get("hi"),
            in_place=bool(doc.get("in_place")),
            groups=doc.get("groups"),
        )


@dataclass(frozen=True)
class ExportParams:
    """The rules' final table, its fields and items; the export itself is the job's `idx` in the spec."""

    table: str
    fields: list[str]
    rows: int | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"table": self.table, "fields": self.fields}
        return doc | {"rows": self.rows} if self.rows is not None else doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ExportParams:
        return cls(doc["table"], list(doc["fields"]), doc.get("rows"))


@dataclass(frozen=True)
class DeliverParams:
    """Which published file goes where: the export's and the target's places in the run's spec, the file's key."""

    export: int
    target: int
    key: str

    def to_json(self) -> dict[str, Any]:
        return {"export": self.export, "target": self.target, "key": self.key}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> DeliverParams:
        return cls(int(doc["export"]), int(doc["target"]), str(doc["key"]))


@dataclass(frozen=True)
class SyncParams:
    """Which export's published items go to its channel: its place in the run's spec, and the run's fields
    (from which the export's output columns, the names of the values in its payloads, are derived)."""

    export: int
    fields: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"export": self.export, "fields": self.fields}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SyncParams:
        return cls(int(doc["export"]), [str(f) for f in doc["fields"]])


JobParams = MergeParams | RulesParams | RulesChunkParams | ExportParams | DeliverParams | SyncParams
"""A source job takes no params: its `idx` is the source's place in the spec."""


# -- results: what a job returns -------------------------------------------------------
def _iso(at: datetime) -> str:
    return at.isoformat()


@dataclass(frozen=True)
class SourceFetched:
    """A source job's result after FETCH (saved mid-job, so the driver can close FETCH while PARSE runs)."""

    fetch: dict[str, Any]  # the source's FETCH part of the RunReport
    fetch_started: datetime
    fetch_finished: datetime
    fetched: dict[str, Any]  # steps.FetchOutcome's fields, for PARSE in the same job

    def to_json(self) -> dict[str, Any]:
        return {
            "fetch": self.fetch,
            "fetch_started": _iso(self.fetch_started),
            "fetch_finished": _iso(self.fetch_finished),
            "fetched": self.fetched,
        }

    @staticmethod
    def present(doc: dict[str, Any] | None) -> bool:
        """Whether a source job's result already holds its FETCH part."""
        return doc is not None and "fetch_finished" in doc


@dataclass(frozen=True)
class SourceResult:
    fetch: dict[str, Any]  # the source's FETCH part of the RunReport
    parse: dict[str, Any]  # its PARSE part (name, rows, fields, skipped ...)
    parsed: ParsedSource
    warnings: list[str]
    fetch_started: datetime
    fetch_finished: datetime
    parse_finished: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "fetch": self.fetch,
            "parse": self.parse
            | {"table": self.parsed.table, "field_names": self.parsed.field_names, "warnings": self.warnings},
            "fetch_started": _iso(self.fetch_started),
            "fetch_finished": _iso(self.fetch_finished),
            "parse_finished": _iso(self.parse_finished),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SourceResult:
        raw = doc["parse"]
        parse = {k: v for k, v in raw.items() if k not in ("table", "field_names", "warnings")}
        return cls(
            fetch=doc["fetch"],
            parse=parse,
            parsed=ParsedSource(raw["name"], raw["table"], list(raw["field_names"]), int(raw["rows"])),
            warnings=list(raw.get("warnings", [])),
            fetch_started=datetime.fromisoformat(doc["fetch_started"]),
            fetch_finished=datetime.fromisoformat(doc["fetch_finished"]),
            parse_finished=datetime.fromisoformat(doc["parse_finished"]),
        )

    @classmethod
    def fetched_part(cls, doc: dict[str, Any]) -> tuple[dict[str, Any], datetime, datetime]:
        """FETCH's report part and clock of a result with at least its FETCH part."""
        return (
            doc["fetch"],
            datetime.fromisoformat(doc["fetch_started"]),
            datetime.fromisoformat(doc["fetch_finished"]),
        )


@dataclass(frozen=True)
class SourceSkips:
    empty_key: int
    duplicate_key: int


@dataclass(frozen=True)
class MergeResult:
    fields: list[str]
    rows: int
    rows_in: int
    skipped: dict[str, SourceSkips]  # per source name, in the spec's order
    #: the lookup tables' RunReport entries (SPEC 9), loaded by the MERGE job; none without lookups
    lookups: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        doc = {
            "fields": self.fields,
            "rows": self.rows,
            "rows_in": self.rows_in,
            "sources": [
                {"name": name, "skipped": {"empty_key": s.empty_key, "duplicate_key": s.duplicate_key}}
                for name, s in self.skipped.items()
            ],
        }
        if self.lookups:
            doc["lookups"] = self.lookups
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> MergeResult:
        return cls(
            fields=list(doc["fields"]),
            rows=int(doc["rows"]),
            rows_in=int(doc["rows_in"]),
            skipped={
                s["name"]: SourceSkips(int(s["skipped"]["empty_key"]), int(s["skipped"]["duplicate_key"]))
                for s in doc["sources"]
            },
            lookups=list(doc.get("lookups", [])),
        )

    def sources_report(self) -> list[dict[str, Any]]:
        """MERGE's `sources` part of the RunReport."""
        return list(self.to_json()["sources"])


@dataclass(frozen=True)
class RulesResult:
    """The RULES step's outcome, however its passes ran."""

    table: str  # the final table (or view) in the company schema; the items table when no rule is enabled
    fields: list[str]  # input fields, then fields created by rules in first-created order
    passes: int
    matched: dict[str, int]  # per enabled rule, in the rules' order
    excluded: int
    rows_in: int
    rows_out: int
    #: per lookup action, its counts and top unmatched values (SPEC 9, P23); none without lookups
    lookups: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        doc = {
            "table": self.table,
            "fields": self.fields,
            "passes": self.passes,
            # Pairs, not an object: JSONB reorders object keys and the report lists rules in their order.
            "matched": [[name, n] for name, n in self.matched.items()],
            "excluded": self.excluded,
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
        }
        if self.lookups:
            doc["lookups"] = self.lookups
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> RulesResult:
        return cls(
            table=doc["table"],
            fields=list(doc["fields"]),
            passes=int(doc["passes"]),
            matched={str(name): int(n) for name, n in doc["matched"]},
            excluded=int(doc["excluded"]),
            rows_in=int(doc["rows_in"]),
            rows_out=int(doc["rows_out"]),
            lookups=list(doc.get("lookups", [])),
        )

    def report(self) -> dict[str, Any]:
        """RULES' part of the RunReport."""
        doc = self.to_json()
        return {k: doc[k] for k in ("passes", "matched", "excluded", "fields", "lookups") if k in doc}


@dataclass(frozen=True)
class ChunkResult:
    """One pass part's table and counts: its input and kept rows, and the matches of each rule of the pass."""

    table: str
    rows_in: int
    rows_out: int
    matched: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
            "matched": [[k, v] for k, v in self.matched.items()],
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ChunkResult:
        matched = {str(k): int(v) for k, v in doc["matched"]}
        return cls(str(doc["table"]), int(doc["rows_in"]), int(doc["rows_out"]), matched)


@dataclass(frozen=True)
class ExportResult:
    """One written export: its RunReport entry (name, path, rows, bytes, sha256, quality ...)."""

    entry: dict[str, Any]

    @property
    def rows(self) -> int:
        return int(self.entry["rows"])

    def to_json(self) -> dict[str, Any]:
        return self.entry

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ExportResult:
        return cls(doc)


@dataclass(frozen=True)
class SyncResult:
    """One sync's outcome (SPEC 10 C10). A failed sync is a job that succeeded: the run does not fail for it.

    `report()` is the RunReport's `exports[i].sync`; `error` (the channel refused the sync itself, or it
    could not start) is the `sync_failed` warning's text, and never holds a secret.
    """

    export: str
    to: str
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    failed: int = 0
    pending: int = 0
    errors: list[dict[str, str]] = field(default_factory=list)
    channel_issues: dict[str, Any] | None = None
    error: str | None = None
    requests: int = 0
    seconds: float = 0.0
    #: the export's columns the channel has no field for, so no item carries them there (Meta's)
    columns_not_sent: list[str] = field(default_factory=list)
    #: items sent without an optional attribute FireFeed could not read; `warnings` the first 20 of them
    #: ({key, attribute, message}), one per attribute left out
    left_out: int = 0
    warnings: list[dict[str, str]] = field(default_factory=list)

    def report(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "to": self.to,
            "inserted": self.inserted,
            "updated": self.updated,
            "deleted": self.deleted,
            "failed": self.failed,
            "pending": self.pending,
            "errors": self.errors,
        }
        if self.channel_issues is not None:
            doc["channel_issues"] = self.channel_issues
        if self.columns_not_sent:
            doc["columns_not_sent"] = self.columns_not_sent
        if self.left_out:
            doc["left_out"] = self.left_out
            doc["warnings"] = self.warnings
        if self.error is not None:
            doc["error"] = self.error
        return doc

    def to_json(self) -> dict[str, Any]:
        return {**self.report(), "export": self.export, "requests": self.requests, "seconds": self.seconds}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SyncResult:
        return cls(
            export=doc["export"],
            to=doc["to"],
            inserted=int(doc.get("inserted", 0)),
            updated=int(doc.get("updated", 0)),
            deleted=int(doc.get("deleted", 0)),
            failed=int(doc.get("failed", 0)),
            pending=int(doc.get("pending", 0)),
            errors=list(doc.get("errors", [])),
            channel_issues=doc.get("channel_issues"),
            error=doc.get("error"),
            requests=int(doc.get("requests", 0)),
            seconds=float(doc.get("seconds", 0.0)),
            columns_not_sent=[str(c) for c in doc.get("columns_not_sent", [])],
            left_out=int(doc.get("left_out", 0)),
            warnings=list(doc.get("warnings", [])),
        )


# -- the job rows ----------------------------------------------------------------------
class DeliveryStatus(StrEnum):
    DELIVERED = "delivered"
    FAILED = "failed"
    UNCHANGED = "unchanged"  # the target already holds this sha256


@dataclass(frozen=True)
class DeliveryResult:
    """One delivery's outcome (a failed delivery is a job that succeeded: the run does not fail for it)."""

    export: str
    target: str  # the URL without credentials
    status: DeliveryStatus
    bytes: int
    attempts: int
    error: str | None = None
    sha256: str | None = None

    def report(self) -> dict[str, Any]:
        """The RunReport's `exports[i].deliveries[j]`."""
        return {
            "target": self.target,
            "status": str(self.status),
            "bytes": self.bytes,
            "attempts": self.attempts,
            "error": self.error,
        }

    def to_json(self) -> dict[str, Any]:
        return {**self.report(), "export": self.export, "sha256": self.sha256}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> DeliveryResult:
        return cls(
            export=doc["export"],
            target=doc["target"],
            status=DeliveryStatus(doc["status"]),
            bytes=int(doc["bytes"]),
            attempts=int(doc["attempts"]),
            error=doc.get("error"),
            sha256=doc.get("sha256"),
        )


@dataclass(frozen=True)
class JobSpec:
    """A job to create: its kind, its place (`idx`, `pass_no`) and what it takes."""

    kind: JobKind
    idx: int = 0
    pass_no: int = 0
    params: JobParams | None = None

    @property
    def step(self) -> Step:
        return self.kind.step


@dataclass(frozen=True)
class JobState:
    """A job row as the store read it; `params`/`result` are the raw JSON, read through the kind's dataclass."""

    id: int
    run_id: str
    kind: JobKind
    idx: int
    pass_no: int
    status: JobStatus
    params: dict[str, Any] | None
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    claimed_at: datetime | None
    heartbeat_at: datetime | None
    created_at: datetime | None
    #: How many times the job was claimed: more than once, an earlier worker stopped beating and it was taken over.
    attempts: int = 0

    @property
    def step(self) -> Step:
        return self.kind.step

    def params_doc(self) -> dict[str, Any]:
        return self.params or {}

    def result_doc(self) -> dict[str, Any]:
        return self.result or {}
