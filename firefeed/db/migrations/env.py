"""Alembic environment: online migrations only, against the configured database."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

import firefeed.processes.models  # noqa: F401  (registers the processes table on Base.metadata)
from firefeed.config import get_settings
from firefeed.db.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url") or get_settings().sqlalchemy_url
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata, compare_type=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations_online()
