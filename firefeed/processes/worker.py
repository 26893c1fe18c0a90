"""`firefeed processes-worker`: claims rows of its scope from `processes`, runs them, writes the outcome back.

One main thread owns the loop: it LISTENs for new pending rows (a trigger
notifies on insert and on release), polls as a fallback, claims while it has
free slots, heartbeats its rows, sweeps orphaned rows back to pending, and
enforces each row's timeout. Each claimed row runs in its own thread, so a
long pipeline run holds one slot while the others keep claiming.
"""

from __future__ import annotations

import contextlib
import json
import logging
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg2
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from firefeed.config import Settings
from firefeed.errors import ConfigError, FireFeedError
from firefeed.processes._sql import query
from firefeed.processes.config import ProcessConfig
from firefeed.processes.registry import JobContext, Outcome, RowLog, lookup
from firefeed.processes.store import ClaimedRow, ProcessStore

log = logging.getLogger(__name__)

# After the grace period, cancelled jobs get this long to stop where they are (a pipeline run
# then ends CANCELLED) before their rows are handed back, so the next claimer is not refused as busy.
_CANCEL_WAIT_S = 5.0
# Back-off between reconnect attempts when the database goes away.
_RECONNECT_S = (0.5, 1.0, 2.0, 5.0)
# NOTIFY payloads carry the scope cut to this length (the trigger's left(..., 1000)).
_PAYLOAD_CUT = 1000


@dataclass
class _Job:
    row: ClaimedRow
    ctx: JobContext
    deadline: float
    thread: threading.Thread | None = None
    abandoned: threading.Event = field(default_factory=threading.Event)
    """Set when the worker took the row's outcome over (timeout, shutdown): the job's thread writes nothing."""
    done: threading.Event = field(default_factory=threading.Event)
    """Set by the job's thread as its last act, before it wakes the loop: its slot is free."""


