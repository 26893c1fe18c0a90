"""The runnables a processes row may name in `function`, by exact name, and the checks on their input.

A runnable takes a JobContext and returns an Outcome; expected failures are
FireFeedErrors whose message goes into the row's `error_message` as is. Every
runnable acts inside the worker's workspace (= company) only.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine

from firefeed.config import Settings
from firefeed.errors import NotFoundError, PipelineBusyError, ProcessInputError
from firefeed.logging import run_context
from firefeed.processes.store import UnreadableInput

log = logging.getLogger(__name__)


class RowLog(logging.LoggerAdapter[logging.Logger]):
    """Prefixes every line with `process <id>:` so all lines about a row can be grouped."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        return f"process {self.extra['process_id'] if self.extra else '?'}: {msg}", kwargs


@dataclass
class Outcome:
    """What a runnable leaves in the row: completed or failed, `output_data`, `error_message`."""

    ok: bool
    output: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class JobContext:
    """One claimed row as a runnable sees it; `cancel()` is how the worker stops it (timeout, shutdown)."""

    process_id: int
    workspace_id: str
    worker: str
    input: dict[str, Any]
    engine: Engine
    settings: Settings
    snapshot: Callable[[], dict[str, Any] | None] | None = None
    """Set by a runnable that can describe its progress: the output_data written if it times out."""
    cancelled: threading.Event = field(default_factory=threading.Event)
    _on_cancel: list[Callable[[], object]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def log(self) -> RowLog:
        return RowLog(log, {"process_id": self.process_id})

    def on_cancel(self, callback: Callable[[], object]) -> None:
        """Call `callback` when the job is cancelled (at once if it already is)."""
        with self._lock:
            if not self.cancelled.is_set():
                self._on_cancel.append(callback)
                return
        callback()

    def cancel(self) -> None:
        with self._lock:
            if self.cancelled.is_set():
                return
            self.cancelled.set()
            callbacks, self._on_cancel = self._on_cancel, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # a failed cancel must not stop the worker; the timeout is still recorded
                self.log.warning("cancelling failed", exc_info=True)


@dataclass(frozen=True)
class Runnable:
    name: str
    func: Callable[[JobContext], Outcome]
    usage: str
    """The input_data it takes, as shown in error messages."""
    required: Mapping[str, type | tuple[type, ...]] = field(default_factory=dict)
    optional: Mapping[str, type | tuple[type, ...]] = field(default_factory=dict)

    def check_input(self, data: Any) -> dict[str, Any]:
        """The input_data as a dict, or ProcessInputError saying what is wrong and what is expected."""
        expected = f"{self.name} takes input_data {self.usage}"
        if isinstance(data, UnreadableInput):
            raise ProcessInputError(f"input_data cannot be read: {data.reason}; {expected}")
        if not isinstance(data, dict):
            raise ProcessInputError(f"input_data must be a JSON object, got {_json_kind(data)}; {expected}")
        unknown = sorted(set(data) - set(self.required) - set(self.optional))
        if unknown:
            raise ProcessInputError(f"input_data has unexpected key(s) {', '.join(map(repr, unknown))}; {expected}")
        for key, kind in {**self.required, **self.optional}.items():
            if key not in data:
                if key in self.required:
                    raise ProcessInputError(f"input_data is missing {key!r}; {expected}")
                continue
            value = data[key]
            if kind is float:
                good = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
            elif kind is str:
                good = isinstance(value, str) and bool(value.strip())
            else:
                good = isinstance(value, kind)
            if not good:
                raise ProcessInputError(
                    f"input_data.{key} must be {_KIND_NAMES[kind]}, got {_json_kind(value)}; {expected}"
                )
        return data


_KIND_NAMES: dict[type | tuple[type, ...], str] = {
    str: "a non-empty string",
    float: "a number >= 0",
    dict: "a JSON object",
    bool: "true or false",
    (dict, str): "a JSON object or a string holding YAML or JSON",
}


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}" if value.strip() else "an empty string"
    if isinstance(value, list):
        return "an array"
    return "an object"


