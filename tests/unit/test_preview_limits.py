"""Preview limits without the API: a fetch ends at its deadline on a trickle; the pool admits a bounded number."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from firefeed.errors import FetchError, PreviewsBusyError, PreviewTimeoutError, TooManyPreviewsError
from firefeed.preview.deadline import Deadline
from firefeed.preview.pool import ANSWER_GRACE_S, PREVIEWS, BoundedPool
from tests.unit.test_fetch import CSV, FeedServer, body, fetch, leftovers, make_settings, server  # noqa: F401

#: the test server's pause between two bytes: longer than any deadline below, shorter than the read timeout
GAP_S = 3.0


def trickled(
    feeds: FeedServer, *, length: int | None, gap_s: float = GAP_S
) -> Callable[[BaseHTTPRequestHandler], None]:
    """Headers at once, then one byte of CSV every `gap_s` seconds (Content-Length `length`, or until close)."""

    def route(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        if length is not None:
            h.send_header("Content-Length", str(length))
        h.end_headers()
        for byte in CSV:
            try:
                h.wfile.write(bytes([byte]))
                h.wfile.flush()
            except OSError:
                return  # the client gave up
            if feeds.release.wait(gap_s):
                return

    return route


def trickled_headers(feeds: FeedServer) -> Callable[[BaseHTTPRequestHandler], None]:
    """Even the status line comes one byte every GAP_S seconds."""

    def route(h: BaseHTTPRequestHandler) -> None:
        for byte in b"HTTP/1.0 200 OK\r\nContent-Type: text/csv\r\n\r\n":
            try:
                h.wfile.write(bytes([byte]))
                h.wfile.flush()
            except OSError:
                return
            if feeds.release.wait(GAP_S):
                return

    return route


def _threads(prefix: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(prefix)]


@pytest.mark.parametrize("shape", ["content-length", "until-close", "headers"])
def test_a_fetch_ends_at_its_deadline_while_the_server_trickles(
    server: FeedServer,  # noqa: F811 (the fixture imported from test_fetch)
    tmp_path: Path,
    shape: str,
) -> None:
    route = {
        "content-length": trickled(server, length=len(CSV)),
        "until-close": trickled(server, length=None),
        "headers": trickled_headers(server),
    }[shape]
    server.routes["/f.csv"] = route
    # The read timeout (30 s) restarts with every byte: only the deadline can stop this one.
    settings = make_settings(fetch_timeout_s=30.0, fetch_retries=3)
    started = time.monotonic()
    with pytest.raises(FetchError, match="did not finish before its deadline"):
        fetch(server.url("/f.csv"), tmp_path, settings=settings, deadline=started + 0.5)
    took = time.monotonic() - started
    # Stopped at the deadline, not at the next byte (GAP_S later) nor by a retry.
    assert took < GAP_S - 0.5, took
    assert server.hits["/f.csv"] == 1
    assert leftovers(tmp_path) == []
    assert _threads("firefeed-fetch-deadline") == []


@pytest.mark.parametrize("length", [len(CSV), None])
def test_a_read_waiting_for_the_next_byte_is_woken_at_the_deadline(
    server: FeedServer,  # noqa: F811
    tmp_path: Path,
    length: int | None,
) -> None:
    # Bytes every 2 s never let a read time out (2.5 s at most, the time left when the request went out);
    # without the watchdog the fetch would end at the byte after the deadline (4 s), not at the deadline.
    server.routes["/f.csv"] = trickled(server, length=length, gap_s=2.0)
    started = time.monotonic()
    with pytest.raises(FetchError, match="did not finish before its deadline"):
        fetch(server.url("/f.csv"), tmp_path, settings=make_settings(fetch_timeout_s=30.0), deadline=started + 2.5)
    took = time.monotonic() - started
    assert 2.4 < took < 3.5, took
    assert leftovers(tmp_path) == []
    assert _threads("firefeed-fetch-deadline") == []


def test_a_fetch_that_ends_in_time_is_untouched_by_its_deadline(
    server: FeedServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    server.routes["/f.csv"] = body(CSV)
    result = fetch(server.url("/f.csv"), tmp_path, deadline=time.monotonic() + 30)
    assert result.path is not None and result.path.read_bytes() == CSV
    assert _threads("firefeed-fetch-deadline") == []


def test_no_retry_is_tried_that_would_end_after_the_deadline(
    server: FeedServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    server.routes["/f.csv"] = body(b"", 503, Retry_After="5")
    started = time.monotonic()
    with pytest.raises(FetchError, match=r"HTTP 503.*no time left to try again"):
        fetch(server.url("/f.csv"), tmp_path, settings=make_settings(fetch_retries=3), deadline=started + 2)
    assert time.monotonic() - started < 2
    assert server.hits["/f.csv"] == 1


def test_the_deadline_names_the_step_that_was_running() -> None:
    deadline = Deadline(0.05)
    deadline.check("fetching source 'main'")
    time.sleep(0.06)
    with pytest.raises(PreviewTimeoutError) as caught:
        deadline.check("parsing source 'main'")
    assert str(caught.value).startswith("the preview did not finish within 0.05 s")
    assert "it was still fetching source 'main'" in str(caught.value)


def test_expiring_a_deadline_early_runs_its_watchers_once() -> None:
    calls: list[str] = []
    deadline = Deadline(60)
    deadline.watch(lambda: calls.append("a"))
    stop = deadline.watch(lambda: calls.append("b"))
    stop()
    with deadline.armed():
        deadline.expire()
        deadline.expire()
    assert calls == ["a"]
    assert deadline.expired()
    deadline.watch(lambda: calls.append("late"))  # watching an expired deadline calls back at once
    assert calls == ["a", "late"]
    assert _threads("firefeed-preview-deadline") == []


# ------------------------------------------------------------ the pool


def test_the_pool_admits_per_company_and_overall_bounds_and_refuses_the_rest_at_once() -> None:
    release = threading.Event()

    def work(deadline: Deadline) -> str:
        release.wait(10)
        return "done"

    async def scenario() -> None:
        pool = BoundedPool(3, kind=PREVIEWS)
        first = [asyncio.ensure_future(pool.run("a", work, deadline_s=5, per_company=2)) for _ in range(2)]
        other = asyncio.ensure_future(pool.run("c", work, deadline_s=5, per_company=2))
        await asyncio.sleep(0.05)
        assert (pool.running(), pool.running("a"), pool.running("c")) == (3, 2, 1)

        with pytest.raises(TooManyPreviewsError) as too_many:
            await pool.run("a", work, deadline_s=5, per_company=2)
        assert "FIREFEED_PREVIEW_PER_COMPANY=2" in too_many.value.message
        assert 1 <= too_many.value.retry_after <= 5 + ANSWER_GRACE_S
        with pytest.raises(PreviewsBusyError) as busy:
            await pool.run("c", work, deadline_s=5, per_company=2)  # c may run two, but the pool is full
        assert "all 3 preview workers are busy" in busy.value.message
        assert 1 <= busy.value.retry_after <= 5 + ANSWER_GRACE_S

        release.set()
        assert await asyncio.gather(*first, other) == ["done"] * 3
        for _ in range(100):
            if pool.running() == 0 and not _threads("firefeed-preview"):
                break
            await asyncio.sleep(0.02)
        assert pool.running() == 0
        assert _threads("firefeed-preview") == []
        assert await pool.run("a", lambda d: "again", deadline_s=5, per_company=2) == "again"

    asyncio.run(scenario())


def test_a_preview_that_overruns_is_answered_at_its_deadline_and_keeps_its_place_until_its_thread_ends() -> None:
    release = threading.Event()

    def stubborn(deadline: Deadline) -> str:
        deadline.check("doing something slow")
        release.wait(10)  # ignores the deadline, as an uninterruptible step would
        return "late"

    async def scenario() -> None:
        pool = BoundedPool(2, kind=PREVIEWS)
        started = time.monotonic()
        with pytest.raises(PreviewTimeoutError, match="it was still doing something slow"):
            await pool.run("a", stubborn, deadline_s=0.2, per_company=1)
        assert time.monotonic() - started < 0.2 + ANSWER_GRACE_S + 2
        assert pool.running("a") == 1  # its thread still runs: the company's place is still taken
        with pytest.raises(TooManyPreviewsError):
            await pool.run("a", stubborn, deadline_s=0.2, per_company=1)
        release.set()
        for _ in range(100):
            if pool.running() == 0:
                break
            await asyncio.sleep(0.02)
        assert pool.running() == 0

    asyncio.run(scenario())


def test_a_preview_whose_client_went_away_is_told_its_time_is_up() -> None:
    seen: list[bool] = []
    started = threading.Event()

    def work(deadline: Deadline) -> None:
        started.set()
        for _ in range(500):
            if deadline.expired():
                seen.append(True)
                return
            time.sleep(0.01)

    async def scenario() -> None:
        pool = BoundedPool(1, kind=PREVIEWS)
        task = asyncio.ensure_future(pool.run("a", work, deadline_s=30, per_company=1))
        while not started.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(200):
            if pool.running() == 0:
                break
            await asyncio.sleep(0.02)
        assert pool.running() == 0

    asyncio.run(scenario())
    assert seen == [True]
