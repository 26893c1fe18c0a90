"""The batch driver: one process runs one run through the five steps (`firefeed run`, the demo, tests).

The Celery driver (firefeed/tasks/) calls the same step functions; only who
calls them differs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine

from firefeed.config import Settings, get_settings
from firefeed.db.engine import get_engine
from firefeed.errors import FireFeedError, RunCancelledError
from firefeed.logging import run_context
from firefeed.pipeline import steps
from firefeed.runs.report import build_report
from firefeed.runs.service import RunStore
from firefeed.schema.service import SchemaService

log = logging.getLogger(__name__)

StepHook = Callable[[str, str, dict[str, Any]], None]
"""Called as hook(step, "start" | "end", info) so a CLI can draw progress."""


def describe_error(step: str | None, err: BaseException) -> dict[str, Any]:
    """The RunReport `error`: which step, what kind, and a message a person can act on."""
    if isinstance(err, FireFeedError):
        message = err.message
    else:
        pgerror = getattr(err, "pgerror", None)
        message = (pgerror or str(err) or type(err).__name__).strip()
    return {"step": step, "type": type(err).__name__, "message": message}


class _Heartbeat:
    """Touches the run's heartbeat while a long step runs, so the reaper can tell a lost worker."""

    def __init__(self, store: RunStore, run_id: str, every_s: float) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(store, run_id, every_s), daemon=True)

    def _loop(self, store: RunStore, run_id: str, every_s: float) -> None:
        while not self._stop.wait(every_s):
            try:
                store.heartbeat(run_id)
            except Exception:  # a missed beat is not worth failing the run for
                log.warning("heartbeat failed", exc_info=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def execute_run(
    run_id: str,
    *,
    engine: Engine | None = None,
    settings: Settings | None = None,
    hook: StepHook | None = None,
) -> dict[str, Any]:
    """Drive a PENDING run to its end in this process and return its RunReport."""
    settings = settings or get_settings()
    engine = engine or get_engine()
    store = RunStore(engine)
    run = store.run(run_id)
    with run_context(run_id=run_id, project=run.project_id, company=run.company_id):
        if not store.mark_running(run_id):
            log.info("run is no longer pending (%s); nothing to do", store.run(run_id).status)
            return build_report(store, run_id)
        spec, spec_dir = store.project_spec(run.project_id)
        ctx = steps.RunContext(
            run_id=run_id,
            spec=spec,
            spec_dir=spec_dir,
            settings=settings,
            engine=engine,
            schema=SchemaService(engine),
            store=store,
        )
        status, error, current = "SUCCEEDED", None, None
        emit = hook or (lambda step, phase, info: None)
        try:
            with _Heartbeat(store, run_id, settings.heartbeat_s):
                for current in steps.STEP_ORDER:
                    ctx.check_cancel()
                    with run_context(step=current):
                        store.step_started(run_id, current)
                        emit(current, "start", {})
                        rows_in, rows_out, detail = _STEP_FUNCS[current](ctx, _state_of(ctx))
                        store.step_finished(
                            run_id, current, "SUCCEEDED", rows_in=rows_in, rows_out=rows_out, detail=detail
                        )
                        emit(current, "end", {"rows_in": rows_in, "rows_out": rows_out})
                        log.info("%s done: %d rows in, %d rows out", current, rows_in, rows_out)
        except RunCancelledError:
            status = "CANCELLED"
            log.info("run cancelled during %s", current)
        except Exception as err:
            status, error = "FAILED", describe_error(current, err)
            log.error("run failed in %s: %s", current, error["message"], exc_info=not isinstance(err, FireFeedError))
            if current:
                store.step_finished(run_id, current, "FAILED", detail={"error": error})
        finally:
            steps.cleanup(ctx)
            _STATES.pop(run_id, None)
        store.finish_run(run_id, status, report=None, error=error)
        report = build_report(store, run_id)
        store.finish_run(run_id, status, report=report, error=error)
        log.info("run %s", status)
        return report


# -- the batch sequence: each step function returns (rows_in, rows_out, detail) ---------------
_STATES: dict[str, dict[str, Any]] = {}


def _state_of(ctx: steps.RunContext) -> dict[str, Any]:
    return _STATES.setdefault(ctx.run_id, {})


def _fetch(ctx: steps.RunContext, state: dict[str, Any]) -> tuple[int, int, dict[str, Any]]:
    fetched = []
    for i in range(len(ctx.spec.sources)):
        ctx.check_cancel()
        fetched.append(steps.fetch_one(ctx, i))
    state["fetched"] = fetched
    return 0, 0, {"sources": [f.report() for f in fetched]}


def _parse(ctx: steps.RunContext, state: dict[str, Any]) -> tuple[int, int, dict[str, Any]]:
    parsed = []
    for i, f in enumerate(state["fetched"]):
        ctx.check_cancel()
        parsed.append(steps.parse_one(ctx, i, f))
    state["parsed"] = parsed
    warnings = [f"source {p.name!r}: {w}" for p in parsed for w in p.warnings]
    return 0, sum(p.rows for p in parsed), {"sources": [p.report() for p in parsed], "warnings": warnings}


def _merge(ctx: steps.RunContext, state: dict[str, Any]) -> tuple[int, int, dict[str, Any]]:
    parsed = state["parsed"]
    merged = steps.merge(ctx, parsed)
    state["merged"] = merged
    detail = {
        "sources": [
            {"name": name, "skipped": {"empty_key": s.empty_key, "duplicate_key": s.duplicate_key}}
            for name, s in merged.sources.items()
        ],
        "fields": merged.fields,
    }
    return sum(p.rows for p in parsed), merged.rows, detail


def _rules(ctx: steps.RunContext, state: dict[str, Any]) -> tuple[int, int, dict[str, Any]]:
    result = steps.apply_rules(ctx, state["merged"])
    state["rules"] = result
    detail = {
        "passes": result.passes,
        "matched": result.matched,
        "excluded": result.excluded,
        "fields": list(result.fields),
    }
    return result.rows_in, result.rows_out, detail


def _export(ctx: steps.RunContext, state: dict[str, Any]) -> tuple[int, int, dict[str, Any]]:
    result = state["rules"]
    ctx.schema.index_order(ctx.spec.company, result.table)
    exports = []
    for i in range(len(ctx.spec.exports)):
        ctx.check_cancel()
        exports.append(steps.export_one(ctx, i, result.table, result.fields))
    ctx.check_cancel()
    steps.publish(ctx, exports)
    return result.rows_out, sum(e["rows"] for e in exports), {"exports": exports}


_STEP_FUNCS: dict[str, Callable[[steps.RunContext, dict[str, Any]], tuple[int, int, dict[str, Any]]]] = {
    "FETCH": _fetch,
    "PARSE": _parse,
    "MERGE": _merge,
    "RULES": _rules,
    "EXPORT": _export,
}
