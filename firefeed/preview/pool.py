"""The API's previews and values calls run here: on threads of their own, a bounded number at once, never queued.

A preview may take its whole deadline (a slow source), so previews must not
run on the thread pool every sync route shares (anyio's, 40 threads): forty
slow previews would leave no thread for anyone's `GET /api/projects` or
`/healthz`. Here each admitted preview gets a thread of its own, at most
FIREFEED_PREVIEW_POOL_SIZE at once and FIREFEED_PREVIEW_PER_COMPANY of one
company. Beyond either a preview is refused at once (429 for the company's
own limit, 503 when the pool is full, both with Retry-After) instead of
waiting: a waiting preview would spend its deadline in a queue. A preview
counts until its thread has ended, not until its request was answered, so the
bound holds even for one that overran its deadline (the API answers 504 at the
deadline whatever the thread does).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TypeVar

from firefeed.errors import (
    FireFeedError,
    PreviewsBusyError,
    RetryLaterError,
    SyncCallsBusyError,
    SyncCallTimeoutError,
    TooManyPreviewsError,
    TooManySyncCallsError,
    TooManyValuesCallsError,
    ValuesBusyError,
    ValuesTimeoutError,
)
from firefeed.preview.deadline import Deadline

T = TypeVar("T")

#: after its deadline, how long the API waits for a preview's own answer before answering 504 itself
ANSWER_GRACE_S = 1.0


@dataclass(frozen=True)
class PoolKind:
    """What a pool runs: the names its threads, refusals and settings go by, and the errors it raises."""

    name: str  # its threads are `firefeed-<name>-<n>`
    plural: str  # "company 'a' already runs 2 <plural>"
    size_setting: str
    per_company_setting: str
    too_many: type[RetryLaterError]  # the company's own limit (the API answers 429)
    busy: type[RetryLaterError]  # the pool is full (503)
    #: the error past the deadline (None: the preview's, PreviewTimeoutError)
    timeout: Callable[[Deadline], FireFeedError] | None = None


PREVIEWS = PoolKind(
    "preview",
    "previews",
    "FIREFEED_PREVIEW_POOL_SIZE",
    "FIREFEED_PREVIEW_PER_COMPANY",
    TooManyPreviewsError,
    PreviewsBusyError,
)


def _values_timeout(deadline: Deadline) -> FireFeedError:
    return ValuesTimeoutError(
        f"the values call did not finish within {deadline.seconds:g} s (FIREFEED_VALUES_DEADLINE_S): "
        f"it was still {deadline.step}"
    )


VALUES = PoolKind(
    "values",
    "values calls",
    "FIREFEED_VALUES_POOL_SIZE",
    "FIREFEED_VALUES_PER_COMPANY",
    TooManyValuesCallsError,
    ValuesBusyError,
    _values_timeout,
)


def _sync_timeout(deadline: Deadline) -> FireFeedError:
    return SyncCallTimeoutError(
        f"the sync call did not answer within {deadline.seconds:g} s (FIREFEED_SYNC_MAX_S); it goes on, and "
        "`GET .../sync` shows what it did"
    )


SYNC_CALLS = PoolKind(
    "sync",
    "sync repairs or refreshes",
    "FIREFEED_SYNC_API_POOL_SIZE",
    "FIREFEED_SYNC_API_PER_COMPANY",
    TooManySyncCallsError,
    SyncCallsBusyError,
    _sync_timeout,
)


@dataclass(frozen=True)
class _Ticket:
    company: str
    deadline: Deadline


class BoundedPool:
    """At most `size` calls at once, `per_company` of one company (given per call: settings may change)."""

    def __init__(self, size: int, *, kind: PoolKind) -> None:
        self.size, self.kind = size, kind
        self._lock = threading.Lock()
        self._running: list[_Ticket] = []
        self._numbers = itertools.count(1)

    def running(self, company: str | None = None) -> int:
        """How many calls (of `company`) hold a place now."""
        with self._lock:
            return sum(1 for t in self._running if company is None or t.company == company)

    def _retry_after(self, tickets: list[_Ticket]) -> int:
        """Seconds until the first of `tickets` is past its deadline: a place is free by then."""
        soonest = min(t.deadline.remaining() for t in tickets) + ANSWER_GRACE_S
        return max(1, math.ceil(soonest))

    def _admit(self, company: str, deadline_s: float, per_company: int) -> _Ticket:
        with self._lock:
            kind = self.kind
            own = [t for t in self._running if t.company == company]
            if len(own) >= per_company:
                wait = self._retry_after(own)
                raise kind.too_many(
                    f"company {company!r} already runs {len(own)} {kind.plural}, the most it may run at once "
                    f"({kind.per_company_setting}={per_company}); retry in {wait} s",
                    wait,
                )
            if len(self._running) >= self.size:
                wait = self._retry_after(self._running)
                raise kind.busy(
                    f"all {self.size} {kind.name} workers are busy ({kind.size_setting}); retry in {wait} s",
                    wait,
                )
            ticket = _Ticket(company, Deadline(deadline_s, timeout=kind.timeout))
            self._running.append(ticket)
            return ticket

    def _release(self, ticket: _Ticket) -> None:
        with self._lock:
            self._running.remove(ticket)

    async def run(self, company: str, work: Callable[[Deadline], T], *, deadline_s: float, per_company: int) -> T:
        """`work(deadline)` on a thread of its own; the kind's `too_many`/`busy` error if it may not start.

        Answers by the deadline (plus ANSWER_GRACE_S): the deadline's error if the
        work has not answered by then, though its thread may still be ending.
        """
        ticket = self._admit(company, deadline_s, per_company)
        result: Future[T] = Future()

        def target() -> None:
            try:
                if not result.set_running_or_notify_cancel():
                    return
                try:
                    result.set_result(work(ticket.deadline))
                except BaseException as err:
                    result.set_exception(err)
            finally:
                self._release(ticket)

        thread = threading.Thread(target=target, name=f"firefeed-{self.kind.name}-{next(self._numbers)}", daemon=True)
        try:
            thread.start()
        except BaseException:
            self._release(ticket)
            raise
        try:
            return await asyncio.wait_for(
                asyncio.wrap_future(result), timeout=max(0.0, ticket.deadline.remaining()) + ANSWER_GRACE_S
            )
        except TimeoutError:
            raise ticket.deadline.error() from None
        except asyncio.CancelledError:
            # The client went away (or the server stops): nobody waits for this call, end it now.
            ticket.deadline.expire()
            raise
