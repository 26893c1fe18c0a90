"""The watch loop: the driver waits for a step's jobs by reading their rows, never a broker's result.

It ends when every job SUCCEEDED (their states, in order), or on the first
FAILED job (StepFailedError with the job's error), a CANCELLED one or a cancel
of the run (RunCancelledError). While it waits it repairs what a dead worker or
a lost message leaves behind:

- a RUNNING job whose heartbeat is older than the lease lost its worker: it is
  sent again (checked every heartbeat interval);
- PENDING jobs when nothing moved for a lease lost their message (with a killed
  worker's prefetch, or a restarted broker): sent again, at most once a lease. A
  duplicate message is harmless, the claim lets one through;
- PENDING jobs when nothing moved for the pickup timeout: no worker takes them
  (JobPickupTimeoutError). The timeout counts from the last time any job moved,
  so a long but moving queue is not mistaken for a missing worker.

Between polls it sleeps on the run's wakeups (firefeed/runs/wakeups.py): a job's
change wakes it at once, so it reads the rows only when something happened, plus
once every `_NOTIFIED_POLL_S` for what no notification announces (a lease running
out). Without live wakeups it polls, quickly at first, then every `_MAX_POLL_S`.

Written against small store, wakeup and clock protocols, so tests/unit/test_watch.py
runs it with fakes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from firefeed.errors import JobPickupTimeoutError, RunCancelledError, StepFailedError
from firefeed.runs.contract import JobKind, JobState, JobStatus

log = logging.getLogger(__name__)

# The first polls come quickly (a small job is done in milliseconds), then back off to this.
_FIRST_POLL_S = 0.002
_MAX_POLL_S = 0.05
# With live wakeups a poll is needed only for what no notification announces: the lease checks.
_NOTIFIED_POLL_S = 0.5


class WatchedJobs(Protocol):
    """What the loop reads of the job store (firefeed/runs/jobs.py JobStore)."""

    def status_counts(self, job_ids: Sequence[int]) -> dict[JobStatus, int]: ...

    def states(self, job_ids: Sequence[int]) -> list[JobState]: ...

    def stale_running(self, job_ids: Sequence[int], lease_s: float) -> list[int]: ...


class Wakeups(Protocol):
    """What the loop sleeps on (firefeed/runs/wakeups.py RunWakeups)."""

    @property
    def live(self) -> bool: ...

    def wait(self, timeout_s: float) -> bool: ...


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@dataclass(frozen=True)
class WatchTimes:
    lease_s: float  # FIREFEED_STALE_RUN_S: a job silent this long lost its worker or its message
    heartbeat_s: float  # FIREFEED_HEARTBEAT_S: how often RUNNING jobs are checked for a lost worker
    pickup_timeout_s: float  # FIREFEED_JOB_PICKUP_TIMEOUT_S


@dataclass
class Watch:
    """One wait for the jobs `ids` of one kind; `resend` hands jobs to the dispatcher again."""

    jobs: WatchedJobs
    run_id: str
    kind: JobKind
    ids: Sequence[int]
    times: WatchTimes
    resend: Callable[[list[int]], None]
    check_cancel: Callable[[], None]
    #: Called with the jobs' states at every poll (then each poll loads the rows, not just counts).
    on_poll: Callable[[list[JobState]], None] | None = None
    #: Says where the jobs should have gone, for the pickup timeout's message.
    hint: str = ""
    #: The run's job notifications; None (or not live): poll.
    wakeups: Wakeups | None = None
    clock: Clock = SystemClock()  # noqa: RUF009  # stateless

    def until_done(self) -> list[JobState]:
        ids, times, clock = self.ids, self.times, self.clock
        delay = _FIRST_POLL_S
        last_counts: dict[JobStatus, int] = {}
        started = clock.monotonic()
        deadline = started + times.pickup_timeout_s
        next_stale_check = started + times.heartbeat_s
        last_move = next_resend = started
        while True:
            counts = self._counts()
            if counts.get(JobStatus.FAILED):
                failed = [st for st in self.jobs.states(ids) if st.status == JobStatus.FAILED]
                raise StepFailedError(
                    failed[0].error or {"step": self.kind.step, "type": "JobFailed", "message": "a step job failed"}
                )
            if counts.get(JobStatus.CANCELLED):
                raise RunCancelledError(f"run {self.run_id} was cancelled")
            if counts.get(JobStatus.SUCCEEDED, 0) == len(ids):
                return self.jobs.states(ids)
            self.check_cancel()
            now = clock.monotonic()
            if counts != last_counts:
                last_counts, deadline, last_move = counts, now + times.pickup_timeout_s, now
            if counts.get(JobStatus.PENDING) and now - last_move > times.lease_s and now >= next_resend:
                next_resend = now + times.lease_s
                queued = [st.id for st in self.jobs.states(ids) if st.status == JobStatus.PENDING]
                if queued:
                    log.warning("%d queued job(s) did not move for a lease; sending them again", len(queued))
                    self.resend(queued)
            if now >= next_stale_check:
                next_stale_check = now + times.heartbeat_s
                lost = self.jobs.stale_running(ids, times.lease_s)
                if lost:
                    log.warning("%d job(s) lost their worker; sending them again", len(lost))
                    self.resend(lost)
            if counts.get(JobStatus.PENDING) and now > deadline:
                raise JobPickupTimeoutError(
                    f"no {self.kind.step} job ({self.kind.value}) moved for {times.pickup_timeout_s:.0f}s"
                    + (f": {self.hint}" if self.hint else "")
                )
            if self.wakeups is not None and self.wakeups.live:
                self.wakeups.wait(_NOTIFIED_POLL_S)
            else:
                clock.sleep(delay)
                delay = min(delay * 1.5, _MAX_POLL_S)

    def _counts(self) -> dict[JobStatus, int]:
        """Without an `on_poll`, only a count per status: hundreds of chunk jobs would otherwise be
        loaded whole many times a second."""
        if self.on_poll is None:
            return self.jobs.status_counts(self.ids)
        states = self.jobs.states(self.ids)
        self.on_poll(states)
        counts: dict[JobStatus, int] = {}
        for st in states:
            counts[st.status] = counts.get(st.status, 0) + 1
        return counts
