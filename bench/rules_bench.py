"""The rules passes alone: FireFeed's run_rules against the hand-written floor passes, in one run.

Builds a merged items table (feed + stock, as MERGE leaves it) of --rows rows in a
scratch database created for the run and dropped at the end, then times, on the
same data and in the same run (the machine is shared: compare ratios, not seconds):
  - run_rules with bench/bench_rules.yaml (20 rules, 2 passes), pass by pass;
  - bench/floor.py's PASS1 + PASS2 (hand-written CASE expressions, 2 CTAS).
Prints both, their ratio, and a checksum of the rules output (so a change that
alters a result shows up); --verify also runs the reference evaluator on the
items and compares (use a small --rows), --explain prints EXPLAIN ANALYZE per pass.

    python bench/rules_bench.py --rows 1000000 --repeat 2
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg2
import yaml
from psycopg2 import sql
from sqlalchemy import create_engine

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _benchdb import create_database, drop_database  # noqa: E402

sys.path.insert(0, str(ROOT))

from floor import PASS1, PASS2  # noqa: E402

from firefeed.dataplane.run_tables import RunTables  # noqa: E402
from firefeed.db.engine import raw_connection  # noqa: E402
from firefeed.rules.executor import plan_passes, prepare_pass, run_pass_chunk  # noqa: E402
from firefeed.rules.model import parse_rules  # noqa: E402
from firefeed.rules.sqlgen import pass_insert  # noqa: E402
from firefeed.schema.identifiers import KEY, ORD, SRC, column_for_field, company_schema, ident  # noqa: E402
from firefeed.schema.service import SchemaService  # noqa: E402

ADMIN = "postgresql://postgres@127.0.0.1/postgres"
FEEDGEN = ROOT.parent / "shared" / "feedgen" / "feedgen.py"
COMPANY = "rbench"
TABLE = "items"


def feed_files(rows: int, data_dir: Path) -> tuple[Path, Path]:
    if rows == 1_000_000 and (data_dir / "feed_1m.csv").exists() and (data_dir / "stock_1m.csv").exists():
        return data_dir / "feed_1m.csv", data_dir / "stock_1m.csv"
    feed, stock = data_dir / f"feed_{rows}_s42.csv", data_dir / f"stock_{rows}_s42.csv"
    data_dir.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, str(FEEDGEN), "--rows", str(rows), "--seed", "42"]
    if not feed.exists():
        subprocess.run([*base, "--format", "csv", "--out", str(feed)], check=True)
    if not stock.exists():
        subprocess.run([*base, "--stock", "--out", str(stock)], check=True)
    return feed, stock


def _header(path: Path) -> list[str]:
    with path.open(newline="", encoding="utf-8") as f:
        return next(csv.reader(f))


def load(dsn: str, engine: Any, feed: Path, stock: Path) -> list[str]:
    """The merged items table (company schema) and the floor's `floor_merged` (public), same rows."""
    fcols, scols = _header(feed), _header(stock)
    service = SchemaService(engine)
    service.create_company_schema(COMPANY)
    service.create_project_table(COMPANY, TABLE)
    service.add_columns(COMPANY, TABLE, [column_for_field(c) for c in fcols])
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    cur = conn.cursor()
    for table, path, cols in (("raw_feed", feed, fcols), ("raw_stock", stock, scols)):
        cur.execute(f"CREATE UNLOGGED TABLE {table} (" + ", ".join(f'"{c}" text' for c in cols) + ")")
        collist = ", ".join(f'"{c}"' for c in cols)
        with path.open("rb") as f:
            cur.copy_expert(
                f"COPY {table} FROM STDIN WITH (FORMAT csv, HEADER true, FORCE_NOT_NULL ({collist}))", f, size=1 << 20
            )
    exprs = [
        f'CASE WHEN s."{c}" <> \'\' THEN s."{c}" ELSE f."{c}" END' if c in scols and c != "id" else f'f."{c}"'
        for c in fcols
    ]
    target = sql.SQL("INSERT INTO {} ({}) ").format(
        ident(company_schema(COMPANY), TABLE), sql.SQL(", ").join(ident(c) for c in [ORD, KEY, SRC, *fcols])
    )
    cur.execute(
        target.as_string(conn)
        + "SELECT row_number() OVER (), btrim(f.id), 0, "
        + ", ".join(exprs)
        + " FROM raw_feed f LEFT JOIN raw_stock s ON s.id = f.id"
    )
    cur.execute(
        "CREATE UNLOGGED TABLE floor_merged AS SELECT "
        + ", ".join(f'"{c}"' for c in fcols)
        + f" FROM {company_schema(COMPANY)}.{TABLE} ORDER BY {ORD}"
    )
    cur.execute("DROP TABLE raw_feed, raw_stock")
    cur.execute(f"VACUUM ANALYZE {company_schema(COMPANY)}.{TABLE}")
    cur.execute("VACUUM ANALYZE floor_merged")
    conn.close()
    return fcols


def checksum(engine: Any, table: str, fields: list[str]) -> str:
    cols = sql.SQL(", ").join(ident(column_for_field(f)) for f in fields)
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(
            sql.SQL("SELECT count(*), md5(string_agg(md5(row({})::text), '' ORDER BY {})) FROM {}").format(
                cols, ident(ORD), ident(company_schema(COMPANY), table)
            )
        )
        n, digest = cur.fetchone()
    return f"{n} rows, md5 {digest}"


