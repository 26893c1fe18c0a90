"""What SPEC 10 C2's channel-grade checks cost the google-xml EXPORT step (#49: at most 10%).

Loads a feedgen feed with `firefeed run` once (a temporary database), then times the EXPORT
step's work for a google-xml export of its items (the file written while `quality.measure`
fills the run table beside it, as `export_one` does) in two builds of the same code:
  - without: the checks before #49 only (missing, too_long, price_format, availability, url), no
    checked values kept, no variant hash, no `variants` query (the C2 parts switched off here,
    in this process, by replacing their functions);
  - with: everything, as a run does.
Each in two states: `steady` (a published baseline from the same build, so unchanged items keep
their flags: the usual run) and `first` (no baseline: every item is checked). Rounds alternate
without/with so a busy machine skews both alike; each figure is the best of --repeat.
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from firefeed.dataplane.run_tables import RunTables

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _benchdb import create_database, drop_database, save_results  # noqa: E402
from pipeline_bench import feed_files, write_spec  # noqa: E402


@contextmanager
def without_channel_grade() -> Iterator[None]:
    """The export's measurement as it was before #49's checks (their functions replaced, then restored)."""
    from firefeed.export import diagnostics, quality

    saved = (
        diagnostics._channel_grade,
        quality._checked_values,
        quality._variant_hash,
        quality.variants,
        quality.mark_variants,
    )
    diagnostics._channel_grade = lambda channel, by_name: []  # type: ignore[assignment]
    quality._checked_values = lambda checks, checked_at: "NULL::text[]"  # type: ignore[assignment]
    quality._variant_hash = lambda variant_at: "NULL::bigint"  # type: ignore[assignment]
    quality.variants = lambda *a, **k: None  # type: ignore[assignment]
    quality.mark_variants = lambda *a, **k: None  # type: ignore[assignment]
    try:
        yield
    finally:
        (
            diagnostics._channel_grade,
            quality._checked_values,
            quality._variant_hash,
            quality.variants,
            quality.mark_variants,
        ) = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--data-dir", type=Path, default=Path("/tmp/firefeed-bench"))
    ap.add_argument(
        "--admin-dsn",
        default=os.environ.get("FIREFEED_BENCH_ADMIN_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    args = ap.parse_args()
    db = f"firefeed_cbench_{os.getpid()}"
    admin, dsn = create_database(args.admin_dsn, db)
    try:
        os.environ.update(
            FIREFEED_DATABASE_URL=dsn,
            FIREFEED_EXPORT_DIR=str(args.data_dir / "exports"),
            FIREFEED_DATA_DIR=str(args.data_dir / "var"),
        )
        feed, stock = feed_files(args.data_dir, args.rows)
        spec_path = write_spec(args.data_dir / "spec_checks.yaml", "bench_checks", feed, stock, "csv")
        exe = Path(sys.executable).with_name("firefeed")
        print(f"loading {args.rows:,} items with firefeed run …", flush=True)
        done = subprocess.run([str(exe), "run", str(spec_path), "--json"], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(done.stderr[-3000:])

        from firefeed.dataplane.names import export_tmp_table
        from firefeed.export.quality import Target, measure, measuring
        from firefeed.export.writer import write_export
        from firefeed.schema.identifiers import project_table, published_keys_table
        from firefeed.schema.service import SchemaService
        from firefeed.spec.model import ExportSpec

        schema = SchemaService()
        engine = schema.engine
        table = project_table("bench_checks")
        columns = [c for c in schema.table_columns("bench", table) if not c.startswith("_ff_")]
        export = ExportSpec(name="g", format="google-xml", path="g.xml")
        published = published_keys_table("bench_checks", export.name)
        out = Path(tempfile.mkdtemp()) / "out.xml"

        def target() -> Target:
            return Target("bench", "bench_checks", str(uuid.uuid4()), 0, table, columns, "id")

        def export_step() -> dict[str, Any]:
            t = target()
            with measuring(engine, schema, t, export) as job:
                write_export(engine, schema="company_bench", table=table, fields=columns, export=export, dest=out)
            outcome = job.result()
            RunTables(schema).drop_export_tmp_for_run("bench", t.run_id)
            return outcome

        def publish_baseline() -> None:
            first = target()
            measure(engine, schema, first, export)
            schema.promote_export_keys("bench", [(export_tmp_table(first.run_id, 0), published)])

        def timed(state: str, fn: Callable[[], Any]) -> float:
            if state == "steady":
                publish_baseline()
            else:
                schema.promote_export_keys("bench", [], drop=[published])
            t = time.perf_counter()
            fn()
            return time.perf_counter() - t

        figures: dict[str, list[float]] = {}
        findings: dict[str, Any] = {}
        for _ in range(args.repeat):
            for state in ("steady", "first"):
                with without_channel_grade():
                    figures.setdefault(f"{state}_without_s", []).append(timed(state, export_step))
                figures.setdefault(f"{state}_with_s", []).append(timed(state, export_step))
        findings = export_step()["diagnostics"]
        results: dict[str, Any] = {"rows": args.rows, **{k: min(v) for k, v in figures.items()}}
        for state in ("steady", "first"):
            without, with_ = results[f"{state}_without_s"], results[f"{state}_with_s"]
            results[f"{state}_added_pct"] = 100 * (with_ - without) / without
            print(
                f"{state:<6} google-xml EXPORT without C2 {without:.2f} s, with {with_:.2f} s: "
                f"+{with_ - without:.2f} s ({results[f'{state}_added_pct']:+.1f}%)",
                flush=True,
            )
        results["findings"] = {f["check"] + ":" + f.get("attribute", ""): f["count"] for f in findings["findings"]}
        print(json.dumps(results["findings"]), flush=True)
        save_results("checks", results)
    finally:
        from firefeed.db.engine import dispose_engines

        dispose_engines()
        drop_database(admin, db)


if __name__ == "__main__":
    main()
