"""One run, driven through the five steps as claimable jobs: the one core behind both drivers.

The driver (the root Celery task, or `firefeed run` in one process) creates each
step's jobs in the database, hands them to a Dispatcher, and waits for them by
watching their rows. Jobs never wait on other jobs, and the root never blocks
on a Celery result, so no pool can deadlock on itself; in the one-process mode
the dispatcher simply runs the jobs where the root is.

Every job is claimed atomically before it runs and records its result when it
ends, so a redelivered job finds it done and does nothing.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from firefeed.config import Settings, get_settings
from firefeed.db.engine import get_engine
from firefeed.errors import FireFeedError, RunCancelledError
from firefeed.logging import run_context
from firefeed.pipeline import steps
from firefeed.runs.backends import cancel_run_backends, run_statements
from firefeed.runs.jobs import JobLostError, JobSpec, JobState, JobStore
from firefeed.runs.report import build_report
from firefeed.runs.service import RunStore
from firefeed.schema.service import SchemaService
from firefeed.tasks.queues import Queue

log = logging.getLogger(__name__)

StepHook = Callable[[str, str, dict[str, Any]], None]
"""Called as hook(step, "start" | "end", info) so a CLI can draw progress."""

TASK_FOR_KIND = {
    "source": ("firefeed.import.source", Queue.IMPORT),
    "merge": ("firefeed.import.merge", Queue.IMPORT),
    "rules": ("firefeed.rules.apply", Queue.RULES),
    "rules_chunk": ("firefeed.rules.chunk", Queue.RULES),
    "export": ("firefeed.export.write", Queue.EXPORT),
}


class StepFailedError(FireFeedError):
    """A step job failed."""

    def __init__(self, error: dict[str, Any]) -> None:
        self.error = error
        super().__init__(str(error.get("message")))


class Dispatcher(Protocol):
    def submit(self, kind: str, job_ids: Sequence[int]) -> None: ...

    def fans_out(self, kind: str) -> bool:
        """True when jobs of this kind run elsewhere in parallel, so splitting them into chunks pays."""
        ...


class InlineDispatcher:
    """Runs each job at once in this process: the batch mode and the one-process worker."""

    def __init__(self, settings: Settings | None = None, engine: Engine | None = None) -> None:
        self.settings, self.engine = settings, engine

    def submit(self, kind: str, job_ids: Sequence[int]) -> None:
        if kind == "source":
            run_source_jobs_phased(job_ids, settings=self.settings, engine=self.engine)
            return
        for job_id in job_ids:
            run_job(job_id, settings=self.settings, engine=self.engine)

    def fans_out(self, kind: str) -> bool:
        return False


def describe_error(step: str | None, err: BaseException) -> dict[str, Any]:
    """The RunReport `error`: which step, what kind, and a message a person can act on."""
    if isinstance(err, StepFailedError):
        return err.error
    step = getattr(err, "firefeed_step", step)
    if isinstance(err, FireFeedError):
        message = err.message
    else:
        # SQLAlchemy's text repeats the statement and its bound values (item data): the driver's own is enough.
        driver = err.orig if isinstance(err, DBAPIError) and err.orig is not None else err
        pgerror = getattr(driver, "pgerror", None)
        message = (pgerror or str(driver) or type(err).__name__).strip()
    return {"step": step, "type": type(err).__name__, "message": message}


class _Beat:
    """Calls `beat` every `every_s` seconds in a thread while a long piece of work runs."""

    def __init__(self, beat: Callable[[], None], every_s: float) -> None:
        self._stop = threading.Event()
        self._beat, self._every = beat, every_s
        # The thread runs in a copy of the caller's context, so its log lines carry the run id too.
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._loop,), daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            try:
                self._beat()
            except Exception:  # a missed beat is not worth failing the work for
                log.warning("heartbeat failed", exc_info=True)

    def __enter__(self) -> _Beat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


_SPECS: OrderedDict[str, tuple[Any, Any]] = OrderedDict()
_SPECS_LOCK = threading.Lock()


def _run_spec(store: RunStore, run_id: str) -> tuple[Any, Any]:
    """A run's spec, parsed once per process: a worker runs hundreds of chunk jobs of one run."""
    with _SPECS_LOCK:
        if run_id in _SPECS:
            _SPECS.move_to_end(run_id)
            return _SPECS[run_id]
    found = store.run_spec(run_id)
    with _SPECS_LOCK:
        _SPECS[run_id] = found
        while len(_SPECS) > 32:
            _SPECS.popitem(last=False)
    return found