class Worker:
    """The daemon for one scope (worker_type, workspace_id); `run()` blocks until `stop()`."""

    def __init__(
        self,
        *,
        engine: Engine,
        settings: Settings,
        workspace_id: str,
        worker_type: str,
        config: ProcessConfig | None = None,
        timeout_s: float | None = None,
    ) -> None:
        self.engine, self.settings = engine, settings
        self.config = config or ProcessConfig()
        self.timeout_s = timeout_s if timeout_s is not None else settings.process_timeout_s
        self.store = ProcessStore(engine, worker_type=worker_type, workspace_id=workspace_id)
        self.workspace_id, self.worker_type = workspace_id, worker_type
        self._jobs: dict[int, _Job] = {}
        self._stopping = threading.Event()
        self._stop_now = threading.Event()
        # A socket pair, not os.pipe(): a job thread that wakes a closed worker gets an error, never a reused fd.
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._listen: Any = None

    @property
    def name(self) -> str:
        return self.store.claimed_by

    # -- control --------------------------------------------------------------------
    def stop(self) -> None:
        """Stop claiming and shut down gracefully; a second call skips the rest of the grace period.

        Safe from a signal handler and from any thread.
        """
        if self._stopping.is_set():
            self._stop_now.set()
        self._stopping.set()
        self._wake()

    def _wake(self) -> None:
        # OSError: the buffer is full (a wake-up is pending anyway) or the worker has stopped.
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:  # BlockingIOError: nothing more to read
            pass

    def close(self) -> None:
        """Free the wake-up sockets (run() does it when it returns; call it after drain())."""
        self._wake_r.close()
        self._wake_w.close()

    # -- the loop -------------------------------------------------------------------
    def run(self) -> None:
        """Serve the scope until stop(), then finish or release the running rows."""
        if not self.store.table_exists():
            raise ConfigError("the processes table is missing: run `firefeed migrate` first")
        log.info(
            "processes worker %s serving worker_type=%r workspace_id=%r (concurrency %d, lease %gs, timeout %gs)",
            self.name,
            self.worker_type,
            self.workspace_id,
            self.config.concurrency,
            self.config.lease_s,
            self.timeout_s,
        )
        failures = 0
        while not self._stopping.is_set():
            try:
                self._connect()
                failures = 0
                self._serve()
            except (psycopg2.Error, DBAPIError) as err:
                pause = _RECONNECT_S[min(failures, len(_RECONNECT_S) - 1)]
                failures += 1
                log.warning("database error in the processes worker, retrying in %gs: %s", pause, err)
                self._close_listen()
                select.select([self._wake_r], [], [], pause)
                self._drain_wake()
        self._shutdown()

    def _connect(self) -> None:
        if self._listen is not None:
            return
        # A connection of its own, outside the pool: it must stay LISTENing for the worker's lifetime.
        pooled = self.engine.raw_connection()
        conn: Any = pooled.driver_connection
        pooled.detach()
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(query("listen"))
        self._listen = conn

    def _close_listen(self) -> None:
        if self._listen is not None:
            with contextlib.suppress(psycopg2.Error):
                self._listen.close()
            self._listen = None

    def _serve(self) -> None:
        cfg = self.config
        next_beat = next_sweep = next_poll = 0.0
        want_claim = True  # rows inserted while no worker listened are found by the first claim
        while not self._stopping.is_set():
            now = time.monotonic()
            self._reap()
            if now >= next_sweep:
                want_claim |= self._sweep()
                next_sweep = now + cfg.sweep_s
            if now >= next_beat:
                self._beat()
                next_beat = now + cfg.heartbeat_s
            self._expire(now)
            if want_claim or now >= next_poll:
                self._fill()
                want_claim = False
                next_poll = time.monotonic() + cfg.poll_s
            deadlines = [next_poll, next_beat, next_sweep] + [
                j.deadline for j in self._jobs.values() if not j.abandoned.is_set()
            ]
            wait = max(0.0, min(deadlines) - time.monotonic())
            readable, _, _ = select.select([self._listen, self._wake_r], [], [], wait)
            if self._wake_r in readable:
                self._drain_wake()
                want_claim = True  # a slot was freed (or stop() was called: the loop ends)
            if self._listen in readable:
                want_claim |= self._notified()

    def _notified(self) -> bool:
        """Read the pending notifications; True when one is about this worker's scope."""
        self._listen.poll()
        mine = False
        scope = (self.worker_type[:_PAYLOAD_CUT], self.workspace_id[:_PAYLOAD_CUT])
        for note in self._listen.notifies:
            try:
                payload = json.loads(note.payload)
                mine |= (payload.get("worker_type"), payload.get("workspace_id")) == scope
            except (ValueError, AttributeError):
                mine = True  # a payload we don't understand: claiming is cheap, missing a row is not
        self._listen.notifies.clear()
        return mine

    # -- claiming and running ----------------------------------------------------------
    def _free_slots(self) -> int:
        return self.config.concurrency - len(self._jobs)

    def _fill(self) -> None:
        while self._free_slots() > 0 and not self._stopping.is_set():
            row = self.store.claim()
            if row is None:
                return
            job = self._job(row)
            job.thread = threading.Thread(target=self._execute, args=(job,), name=f"process-{row.id}", daemon=True)
            self._jobs[row.id] = job
            job.thread.start()

    def _job(self, row: ClaimedRow) -> _Job:
        ctx = JobContext(
            process_id=row.id,
            workspace_id=self.workspace_id,
            worker=self.name,
            input=row.input_data if isinstance(row.input_data, dict) else {},
            engine=self.engine,
            settings=self.settings,
        )
        ctx.log.info("claimed %s (lost to dead workers before: %d)", row.function, row.attempts)
        return _Job(row=row, ctx=ctx, deadline=time.monotonic() + self.timeout_s)

    def _execute(self, job: _Job) -> None:
        """Run one row to its outcome and write it, unless the worker took the row over meanwhile."""
        ctx, row = job.ctx, job.row
        try:
            outcome = self._outcome(row, ctx)
            for attempt in (1, 2):
                if job.abandoned.is_set():
                    break
                try:
                    self._write(ctx.log, row.id, outcome)
                    break
                except (psycopg2.Error, DBAPIError):
                    if attempt == 2:
                        raise
                    time.sleep(1.0)  # one retry over a dropped connection; the pool reconnects
        except Exception:
            ctx.log.exception("could not write the outcome; the lease will hand the row on")
        finally:
            job.done.set()
            self._wake()

    @staticmethod
    def _outcome(row: ClaimedRow, ctx: JobContext) -> Outcome:
        try:
            runnable = lookup(row.function)
            runnable.check_input(row.input_data)
            return runnable.func(ctx)
        except FireFeedError as err:
            return Outcome(ok=False, error=err.message)
        except Exception as err:
            ctx.log.exception("%s raised", row.function)
            return Outcome(ok=False, error=f"internal error in {row.function}: {type(err).__name__}: {err}")

    def _write(self, row_log: RowLog, process_id: int, outcome: Outcome) -> None:
        written = self.store.finish(process_id, ok=outcome.ok, output=outcome.output, error_message=outcome.error)
        if not written:
            row_log.warning("outcome dropped: the row is no longer held by this worker")
        elif outcome.ok:
            row_log.info("completed")
        else:
            row_log.info("failed: %s", outcome.error)

    def drain(self, limit: int = 1000) -> int:
        """Claim and run pending rows one at a time in this thread until none is left; returns how many.

        No timeout and no concurrency: for tests and one-shot maintenance.
        """
        done = 0
        while done < limit:
            row = self.store.claim()
            if row is None:
                break
            job = self._job(row)
            self._write(job.ctx.log, row.id, self._outcome(row, job.ctx))
            done += 1
        return done

    # -- leases, timeouts ----------------------------------------------------------------
    def _reap(self) -> None:
        for pid in [pid for pid, job in self._jobs.items() if job.done.is_set()]:
            del self._jobs[pid]

    def _held(self) -> list[int]:
        return [pid for pid, job in self._jobs.items() if not job.abandoned.is_set()]

    def _beat(self) -> None:
        held = self._held()
        kept = self.store.heartbeat(held)
        for pid in set(held) - kept:
            job = self._jobs[pid]
            job.abandoned.set()
            job.ctx.log.warning("lost the row (its lease expired and it was recovered elsewhere); cancelling the job")
            job.ctx.cancel()

    def _sweep(self) -> bool:
        """Recover the scope's orphaned rows; True when some went back to pending."""
        requeued = False
        for rec in self.store.recover_stale(lease_s=self.config.lease_s, max_attempts=self.config.max_attempts):
            row_log = RowLog(log, {"process_id": rec.id})
            if rec.status == "pending":
                requeued = True
                row_log.warning(
                    "worker %s stopped heartbeating; back to pending (attempt %d)", rec.lost_by, rec.attempts + 1
                )
            else:
                row_log.warning("worker %s stopped heartbeating; failed after %d attempt(s)", rec.lost_by, rec.attempts)
        return requeued

    def _expire(self, now: float) -> None:
        for job in list(self._jobs.values()):
            if job.abandoned.is_set() or now < job.deadline:
                continue
            job.abandoned.set()
            job.ctx.cancel()
            output = None
            if job.ctx.snapshot is not None:
                try:
                    output = job.ctx.snapshot()
                except Exception:
                    job.ctx.log.warning("no progress report for the timed-out job", exc_info=True)
            message = f"timed out after {self.timeout_s:g} s (FIREFEED_PROCESS_TIMEOUT_S); the job was cancelled"
            self._write(job.ctx.log, job.row.id, Outcome(ok=False, output=output, error=message))

    # -- shutdown ------------------------------------------------------------------------
    def _shutdown(self) -> None:
        self._reap()
        running = self._held()
        if running:
            log.info(
                "stopping: no new claims; %d running row(s) get up to %gs to finish", len(running), self.config.grace_s
            )
        grace_end = time.monotonic() + self.config.grace_s
        next_beat = 0.0
        try:
            while self._held() and not self._stop_now.is_set():
                now = time.monotonic()
                if now >= grace_end:
                    break
                if now >= next_beat:
                    self._beat()  # keep the leases while finishing, or a peer would take the rows over
                    next_beat = now + self.config.heartbeat_s
                self._expire(now)
                select.select([self._wake_r], [], [], min(grace_end, next_beat) - now)
                self._drain_wake()
                self._reap()
            leftover = [self._jobs[pid] for pid in self._held()]
            for job in leftover:
                job.abandoned.set()
                job.ctx.cancel()
            wait_end = time.monotonic() + _CANCEL_WAIT_S
            for job in leftover:
                if job.thread is not None:
                    job.thread.join(max(0.0, wait_end - time.monotonic()))
            released = self.store.release([job.row.id for job in leftover])
            for job in leftover:
                if job.row.id in released:
                    job.ctx.log.info("released back to pending (the worker is stopping)")
        finally:
            self._close_listen()
            self.close()
        log.info("processes worker %s stopped", self.name)
