"""The watch loop against a fake job store and a fake clock: each behaviour of pipeline/watch.py."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import pytest

from firefeed.errors import JobPickupTimeoutError, RunCancelledError, StepFailedError
from firefeed.pipeline.watch import Watch, WatchTimes
from firefeed.runs.contract import JobKind, JobState, JobStatus

RUN = "00000000-0000-0000-0000-000000000001"
TIMES = WatchTimes(lease_s=30.0, heartbeat_s=5.0, pickup_timeout_s=120.0)


class FakeClock:
    """Time moves only when the loop sleeps; `at(t, change)` makes the world change at time t."""

    def __init__(self) -> None:
        self.now = 0.0
        self._events: list[tuple[float, Callable[[], None]]] = []

    def at(self, when: float, change: Callable[[], None]) -> None:
        self._events.append((when, change))
        self._events.sort(key=lambda e: e[0])

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        while self._events and self._events[0][0] <= self.now:
            self._events.pop(0)[1]()


@dataclass
class FakeStore:
    clock: FakeClock
    jobs: dict[int, JobState] = field(default_factory=dict)
    beats: dict[int, float] = field(default_factory=dict)  # job id -> time of its last heartbeat
    reads: int = 0

    def add(self, n: int, kind: JobKind = JobKind.RULES_CHUNK) -> list[int]:
        ids = list(range(len(self.jobs) + 1, len(self.jobs) + n + 1))
        for i in ids:
            self.jobs[i] = JobState(i, RUN, kind, i, 1, JobStatus.PENDING, None, None, None, None, None, None)
        return ids

    def set(self, job_id: int, status: JobStatus, **changes: object) -> None:
        self.jobs[job_id] = replace(self.jobs[job_id], status=status, **changes)  # type: ignore[arg-type]
        if status == JobStatus.RUNNING:
            self.beats[job_id] = self.clock.now

    def status_counts(self, job_ids: Sequence[int]) -> dict[JobStatus, int]:
        counts: dict[JobStatus, int] = {}
        for i in job_ids:
            counts[self.jobs[i].status] = counts.get(self.jobs[i].status, 0) + 1
        return counts

    def states(self, job_ids: Sequence[int]) -> list[JobState]:
        self.reads += 1
        return [self.jobs[i] for i in job_ids]

    def stale_running(self, job_ids: Sequence[int], lease_s: float) -> list[int]:
        return [
            i for i in job_ids if self.jobs[i].status == JobStatus.RUNNING and self.clock.now - self.beats[i] > lease_s
        ]


@dataclass
class Harness:
    clock: FakeClock = field(default_factory=FakeClock)
    sent: list[tuple[float, list[int]]] = field(default_factory=list)
    cancelled: bool = False

    def __post_init__(self) -> None:
        self.store = FakeStore(self.clock)

    def check_cancel(self) -> None:
        if self.cancelled:
            raise RunCancelledError(f"run {RUN} was cancelled")

    def watch(self, ids: list[int], on_poll: Callable[[list[JobState]], None] | None = None) -> Watch:
        return Watch(
            jobs=self.store,
            run_id=RUN,
            kind=JobKind.RULES_CHUNK,
            ids=ids,
            times=TIMES,
            resend=lambda lost: self.sent.append((self.clock.now, list(lost))),
            check_cancel=self.check_cancel,
            on_poll=on_poll,
            hint="is a worker consuming queue 'rules'?",
            clock=self.clock,
        )


def test_the_wait_ends_with_every_job_s_state_in_order_once_all_succeeded() -> None:
    h = Harness()
    ids = h.store.add(3)
    for n, i in enumerate(reversed(ids)):
        h.clock.at(0.01 * (n + 1), lambda i=i: h.store.set(i, JobStatus.SUCCEEDED, result={"n": i}))
    states = h.watch(ids).until_done()
    assert [s.id for s in states] == ids
    assert [s.result for s in states] == [{"n": i} for i in ids]
    assert h.sent == []


def test_a_failed_job_ends_the_wait_with_its_own_error() -> None:
    h = Harness()
    ids = h.store.add(2)
    error = {"step": "RULES", "type": "RulesError", "message": "division by zero in rule 'vat'"}
    h.clock.at(0.5, lambda: h.store.set(ids[1], JobStatus.FAILED, error=error))
    with pytest.raises(StepFailedError) as caught:
        h.watch(ids).until_done()
    assert caught.value.error == error


def test_a_cancelled_job_ends_the_wait_as_the_run_s_cancel() -> None:
    h = Harness()
    ids = h.store.add(2)
    h.clock.at(0.5, lambda: h.store.set(ids[0], JobStatus.CANCELLED))
    with pytest.raises(RunCancelledError):
        h.watch(ids).until_done()


def test_a_cancel_of_the_run_ends_the_wait_while_jobs_still_run() -> None:
    h = Harness()
    ids = h.store.add(1)
    h.clock.at(0.1, lambda: h.store.set(ids[0], JobStatus.RUNNING))
    h.clock.at(1.0, lambda: setattr(h, "cancelled", True))
    with pytest.raises(RunCancelledError):
        h.watch(ids).until_done()
    assert 1.0 <= h.clock.now < 1.2


def test_a_running_job_that_stopped_beating_for_a_lease_is_sent_again() -> None:
    h = Harness()
    ids = h.store.add(2)
    h.clock.at(0.1, lambda: [h.store.set(i, JobStatus.RUNNING) for i in ids])
    # The first job's worker keeps beating; the second one's died at once.
    for t in range(1, 60):
        h.clock.at(float(t), lambda: h.store.beats.__setitem__(ids[0], h.clock.now))
    h.clock.at(60.0, lambda: [h.store.set(i, JobStatus.SUCCEEDED) for i in ids])
    h.watch(ids).until_done()
    assert h.sent, "the lost job was never sent again"
    first_at, first = h.sent[0]
    assert first == [ids[1]]
    # Found at the first heartbeat check after its lease ran out, not before.
    assert TIMES.lease_s < first_at <= TIMES.lease_s + TIMES.heartbeat_s + 1.0


def test_pending_jobs_that_did_not_move_for_a_lease_are_sent_again_once_a_lease() -> None:
    h = Harness()
    ids = h.store.add(3)
    h.clock.at(0.1, lambda: h.store.set(ids[0], JobStatus.SUCCEEDED))
    h.clock.at(100.0, lambda: [h.store.set(i, JobStatus.SUCCEEDED) for i in ids[1:]])
    h.watch(ids).until_done()
    assert [batch for _, batch in h.sent] == [ids[1:]] * 3  # after 30 s, 60 s and 90 s of nothing moving
    times = [t for t, _ in h.sent]
    assert TIMES.lease_s < times[0] < TIMES.lease_s + 0.5
    assert all(b - a >= TIMES.lease_s for a, b in itertools.pairwise(times))


def test_pending_jobs_nobody_takes_end_the_wait_after_the_pickup_timeout() -> None:
    h = Harness()
    ids = h.store.add(2)
    with pytest.raises(JobPickupTimeoutError, match=r"no RULES job \(rules_chunk\) moved for 120s: is a worker"):
        h.watch(ids).until_done()
    assert TIMES.pickup_timeout_s < h.clock.now < TIMES.pickup_timeout_s + 0.2


def test_the_pickup_timeout_counts_from_the_last_move_so_a_slow_moving_queue_is_not_a_missing_worker() -> None:
    h = Harness()
    ids = h.store.add(5)
    # One job done every 100 s: 500 s in all, far past the 120 s pickup timeout, but always moving.
    for n, i in enumerate(ids, start=1):
        h.clock.at(100.0 * n, lambda i=i: h.store.set(i, JobStatus.SUCCEEDED))
    states = h.watch(ids).until_done()
    assert all(s.status == JobStatus.SUCCEEDED for s in states)
    assert h.clock.now >= 500.0


def test_without_on_poll_only_counts_are_read_until_the_end() -> None:
    h = Harness()
    ids = h.store.add(4)
    h.clock.at(2.0, lambda: [h.store.set(i, JobStatus.SUCCEEDED) for i in ids])
    h.watch(ids).until_done()
    assert h.store.reads == 1  # the states, once, when all succeeded


def test_on_poll_sees_the_jobs_states_at_every_poll() -> None:
    h = Harness()
    ids = h.store.add(2)
    seen: list[list[JobStatus]] = []
    h.clock.at(0.05, lambda: h.store.set(ids[0], JobStatus.RUNNING, result={"fetch_finished": "x"}))
    h.clock.at(0.5, lambda: [h.store.set(i, JobStatus.SUCCEEDED) for i in ids])
    h.watch(ids, on_poll=lambda states: seen.append([s.status for s in states])).until_done()
    assert seen[0] == [JobStatus.PENDING, JobStatus.PENDING]
    assert [JobStatus.RUNNING, JobStatus.PENDING] in seen
    assert seen[-1] == [JobStatus.SUCCEEDED, JobStatus.SUCCEEDED]


@dataclass
class FakeWakeups:
    """Notified at every change the clock's world makes: `wait` returns at the next one (or the timeout)."""

    clock: FakeClock
    live: bool = True
    waits: list[float] = field(default_factory=list)

    def wait(self, timeout_s: float) -> bool:
        self.waits.append(timeout_s)
        events = self.clock._events
        if events and events[0][0] <= self.clock.now + timeout_s:
            self.clock.sleep(events[0][0] - self.clock.now)
            return True
        self.clock.sleep(timeout_s)
        return False