_PLANS: OrderedDict[tuple[str, int, tuple[str, ...]], Any] = OrderedDict()


def _pass_plan(ctx: steps.RunContext, pass_no: int, fields: tuple[str, ...]) -> Any:
    """The plan of one rules pass, computed once per process and run."""
    from firefeed.rules.executor import plan_passes

    key = (ctx.run_id, pass_no, fields)
    with _SPECS_LOCK:
        if key in _PLANS:
            return _PLANS[key]
    plan = plan_passes(ctx.spec.parsed_rules, list(fields))[pass_no - 1]
    with _SPECS_LOCK:
        _PLANS[key] = plan
        while len(_PLANS) > 64:
            _PLANS.popitem(last=False)
    return plan


def load_context(run_id: str, settings: Settings | None = None, engine: Engine | None = None) -> steps.RunContext:
    settings = settings or get_settings()
    engine = engine or get_engine()
    store = RunStore(engine)
    spec, spec_dir = _run_spec(store, run_id)
    return steps.RunContext(
        run_id=run_id,
        spec=spec,
        spec_dir=spec_dir,
        settings=settings,
        engine=engine,
        schema=SchemaService(engine),
        store=store,
    )


# -- jobs: what a step worker runs ---------------------------------------------------
def run_job(job_id: int, *, settings: Settings | None = None, engine: Engine | None = None) -> None:
    """Claim and run one job; a job already done, taken or cancelled is left alone."""
    settings = settings or get_settings()
    engine = engine or get_engine()
    jobs = JobStore(engine)
    job = jobs.claim(job_id, lease_s=settings.stale_run_s)
    if job is None:
        return
    ctx = load_context(job.run_id, settings, engine)
    ok, result = _guarded(ctx, job, jobs, lambda: _JOB_FUNCS[job.kind](ctx, job, jobs))
    if ok and result is not None:
        try:
            jobs.succeed(job_id, result)
        except JobLostError:
            log.warning("job %s was taken over by another worker; its result here is dropped", job_id)


def _guarded(
    ctx: steps.RunContext, job: JobState, jobs: JobStore, work: Callable[[], dict[str, Any] | None]
) -> tuple[bool, dict[str, Any] | None]:
    """Run a job's work with its log context and heartbeat; a failure is recorded on the job row."""
    with run_context(run_id=ctx.run_id, project=ctx.spec.project, company=ctx.spec.company, step=_STEP_OF[job.kind]):
        try:
            with (
                _Beat(lambda: jobs.heartbeat(job.id), ctx.settings.heartbeat_s),
                # Its connections carry the job's name (a cancel finds them anywhere) and the step's time limit.
                run_statements(ctx.engine, ctx.run_id, _STEP_OF[job.kind], settings=ctx.settings, job_id=job.id),
            ):
                return True, work()
        except RunCancelledError:
            # A cancel seen inside a job is the run's cancel, not the job's failure.
            jobs.cancel(job.id)
            return False, None
        except JobLostError:
            log.warning("job %s was taken over by another worker; this attempt is dropped", job.id)
            return False, None
        except Exception as err:
            error = describe_error(_STEP_OF[job.kind], err)
            log.error("%s job failed: %s", job.kind, error["message"], exc_info=not isinstance(err, FireFeedError))
            jobs.fail(job.id, error)
            return False, None


