"""The sync's pacer (firefeed/sync/pacing.py) on a clock the test turns: budget, quota halving, pauses, creep."""

from __future__ import annotations

import pytest

from firefeed.sync.pacing import CREEP_S, FLOOR, HEADROOM, Pacer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def pacer(per_minute: float = 3000) -> tuple[Pacer, Clock]:
    clock = Clock()
    return Pacer(per_minute, clock=clock, sleep=clock.sleep), clock


def test_a_minute_of_tokens_is_97_percent_of_the_budget_and_never_more() -> None:
    p, clock = pacer(3000)
    start, taken = clock.now, 0
    while clock.now - start < 60:
        assert p.take()
        taken += 1
    assert 3000 * HEADROOM - 2 <= taken <= 3000 * HEADROOM + 2
    # any 60 s window: never over the budget itself
    assert taken < 3000


def test_a_quota_answer_halves_the_pace_pauses_for_retry_after_and_the_pace_creeps_back() -> None:
    p, clock = pacer(3000)
    p.take()
    p.busy(quota=True, retry_after=2.0)
    assert p.rate == pytest.approx(p.budget / 2)
    before = clock.now
    assert p.take()
    assert clock.now - before >= 2.0  # nobody sends before Retry-After has passed
    for _ in range(10):
        p.busy(quota=True, retry_after=0.1)
    assert p.rate == pytest.approx(p.budget * FLOOR)  # halved down to the floor, never to zero
    assert p.quota_hits == 11
    clock.now += 20 * CREEP_S
    p.take()
    assert p.rate == pytest.approx(p.budget)  # back to the full pace after quiet time


def test_a_server_error_pauses_with_a_doubling_backoff_but_keeps_the_pace() -> None:
    p, clock = pacer(3000)
    p.busy(quota=False, retry_after=None)
    first = clock.now
    p.take()
    assert clock.now - first >= 1.0 and p.rate == p.budget
    p.busy(quota=False, retry_after=None)
    second = clock.now
    p.take()
    assert clock.now - second >= 2.0
    p.ok()
    p.busy(quota=False, retry_after=None)
    third = clock.now
    p.take()
    assert 1.0 <= clock.now - third < 2.0  # an answer that was not a refusal starts the backoff small again


def test_take_gives_up_when_the_stop_time_comes_before_the_token() -> None:
    p, clock = pacer(60)  # about one token a second
    assert p.take()
    assert not p.take(stop_at=clock.now + 0.2)
