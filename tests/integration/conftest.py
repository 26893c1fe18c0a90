"""Fixtures for end-to-end runs: a project folder with feeds, and settings pointing at temp folders."""

from __future__ import annotations

import csv
import io
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import httpx
import pytest

from firefeed.config import reset_settings
from firefeed.storage import spares
from tests.integration.file_servers import ftp, sftp, transfer_env, trusted_cert  # noqa: F401  (fixtures)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Keep each phase's report on the test (`item.rep_call`), so a fixture's teardown can tell a failed
    test: the browser tests then save a screenshot of the page they saw (tests/integration/web.py)."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, "rep_" + report.when, report)


@pytest.fixture(scope="module")
def base_url(database_url: str) -> Iterator[str]:
    """The real API (uvicorn in a thread), one server per test module."""
    from firefeed.api.app import create_app
    from firefeed.api.serve import ServerThread

    with ServerThread(create_app()) as url:
        yield url


@pytest.fixture()
def http(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=30) as client:
        yield client


def new_company(prefix: str = "co_") -> tuple[str, dict[str, str]]:
    """A fresh company and the Authorization header of a new token for it."""
    from firefeed.runs.tokens import TokenStore

    company = prefix + uuid.uuid4().hex[:10]
    return company, {"Authorization": f"Bearer {TokenStore().create(company)}"}


@pytest.fixture()
def run_env(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Exports and downloads under tmp_path; yields the export folder."""
    exports = tmp_path / "exports"
    monkeypatch.setenv("FIREFEED_EXPORT_DIR", str(exports))
    monkeypatch.setenv("FIREFEED_DATA_DIR", str(tmp_path / "var"))
    reset_settings()
    yield exports
    reset_settings()


def published_files(folder: Path) -> dict[str, bytes]:
    """The files of an export folder, by name: what it publishes (not the spares kept beside large exports
    for their next write, storage/spares.py)."""
    if not folder.exists():
        return {}
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and not spares.is_spare(p.name)}


@pytest.fixture()
def patch_env(run_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """`run_env` where every csv source keeps its copy for PARSE by patch and every replaced export its spare
    for the next write (the test files are small)."""
    monkeypatch.setenv("FIREFEED_PARSE_KEEP_COPY_MIN_BYTES", "1")
    monkeypatch.setenv("FIREFEED_EXPORT_SPARE_MIN_BYTES", "1")
    reset_settings()
    yield run_env
    reset_settings()


def write_csv(path: Path, header: list[str], rows: list[list[str]], delimiter: str = ",") -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, delimiter=delimiter)
        w.writerow(header)
        w.writerows(rows)


def filler(seed: int, size: int = 1800) -> str:
    """`size` letters, the same for a seed in every call, that Postgres does not compress: an item this
    wide puts a few items on each heap page, so runs cut by pages (RULES halves, fleet parts) cut them."""
    import random
    import string

    return "".join(random.Random(seed).choices(string.ascii_letters, k=size))


def read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def cli(*args: str) -> tuple[int, str]:
    """Run the `firefeed` command in-process; returns (exit code, stdout)."""
    from firefeed.cli import main

    out = io.StringIO()
    with redirect_stdout(out):
        code = main(list(args))
    return code, out.getvalue()


def run_json(spec: Path, *flags: str) -> tuple[int, dict[str, Any]]:
    """`firefeed run SPEC --json [flags]` (`--full`: recompute even when nothing changed, SPEC 11 I2)."""
    import json

    code, out = cli("run", str(spec), "--json", *flags)
    return code, json.loads(out)


def eventually(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Whether `check` holds within `timeout` seconds, asked every 50 ms (for states another thread reaches)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.05)
    return check()


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's S3 server as its own process for the whole session; AWS credentials in this process's env."""
    from tests.integration.moto_s3 import S3_ENV, moto_s3_server

    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with pytest.MonkeyPatch.context() as mp, moto_s3_server(log) as endpoint:
        for name, value in S3_ENV.items():
            mp.setenv(name, value)
        yield endpoint
