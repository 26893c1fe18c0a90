"""Named SQL blocks in a package's `.sql` file, procrastinate style: the one loader of every SQL home.

A block starts with a `-- name --` line and a one-line description (`-- what it does`),
then the statement; parameters are psycopg2's `%(name)s`. Comment lines inside a block are
dropped. Keeping a concern's fixed statements in one file lets a reader (and `EXPLAIN`) see
them whole; statements built around identifiers stay in Python, composed by psycopg2.sql.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
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
def load_queries(package: str, filename: str = "queries.sql") -> Mapping[str, str]:
    """The named blocks of `filename` in `package` (read once per process)."""
    return parse_queries(resources.files(package).joinpath(filename).read_text("utf-8"))
