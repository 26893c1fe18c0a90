"""Loads queries.sql into named statements, procrastinate style: `-- name --`, a description line, the SQL."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_HEADER = re.compile(r"^-- ([a-z_]+) --$", re.MULTILINE)


def parse_queries(text: str) -> dict[str, str]:
    """Split a queries file into {name: sql}; comment lines inside a block are dropped."""
    parts = _HEADER.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [line for line in body.splitlines() if line.strip() and not line.lstrip().startswith("--")]
        queries[name] = "\n".join(lines).strip()
    return queries


@cache
def _queries() -> dict[str, str]:
    return parse_queries(resources.files("firefeed.processes").joinpath("queries.sql").read_text("utf-8"))


def query(name: str) -> str:
    """The SQL of the named block of queries.sql (KeyError for a name that is not there)."""
    return _queries()[name]
