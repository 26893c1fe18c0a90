"""At most SPEC_WRITES_PER_COMPANY spec validations of one company at once in an API process.

Validating a spec is pure CPU under the GIL: a spec at the rule caps (1,000 rules,
5,000 actions, `rules/limits.py`) whose SQL nears FIREFEED_RULES_MAX_SQL_BYTES
takes seconds. Forty such PUTs of one tenant at once would hold every thread of
anyio's pool that the sync routes of every other company share, for minutes.
Past the bound a PUT is refused at once (429 with Retry-After), never queued: a
client that writes its spec again a second later loses nothing. Previews
parse their drafts in the preview pool, which has its own per-company bound.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from firefeed.errors import TooManySpecWritesError

#: one company's validations at once: two, so a client retrying after a timeout is not refused
SPEC_WRITES_PER_COMPANY = 2
#: what a refused client is told to wait: a validation at the caps takes a few seconds
RETRY_AFTER_S = 2


def busy_response() -> dict[int | str, dict[str, Any]]:
    """The OpenAPI answer of a route that validates a spec under this bound (PUT, validate, restore)."""
    from firefeed.api import schemas

    return {
        429: {
            "model": schemas.ErrorBody,
            "description": "the company already has as many spec writes in progress as the API validates at once "
            "(`too_many_spec_writes`, with Retry-After)",
        }
    }


def spec_body(description: str) -> dict[str, Any]:
    """The OpenAPI request body of a route that takes a spec as JSON or YAML."""
    return {
        "requestBody": {
            "required": True,
            "description": description,
            "content": {
                "application/json": {"schema": {"type": "object"}},
                "application/yaml": {"schema": {"type": "string"}},
            },
        }
    }


class SpecWrites:
    """The companies' validations in progress, counted under one lock."""

    def __init__(self, per_company: int = SPEC_WRITES_PER_COMPANY) -> None:
        self.per_company = per_company
        self._lock = threading.Lock()
        self._running: dict[str, int] = {}

    @contextmanager
    def admitted(self, company: str) -> Iterator[None]:
        """Hold one of the company's places while the body runs; TooManySpecWritesError when none is free."""
        with self._lock:
            held = self._running.get(company, 0)
            if held >= self.per_company:
                raise TooManySpecWritesError(
                    f"company {company!r} already has {held} spec writes in progress, the most at once; "
                    f"retry in {RETRY_AFTER_S} s",
                    RETRY_AFTER_S,
                )
            self._running[company] = held + 1
        try:
            yield
        finally:
            with self._lock:
                left = self._running[company] - 1
                if left:
                    self._running[company] = left
                else:
                    del self._running[company]


SPEC_WRITES = SpecWrites()