def run_source_jobs_phased(
    job_ids: Sequence[int], *, settings: Settings | None = None, engine: Engine | None = None
) -> None:
    """In one process: every source's FETCH first, then every PARSE, so the timeline shows the steps apart."""
    settings = settings or get_settings()
    engine = engine or get_engine()
    jobs = JobStore(engine)
    claimed = [j for j in (jobs.claim(i, lease_s=settings.stale_run_s) for i in job_ids) if j is not None]
    if not claimed:
        return
    ctx = load_context(claimed[0].run_id, settings, engine)
    fetched: list[tuple[JobState, dict[str, Any]]] = []

    def give_up(after: int) -> None:
        # The step failed: the sources this process claimed but will not run are cancelled, not left RUNNING.
        for other in claimed[after:]:
            jobs.cancel(other.id)

    for i, job in enumerate(claimed):
        ok, partial = _guarded(ctx, job, jobs, lambda job=job: _source_fetch(ctx, job, jobs))  # type: ignore[misc]
        if not ok:
            give_up(i + 1)
            for done, _ in fetched:
                jobs.cancel(done.id)
            return
        assert partial is not None
        fetched.append((job, partial))
    for i, (job, partial) in enumerate(fetched):
        ok, result = _guarded(ctx, job, jobs, lambda job=job, partial=partial: _source_parse(ctx, job, partial))  # type: ignore[misc]
        if not ok:
            for later, _ in fetched[i + 1 :]:
                jobs.cancel(later.id)
            return
        assert result is not None
        try:
            jobs.succeed(job.id, result)
        except JobLostError:
            log.warning("job %s was taken over by another worker; its result here is dropped", job.id)


def _iso_now() -> str:
    return datetime.now().astimezone().isoformat()


def _source_fetch(ctx: steps.RunContext, job: JobState, jobs: JobStore) -> dict[str, Any]:
    started = _iso_now()
    try:
        fetched = steps.fetch_one(ctx, job.idx)
    except Exception as err:
        err.firefeed_step = "FETCH"  # type: ignore[attr-defined]
        raise
    partial = {
        "fetch": fetched.report(),
        "fetch_started": started,
        "fetch_finished": _iso_now(),
        "fetched": dataclasses.asdict(fetched),
    }
    jobs.save_partial(job.id, partial)
    return partial


def _source_parse(ctx: steps.RunContext, job: JobState, partial: dict[str, Any]) -> dict[str, Any]:
    ctx.check_cancel()
    parsed = steps.parse_one(ctx, job.idx, steps.FetchOutcome(**partial["fetched"]))
    return {
        "fetch": partial["fetch"],
        "parse": parsed.report() | {"table": parsed.table, "field_names": parsed.fields, "warnings": parsed.warnings},
        "fetch_started": partial["fetch_started"],
        "fetch_finished": partial["fetch_finished"],
        "parse_finished": _iso_now(),
    }


def _source_job(ctx: steps.RunContext, job: JobState, jobs: JobStore) -> dict[str, Any]:
    """FETCH then PARSE one source: one job, so the download never leaves the worker that made it."""
    return _source_parse(ctx, job, _source_fetch(ctx, job, jobs))


def _merge_job(ctx: steps.RunContext, job: JobState, jobs: JobStore) -> dict[str, Any]:
    parsed = [
        steps.ParseOutcome(name=p["name"], table=p["table"], fields=p["field_names"], rows=p["rows"])
        for p in (job.params or {})["parsed"]
    ]
    merged = steps.merge(ctx, parsed)
    return {
        "fields": merged.fields,
        "rows": merged.rows,
        "rows_in": sum(p.rows for p in parsed),
        "sources": [
            {"name": name, "skipped": {"empty_key": s.empty_key, "duplicate_key": s.duplicate_key}}
            for name, s in merged.sources.items()
        ],
    }


