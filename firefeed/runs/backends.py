"""Which Postgres backends work for a run, and stopping them through Postgres.

A run's connections say whose they are in `application_name`:
`firefeed:<run id>:<STEP>` for the driver's own data-plane work and
`firefeed:<run id>:<STEP>:<job id>` for a step job's. A cancel received anywhere
(the API, the CLI, a failing driver) finds those backends in `pg_stat_activity` and
calls `pg_cancel_backend` on them, so it reaches a statement on any machine: no
signal to a local process, which could not stop the backend anyway (Celery's time
limits kill the Python process, and the backend runs its statement to the end).

A job sent again after its worker stopped beating ends its earlier attempt's backends
before it runs (`terminate_job_backends`): a killed worker's statement would otherwise
run on, holding its locks.

A job also keeps FIREFEED_STEP_TIME_LIMIT_S itself, from a timer thread, since a
soft time limit cannot interrupt a thread blocked in a statement.

The cancelled statement raises in the job; `run_statements` says why it was
cancelled: the run's cancel (RunCancelledError), the step's time limit, or the
statement's own timeout (FIREFEED_STATEMENT_TIMEOUT_S).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg2.errors
from sqlalchemy import Engine

from firefeed.config import Settings
from firefeed.db.engine import raw_connection, session_state
from firefeed.errors import StatementTimeoutError, StepTimeLimitError

log = logging.getLogger(__name__)

PREFIX = "firefeed"

#: Active backends of this database whose name is exactly %(name)s or starts with %(prefix)s
#: (`left` rather than LIKE: nothing in a name is a pattern). Idle ones have nothing to cancel.
_CANCEL = (
    "SELECT count(*) FILTER (WHERE pg_cancel_backend(pid)) FROM pg_stat_activity"
    " WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active'"
    " AND (application_name = %(name)s OR left(application_name, char_length(%(prefix)s)) = %(prefix)s)"
)

#: The backends of this database named exactly %(name)s (or below it) that are not idle, ended with
#: pg_terminate_backend; their pids come back. An idle one of a dead client leaves by itself, and one
#: of a live process's pool merely still carries the name of the job it last served. The call sits in
#: the aggregate's FILTER, which sees only the rows the WHERE kept: in the WHERE itself the planner may
#: evaluate it first (it is the cheapest condition), on every backend of the server.
_TERMINATE = (
    "SELECT coalesce(array_agg(pid) FILTER (WHERE pg_terminate_backend(pid)), '{}') FROM pg_stat_activity"
    " WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'"
    " AND (application_name = %(name)s OR left(application_name, char_length(%(prefix)s)) = %(prefix)s)"
)
#: Which of %(pids)s are still backends (a terminated one leaves once it has rolled back).
_ALIVE = "SELECT pid FROM pg_stat_activity WHERE pid = ANY(%(pids)s)"

#: How often a job past its time limit cancels its statements again (it may start another).
_REPEAT_S = 1.0
#: How long a resent job waits for its predecessor's backends to leave: a backend rolls back before it
#: goes, which takes as long as undoing what its statement wrote so far.
TERMINATE_WAIT_S = 30.0
_TERMINATE_POLL_S = 0.05


def application_name(run_id: str, step: str | None = None, job_id: int | None = None) -> str:
    """The name a run's connections carry (at most 63 bytes, Postgres' limit: a uuid, a step, a job id)."""
    parts = [PREFIX, str(run_id)]
    if step is not None:
        parts.append(step)
        if job_id is not None:
            parts.append(str(job_id))
    return ":".join(parts)


def _cancel(engine: Engine, name: str, prefix: str) -> int:
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(_CANCEL, {"name": name, "prefix": prefix})
        return int(cur.fetchone()[0])


def cancel_run_backends(engine: Engine, run_id: str) -> int:
    """Cancel the statements every backend of the run is running, wherever its worker is; returns how many."""
    # The trailing colon: a run id never matches a longer one.
    found = _cancel(engine, application_name(run_id), application_name(run_id) + ":")
    if found:
        log.info("cancelled %d statement(s) of run %s", found, run_id)
    return found


def cancel_job_backends(engine: Engine, run_id: str, step: str, job_id: int) -> int:
    """Cancel the statements of one job's backends (its name exactly: job 12 is not job 123)."""
    name = application_name(run_id, step, job_id)
    return _cancel(engine, name, name + ":")


