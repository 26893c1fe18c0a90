"""Run diff: an export's (key, content hash) rows against the ones of its last published file, in Postgres.

Each export of a run fills its own table (`quality`); the export's published
table holds the rows of the file the last successful run published. One FULL
JOIN on the key (hashed by its 64-bit hash `kh`, then compared) counts the
items added, removed, changed (same key, another hash) and unchanged, and
keeps up to 5 sample keys of each kind: the two files
are never read into memory. With no published table yet (the export's first
run, or its first since diffs exist) every item is "added" and there is no
baseline, so the drop guard does not apply.
"""

from __future__ import annotations

from typing import Any

from psycopg2 import sql

from firefeed.schema.identifiers import ident

_SAMPLES = 5


def table_exists(cur: Any, schema: str, table: str) -> bool:
    cur.execute("SELECT to_regclass(%s) IS NOT NULL", (sql.Identifier(schema, table).as_string(cur),))
    return bool(cur.fetchone()[0])


def _join(cur: Any, schema: str, published: str) -> sql.Composable:
    """Join on the key hash, then the key; a published table from before `kh` existed joins on the key alone."""
    cur.execute(
        "SELECT EXISTS (SELECT 1 FROM information_schema.columns"
        " WHERE table_schema = %s AND table_name = %s AND column_name = 'kh')",
        (schema, published),
    )
    return sql.SQL("o.kh = n.kh AND o.k = n.k" if cur.fetchone()[0] else "o.k = n.k")


def compare(cur: Any, schema: str, run_table: str, published: str, rows: int) -> dict[str, Any]:
    """The diff of the run's `rows` rows against the published ones (see the module docstring)."""
    new = ident(schema, run_table)
    if not table_exists(cur, schema, published):
        cur.execute(sql.SQL("SELECT k FROM {} LIMIT %s").format(new), (_SAMPLES,))
        added = [r[0] for r in cur.fetchall()]
        return {
            "baseline": False,
            "previous": None,
            "rows": rows,
            "added": rows,
            "removed": 0,
            "changed": 0,
            "unchanged": 0,
            "samples": {"added": added, "removed": [], "changed": []},
        }
    cur.execute(
        sql.SQL(
            "SELECT count(n.k), count(o.k),"
            " count(*) FILTER (WHERE o.k IS NULL), count(*) FILTER (WHERE n.k IS NULL),"
            " count(*) FILTER (WHERE n.h <> o.h), count(*) FILTER (WHERE n.h = o.h),"
            " (array_agg(n.k) FILTER (WHERE o.k IS NULL))[1:%s],"
            " (array_agg(o.k) FILTER (WHERE n.k IS NULL))[1:%s],"
            " (array_agg(n.k) FILTER (WHERE n.h <> o.h))[1:%s]"
            " FROM {} n FULL JOIN {} o ON {}"
        ).format(new, ident(schema, published), _join(cur, schema, published)),
        (_SAMPLES, _SAMPLES, _SAMPLES),
    )
    rows, previous, added, removed, changed, unchanged, s_added, s_removed, s_changed = cur.fetchone()
    return {
        "baseline": True,
        "previous": int(previous),
        "rows": int(rows),
        "added": int(added),
        "removed": int(removed),
        "changed": int(changed),
        "unchanged": int(unchanged),
        "samples": {"added": list(s_added or []), "removed": list(s_removed or []), "changed": list(s_changed or [])},
    }
