"""Alembic owns the control plane: the migrations build exactly what the models say."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine

from firefeed.config import normalize_database_url
from firefeed.db.migrate import current_and_head
from firefeed.db.models import Base


def test_the_session_database_was_migrated_from_empty_to_head(database_url: str) -> None:
    current, head = current_and_head(database_url)
    assert current == head is not None


def test_the_migrated_schema_has_no_drift_from_the_models(database_url: str) -> None:
    import firefeed.processes.models  # noqa: F401 - registers its table on Base

    engine = create_engine(normalize_database_url(database_url))
    try:
        with engine.connect() as conn:
            diffs = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    finally:
        engine.dispose()
    assert diffs == []