def _rules_job(ctx: steps.RunContext, job: JobState, jobs: JobStore) -> dict[str, Any]:
    from firefeed.pipeline.merge import MergeResult

    params = job.params or {}
    result = steps.apply_rules(ctx, MergeResult(fields=params["fields"], rows=params["rows"]))
    return {
        "table": result.table,
        "fields": list(result.fields),
        "passes": result.passes,
        # Pairs, not an object: JSONB reorders object keys and the report lists rules in their order.
        "matched": [[r.name, result.matched.get(r.name, 0)] for r in ctx.spec.parsed_rules if r.enabled],
        "excluded": result.excluded,
        "rows_in": result.rows_in,
        "rows_out": result.rows_out,
    }


def _rules_chunk_job(ctx: steps.RunContext, job: JobState, jobs: JobStore) -> dict[str, Any] | None:
    """One chunk of one rules pass (or a whole pass that deletes in place); its rows and its job's
    SUCCEEDED land in one transaction."""
    from firefeed.db.engine import raw_connection
    from firefeed.rules.executor import run_pass_chunk, run_pass_in_place

    p = job.params or {}
    plan = _pass_plan(ctx, job.pass_no, tuple(p["fields"]))
    with raw_connection(ctx.engine) as conn:
        if p.get("in_place"):
            counts = run_pass_in_place(conn, plan, p["src"], company=ctx.spec.company, rows_in=p.get("rows"))
        else:
            counts = run_pass_chunk(
                conn,
                plan,
                p["src"],
                p["dst"],
                p["lo"],
                p["hi"],
                company=ctx.spec.company,
                rows_in=p.get("rows"),
                prepare=True,
            )
        jobs.succeed(
            job.id,
            {
                "rows_in": counts.rows_in,
                "rows_out": counts.rows_out,
                "matched": [[k, v] for k, v in counts.matched.items()],
            },
            conn=conn,
        )
    return None


def _export_job(ctx: steps.RunContext, job: JobState, jobs: JobStore) -> dict[str, Any]:
    params = job.params or {}
    return steps.export_one(ctx, job.idx, params["table"], params["fields"])


_JOB_FUNCS: dict[str, Callable[[steps.RunContext, JobState, JobStore], dict[str, Any] | None]] = {
    "source": _source_job,
    "merge": _merge_job,
    "rules": _rules_job,
    "rules_chunk": _rules_chunk_job,
    "export": _export_job,
}
_STEP_OF = {"source": "PARSE", "merge": "MERGE", "rules": "RULES", "rules_chunk": "RULES", "export": "EXPORT"}


