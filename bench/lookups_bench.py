"""Lookup actions (SPEC 9) against the two indexes a lookup table can have, in one run.

A lookup table had a unique btree index on its key, which refuses a key over ~2.7 KB
(Postgres's "index row size exceeds"); it now has a hash index, which takes any key.
This builds, in a scratch database created for the run and dropped at the end, an items
table of --rows items and two lookup tables, then times, on the same data and alternating
(the machine is shared: compare ratios, not seconds):
  - building each lookup table's index, either kind;
  - run_rules with three lookup actions (two on a text field, one in a rule's `else`), and
    with --list a fourth on a list field (P22), with the tables indexed either way.
Prints the medians (and the best times), their ratios (hash / btree) and a checksum of the rules output per
kind (they must be equal).

    python bench/lookups_bench.py --rows 100000 --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from psycopg2 import sql
from sqlalchemy import create_engine

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _benchdb import create_database, drop_database, save_results  # noqa: E402

sys.path.insert(0, str(ROOT))

from firefeed.db.engine import raw_connection  # noqa: E402
from firefeed.pipeline.rule_passes import run_rules  # noqa: E402
from firefeed.rules.model import parse_rules  # noqa: E402
from firefeed.schema.identifiers import KEY, ORD, SRC, column_for_field, company_schema, ident  # noqa: E402
from firefeed.schema.service import SchemaService  # noqa: E402

ADMIN = "postgresql://postgres@127.0.0.1/postgres"
COMPANY = "lbench"
ITEMS = "items"
TABLES = {"cat": "lkp_cat", "brand": "lkp_brand"}
KINDS = {
    "btree": "CREATE UNIQUE INDEX {} ON {} ({})",  # the index before (refused a key over ~2.7 KB)
    "hash": "CREATE INDEX {} ON {} USING hash ({})",  # SchemaService.rebuild_lookup_table's
}
RULES = [
    {"name": "gpc", "then": [{"lookup": "cat", "match": "cat", "set": {"gpc": "gpc", "label": "label"}}]},
    {"name": "brand", "then": [{"lookup": "brand", "match": "brand", "set": {"maker": "maker"}}]},
    {
        "name": "cheap",
        "when": {"field": "price", "op": "lt", "value": 10},
        "then": [{"set": "band", "value": "cheap"}],
        "else": [{"lookup": "brand", "match": "brand", "set": {"band": "maker"}, "default": {"band": "none"}}],
    },
]


#: a lookup on a list field: each item's elements are tried in order, each probing the table's index
#: (before, each item read the whole table: 5,000 items and keys took 5 s)
LIST_RULE = {"name": "tags", "then": [{"lookup": "cat", "match": "tags", "set": {"tag_gpc": "gpc"}}]}


def load(engine: Any, rows: int, keys: int) -> None:
    """The items (cat, brand, price, tags: a list of three) and the two lookup tables' rows."""
    service = SchemaService(engine)
    schema = company_schema(COMPANY)
    service.create_company_schema(COMPANY)
    service.create_project_table(COMPANY, ITEMS)
    service.add_columns(COMPANY, ITEMS, ["id", "cat", "brand", "price", "tags"], lists={"tags"})
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(
            sql.SQL(
                "INSERT INTO {} ({}, {}, {}, id, cat, brand, price, tags) SELECT i, 'k' || i, 0, 'k' || i, "
                "'category ' || (i * 7919 %% %(span)s), 'brand ' || (i %% 2500), (i %% 50)::text, "
                "ARRAY['tag ' || (i %% 997 + %(span)s), 'category ' || (i * 31 %% %(span)s), 'x']"
                " FROM generate_series(1, %(rows)s) i"
            ).format(ident(schema, ITEMS), ident(ORD), ident(KEY), ident(SRC)),
            {"rows": rows, "span": keys + keys // 5},  # a sixth of the categories have no row
        )
        for name, select in (
            ("cat", "SELECT 'category ' || i, 'Apparel > ' || i, 'label ' || (i %% 9) FROM generate_series(0, %s) i"),
            ("brand", "SELECT 'brand ' || i, 'Maker ' || i, '' FROM generate_series(0, %s) i"),
        ):
            table = ident(schema, TABLES[name])
            cols = [KEY, column_for_field("gpc" if name == "cat" else "maker"), column_for_field("label")]
            cur.execute(
                sql.SQL("CREATE UNLOGGED TABLE {} ({}) AS ").format(table, sql.SQL(", ").join(ident(c) for c in cols))
                + sql.SQL(select),
                (keys - 1 if name == "cat" else 1999,),
            )
        cur.execute(sql.SQL("ANALYZE {}").format(ident(schema, ITEMS)))


def index(engine: Any, kind: str) -> float:
    """Replace both lookup tables' index by one of `kind`; the seconds the CREATE INDEX took."""
    schema = company_schema(COMPANY)
    spent = 0.0
    with raw_connection(engine) as conn, conn.cursor() as cur:
        for table in TABLES.values():
            cur.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(ident(schema, f"{table}_k")))
            t0 = time.perf_counter()
            cur.execute(sql.SQL(KINDS[kind]).format(ident(f"{table}_k"), ident(schema, table), ident(KEY)))
            spent += time.perf_counter() - t0
            cur.execute(sql.SQL("ANALYZE {}").format(ident(schema, table)))
    return spent