def run_firefeed(engine: Any, fields: list[str], rules: Any, explain: bool) -> tuple[float, list[float], str, dict]:
    """run_rules' loop, timed pass by pass (prepare_pass + run_pass_chunk, as run_rules does)."""
    service = SchemaService(engine)
    run_id = str(uuid.uuid4())
    plans = plan_passes(rules, fields)
    src, known, per_pass = TABLE, None, []
    matched: dict[str, int] = {}
    t0 = time.perf_counter()
    explained = 0.0
    try:
        for plan in plans:
            dst = prepare_pass(service, company=COMPANY, run_id=run_id, plan=plan)
            if explain:
                te = time.perf_counter()
                with raw_connection(engine) as conn, conn.cursor() as cur:
                    cur.execute("SET LOCAL jit = off")
                    stmt = pass_insert(plan, ident(company_schema(COMPANY), src), ident(company_schema(COMPANY), dst))
                    cur.execute(sql.SQL("EXPLAIN (ANALYZE, VERBOSE off, COSTS off) ") + stmt.sql, stmt.params)
                    print("\n".join(r[0] for r in cur.fetchall()))
                    conn.rollback()
                explained += time.perf_counter() - te
            t = time.perf_counter()
            with raw_connection(engine) as conn:
                counts = run_pass_chunk(conn, plan, src, dst, company=COMPANY, rows_in=known)
            per_pass.append(time.perf_counter() - t)
            if src != TABLE:
                service.drop_table(COMPANY, src)
            for name, n in counts.matched.items():
                matched[name] = matched.get(name, 0) + n
            known, src = counts.rows_out, dst
        total = time.perf_counter() - t0 - explained
        digest = checksum(engine, src, list(plans[-1].fields_out))
    finally:
        RunTables(service).drop_rules_tmp_for_run(COMPANY, run_id)
    return total, per_pass, digest, matched


def run_floor_passes(dsn: str) -> list[float]:
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("SET jit = off")
    cur.execute("SET max_parallel_workers_per_gather = 0")
    times = []
    for statement in (PASS1, PASS2):
        t = time.perf_counter()
        cur.execute(statement)
        times.append(time.perf_counter() - t)
    cur.execute("DROP TABLE floor_p1, floor_p2")
    conn.close()
    return times


def verify(engine: Any, fields: list[str], rules: Any) -> None:
    from firefeed.pipeline.rule_passes import run_rules
    from firefeed.rules.reference import apply_rules

    service = SchemaService(engine)
    run_id = str(uuid.uuid4())
    cols = [ORD, *(column_for_field(f) for f in fields)]
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(
            sql.SQL("SELECT {} FROM {} ORDER BY {}").format(
                sql.SQL(", ").join(ident(c) for c in cols), ident(company_schema(COMPANY), TABLE), ident(ORD)
            )
        )
        items = [dict(zip(fields, r[1:], strict=True)) for r in cur.fetchall()]
    try:
        result = run_rules(
            engine, service, company=COMPANY, run_id=run_id, source_table=TABLE, fields=fields, rules=rules
        )
        out_cols = [column_for_field(f) for f in result.fields]
        with raw_connection(engine) as conn, conn.cursor() as cur:
            cur.execute(
                sql.SQL("SELECT {} FROM {} ORDER BY {}").format(
                    sql.SQL(", ").join(ident(c) for c in out_cols),
                    ident(company_schema(COMPANY), result.table),
                    ident(ORD),
                )
            )
            got = [dict(zip(result.fields, r, strict=True)) for r in cur.fetchall()]
    finally:
        RunTables(service).drop_rules_tmp_for_run(COMPANY, run_id)
    want = apply_rules(items, rules)
    expected = [{f: item.get(f, "") for f in result.fields} for item in want.items]
    bad = sum(1 for a, b in zip(got, expected, strict=False) if a != b) + abs(len(got) - len(expected))
    same_counts = result.matched == want.matched and result.excluded == want.excluded
    print(f"verify: {len(items)} items, {bad} differing, counts {'agree' if same_counts else 'DIFFER'}")
    if bad or not same_counts:
        raise SystemExit(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--data-dir", type=Path, default=Path("/tmp/ffbench"))
    ap.add_argument("--rules", type=Path, default=HERE / "bench_rules.yaml")
    ap.add_argument("--explain", action="store_true", help="EXPLAIN ANALYZE each pass first (doubles the time)")
    ap.add_argument("--verify", action="store_true", help="compare with the reference evaluator (small --rows)")
    ap.add_argument("--no-floor", action="store_true")
    args = ap.parse_args()

    feed, stock = feed_files(args.rows, args.data_dir)
    db = f"rules_bench_{uuid.uuid4().hex[:8]}"
    admin, dsn = create_database(ADMIN, db)
    engine = create_engine(dsn.replace("postgresql://", "postgresql+psycopg2://"), pool_size=2)
    try:
        t = time.perf_counter()
        fields = load(dsn, engine, feed, stock)
        print(f"loaded {args.rows} rows x {len(fields)} fields in {time.perf_counter() - t:.1f}s", flush=True)
        raw = yaml.load(args.rules.read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
        rules = parse_rules(raw, key_field="id")
        if args.verify:
            verify(engine, fields, rules)
        for i in range(args.repeat):
            total, per_pass, digest, matched = run_firefeed(engine, fields, rules, args.explain and i == 0)
            passes = " + ".join(f"{p:.2f}" for p in per_pass)
            print(f"[{i + 1}] firefeed rules: {total:6.2f}s  (passes {passes})  {digest}", flush=True)
            if i == 0:
                print("    matched:", matched)
            if not args.no_floor:
                floor = run_floor_passes(dsn)
                print(
                    f"[{i + 1}] floor passes:   {sum(floor):6.2f}s  ({' + '.join(f'{p:.2f}' for p in floor)})"
                    f"  ratio {total / sum(floor):.2f}x",
                    flush=True,
                )
    finally:
        engine.dispose()
        drop_database(admin, db)


if __name__ == "__main__":
    main()
