"""The processes worker: wake-up latency (INSERT -> running) and claims per second. Not a test; run on demand.

  - latency: one idle `firefeed processes-worker` (then four) with a 60 s poll interval,
    so only LISTEN/NOTIFY can wake it; one `firefeed.ping` row at a time, measured on the
    database's own clock as claimed_at - created_at. Target: median < 50 ms.
  - throughput: four worker processes (FIREFEED_PROCESS_CONCURRENCY each) serving one
    workspace; N ping rows inserted in one statement; claims/s over the span of claimed_at,
    and rows completed per second.
Runs against a fresh database made with --admin-dsn and dropped at the end; prints the
figures and writes them as JSON to bench/out/processes.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg2

HERE = Path(__file__).resolve().parent
WORKSPACE = "bench"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def start_workers(dsn: str, n: int, out_dir: Path, **env: str) -> list[subprocess.Popen[bytes]]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FIREFEED_")}
    environ |= {
        "FIREFEED_DATABASE_URL": dsn,
        "FIREFEED_WORKSPACE_ID": WORKSPACE,
        "FIREFEED_LOG_LEVEL": "WARNING",  # a log line per row would measure the terminal, not the worker
        "FIREFEED_PROCESS_POLL_S": "60",  # only NOTIFY may wake a worker quickly
        **env,
    }
    procs = []
    for i in range(n):
        log = (out_dir / f"processes_worker{i}.log").open("wb")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "firefeed.cli", "processes-worker"],
                env=environ,
                cwd=out_dir,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
    return procs


def stop_workers(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(30)


def wait_listening(conn: Any, n: int, timeout: float = 30) -> None:
    """Until n sessions LISTEN (pg_stat_activity shows the LISTEN as their last query)."""
    deadline = time.monotonic() + timeout
    with conn.cursor() as cur:
        while time.monotonic() < deadline:
            cur.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%%'"
            )
            if cur.fetchone()[0] >= n:
                return
            time.sleep(0.1)
    raise RuntimeError("workers did not start listening")


def latency(conn: Any, samples: int) -> dict[str, float]:
    """One row at a time into an idle scope; ms from the INSERT's now() to the claim's now()."""
    ms = []
    with conn.cursor() as cur:
        for _ in range(samples):
            cur.execute(
                "INSERT INTO processes (worker_type, workspace_id, function) VALUES ('etl', %s, 'firefeed.ping') "
                "RETURNING id",
                (WORKSPACE,),
            )
            pid = cur.fetchone()[0]
            while True:
                cur.execute(
                    "SELECT status, extract(epoch FROM claimed_at - created_at) FROM processes WHERE id = %s", (pid,)
                )
                status, seconds = cur.fetchone()
                if status == "completed":
                    ms.append(float(seconds) * 1000)
                    break
                time.sleep(0.002)
            time.sleep(0.02)  # let the worker go idle again: we measure a wake-up, not a busy loop
    return {
        "samples": samples,
        "p50_ms": round(statistics.median(ms), 2),
        "p90_ms": round(_percentile(ms, 0.9), 2),
        "max_ms": round(max(ms), 2),
    }


def throughput(conn: Any, rows: int, timeout: float = 300) -> dict[str, float]:
    with conn.cursor() as cur:
        cur.execute("SELECT coalesce(max(id), 0) FROM processes")
        first = cur.fetchone()[0]
        cur.execute(
            "INSERT INTO processes (worker_type, workspace_id, function) "
            "SELECT 'etl', %s, 'firefeed.ping' FROM generate_series(1, %s)",
            (WORKSPACE, rows),
        )
        deadline = time.monotonic() + timeout
        while True:
            cur.execute("SELECT count(*) FROM processes WHERE id > %s AND status <> 'completed'", (first,))
            if cur.fetchone()[0] == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("throughput rows not completed in time")
            time.sleep(0.1)
        cur.execute(
            "SELECT extract(epoch FROM max(claimed_at) - min(created_at)), "
            "extract(epoch FROM max(updated_at) - min(created_at)), count(DISTINCT claimed_by) "
            "FROM processes WHERE id > %s",
            (first,),
        )
        claim_span, done_span, claimers = cur.fetchone()
    return {
        "rows": rows,
        "claims_per_s": round(rows / float(claim_span), 1),
        "completed_per_s": round(rows / float(done_span), 1),
        "workers_that_claimed": int(claimers),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--admin-dsn",
        default=os.environ.get("FIREFEED_TEST_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    parser.add_argument("--samples", type=int, default=200, help="latency samples per setup (default 200)")
    parser.add_argument("--rows", type=int, default=5000, help="rows for the throughput run (default 5000)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=4, help="FIREFEED_PROCESS_CONCURRENCY of each worker")
    args = parser.parse_args()

    out_dir = HERE / "out"
    out_dir.mkdir(exist_ok=True)
    db = f"firefeed_bench_processes_{uuid.uuid4().hex[:6]}"
    admin = psycopg2.connect(args.admin_dsn)
    admin.autocommit = True
    admin.cursor().execute(f"CREATE DATABASE {db} TEMPLATE template0 ENCODING 'UTF8'")
    dsn = args.admin_dsn.rsplit("/", 1)[0] + "/" + db
    results: dict[str, Any] = {"workers": args.workers, "concurrency": args.concurrency, "cpus": os.cpu_count()}
    try:
        os.environ["FIREFEED_DATABASE_URL"] = dsn
        from firefeed.db.migrate import upgrade

        upgrade(dsn)
        conn = psycopg2.connect(dsn)
        conn.autocommit = True
        try:
            for n in (1, args.workers):
                procs = start_workers(dsn, n, out_dir, FIREFEED_PROCESS_CONCURRENCY=str(args.concurrency))
                try:
                    wait_listening(conn, n)
                    results[f"latency_{n}_worker"] = latency(conn, args.samples)
                    print(f"latency, {n} idle worker(s): {results[f'latency_{n}_worker']}", flush=True)
                    if n == args.workers:
                        results["throughput"] = throughput(conn, args.rows)
                        print(f"throughput, {n} workers: {results['throughput']}", flush=True)
                finally:
                    stop_workers(procs)
        finally:
            conn.close()
    finally:
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        admin.close()
    (out_dir / "processes.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
