"""A pooled connection whose backend died while idle is replaced at checkout, inside a run's block or not."""

from __future__ import annotations

import uuid
from contextlib import AbstractContextManager, nullcontext

import psycopg2
import pytest

from firefeed.db.engine import get_engine, raw_connection, session_state
from firefeed.runs.backends import application_name

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("in_run", [False, True], ids=["outside-a-run", "inside-a-run"])
def test_a_connection_killed_in_the_pool_is_replaced_not_handed_out(database_url: str, in_run: bool) -> None:
    sep = "&" if "?" in database_url else "?"
    engine = get_engine(f"{database_url}{sep}application_name=liveness-{uuid.uuid4().hex[:6]}")
    engine.dispose()

    def block() -> AbstractContextManager[None]:
        return session_state(application_name(str(uuid.uuid4()), "RULES"), 30.0) if in_run else nullcontext()

    with block(), raw_connection(engine) as conn:
        pid = conn.get_backend_pid()
    admin = psycopg2.connect(database_url)
    admin.autocommit = True
    try:
        with admin.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with block(), raw_connection(engine) as conn, conn.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            assert cur.fetchone()[0] != pid
    finally:
        admin.close()
        engine.dispose()


def test_the_engines_connections_plan_without_jit_unless_the_url_asks(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """JIT compiled the delta's statements on run tables without statistics (~0.1-0.3 s each): off for every
    statement FireFeed sends, while PGOPTIONS (which an `options` parameter replaces) and a URL's own
    `options` still apply."""
    sep = "&" if "?" in database_url else "?"
    monkeypatch.setenv("PGOPTIONS", "-c work_mem=7MB")
    for suffix, expected in (("", "off"), ("options=-c%20jit%3Don", "on")):
        engine = get_engine(f"{database_url}{sep}application_name=jit-{uuid.uuid4().hex[:6]}&{suffix}".rstrip("&"))
        try:
            with raw_connection(engine) as conn, conn.cursor() as cur:
                cur.execute("SHOW jit")
                assert cur.fetchone()[0] == expected
                cur.execute("SHOW work_mem")
                assert cur.fetchone()[0] == "7MB"
        finally:
            engine.dispose()