# -- the root: what drives one run -------------------------------------------------------
class _Driver:
    def __init__(self, ctx: steps.RunContext, dispatcher: Dispatcher, hook: StepHook | None) -> None:
        self.ctx, self.dispatcher = ctx, dispatcher
        self.jobs = JobStore(ctx.engine)
        self.store = ctx.store
        self.hook = hook or (lambda step, phase, info: None)
        self.current: str | None = None

    def run_jobs(
        self, kind: str, specs: Sequence[JobSpec], on_poll: Callable[[list[JobState]], None] | None = None
    ) -> list[JobState]:
        ids = self.jobs.create(self.ctx.run_id, specs)
        self.dispatcher.submit(kind, ids)
        return self.wait(ids, on_poll)

    def wait(self, ids: Sequence[int], on_poll: Callable[[list[JobState]], None] | None) -> list[JobState]:
        """Watch the jobs until all succeeded; a failed or cancelled one ends the wait.

        Without an `on_poll` the loop reads only a count per status (hundreds of
        chunk jobs would otherwise be loaded whole, many times a second) and loads
        the jobs once, at the end. A job whose worker died (RUNNING, heartbeat older
        than the lease) is sent again; so are PENDING jobs when nothing moved for a
        lease (their message died with a killed worker's prefetch or a restarted
        broker; a duplicate message is harmless, the claim lets one through). The
        pickup timeout counts from the last time any job moved, so a long but moving
        queue is not mistaken for a missing worker.
        """
        settings = self.ctx.settings
        delay = 0.002
        last_counts: dict[str, int] = {}
        deadline = time.monotonic() + settings.job_pickup_timeout_s
        next_stale_check = time.monotonic() + settings.heartbeat_s
        last_move = next_resend = time.monotonic()
        while True:
            if on_poll is not None:
                states = self.jobs.states(ids)
                on_poll(states)
                counts: dict[str, int] = {}
                for st in states:
                    counts[st.status] = counts.get(st.status, 0) + 1
            else:
                counts = self.jobs.status_counts(ids)
            if counts.get("FAILED"):
                failed = [st for st in self.jobs.states(ids) if st.status == "FAILED"]
                raise StepFailedError(
                    failed[0].error or {"step": self.current, "type": "JobFailed", "message": "a step job failed"}
                )
            if counts.get("CANCELLED"):
                raise RunCancelledError(f"run {self.ctx.run_id} was cancelled")
            if counts.get("SUCCEEDED", 0) == len(ids):
                return self.jobs.states(ids)
            self.ctx.check_cancel()
            now_ = time.monotonic()
            if counts != last_counts:
                last_counts, deadline, last_move = counts, now_ + settings.job_pickup_timeout_s, now_
            if counts.get("PENDING") and now_ - last_move > settings.stale_run_s and now_ >= next_resend:
                next_resend = now_ + settings.stale_run_s
                queued = [st for st in self.jobs.states(ids) if st.status == "PENDING"]
                if queued:
                    log.warning("%d queued job(s) did not move for a lease; sending them again", len(queued))
                    self.dispatcher.submit(queued[0].kind, [st.id for st in queued])
            if now_ >= next_stale_check:
                next_stale_check = now_ + settings.heartbeat_s
                lost = self.jobs.stale_running(ids, settings.stale_run_s)
                if lost:
                    log.warning("%d job(s) lost their worker; sending them again", len(lost))
                    kind = self.jobs.states(lost[:1])[0].kind
                    self.dispatcher.submit(kind, lost)
            if counts.get("PENDING") and now_ > deadline:
                kind = self.jobs.states(ids[:1])[0].kind
                task, queue = TASK_FOR_KIND[kind]
                raise FireFeedError(
                    f"no {self.current} job ({task}) moved for {settings.job_pickup_timeout_s:.0f}s: "
                    f"is a worker consuming queue {queue.value!r}?"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 0.05)

    def step(self, name: str, fn: Callable[[], tuple[int, int, dict[str, Any]]]) -> None:
        self.current = name
        self.ctx.check_cancel()
        with (
            run_context(step=name),
            run_statements(self.ctx.engine, self.ctx.run_id, name, settings=self.ctx.settings),
        ):
            self.store.step_started(self.ctx.run_id, name)
            self.hook(name, "start", {})
            rows_in, rows_out, detail = fn()
            self.store.step_finished(
                self.ctx.run_id, name, "SUCCEEDED", rows_in=rows_in, rows_out=rows_out, detail=detail
            )
            self.hook(name, "end", {"rows_in": rows_in, "rows_out": rows_out})
            log.info("%s done: %d rows in, %d rows out", name, rows_in, rows_out)

    # FETCH and PARSE run together, one job per source; their timeline comes from the jobs' own clocks.
    def fetch_and_parse(self) -> list[dict[str, Any]]:
        ctx = self.ctx
        self.current = "FETCH"
        self.store.step_started(ctx.run_id, "FETCH")
        self.hook("FETCH", "start", {})
        fetch_done = {"flag": False}

        def on_poll(states: list[JobState]) -> None:
            if not fetch_done["flag"] and all(s.result and "fetch_finished" in s.result for s in states):
                fetch_done["flag"] = True
                self._finish_fetch(states)

        states = self.run_jobs(
            "source", [JobSpec("PARSE", "source", idx=i) for i in range(len(ctx.spec.sources))], on_poll
        )
        if not fetch_done["flag"]:
            self._finish_fetch(states)
        results = [s.result or {} for s in states]
        self.current = "PARSE"
        parsed = [r["parse"] for r in results]
        warnings = [f"source {p['name']!r}: {w}" for p in parsed for w in p.get("warnings", [])]
        self.store.step_finished(
            ctx.run_id,
            "PARSE",
            "SUCCEEDED",
            rows_in=0,
            rows_out=sum(p["rows"] for p in parsed),
            detail={
                "sources": [
                    {k: v for k, v in p.items() if k not in ("table", "field_names", "warnings")} for p in parsed
                ],
                "warnings": warnings,
            },
            at=max(datetime.fromisoformat(r["parse_finished"]) for r in results),
        )
        self.hook("PARSE", "end", {"rows_in": 0, "rows_out": sum(p["rows"] for p in parsed)})
        return parsed

    def _finish_fetch(self, states: list[JobState]) -> None:
        results = [s.result or {} for s in states]
        first = min(datetime.fromisoformat(r["fetch_started"]) for r in results)
        last = max(datetime.fromisoformat(r["fetch_finished"]) for r in results)
        self.store.step_started(self.ctx.run_id, "FETCH", at=first)
        self.store.step_finished(
            self.ctx.run_id, "FETCH", "SUCCEEDED", detail={"sources": [r["fetch"] for r in results]}, at=last
        )
        self.hook("FETCH", "end", {"rows_in": 0, "rows_out": 0})
        self.current = "PARSE"
        self.store.step_started(self.ctx.run_id, "PARSE", at=first)
        self.hook("PARSE", "start", {})

    def chunked_rules(self, fields: list[str], rows: int) -> dict[str, Any]:
        """RULES as chunk jobs: each pass split into FIREFEED_CHUNK_ROWS items per job on the rules queue."""
        from firefeed.rules.executor import prepare_pass
        from firefeed.rules.limits import check_sql_size
        from firefeed.rules.sqlgen import deletes_only

        ctx = self.ctx
        plans = check_sql_size(ctx.spec.parsed_rules, fields)  # a SpecError before any pass runs
        enabled = [r.name for r in ctx.spec.parsed_rules if r.enabled]
        matched = dict.fromkeys(enabled, 0)
        src, rows_in, current = ctx.items_table, rows, rows
        for plan in plans:
            ctx.check_cancel()
            dst = src
            if src != ctx.items_table and deletes_only(plan):
                # One DELETE in this run's own pass table costs less than copying every kept row, chunk by chunk.
                specs = [
                    JobSpec(
                        "RULES",
                        "rules_chunk",
                        idx=0,
                        pass_no=plan.number,
                        params={"fields": fields, "src": src, "in_place": True, "rows": current},
                    )
                ]
            else:
                dst = prepare_pass(ctx.schema, company=ctx.spec.company, run_id=ctx.run_id, plan=plan)
                bounds = self.chunk_bounds(src)
                specs = [
                    JobSpec(
                        "RULES",
                        "rules_chunk",
                        idx=i,
                        pass_no=plan.number,
                        params={"fields": fields, "src": src, "dst": dst, "lo": lo, "hi": hi, "rows": n},
                    )
                    for i, ((lo, hi), n) in enumerate(zip(bounds, self.chunk_rows(bounds, current), strict=True))
                ]
            results = [s.result or {} for s in self.run_jobs("rules_chunk", specs)]
            for res in results:
                for name, n in res["matched"]:
                    matched[name] = matched.get(name, 0) + n
            current = sum(res["rows_out"] for res in results)
            if src not in (ctx.items_table, dst):
                ctx.schema.drop_table(ctx.spec.company, src)
            src = dst
        if src != ctx.items_table:
            # Chunk jobs running side by side stored the items out of order: exports read them through
            # this index instead of sorting them all (see export._copy).
            ctx.schema.index_order(ctx.spec.company, src, analyze=False)
        final_fields = list(plans[-1].fields_out) if plans else list(dict.fromkeys(fields))
        return {
            "table": src,
            "fields": final_fields,
            "passes": len(plans),
            "matched": [[n, matched.get(n, 0)] for n in enabled],
            "excluded": rows_in - current,
            "rows_in": rows_in,
            "rows_out": current,
        }

    def chunk_rows(self, bounds: list[tuple[int | None, int | None]], total: int) -> list[int]:
        """Items per chunk: FIREFEED_CHUNK_ROWS each, the rest in the last (bounds cut at every n-th item)."""
        size = self.ctx.settings.chunk_rows
        if len(bounds) == 1:
            return [total]
        return [size] * (len(bounds) - 1) + [total - size * (len(bounds) - 1)]

    def chunk_bounds(self, table: str) -> list[tuple[int | None, int | None]]:
        """Position ranges of about FIREFEED_CHUNK_ROWS items each (one open range for a small table)."""
        from psycopg2 import sql

        from firefeed.db.engine import raw_connection
        from firefeed.schema.identifiers import ORD, company_schema, ident

        size = self.ctx.settings.chunk_rows
        self.ctx.schema.index_order(self.ctx.spec.company, table)
        with raw_connection(self.ctx.engine) as conn, conn.cursor() as cur:
            cur.execute(
                sql.SQL(
                    "SELECT o FROM (SELECT {ord} AS o, row_number() OVER (ORDER BY {ord}) AS n FROM {t}) s "
                    "WHERE n %% %s = 1 ORDER BY o"
                ).format(ord=ident(ORD), t=ident(company_schema(self.ctx.spec.company), table)),
                (size,),
            )
            starts = [int(r[0]) for r in cur.fetchall()]
        if len(starts) <= 1:
            return [(None, None)]
        return [
            (None if i == 0 else lo, starts[i + 1] - 1 if i + 1 < len(starts) else None) for i, lo in enumerate(starts)
        ]

    def check_publish(self, exports: list[dict[str, Any]]) -> None:
        """fail_on and the drop guard (#9), before anything is published; a block fails the run."""
        from firefeed.errors import PublishBlockedError
        from firefeed.export.guard import check_publish

        try:
            check_publish(self.ctx.spec, exports, accept_drop=self.store.run(self.ctx.run_id).accept_drop)
        except PublishBlockedError as err:
            err.step_detail = {"exports": exports}  # type: ignore[attr-defined]  # the failed run still reports them
            raise

    def promote(self, exports: list[dict[str, Any]]) -> None:
        """The published exports' diff rows become the next run's baseline."""
        from firefeed.export.guard import promote

        try:
            promote(self.ctx.schema, self.ctx.spec, self.ctx.run_id, exports)
        except Exception:  # the files are published; only the next run's diff baseline is older
            log.exception("could not keep the published exports' diff rows; the next run diffs against older ones")

    def drive(self) -> None:
        ctx = self.ctx
        parsed = self.fetch_and_parse()
        state: dict[str, Any] = {}

        def merge() -> tuple[int, int, dict[str, Any]]:
            (job,) = self.run_jobs("merge", [JobSpec("MERGE", "merge", params={"parsed": parsed})])
            r = job.result or {}
            state["merge"] = r
            return r["rows_in"], r["rows"], {"sources": r["sources"], "fields": r["fields"]}

        def rules() -> tuple[int, int, dict[str, Any]]:
            m = state["merge"]
            if self.dispatcher.fans_out("rules_chunk"):
                r = self.chunked_rules(m["fields"], m["rows"])
            else:
                (job,) = self.run_jobs(
                    "rules", [JobSpec("RULES", "rules", params={"fields": m["fields"], "rows": m["rows"]})]
                )
                r = job.result or {}
            state["rules"] = r
            return r["rows_in"], r["rows_out"], {k: r[k] for k in ("passes", "matched", "excluded", "fields")}

        def export() -> tuple[int, int, dict[str, Any]]:
            r = state["rules"]
            specs = [
                JobSpec("EXPORT", "export", idx=i, params={"table": r["table"], "fields": r["fields"]})
                for i in range(len(ctx.spec.exports))
            ]
            exports = [s.result or {} for s in self.run_jobs("export", specs)] if specs else []
            ctx.check_cancel()
            self.check_publish(exports)
            steps.publish(ctx, exports)
            self.promote(exports)
            return r["rows_out"], sum(e["rows"] for e in exports), {"exports": exports}

        self.step("MERGE", merge)
        self.step("RULES", rules)
        self.step("EXPORT", export)


