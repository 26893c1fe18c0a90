"""Values calls run in a pool of their own (issue #47): the previews' pool type, with values' settings and errors."""

from __future__ import annotations

import asyncio
import threading

import pytest

from firefeed.api.errors import status_of
from firefeed.errors import TooManyValuesCallsError, ValuesBusyError, ValuesTimeoutError
from firefeed.preview.deadline import Deadline
from firefeed.preview.pool import ANSWER_GRACE_S, VALUES, BoundedPool


def test_a_values_pool_refuses_in_its_own_words_and_times_out_with_its_own_error() -> None:
    release = threading.Event()

    def held(deadline: Deadline) -> str:
        deadline.check("counting the values its run kept")
        release.wait(10)
        return "done"

    async def scenario() -> None:
        pool = BoundedPool(2, kind=VALUES)
        first = asyncio.ensure_future(pool.run("a", held, deadline_s=5, per_company=1))
        await asyncio.sleep(0.05)
        with pytest.raises(TooManyValuesCallsError) as too_many:
            await pool.run("a", held, deadline_s=5, per_company=1)
        assert too_many.value.message.startswith("company 'a' already runs 1 values calls")
        assert "FIREFEED_VALUES_PER_COMPANY=1" in too_many.value.message
        assert 1 <= too_many.value.retry_after <= 5 + ANSWER_GRACE_S
        with pytest.raises(ValuesTimeoutError) as late:
            await pool.run("b", held, deadline_s=0.2, per_company=1)
        assert late.value.message == (
            "the values call did not finish within 0.2 s (FIREFEED_VALUES_DEADLINE_S): "
            "it was still counting the values its run kept"
        )
        # b's overrun call keeps its place until its thread ends: the pool (2) is full for c.
        with pytest.raises(ValuesBusyError) as busy:
            await pool.run("c", held, deadline_s=5, per_company=1)
        assert "all 2 values workers are busy (FIREFEED_VALUES_POOL_SIZE)" in busy.value.message
        release.set()
        assert await first == "done"

    asyncio.run(scenario())
    assert [status_of(err("m", 1)) for err in (TooManyValuesCallsError, ValuesBusyError)] == [429, 503]
    assert status_of(ValuesTimeoutError("m")) == 504