def terminate_job_backends(
    engine: Engine, run_id: str, step: str, job_id: int, *, wait_s: float = TERMINATE_WAIT_S
) -> list[int]:
    """End the backends of an earlier attempt of a job and wait until they are gone; returns their pids.

    Called when a job is claimed from a worker that stopped beating for a lease (killed, frozen, cut off).
    Postgres runs a dead client's statement to its end, holding its locks, and a frozen worker may wake
    and write again, so the resent job ends them first: terminated rather than cancelled, a cancel leaves
    the session (and a transaction of a live worker) in place. Backends still there after `wait_s` are
    logged; the attempt goes on (its writes commit only with its own claim, `succeed_job`).
    """
    name = application_name(run_id, step, job_id)
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(_TERMINATE, {"name": name, "prefix": name + ":"})
        pids = [int(pid) for pid in cur.fetchone()[0]]
    left = pids
    deadline = time.monotonic() + wait_s
    while left and time.monotonic() < deadline:
        time.sleep(_TERMINATE_POLL_S)
        with raw_connection(engine) as conn, conn.cursor() as cur:
            cur.execute(_ALIVE, {"pids": left})
            left = [int(row[0]) for row in cur.fetchall()]
    if pids:
        log.warning("ended %d backend(s) of an earlier attempt of job %s: %s", len(pids), job_id, pids)
    if left:
        log.warning("backend(s) %s of an earlier attempt of job %s were still there after %g s", left, job_id, wait_s)
    return pids


def query_cancel(err: BaseException) -> psycopg2.errors.QueryCanceled | None:
    """The Postgres cancel (SQLSTATE 57014) behind `err`, through SQLAlchemy's wrapper and `__cause__` chains."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [err]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, psycopg2.errors.QueryCanceled):
            return e
        todo.extend([getattr(e, "orig", None), e.__cause__, e.__context__])
    return None


def _is_soft_time_limit(err: BaseException) -> bool:
    from celery.exceptions import SoftTimeLimitExceeded

    return isinstance(err, SoftTimeLimitExceeded)


class _Watchdog:
    """After `limit_s`, cancel the job's statements, and again every second until the job ends."""

    def __init__(self, engine: Engine, run_id: str, step: str, job_id: int, limit_s: float) -> None:
        self.fired = False
        self._stop = threading.Event()
        self._args = (engine, run_id, step, job_id)
        self._limit = limit_s
        # No copy of the caller's context: its own connection must not carry the job's name.
        self._thread = threading.Thread(target=self._loop, name=f"firefeed-limit-{job_id}", daemon=True)

    def _loop(self) -> None:
        if self._stop.wait(self._limit):
            return
        self.fired = True
        job_id = self._args[3]
        log.warning("job %s passed FIREFEED_STEP_TIME_LIMIT_S (%g s): cancelling its statements", job_id, self._limit)
        while True:
            try:
                cancel_job_backends(*self._args)
            except Exception:
                log.warning("could not cancel the statements of job %s", self._args[3], exc_info=True)
            if self._stop.wait(_REPEAT_S):
                return

    def __enter__(self) -> _Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _limit_error(step: str, settings: Settings) -> StepTimeLimitError:
    return StepTimeLimitError(
        f"the {step} step ran longer than FIREFEED_STEP_TIME_LIMIT_S={settings.step_time_limit_s} s and was stopped"
    )


def _timeout_error(step: str, settings: Settings) -> StatementTimeoutError:
    return StatementTimeoutError(
        f"{step}: a statement ran longer than FIREFEED_STATEMENT_TIMEOUT_S={settings.statement_timeout_s:g} s "
        "and was cancelled; raise that setting, or make the work cheaper (a `matches` pattern over long values?)"
    )


@contextmanager
def run_statements(
    engine: Engine, run_id: str, step: str, *, settings: Settings, job_id: int | None = None
) -> Iterator[None]:
    """Run the block's statements as the run's (a job's, with `job_id`, under the step's time limit).

    A cancelled statement leaves the block as RunCancelledError when the run was
    cancelled, StepTimeLimitError when the job's time ran out, StatementTimeoutError
    otherwise; every other error leaves unchanged.
    """
    from firefeed.runs.service import RunStore

    watchdog = _Watchdog(engine, run_id, step, job_id, settings.step_time_limit_s) if job_id is not None else None
    try:
        with session_state(application_name(run_id, step, job_id), settings.statement_timeout_s):
            if watchdog is None:
                yield
            else:
                with watchdog:
                    yield
    except Exception as err:
        canceled = query_cancel(err)
        # A job's own error (a download too slow, say) stays itself; only what the limit interrupted is renamed.
        if job_id is not None and (_is_soft_time_limit(err) or (canceled and watchdog and watchdog.fired)):
            # Celery's soft limit interrupts Python code only: a thread of the job may still be in a statement.
            try:
                cancel_job_backends(engine, run_id, step, job_id)
            except Exception:
                log.warning("could not cancel the statements of job %s", job_id, exc_info=True)
            raise _limit_error(step, settings) from err
        if canceled is None:
            raise
        RunStore(engine).check_cancel(run_id)  # RunCancelledError when the run's cancel did it
        if "user request" in (canceled.pgerror or ""):
            raise  # someone outside FireFeed cancelled it (pg_cancel_backend): say what Postgres said
        raise _timeout_error(step, settings) from err
