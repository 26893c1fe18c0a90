"""Alembic, driven from code so `firefeed migrate` and the tests need no alembic.ini lookup."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine

from firefeed.config import get_settings, normalize_database_url

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(url: str | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    url = normalize_database_url(url) if url else get_settings().sqlalchemy_url
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str | None = None, revision: str = "head") -> None:
    """Bring the control-plane tables up to `revision`."""
    command.upgrade(alembic_config(url), revision)


def current_and_head(url: str | None = None) -> tuple[str | None, str | None]:
    """(revision the database is at, newest revision shipped) for `firefeed doctor`."""
    cfg = alembic_config(url)
    head = ScriptDirectory.from_config(cfg).get_current_head()
    engine = create_engine(cfg.get_main_option("sqlalchemy.url") or "")
    try:
        with engine.connect() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()
    return current, head