def test_with_live_wakeups_the_rows_are_read_once_per_change_not_polled() -> None:
    h = Harness()
    ids = h.store.add(2)
    for n, i in enumerate(ids):
        h.clock.at(0.3 + n, lambda i=i: h.store.set(i, JobStatus.RUNNING))
        h.clock.at(0.8 + n, lambda i=i: h.store.set(i, JobStatus.SUCCEEDED))
    wakeups = FakeWakeups(h.clock)
    watch = h.watch(ids)
    watch.wakeups = wakeups
    states = watch.until_done()
    assert [s.status for s in states] == [JobStatus.SUCCEEDED] * 2
    assert h.clock.now == pytest.approx(1.8)  # seen the moment the last job ended
    # 4 changes, and a timeout poll while the second job ran (0.8 -> 1.3 -> 1.8): far from 50 ms polling.
    assert len(wakeups.waits) <= 6, wakeups.waits
    assert h.store.reads == 1  # the states are loaded once, at the end; polls count


def test_a_cancel_is_seen_within_one_notified_poll() -> None:
    h = Harness()
    ids = h.store.add(1)
    h.clock.at(0.1, lambda: h.store.set(ids[0], JobStatus.RUNNING))
    h.clock.at(1.0, lambda: setattr(h, "cancelled", True))
    watch = h.watch(ids)
    watch.wakeups = FakeWakeups(h.clock)
    with pytest.raises(RunCancelledError):
        watch.until_done()
    assert 1.0 <= h.clock.now <= 1.6


def test_without_live_wakeups_the_loop_polls_as_before() -> None:
    h = Harness()
    ids = h.store.add(1)
    h.clock.at(0.5, lambda: h.store.set(ids[0], JobStatus.SUCCEEDED))
    wakeups = FakeWakeups(h.clock, live=False)
    watch = h.watch(ids)
    watch.wakeups = wakeups
    watch.until_done()
    assert wakeups.waits == []
    assert 0.5 <= h.clock.now < 0.56  # polled: seen within one 50 ms poll
