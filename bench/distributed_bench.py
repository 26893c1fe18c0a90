"""The pipeline through Celery on Redis (one worker per queue) against `firefeed run`, in one benchmark run.

  1. a 10-item project: median (and p90) time from trigger to SUCCEEDED over --small-runs runs;
  2. the 1M-item workload of bench/pipeline_bench.py: `firefeed run` (batch) then the same spec
     through the queues, and the ratio (target <= 1.25).
Feeds come from ../shared/feedgen (cached in --data-dir). A scratch database is created and dropped.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _benchdb import create_database, drop_database, fleet_env, save_results  # noqa: E402

sys.path.insert(0, str(ROOT))

from pipeline_bench import feed_files, write_spec  # noqa: E402


def wait_run(run_id: str, timeout: float) -> dict[str, Any]:
    from firefeed.runs.report import build_report
    from firefeed.runs.service import RunStore

    store = RunStore()
    deadline = time.monotonic() + timeout
    delay = 0.002
    while time.monotonic() < deadline:
        if store.run(run_id).status not in ("PENDING", "RUNNING"):
            return build_report(store, run_id)
        # Polling every 2 ms for a whole big run took ~20% of a core from the workers being measured;
        # at most 10 ms late keeps the small project's latency figure honest.
        time.sleep(delay)
        delay = min(delay * 1.5, 0.01)
    raise SystemExit(f"run {run_id} did not finish within {timeout}s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--small-runs", type=int, default=20)
    ap.add_argument("--data-dir", type=Path, default=Path("/tmp/firefeed-bench"))
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/14")
    ap.add_argument("--admin-dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--skip-big", action="store_true")
    args = ap.parse_args()

    db = f"firefeed_dbench_{os.getpid()}"
    admin, dsn = create_database(args.admin_dsn, db)
    env = fleet_env(dsn, args.redis, args.data_dir)
    redis.Redis.from_url(args.redis).flushdb()
    from firefeed.config import reset_settings
    from tests.integration.celery_workers import celery_workers, use_broker

    reset_settings()
    use_broker(args.redis)
    from firefeed.cli import ensure_migrated
    from firefeed.runs.requests import start_run
    from firefeed.runs.service import RunStore
    from firefeed.spec.loader import load_spec_file

    ensure_migrated()
    results: dict[str, Any] = {}
    try:
        with celery_workers(env, log_dir=args.data_dir):
            # 1. latency of a small project
            small = args.data_dir / "tiny"
            small.mkdir(parents=True, exist_ok=True)
            (small / "tiny.csv").write_text(
                "id,title,price\n" + "".join(f"T{i},item {i},{i}.50 EUR\n" for i in range(10))
            )
            spec = small / "spec.yaml"
            spec.write_text(
                "company: bench\nproject: tiny\nsources: [{name: main, url: tiny.csv}]\n"
                "rules: [{name: vat, then: [{math: price, op: multiply, value: '1.22'}]}]\n"
                "exports: [{name: out, format: csv, path: tiny.csv}]\n"
            )
            RunStore().apply_spec(load_spec_file(spec), spec_dir=small)
            wait_run(start_run("tiny", "api"), 60)  # warm-up: connections, imports
            lat = []
            for _ in range(args.small_runs):
                t = time.perf_counter()
                report = wait_run(start_run("tiny", "api"), 60)
                lat.append(time.perf_counter() - t)
                assert report["status"] == "SUCCEEDED", report["error"]
            lat.sort()
            results["tiny_median_s"] = statistics.median(lat)
            results["tiny_p90_s"] = lat[int(0.9 * (len(lat) - 1))]
            print(
                f"10-item project, trigger -> SUCCEEDED over {len(lat)} runs: median "
                f"{results['tiny_median_s'] * 1000:.0f} ms, p90 {results['tiny_p90_s'] * 1000:.0f} ms "
                "(target median < 500 ms)",
                flush=True,
            )

            if not args.skip_big:
                feed, stock = feed_files(args.data_dir, args.rows)
                big = write_spec(args.data_dir / "spec_dist.yaml", "dist_big", feed, stock, "csv")
                exe = Path(sys.executable).with_name("firefeed")
                t = time.perf_counter()
                out = subprocess.run([str(exe), "run", str(big), "--json"], env=env, capture_output=True, text=True)
                batch_s = time.perf_counter() - t
                if out.returncode != 0:
                    raise SystemExit(out.stderr[-2000:])
                batch = json.loads(out.stdout)
                # Same spec, sources unchanged for both: parse once more by forgetting the validators.
                print(f"batch firefeed run: {batch_s:.2f}s", flush=True)
                from sqlalchemy import update

                from firefeed.db.engine import session_factory
                from firefeed.db.models import Source

                with session_factory()() as s, s.begin():
                    s.execute(update(Source).where(Source.project_id == "dist_big").values(parse_signature=None))
                t = time.perf_counter()
                report = wait_run(start_run("dist_big", "api"), 3600)
                dist_s = time.perf_counter() - t
                assert report["status"] == "SUCCEEDED", report["error"]
                same = [e["sha256"] for e in report["exports"]] == [e["sha256"] for e in batch["exports"]]
                results.update(
                    {
                        "batch_s": batch_s,
                        "celery_s": dist_s,
                        "ratio": dist_s / batch_s,
                        "same_exports": same,
                        "celery_steps": {s["step"]: s["duration_s"] for s in report["steps"]},
                        "batch_steps": {s["step"]: s["duration_s"] for s in batch["steps"]},
                    }
                )
                print(
                    f"through the queues: {dist_s:.2f}s, ratio {dist_s / batch_s:.2f} (target <= 1.25), "
                    f"same exports: {same}",
                    flush=True,
                )
                print(f"  steps batch  {results['batch_steps']}\n  steps celery {results['celery_steps']}")
        save_results("distributed", results)
    finally:
        from firefeed.db.engine import dispose_engines

        dispose_engines()
        drop_database(admin, db)


if __name__ == "__main__":
    main()
