"""How fast a sync sends (SPEC 10 C10): a token bucket at the channel's per-minute budget, slowed by its answers.

Google counts the Merchant API's requests per account over a sliding minute and answers 429
`RESOURCE_EXHAUSTED` (`quota/request_rate_too_high`) past it. The bucket spends 97% of the budget
(`HEADROOM`): a full-rate pace lands within a request or two of the limit in any 60 s window, and the
channel's clock is not ours. A quota answer halves the pace (down to `FLOOR` of the budget) and
stops every sender until its `retry_after` (or a backoff doubling from 1 s to 60 s) has passed;
then the pace creeps back up, +10% of the budget per quiet `CREEP_S`. A 5xx stops the senders for
the backoff without touching the pace: the server is sick, not the quota spent.

Thread-safe: every sending thread calls `take()` before its request, and `busy()` on a refusal.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

HEADROOM = 0.97
FLOOR = 1 / 64
CREEP_S = 5.0
CREEP_STEP = 0.10
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 60.0


class Pacer:
    """A token bucket of `per_minute` requests (one second's worth of burst), adjusted by the channel's word."""

    def __init__(
        self,
        per_minute: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.budget = per_minute * HEADROOM / 60.0  # requests per second at full pace
        self.rate = self.budget
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._turn = threading.Lock()
        # Start with one token: a burst of a full second at the start could crowd a window another sync left.
        self._tokens = 1.0
        self._capacity = max(1.0, self.budget)
        self._at = clock()
        self._paused_until = 0.0
        self._backoff = BACKOFF_FIRST_S
        self._calm_since = self._at
        self.quota_hits = 0
        self.server_hits = 0

    def take(self, stop_at: float | None = None) -> bool:
        """Wait for a token; False when `stop_at` (a clock time) comes first, so the caller sends nothing.

        One thread at a time waits for the next token (`_turn`); the others block on the turn instead of
        all waking for each token and all but one going back to sleep (the CPU of a sync's idle time).
        """
        timeout = -1.0 if stop_at is None else max(0.0, stop_at - self._clock())
        if not self._turn.acquire(timeout=timeout):
            return False
        try:
            return self._take(stop_at)
        finally:
            self._turn.release()

    def _take(self, stop_at: float | None) -> bool:
        while True:
            with self._lock:
                now = self._clock()
                self._creep(now)
                wait = self._paused_until - now
                if wait <= 0:
                    self._tokens = min(self._capacity, self._tokens + (now - self._at) * self.rate)
                    self._at = now
                    if self._tokens >= 1.0 - 1e-9:  # a float a hair short of a token is one (no endless tiny waits)
                        self._tokens = max(0.0, self._tokens - 1.0)
                        return True
                    wait = (1.0 - self._tokens) / self.rate
            if stop_at is not None and self._clock() + wait > stop_at:
                return False
            self._sleep(min(wait, 0.5))

    def busy(self, *, quota: bool, retry_after: float | None) -> None:
        """The channel refused a request as busy: pause everyone; a quota refusal also halves the pace."""
        with self._lock:
            now = self._clock()
            if quota:
                self.quota_hits += 1
                self.rate = max(self.budget * FLOOR, self.rate / 2)
            else:
                self.server_hits += 1
            delay = retry_after if retry_after is not None and retry_after > 0 else self._backoff
            self._backoff = min(BACKOFF_MAX_S, self._backoff * 2)
            self._paused_until = max(self._paused_until, now + delay)
            self._tokens = 0.0
            self._at = max(now, self._paused_until)
            self._calm_since = self._paused_until

    def ok(self) -> None:
        """An answer that was not a refusal: the backoff starts small again next time."""
        with self._lock:
            self._backoff = BACKOFF_FIRST_S

    def _creep(self, now: float) -> None:
        if self.rate >= self.budget or now < self._calm_since + CREEP_S:
            return
        steps = int((now - self._calm_since) // CREEP_S)
        self.rate = min(self.budget, self.rate + steps * CREEP_STEP * self.budget)
        self._calm_since += steps * CREEP_S


class Unpaced:
    """Meta's batches: one call at a time, polled to its end; the channel's own limits are its `ChannelBusy`."""

    def __init__(self, *, sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic):
        self._inner = Pacer(60_000_000, sleep=sleep, clock=clock)
        self.quota_hits = 0
        self.server_hits = 0

    def take(self, stop_at: float | None = None) -> bool:
        return self._inner.take(stop_at)

    def busy(self, *, quota: bool, retry_after: float | None) -> None:
        self._inner.busy(quota=quota, retry_after=retry_after)
        self.quota_hits, self.server_hits = self._inner.quota_hits, self._inner.server_hits

    def ok(self) -> None:
        self._inner.ok()
