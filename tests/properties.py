"""How hard the differential property tests search: part of their examples in `make test`, all in `make stress`.

`make test` has a ten-minute budget and the SQL route's property tests are its longest
(about 85 s at full count); `make stress` sets FIREFEED_THOROUGH_PROPERTIES=1 and runs them
again with every example. Each test states its full count, so the two modes stay in proportion.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

THOROUGH = os.environ.get("FIREFEED_THOROUGH_PROPERTIES") == "1"
#: the share of a test's examples `make test` tries
QUICK_SHARE = 0.5


def examples(full: int) -> int:
    """The examples to try of a test whose thorough count is `full` (never fewer than 20)."""
    return full if THOROUGH else max(20, round(full * QUICK_SHARE))


def sql_route(full: int, *extra: HealthCheck) -> settings:
    """The settings of a property test that runs every example through the database: no deadline (a
    statement's time is not the property), no example database (each run starts fresh), fixtures per test."""
    checks = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, *extra]
    return settings(max_examples=examples(full), deadline=None, database=None, suppress_health_check=checks)