def rules_once(engine: Any, raw: list[dict[str, Any]]) -> tuple[float, str]:
    schema = company_schema(COMPANY)
    rules = parse_rules(raw, key_field="id", declared_lists=frozenset({"tags"}), lookups=TABLES)
    fields = ["id", "cat", "brand", "price", "tags"]
    t0 = time.perf_counter()
    result = run_rules(
        engine, SchemaService(engine), company=COMPANY, run_id=str(uuid.uuid4()), source_table=ITEMS,
        fields=fields, rules=rules,
    )  # fmt: skip
    spent = time.perf_counter() - t0
    out = [column_for_field(f) for f in result.fields if f not in fields]
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(
            sql.SQL("SELECT md5(string_agg(md5(row({})::text), '' ORDER BY {})) FROM {}").format(
                sql.SQL(", ").join(ident(c) for c in out), ident(ORD), ident(schema, result.table)
            )
        )
        digest = str(cur.fetchone()[0])
        cur.execute(sql.SQL("DROP TABLE {}").format(ident(schema, result.table)))
    return spent, digest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=50_000, help="rows of the larger lookup table")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--list", action="store_true", help="add a lookup on a list field (LIST_RULE)")
    args = ap.parse_args()
    name = f"ff_lookups_bench_{uuid.uuid4().hex[:8]}"
    admin, dsn = create_database(ADMIN, name)
    engine = create_engine(dsn.replace("postgresql://", "postgresql+psycopg2://"))
    try:
        load(engine, args.rows, args.keys)
        build: dict[str, list[float]] = {k: [] for k in KINDS}
        rules: dict[str, list[float]] = {k: [] for k in KINDS}
        digests: dict[str, set[str]] = {k: set() for k in KINDS}
        for i in range(args.repeat):
            for kind in KINDS if i % 2 == 0 else reversed(KINDS):
                build[kind].append(index(engine, kind))
                spent, digest = rules_once(engine, [*RULES, *([LIST_RULE] if args.list else [])])
                rules[kind].append(spent)
                print(f"  {kind}: rules {spent:.3f} s", flush=True)
                digests[kind].add(digest)
        results: dict[str, Any] = {"rows": args.rows, "keys": args.keys, "repeat": args.repeat, "list": args.list}
        for kind in KINDS:
            results[kind] = {
                "index_s": round(statistics.median(build[kind]), 4),
                "rules_s": round(statistics.median(rules[kind]), 4),
                "rules_min_s": round(min(rules[kind]), 4),
                "checksums": sorted(digests[kind]),
            }
            print(f"{kind:6} index {results[kind]['index_s']:.4f} s  rules {results[kind]['rules_s']:.4f} s "
                  f"(best {results[kind]['rules_min_s']:.4f} s)  "
                  f"checksum {', '.join(results[kind]['checksums'])}")  # fmt: skip
        results["ratio_rules"] = round(results["hash"]["rules_s"] / results["btree"]["rules_s"], 3)
        results["ratio_rules_best"] = round(results["hash"]["rules_min_s"] / results["btree"]["rules_min_s"], 3)
        results["ratio_index"] = round(results["hash"]["index_s"] / results["btree"]["index_s"], 3)
        print(
            f"hash / btree: rules {results['ratio_rules']} (best {results['ratio_rules_best']}), "
            f"index {results['ratio_index']}"
        )
        if digests["hash"] != digests["btree"]:
            print("CHECKSUMS DIFFER", file=sys.stderr)
            sys.exit(1)
        print(f"-> {save_results('lookups', results)}")
    finally:
        engine.dispose()
        drop_database(admin, name)


if __name__ == "__main__":
    main()
