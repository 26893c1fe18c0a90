"""The embedded broker of `firefeed fleet`: kombu's SQLAlchemy transport on FireFeed's own database.

With no FIREFEED_BROKER_URL the fleet still needs one broker that every child
shares; the database they already share is one (`sqla+postgresql+psycopg2://…`),
with Celery's database result backend beside it (config.py derives `db+…`).
Both keep their tables in their own schema, `firefeed_broker`, through the
connection's search_path: the control plane's schema stays exactly what Alembic
built. The transport never deletes a consumed message (it only hides it), so the
fleet sweeps those away now and then.
"""

from __future__ import annotations

import warnings

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from firefeed.config import SQL_BROKER_PREFIX

BROKER_SCHEMA = "firefeed_broker"

_CREATE_SCHEMA = f"CREATE SCHEMA IF NOT EXISTS {BROKER_SCHEMA}"
# Consumed messages (the transport marks them invisible and keeps them for good).
_SWEEP = f"DELETE FROM {BROKER_SCHEMA}.kombu_message WHERE visible = false"


def broker_url_on(database_url: str) -> str:
    """The broker URL on `database_url` (a postgresql+psycopg2 SQLAlchemy URL), its tables in BROKER_SCHEMA."""
    url = make_url(database_url)
    options = url.query.get("options")
    search_path = f"-csearch_path={BROKER_SCHEMA}"
    if isinstance(options, tuple):
        options = " ".join(options)
    merged = f"{options} {search_path}" if options else search_path
    url = url.update_query_dict({"options": merged})
    return SQL_BROKER_PREFIX + url.render_as_string(hide_password=False)


def prepare(database_url: str, broker_url: str) -> None:
    """Create the broker's schema and tables once, before the children race to create them."""
    from kombu import Connection

    engine = create_engine(database_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(text(_CREATE_SCHEMA))
    finally:
        engine.dispose()
    with warnings.catch_warnings():
        # kombu's models use the `noload` strategy SQLAlchemy 2.1 deprecates; harmless here.
        warnings.simplefilter("ignore")
        with Connection(broker_url) as conn:
            conn.default_channel.session  # noqa: B018 - opening the channel creates kombu's tables


def sweep(database_url: str) -> int:
    """Delete the messages the workers already consumed; returns how many."""
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            return int(conn.execute(text(_SWEEP)).rowcount or 0)
    finally:
        engine.dispose()
