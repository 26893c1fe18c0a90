"""A database that is missing or not answering gets a few lines and exit 2, not a traceback (#48)."""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import psycopg2
import pytest

from firefeed.cli import EXIT_BAD_INPUT, EXIT_OK, main
from firefeed.config import reset_settings
from tests.ports import free_ports
from tests.services import admin_url, database_url_for

pytestmark = pytest.mark.integration

SPEC = Path(__file__).parents[2] / "firefeed" / "demo" / "spec.yaml"


@pytest.fixture()
def missing_database(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """FIREFEED_DATABASE_URL naming a database of the test server that does not exist (dropped after)."""
    name = f"firefeed_missing_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("FIREFEED_DATABASE_URL", database_url_for(admin_url(), name))
    reset_settings()
    yield name
    reset_settings()
    conn = psycopg2.connect(admin_url())
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    conn.close()


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("command", [["apply", str(SPEC)], ["run", str(SPEC)], ["status", "shoes_it"]])
def test_a_missing_database_is_named_with_how_to_create_it(missing_database: str, command: list[str]) -> None:
    code, _, err = _cli(*command)
    assert code == EXIT_BAD_INPUT
    assert f"database '{missing_database}' does not exist" in err
    assert "firefeed migrate" in err and "createdb" in err
    assert "Traceback" not in err and len(err.splitlines()) <= 3


def test_migrate_creates_a_missing_database_then_migrates_it(missing_database: str) -> None:
    code, out, _ = _cli("migrate")
    assert code == EXIT_OK
    assert f"created database {missing_database}" in out
    assert "control plane at revision" in out
    code, out, _ = _cli("migrate")  # the second time there is nothing to create
    assert code == EXIT_OK and "created database" not in out


def test_doctor_names_the_missing_database_and_the_fix(missing_database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIREFEED_BROKER_URL", raising=False)
    reset_settings()
    code, out, _ = _cli("doctor")
    assert code != EXIT_OK
    assert f"database '{missing_database}' does not exist" in out
    assert "firefeed migrate" in out
    # Without a broker the API runs its own runs: doctor no longer says it needs one (#48).
    broker = next(line for line in out.splitlines() if " broker " in line)
    assert broker.split()[0] == "info" and "`firefeed api` run projects in their own process" in broker
    assert "need one" not in out


def test_no_server_answering_is_said_in_two_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_ports()
    monkeypatch.setenv("FIREFEED_DATABASE_URL", f"postgresql://postgres@127.0.0.1:{port}/firefeed")
    reset_settings()
    try:
        code, _, err = _cli("apply", str(SPEC))
    finally:
        reset_settings()
    assert code == EXIT_BAD_INPUT
    assert f"no Postgres server answers at 127.0.0.1:{port}" in err
    assert "Traceback" not in err
