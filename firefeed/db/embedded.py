"""The embedded default database, used when FIREFEED_DATABASE_URL is not set."""

from __future__ import annotations

from pathlib import Path

from firefeed.errors import ConfigError


def embedded_database_url(data_dir: Path) -> str:
    """Return the URL of the embedded Postgres in `data_dir`, starting it when needed."""
    raise ConfigError(
        "FIREFEED_DATABASE_URL is not set and the embedded Postgres is not available yet; "
        "set FIREFEED_DATABASE_URL=postgresql://user@host/db"
    )
