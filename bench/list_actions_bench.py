"""Per-element list actions on one long list: N elements against 4N, SQL route and reference (issue #47).

For each shape (a `map` whose `default` reads `{tags[0]}`, a `map` value reading `{tags[-1]}`, a
`remove` whose value reads `{tags[0]}`, a list condition reading `{tags[-1]}`) it times run_rules
on one item holding an N-element list, then a 4N one, in a scratch database created for the run
and dropped at the end, and the reference evaluator (firefeed/rules/reference.py) on the same item.
Linear work takes about 4x as long on 4N elements, quadratic 16x; the machine is shared, so read
the ratios, not the seconds. Writes bench/out/list_actions_<time>.json.

    python bench/list_actions_bench.py --elements 50000
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from psycopg2 import sql
from sqlalchemy import create_engine

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _benchdb import create_database, drop_database, save_results  # noqa: E402

sys.path.insert(0, str(HERE.parent))

from firefeed.dataplane.run_tables import RunTables  # noqa: E402
from firefeed.db.engine import raw_connection  # noqa: E402
from firefeed.pipeline.rule_passes import run_rules  # noqa: E402
from firefeed.rules.model import parse_rules  # noqa: E402
from firefeed.rules.reference import apply_rules  # noqa: E402
from firefeed.schema.identifiers import KEY, ORD, SRC, column_for_field, company_schema, ident  # noqa: E402
from firefeed.schema.service import SchemaService  # noqa: E402

ADMIN = "postgresql://postgres@127.0.0.1/postgres"
COMPANY = "lbench"
SHAPES: dict[str, list[dict[str, Any]]] = {
    "map default {tags[0]}": [{"then": [{"map": "tags", "values": {"x": "y"}, "default": "{tags[0]}"}]}],
    "map value {tags[-1]}": [{"then": [{"map": "tags", "values": {"hit": "{tags[-1]}!"}}]}],
    "remove value {tags[0]}": [
        {"then": [{"remove": "tags", "when": {"field": "_", "op": "eq", "value": "{tags[0]}"}}]}
    ],
    "list condition {tags[-1]}": [
        {"when": {"field": "tags", "op": "eq", "value": "{tags[-1]}x"}, "then": [{"set": "title", "value": "found"}]}
    ],
}


def elements(n: int) -> tuple[str, ...]:
    """A third "hit" (map keys and remove values match them), the rest distinct, 8 bytes each (120 KB for 15,000)."""
    return tuple("hit" if i % 3 == 0 else f"k{i:07d}" for i in range(n))


def load(engine: Any, table: str, tags: tuple[str, ...]) -> None:
    """One item, as MERGE leaves it: a list field `tags` (text[]) and a text field `title`."""
    service = SchemaService(engine)
    service.create_company_schema(COMPANY)
    service.create_project_table(COMPANY, table)
    service.add_columns(COMPANY, table, [column_for_field("id"), column_for_field("title")])
    service.add_columns(COMPANY, table, [column_for_field("tags")], lists={column_for_field("tags")})
    target = ident(company_schema(COMPANY), table)
    with raw_connection(engine) as conn, conn.cursor() as cur:
        columns = sql.SQL(", ").join(ident(c) for c in (ORD, KEY, SRC, "id", column_for_field("tags"), "title"))
        cur.execute(
            sql.SQL("INSERT INTO {} ({}) VALUES (1, '1', 0, '1', %s::text[], 't')").format(target, columns),
            (list(tags),),
        )


def time_shape(engine: Any, raw: list[dict[str, Any]], n: int) -> tuple[float, float]:
    """(run_rules seconds, reference seconds) on one item of n elements."""
    rules = parse_rules(raw, key_field="id", declared_lists=frozenset({"tags"}))
    tags = elements(n)
    table = f"items_{uuid.uuid4().hex[:8]}"
    load(engine, table, tags)
    service = SchemaService(engine)
    run_id = str(uuid.uuid4())
    try:
        t = time.perf_counter()
        run_rules(
            engine, service, company=COMPANY, run_id=run_id, source_table=table, fields=["id", "tags", "title"],
            rules=rules, rows=1,
        )  # fmt: skip
        in_sql = time.perf_counter() - t
    finally:
        RunTables(service).drop_rules_tmp_for_run(COMPANY, run_id)
        service.drop_table(COMPANY, table)
    t = time.perf_counter()
    apply_rules([{"id": "1", "tags": tags, "title": "t"}], rules)
    return in_sql, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--elements", type=int, default=50_000, help="N: the shorter list (the longer has 4N)")
    args = ap.parse_args()
    sizes = (args.elements, 4 * args.elements)
    db = f"list_bench_{uuid.uuid4().hex[:8]}"
    admin, dsn = create_database(ADMIN, db)
    engine = create_engine(dsn.replace("postgresql://", "postgresql+psycopg2://"), pool_size=2)
    results: dict[str, Any] = {"elements": list(sizes), "shapes": {}}
    try:
        print(f"{'shape':28} {'sql N':>8} {'sql 4N':>8} {'ratio':>6}   {'ref N':>7} {'ref 4N':>7} {'ratio':>6}")
        for name, raw in SHAPES.items():
            (s1, r1), (s4, r4) = (time_shape(engine, raw, n) for n in sizes)
            results["shapes"][name] = {"sql_s": [s1, s4], "reference_s": [r1, r4]}
            print(f"{name:28} {s1:8.2f} {s4:8.2f} {s4 / s1:6.1f}   {r1:7.2f} {r4:7.2f} {r4 / r1:6.1f}", flush=True)
    finally:
        engine.dispose()
        drop_database(admin, db)
    print("figures:", save_results("list_actions", results))


if __name__ == "__main__":
    main()