# How long a failed or cancelled run waits for its still-running jobs to notice and stop.
_DRAIN_S = 30.0


def _stop_jobs(store: RunStore, run_id: str, settings: Settings) -> None:
    """Before the project is freed: flag the cancel, drop queued jobs, give running ones time to stop.

    Otherwise a job of the failed run could still be writing a staging table that
    the project's next run is already rebuilding.
    """
    jobs = JobStore(store.engine)
    try:
        store.request_cancel(run_id)
        jobs.cancel_pending(run_id)
        deadline = time.monotonic() + _DRAIN_S
        next_sweep = time.monotonic() + 1.0
        while jobs.running_count(run_id) and time.monotonic() < deadline:
            if time.monotonic() >= next_sweep:  # a job may have started a statement after the first cancel
                cancel_run_backends(store.engine, run_id)
                next_sweep += 1.0
            time.sleep(0.05)
    except Exception:  # the run must still end; the reaper and the lease cover what is left
        log.warning("could not stop the run's jobs", exc_info=True)


def drive_run(
    run_id: str,
    *,
    dispatcher: Dispatcher | None = None,
    hook: StepHook | None = None,
    settings: Settings | None = None,
    engine: Engine | None = None,
) -> dict[str, Any]:
    """Drive a PENDING run to its end and return its RunReport."""
    settings = settings or get_settings()
    engine = engine or get_engine()
    store = RunStore(engine)
    run = store.run(run_id)
    with run_context(run_id=run_id, project=run.project_id, company=run.company_id):
        if not store.mark_running(run_id):
            log.info("run is no longer pending (%s); nothing to do", store.run(run_id).status)
            return build_report(store, run_id)
        if dispatcher is None:
            from firefeed.tasks.dispatch import CeleryDispatcher

            dispatcher = CeleryDispatcher(settings=settings, engine=engine)
        ctx: steps.RunContext | None = None
        driver: _Driver | None = None
        status, error = "SUCCEEDED", None
        try:
            ctx = load_context(run_id, settings, engine)
            driver = _Driver(ctx, dispatcher, hook)
            with _Beat(lambda: store.heartbeat(run_id), settings.heartbeat_s):
                driver.drive()
        except RunCancelledError:
            status = "CANCELLED"
            JobStore(engine).cancel_pending(run_id)
            log.info("run cancelled during %s", driver.current if driver else None)
        except Exception as err:
            current = driver.current if driver else None
            status, error = "FAILED", describe_error(current, err)
            if error.get("step") is None:
                error["step"] = current
            JobStore(engine).cancel_pending(run_id)
            log.error("run failed in %s: %s", current, error["message"], exc_info=not isinstance(err, FireFeedError))
            if current:
                detail = {"error": error, **getattr(err, "step_detail", {})}
                store.step_finished(run_id, current, "FAILED", detail=detail)
        finally:
            if status != "SUCCEEDED":
                # Still beating while the jobs drain: the reaper must not take a run whose driver is alive.
                with _Beat(lambda: store.heartbeat(run_id), settings.heartbeat_s):
                    _stop_jobs(store, run_id, settings)
            if ctx is not None:
                steps.cleanup(ctx)
        store.finish_run(run_id, status, report=None, error=error)
        report = build_report(store, run_id)
        store.finish_run(run_id, status, report=report, error=error)
        log.info("run %s", status)
        return report
