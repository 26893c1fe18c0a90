"""What a failed connection to the configured database means, said in a few lines a person can act on.

A database that does not exist, a server that is not running and a refused login
reached a new operator as a 117-line SQLAlchemy traceback from `run`, `migrate` and
`apply`. Every entry point of the CLI goes through `explain` (cli.py), `firefeed
doctor` gives the same fix, and `firefeed migrate` creates a missing database
itself when the server lets the configured user do it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import psycopg2
import psycopg2.errors
from psycopg2 import sql
from sqlalchemy.engine import make_url

from firefeed.errors import ConfigError
from firefeed.schema.identifiers import ident

_MISSING = re.compile(r'database "([^"]+)" does not exist')
_DOWN = ("connection refused", "could not connect", "no such file or directory", "timeout expired")
_LOGIN = ("password authentication failed", "role ", "no pg_hba.conf entry")


@dataclass(frozen=True)
class Unreachable:
    """Why the database could not be reached: `kind` is missing, down or login."""

    kind: str
    database: str
    where: str
    message: str
    fix: str

    def error(self) -> ConfigError:
        return ConfigError(f"{self.message}\n  {self.fix}")


def _where(url: str) -> tuple[str, str]:
    parsed = make_url(url)
    host = parsed.host or str(parsed.query.get("host") or "the local socket")
    port = f":{parsed.port}" if parsed.port else ""
    return parsed.database or "", f"{host}{port}"


def explain(err: BaseException, url: str) -> Unreachable | None:
    """The reason behind a connection error to `url`, or None when `err` is something else."""
    text = " ".join(str(err).split())
    lowered = text.lower()
    if "OperationalError" not in type(err).__name__ and "OperationalError" not in text:
        return None
    database, where = _where(url)
    missing = _MISSING.search(text)
    if missing:
        name = missing.group(1)
        return Unreachable(
            "missing",
            name,
            where,
            f"database {name!r} does not exist on the Postgres server at {where}",
            f"create it: `firefeed migrate` (creates it when the user may), or `createdb -h {where.split(':')[0]} "
            f"{name}`; or point FIREFEED_DATABASE_URL at another database",
        )
    if any(s in lowered for s in _LOGIN):
        return Unreachable(
            "login",
            database,
            where,
            f"the Postgres server at {where} refused the login of FIREFEED_DATABASE_URL",
            "check the user and password in FIREFEED_DATABASE_URL and the server's pg_hba.conf",
        )
    if any(s in lowered for s in _DOWN):
        return Unreachable(
            "down",
            database,
            where,
            f"no Postgres server answers at {where}",
            "start Postgres there, or correct FIREFEED_DATABASE_URL (unset, FireFeed starts its own embedded one)",
        )
    return None


def create_database(url: str) -> bool:
    """Create the database `url` names, connecting to the same server's `postgres` database.

    True when it was created; False when it already existed. A user without CREATEDB gets
    the server's refusal as a ConfigError that says so.
    """
    parsed = make_url(url)
    name = parsed.database or ""
    maintenance = parsed.set(drivername="postgresql", database="postgres").render_as_string(hide_password=False)
    try:
        conn = psycopg2.connect(maintenance, connect_timeout=10)
    except psycopg2.OperationalError as err:
        raise ConfigError(f"cannot create database {name!r}: {str(err).strip().splitlines()[0]}") from None
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if cur.fetchone():
                return False
            cur.execute(sql.SQL("CREATE DATABASE {}").format(ident(name)))
    except psycopg2.errors.InsufficientPrivilege:
        raise ConfigError(
            f"database {name!r} does not exist and the user of FIREFEED_DATABASE_URL may not create it: "
            "ask the database's owner to create it"
        ) from None
    finally:
        conn.close()
    return True
