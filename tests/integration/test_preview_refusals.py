"""A statement the database refuses in a preview answers by its SQLSTATE, with the one code `preview_failed`."""

from __future__ import annotations

import psycopg2
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from firefeed.api.errors import error_body, status_of
from firefeed.db.engine import get_engine, raw_connection
from firefeed.preview.service import refused

pytestmark = pytest.mark.integration


def refusal(statement: str, *, timeout_ms: int | None = None) -> psycopg2.Error:
    with raw_connection() as conn, conn.cursor() as cur:
        if timeout_ms is not None:
            cur.execute(f"SET statement_timeout = {timeout_ms}")
        try:
            cur.execute(statement)
        except psycopg2.Error as err:
            conn.rollback()
            return err
    raise AssertionError(f"{statement!r} was not refused")


@pytest.mark.parametrize(
    ("statement", "timeout_ms", "status"),
    [
        ("SELECT 1 / 0", None, 422),  # 22012: the data's doing
        ("SELECT 'x'::numeric", None, 422),  # 22P02
        ("SELECT pg_sleep(2)", 50, 503),  # 57014 outside the preview's deadline: the database's state
        ("SELECT * FROM no_such_table_here", None, 500),  # 42P01: a statement of ours, a bug
    ],
)
def test_the_status_follows_the_sqlstate_and_the_body_carries_the_databases_words(
    database_url: str, statement: str, timeout_ms: int | None, status: int
) -> None:
    err = refused(refusal(statement, timeout_ms=timeout_ms))
    assert status_of(err) == status
    body = error_body(err)
    assert body["error"] == "preview_failed"
    assert body["message"].startswith("the database refused the preview: ERROR:")


def test_an_error_through_sqlalchemy_is_read_the_same_way(database_url: str) -> None:
    with get_engine().connect() as conn, pytest.raises(DBAPIError) as caught:
        conn.execute(text("SELECT 1 / 0"))
    assert status_of(refused(caught.value)) == 422
