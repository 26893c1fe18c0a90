"""What every benchmark script does around its measurements: a scratch database, and its JSON figures."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import psycopg2

OUT_DIR = Path(__file__).resolve().parent / "out"


def create_database(admin_dsn: str, name: str) -> tuple[Any, str]:
    """Create database `name` (UTF-8, C.UTF-8 collation like the test databases); (admin connection, its DSN)."""
    admin = psycopg2.connect(admin_dsn)
    admin.autocommit = True
    admin.cursor().execute(
        f"CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C.UTF-8' LC_CTYPE 'C.UTF-8'"
    )
    return admin, admin_dsn.rsplit("/", 1)[0] + "/" + name


def drop_database(admin: Any, name: str) -> None:
    admin.cursor().execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    admin.close()


def save_results(kind: str, results: dict[str, Any]) -> Path:
    """Write the figures to bench/out/<kind>_<time>.json."""
    OUT_DIR.mkdir(exist_ok=True)
    path = OUT_DIR / f"{kind}_{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(results, indent=2))
    return path


def fleet_env(dsn: str, broker: str, data_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a benchmark's worker fleet (and of this process, which sends to it)."""
    env = dict(
        os.environ,
        FIREFEED_DATABASE_URL=dsn,
        FIREFEED_BROKER_URL=broker,
        FIREFEED_EXPORT_DIR=str(data_dir / "exports"),
        FIREFEED_DATA_DIR=str(data_dir / "var"),
        FIREFEED_WORKER_METRICS_PORT="0",
        **extra,
    )
    os.environ.update(env)
    return env