# -- runnables -------------------------------------------------------------------------
def pipeline_run(ctx: JobContext) -> Outcome:
    """Request a run through the project lock (trigger "process") and drive it here; output = its RunReport.

    A busy project fails the row at once with the active run's id: the lock's
    contract is "refused, never a wait", and the caller can insert a new row
    (or watch that run) knowing exactly why nothing started.
    """
    from firefeed.pipeline.run import execute_run
    from firefeed.runs.report import build_report
    from firefeed.runs.service import RunStore

    project = ctx.input["project"]
    store = RunStore(ctx.engine)
    try:
        run_id = store.request_run(
            project,
            "process",
            company=ctx.workspace_id,
            accept_drop=bool(ctx.input.get("accept_drop", False)),
            accept_invalid=bool(ctx.input.get("accept_invalid", False)),
            full=bool(ctx.input.get("full", False)),
        )
    except PipelineBusyError as err:
        return Outcome(
            ok=False,
            output={"error": "pipeline_busy", "project": project, "run_id": err.run_id},
            error=f"project {project!r} already has an active run {err.run_id}; no new run was started",
        )
    ctx.on_cancel(lambda: store.request_cancel(run_id))
    ctx.snapshot = lambda: build_report(store, run_id)
    with run_context(run_id=run_id, project=project, company=ctx.workspace_id):
        ctx.log.info("run %s of project %s started", run_id, project)
        report = execute_run(run_id, engine=ctx.engine, settings=ctx.settings)
        ctx.log.info("run %s ended %s", run_id, report["status"])
    if report["status"] == "SUCCEEDED":
        return Outcome(ok=True, output=report)
    error = report.get("error") or {}
    where = f" in {error['step']}" if error.get("step") else ""
    message = error.get("message") or f"the run ended {report['status']}"
    return Outcome(ok=False, output=report, error=f"run {run_id} {report['status']}{where}: {message}")


def run_status(ctx: JobContext) -> Outcome:
    """The RunReport of one of the workspace's runs, as `firefeed status RUN_ID --json` prints it."""
    from firefeed.runs.report import build_report
    from firefeed.runs.service import RunStore

    run_id = ctx.input["run_id"]
    store = RunStore(ctx.engine)
    run = store.run(run_id)
    if run.company_id != ctx.workspace_id:
        raise NotFoundError(f"unknown run {run_id!r}")
    return Outcome(ok=True, output=build_report(store, run_id))


def project_apply(ctx: JobContext) -> Outcome:
    """Create or update a project of the workspace's company from a spec (as `firefeed apply`).

    Local source paths are not resolved against any folder: use URLs or absolute paths.
    `spec` may be the spec's text (YAML or JSON): `input_data` is JSONB, which sorts an
    object's keys, so only text keeps the order of `fields`, `map` values and `headers`
    (SPEC 8.18) from the service that wrote the row.
    """
    from firefeed.runs.service import RunStore
    from firefeed.spec.loader import check_spec_size, load_spec, parse_spec

    raw = ctx.input["spec"]
    if isinstance(raw, str):
        spec = load_spec(raw, filename="input_data.spec")  # checks FIREFEED_SPEC_MAX_BYTES first
    else:
        # The object's JSON text, as the API would have received it: the one cap, the same words.
        check_spec_size(len(json.dumps(raw, ensure_ascii=False).encode("utf-8", "surrogatepass")))
        spec = parse_spec(raw)
    if spec.company != ctx.workspace_id:
        raise ProcessInputError(
            f"spec.company {spec.company!r} is not this workspace {ctx.workspace_id!r}; "
            "a workspace applies only its own company's projects"
        )
    try:
        created = RunStore(ctx.engine).apply_spec(spec, spec_dir=None, company=ctx.workspace_id)
    except NotFoundError:
        # Another company owns that id: say no more than "not available" (SPEC 6).
        raise NotFoundError(f"project id {spec.project!r} is not available to this workspace") from None
    return Outcome(
        ok=True,
        output={
            "company": spec.company,
            "project": spec.project,
            "created": created,
            "sources": len(spec.sources),
            "rules": len(spec.parsed_rules),
            "exports": len(spec.exports),
        },
    )


def ping(ctx: JobContext) -> Outcome:
    """Answers which worker serves the workspace; `sleep_s` holds the slot that long (checks timeouts, leases)."""
    sleep_s = float(ctx.input.get("sleep_s", 0))
    if sleep_s and ctx.cancelled.wait(sleep_s):
        return Outcome(ok=False, error="cancelled while sleeping")
    return Outcome(ok=True, output={"pong": True, "worker": ctx.worker, "workspace_id": ctx.workspace_id})


RUNNABLES: dict[str, Runnable] = {
    r.name: r
    for r in (
        Runnable(
            "firefeed.pipeline.run",
            pipeline_run,
            '{"project": "<project id>"}, optionally with "accept_drop": true, "accept_invalid": true and "full": true',
            required={"project": str},
            optional={"accept_drop": bool, "accept_invalid": bool, "full": bool},
        ),
        Runnable("firefeed.run.status", run_status, '{"run_id": "<run id>"}', required={"run_id": str}),
        Runnable(
            "firefeed.project.apply",
            project_apply,
            '{"spec": {<project spec>}} or {"spec": "<project spec as YAML or JSON text>"}',
            required={"spec": (dict, str)},
        ),
        Runnable("firefeed.ping", ping, '{} or {"sleep_s": <seconds>}', optional={"sleep_s": float}),
    )
}


def lookup(name: Any) -> Runnable:
    """The runnable named exactly `name`; ProcessInputError listing the known names otherwise."""
    runnable = RUNNABLES.get(name) if isinstance(name, str) else None
    if runnable is None:
        raise ProcessInputError(f"unknown function {name!r}; known functions: {', '.join(sorted(RUNNABLES))}")
    return runnable
