"""What feed quality (#9) costs an export: the EXPORT work alone, the quality work alone, and both at once.

Loads a feedgen feed with `firefeed run` once (a temporary database), then, on its final items table,
times for a csv export (no channel: diff only) and a google-xml export (Google diagnostics + diff):
  - write_export alone (what EXPORT did before #9),
  - quality.measure alone (the diff table, the findings and the diff query),
  - both as export_one runs them (measure in a thread beside the COPY).
Each figure is the best of --repeat alternating rounds, so a busy machine skews it less.
Prints the figures and writes them as JSON to bench/out/.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _benchdb import create_database, drop_database, save_results  # noqa: E402
from pipeline_bench import feed_files, write_spec  # noqa: E402


def _best(fn: Any, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--data-dir", type=Path, default=Path("/tmp/firefeed-bench"))
    ap.add_argument(
        "--admin-dsn",
        default=os.environ.get("FIREFEED_BENCH_ADMIN_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    args = ap.parse_args()
    db = f"firefeed_qbench_{os.getpid()}"
    admin, dsn = create_database(args.admin_dsn, db)
    try:
        os.environ.update(
            FIREFEED_DATABASE_URL=dsn,
            FIREFEED_EXPORT_DIR=str(args.data_dir / "exports"),
            FIREFEED_DATA_DIR=str(args.data_dir / "var"),
        )
        feed, stock = feed_files(args.data_dir, args.rows)
        spec_path = write_spec(args.data_dir / "spec_quality.yaml", "bench_quality", feed, stock, "csv")
        exe = Path(sys.executable).with_name("firefeed")
        print(f"loading {args.rows:,} items with firefeed run …", flush=True)
        done = subprocess.run([str(exe), "run", str(spec_path), "--json"], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(done.stderr[-3000:])
        report = json.loads(done.stdout)
        results: dict[str, Any] = {"rows": args.rows, "exported": report["exports"][0]["rows"]}

        from firefeed.dataplane.names import export_tmp_table
        from firefeed.export.quality import Target, measure, measuring
        from firefeed.export.writer import write_export
        from firefeed.schema.identifiers import project_table, published_keys_table
        from firefeed.schema.service import SchemaService
        from firefeed.spec.model import ExportSpec

        engine_schema = SchemaService()
        engine = engine_schema.engine
        table = project_table("bench_quality")
        columns = [c for c in engine_schema.table_columns("bench", table) if not c.startswith("_ff_")]
        # The items table holds the merged items; the rules would only change values, not the work.
        for fmt in ("csv", "google-xml"):
            export = ExportSpec(name=f"q_{fmt}", format=fmt, path=f"q.{fmt}")  # type: ignore[arg-type]
            out = Path(tempfile.mkdtemp()) / "out"

            def target() -> Target:
                return Target("bench", "bench_quality", str(uuid.uuid4()), 0, table, columns, "id")

            def export_only(export: ExportSpec = export, out: Path = out) -> None:
                write_export(engine, schema="company_bench", table=table, fields=columns, export=export, dest=out)

            def quality_only(export: ExportSpec = export) -> None:
                measure(engine, engine_schema, target(), export)

            def both(export: ExportSpec = export) -> None:
                with measuring(engine, engine_schema, target(), export) as job:
                    export_only()
                job.result()

            # A published baseline first, so every timed diff is the steady state's FULL JOIN.
            first = target()
            measure(engine, engine_schema, first, export)
            published = published_keys_table("bench_quality", export.name)
            engine_schema.promote_export_keys("bench", [(export_tmp_table(first.run_id, 0), published)])
            figures: dict[str, list[float]] = {"export_s": [], "quality_s": [], "both_s": []}
            for _ in range(args.repeat):
                figures["export_s"].append(_best(export_only, 1))
                figures["quality_s"].append(_best(quality_only, 1))
                figures["both_s"].append(_best(both, 1))
            best = {k: min(v) for k, v in figures.items()}
            best["added_s"] = best["both_s"] - best["export_s"]
            best["added_pct"] = 100 * best["added_s"] / best["export_s"]
            results[fmt] = best
            print(
                f"{fmt:<11} export {best['export_s']:.2f} s, quality alone {best['quality_s']:.2f} s, "
                f"both {best['both_s']:.2f} s: +{best['added_s']:.2f} s ({best['added_pct']:.0f}%)",
                flush=True,
            )
        save_results("quality", results)
    finally:
        from firefeed.db.engine import dispose_engines

        dispose_engines()
        drop_database(admin, db)


if __name__ == "__main__":
    main()
