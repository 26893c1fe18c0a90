"""The processes worker's statements: the named blocks of queries.sql (loader: firefeed/db/sqlfile.py)."""

from __future__ import annotations

from firefeed.db.sqlfile import load_queries, parse_queries

__all__ = ["parse_queries", "query"]


def query(name: str) -> str:
    """The SQL of the named block of queries.sql (KeyError for a name that is not there)."""
    return load_queries("firefeed.processes")[name]
