"""Another try after a failure worth one: the backoff and tries every fetch shares (http, sftp, ftp).

One loop, so an sftp source and an https one give up alike: after `FIREFEED_FETCH_RETRIES`, past the
fetch's deadline, or when the next wait would end after it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from firefeed.config import Settings
from firefeed.errors import FetchError
from firefeed.pipeline._fetch_deadline import PAST_DEADLINE

log = logging.getLogger("firefeed.pipeline.fetch")

T = TypeVar("T")
#: never let a server park a worker longer than this between tries (an http Retry-After)
MAX_RETRY_AFTER_S = 60.0


class Retryable(Exception):
    """One try failed in a way worth another (5xx, 429, a refused or lost connection, a timeout)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


def with_retries(source: str, settings: Settings, deadline: float | None, one_try: Callable[[], T]) -> T:
    """`one_try` again after a Retryable, with exponential backoff; a FetchError naming why it gave up."""
    attempt = 0
    while True:
        try:
            return one_try()
        except Retryable as failure:
            if deadline is not None and time.monotonic() >= deadline:
                raise FetchError(source, f"{failure.message}: {PAST_DEADLINE}") from failure.__cause__
            if attempt >= settings.fetch_retries:
                raise FetchError(
                    source, f"{failure.message} (gave up after {attempt + 1} tries)"
                ) from failure.__cause__
            delay = settings.fetch_backoff_s * 2**attempt
            if failure.retry_after is not None:
                delay = max(delay, min(failure.retry_after, MAX_RETRY_AFTER_S))
            if deadline is not None and time.monotonic() + delay >= deadline:
                raise FetchError(source, f"{failure.message}: no time left to try again") from failure.__cause__
            attempt += 1
            log.warning(
                "fetch %s: %s; try %d of %d in %.2fs",
                source,
                failure.message,
                attempt + 1,
                settings.fetch_retries + 1,
                delay,
            )
            time.sleep(delay)
