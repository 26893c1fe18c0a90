"""`make test` runs on pytest-xdist workers: each must get a Redis and ports no other worker uses.

xdist's controller imports tests/services.py too, starts a Redis and names it in FIREFEED_TEST_REDIS_URL,
which the workers inherit; sharing it, two workers' test files would empty each other's databases.
"""

from __future__ import annotations

import pytest

from tests import ports, services


def _env(monkeypatch: pytest.MonkeyPatch, **values: str | None) -> None:
    for name, value in values.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)


def test_a_worker_does_not_take_the_redis_the_controller_started(monkeypatch: pytest.MonkeyPatch) -> None:
    url = "redis://127.0.0.1:20001/13"
    _env(monkeypatch, FIREFEED_TEST_REDIS_URL=url, FIREFEED_TEST_REDIS_WORKER="", PYTEST_XDIST_WORKER="gw1")
    assert services._named_redis() is None
    # ... but a pytest that a worker's test starts (same worker id) uses the worker's, as a serial session's child does
    _env(monkeypatch, FIREFEED_TEST_REDIS_WORKER="gw1")
    assert services._named_redis() == url
    _env(monkeypatch, FIREFEED_TEST_REDIS_WORKER="", PYTEST_XDIST_WORKER=None)
    assert services._named_redis() == url


def test_a_redis_named_by_hand_is_used_by_every_session(monkeypatch: pytest.MonkeyPatch) -> None:
    url = "redis://127.0.0.1:7000/13"
    _env(monkeypatch, FIREFEED_TEST_REDIS_URL=url, FIREFEED_TEST_REDIS_WORKER=None, PYTEST_XDIST_WORKER="gw0")
    assert services._named_redis() == url


def test_each_worker_chooses_ports_from_its_own_share(monkeypatch: pytest.MonkeyPatch) -> None:
    _env(monkeypatch, PYTEST_XDIST_WORKER_COUNT="2", PYTEST_XDIST_WORKER="gw0")
    first = ports._worker_slice(20000, 32000)
    _env(monkeypatch, PYTEST_XDIST_WORKER="gw1")
    second = ports._worker_slice(20000, 32000)
    assert first == (20000, 26000) and second == (26000, 32000)
    _env(monkeypatch, PYTEST_XDIST_WORKER=None, PYTEST_XDIST_WORKER_COUNT=None)
    assert ports._worker_slice(20000, 32000) == (20000, 32000)
