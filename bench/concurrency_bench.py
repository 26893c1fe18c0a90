"""`make bench-concurrency`: does inter-project concurrency pay? PIPELINE_CONCURRENCY=4 against 1, in one run.

20 small projects (--items items each, 4 companies) whose one source is served by a local HTTP
server on 127.0.0.1 that waits --delay-ms (300) before it answers, like a slow merchant's feed
server. Two fleets of real `firefeed worker` processes (one per queue) run side by side, each on
a Redis database of its own (--redis, --redis-high: FLUSHDB'd): PIPELINE_CONCURRENCY=1 and 4, the
other three concurrency variables at their defaults. Each fleet first runs a warm-up round (pool
children import their code, the project tables get created); then --rounds rounds per fleet,
alternating, trigger all 20 projects at once and measure the wall time from the first trigger to
the last run SUCCEEDED. Every round serves new feed content, so no source is "not modified": each
run fetches and parses in full.

Printed and written to bench/out/concurrency_<time>.json: the median wall time and throughput
(runs/s) of each setting, their ratio (target: at least 3x), and what explains them: the most runs
RUNNING and downloads in flight at once, median step times, CPU per run of each worker (with its
pool) and of the database backends, and how busy the whole machine was.
A scratch database is created and dropped.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psutil
import psycopg2
import redis

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _benchdb import create_database, drop_database, fleet_env, save_results  # noqa: E402

sys.path.insert(0, str(ROOT))

from firefeed.tasks.queues import ALL_QUEUES  # noqa: E402

PROJECTS = 20
COMPANIES = ("concbench_a", "concbench_b", "concbench_c", "concbench_d")
TARGET_RATIO = 3.0


class SlowFeeds:
    """Serves /p<NN>.csv after a delay; the content changes with `version`, so every round is a fresh feed."""

    def __init__(self, items: int, delay_s: float) -> None:
        self.items, self.delay_s, self.version = items, delay_s, 0
        self._lock = threading.Lock()
        self.in_flight = self.peak = 0
        feeds = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with feeds._lock:
                    feeds.in_flight += 1
                    feeds.peak = max(feeds.peak, feeds.in_flight)
                try:
                    time.sleep(feeds.delay_s)
                    body = feeds.body(self.path.strip("/"))
                    self.send_response(200)
                    self.send_header("Content-Type", "text/csv; charset=utf-8")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                finally:
                    with feeds._lock:
                        feeds.in_flight -= 1

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]

    def body(self, name: str) -> bytes:
        v = self.version
        price = "{}.{:02d} EUR"
        rows = "".join(
            f"{name}-{i},item {i} of {name},{price.format((i * 7 + v) % 500, v % 100)}\n" for i in range(self.items)
        )
        return ("id,title,price\n" + rows).encode()

    def new_round(self, version: int) -> None:
        with self._lock:
            self.version, self.peak = version, 0

    @contextmanager
    def serving(self) -> Iterator[SlowFeeds]:
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()


def write_specs(data_dir: Path, port: int) -> list[Path]:
    specs = []
    for n in range(PROJECTS):
        project = f"conc_{n:02d}"
        spec = data_dir / f"{project}.yaml"
        spec.write_text(
            f"company: {COMPANIES[n % len(COMPANIES)]}\nproject: {project}\n"
            f"sources: [{{name: main, url: 'http://127.0.0.1:{port}/p{n:02d}.csv'}}]\n"
            "rules:\n"
            "  - {name: vat, then: [{math: price, op: multiply, value: '1.22'}]}\n"
            "  - {name: cheap, when: {field: price, op: lt, value: '10'}, then: [{set: title, value: cheap}]}\n"
            f"exports: [{{name: out, format: csv, path: {project}.csv}}]\n",
            encoding="utf-8",
        )
        specs.append(spec)
    return specs


def wait_all(dsn: str, run_ids: Sequence[str], timeout: float) -> None:
    """Until every run has ended (one count per 10 ms); exits naming the first run that did not succeed."""
    with contextlib.closing(psycopg2.connect(dsn)) as conn:
        conn.autocommit = True
        cur = conn.cursor()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            cur.execute(
                "SELECT count(*) FROM pipeline_runs WHERE id = ANY(%s::uuid[]) AND status IN ('PENDING', 'RUNNING')",
                (list(run_ids),),
            )
            if cur.fetchone()[0] == 0:
                break
            time.sleep(0.01)
        else:
            raise SystemExit(f"runs did not end within {timeout:.0f} s")
        cur.execute(
            "SELECT project_id, status, error FROM pipeline_runs WHERE id = ANY(%s::uuid[]) AND status <> 'SUCCEEDED'",
            (list(run_ids),),
        )
        bad = cur.fetchall()
    if bad:
        raise SystemExit(f"{len(bad)} run(s) did not succeed, first: {bad[0]}")


def round_facts(dsn: str, run_ids: Sequence[str]) -> dict[str, Any]:
    """What explains a round's wall time: the most runs RUNNING at once, median queue wait and run time."""
    with contextlib.closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT extract(epoch FROM requested_at), extract(epoch FROM started_at), extract(epoch FROM finished_at)"
            " FROM pipeline_runs WHERE id = ANY(%s::uuid[])",
            (list(run_ids),),
        )
        rows = [tuple(float(x) for x in r) for r in cur.fetchall()]
        cur.execute(
            "SELECT step, percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at))"
            " FROM pipeline_steps WHERE run_id = ANY(%s::uuid[]) GROUP BY step",
            (list(run_ids),),
        )
        steps = {str(step): float(median) for step, median in cur.fetchall()}
    edges = sorted([(s, 1) for _, s, _ in rows] + [(f, -1) for _, _, f in rows], key=lambda e: (e[0], e[1]))
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return {
        "peak_running": peak,
        "median_wait_s": statistics.median(s - r for r, s, _ in rows),
        "median_run_s": statistics.median(f - s for _, s, f in rows),
        "median_step_s": {
            step: steps[step] for step in ("FETCH", "PARSE", "MERGE", "RULES", "EXPORT") if step in steps
        },
    }


QUEUES = ALL_QUEUES  # the control worker too: triggers, beat's tick and maintenance


def cpu_seconds(procs: Sequence[Any]) -> dict[str, float]:
    """User + system CPU so far of each queue's worker process with its pool children (celery_workers' order)."""
    totals: dict[str, float] = {}
    for queue, proc in zip(QUEUES, procs, strict=True):
        totals[queue] = 0.0
        with contextlib.suppress(psutil.NoSuchProcess):
            p = psutil.Process(proc.pid)
            for q in [p, *p.children(recursive=True)]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    t = q.cpu_times()
                    totals[queue] += t.user + t.system
    return totals


def database_cpu_seconds(dsn: str) -> dict[int, float]:
    """CPU so far of each Postgres backend connected to the bench database, by pid (backends that
    exited since are missed, but the pools keep theirs)."""
    with contextlib.closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
        cur.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
        pids = [int(r[0]) for r in cur.fetchall()]
    cpu: dict[int, float] = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            cpu[pid] = t.user + t.system
    return cpu


def machine_busy() -> float:
    """CPU seconds the whole machine spent busy so far (every process, Postgres and other users' included)."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0.0)


def run_round(
    pipeline: int, procs: Sequence[Any], feeds: SlowFeeds, dsn: str, version: int
) -> tuple[float, dict[str, Any]]:
    """Trigger all projects at once on the fleet `procs`; (wall seconds, what explains them)."""
    from firefeed.runs.requests import start_run

    feeds.new_round(version)
    cpu0, db0, busy0 = cpu_seconds(procs), database_cpu_seconds(dsn), machine_busy()
    t = time.perf_counter()
    ids = [start_run(f"conc_{n:02d}", "api") for n in range(PROJECTS)]
    wait_all(dsn, ids, timeout=600)
    wall = time.perf_counter() - t
    cpu1, db1, busy = cpu_seconds(procs), database_cpu_seconds(dsn), machine_busy() - busy0
    cpu = {q: (cpu1[q] - cpu0[q]) / PROJECTS for q in QUEUES}
    cpu["postgres"] = sum(v - db0.get(pid, 0.0) for pid, v in db1.items()) / PROJECTS
    return wall, round_facts(dsn, ids) | {
        "peak_fetches": feeds.peak,
        "workers_cpu_s_per_run": sum(v for q, v in cpu.items() if q != "postgres"),
        "cpu_s_per_run": cpu,
        "machine_busy": busy / (wall * (psutil.cpu_count() or 1)),
    }


def show_round(pipeline: int, label: str, wall: float, f: dict[str, Any]) -> None:
    steps = ", ".join(f"{k} {v * 1000:.0f}" for k, v in f["median_step_s"].items())
    cpu = ", ".join(f"{q} {v * 1000:.0f}" for q, v in f["cpu_s_per_run"].items())
    print(
        f"  PIPELINE_CONCURRENCY={pipeline} {label}: {wall:.2f} s, {PROJECTS / wall:.2f} runs/s (at once: "
        f"{f['peak_running']} runs, {f['peak_fetches']} downloads; median run {f['median_run_s'] * 1000:.0f} ms, "
        f"median wait {f['median_wait_s'] * 1000:.0f} ms)\n"
        f"    median step times (ms): {steps}\n"
        f"    CPU per run (ms): {cpu}; machine busy {f['machine_busy'] * 100:.0f}%",
        flush=True,
    )


def summary(walls: list[float], facts: list[dict[str, Any]]) -> dict[str, Any]:
    wall = statistics.median(walls)
    return {
        "wall_s": wall,
        "runs_per_s": PROJECTS / wall,
        "rounds_s": walls,
        "peak_running": max(f["peak_running"] for f in facts),
        "peak_fetches": max(f["peak_fetches"] for f in facts),
        "median_run_s": statistics.median(f["median_run_s"] for f in facts),
        "median_wait_s": statistics.median(f["median_wait_s"] for f in facts),
        "cpu_s_per_run": {
            q: statistics.median(f["cpu_s_per_run"][q] for f in facts) for q in facts[0]["cpu_s_per_run"]
        },
        "machine_busy": statistics.median(f["machine_busy"] for f in facts),
        "median_step_s": {
            step: statistics.median(f["median_step_s"][step] for f in facts if step in f["median_step_s"])
            for step in facts[0]["median_step_s"]
        },
    }


def measure(
    settings: Sequence[tuple[int, str]], base_env: dict[str, str], feeds: SlowFeeds, dsn: str, args: argparse.Namespace
) -> dict[int, dict[str, Any]]:
    """One fleet per (PIPELINE_CONCURRENCY, Redis URL), all running; rounds alternate between them.

    Alternating rounds (after one warm-up round each) keeps a machine whose load drifts (other
    users, a shared CI box) from favouring whichever setting ran first.
    """
    from firefeed.concurrency import DEFAULTS
    from tests.integration.celery_workers import celery_workers, flush_redis, use_broker

    fleets: dict[int, Sequence[Any]] = {}
    walls: dict[int, list[float]] = {p: [] for p, _ in settings}
    facts: dict[int, list[dict[str, Any]]] = {p: [] for p, _ in settings}
    version = 0
    with contextlib.ExitStack() as stack:
        for pipeline, url in settings:
            env = {
                **base_env,
                **{name: str(value) for name, value in DEFAULTS.items()},
                "PIPELINE_CONCURRENCY": str(pipeline),
                "FIREFEED_BROKER_URL": url,
            }
            flush_redis(url)
            log_dir = args.data_dir / f"logs-p{pipeline}"
            log_dir.mkdir(parents=True, exist_ok=True)
            fleets[pipeline] = stack.enter_context(celery_workers(env, queues=QUEUES, log_dir=log_dir))
        for r in range(args.rounds + 1):
            for pipeline, url in settings:
                use_broker(url)
                version += 1
                wall, f = run_round(pipeline, fleets[pipeline], feeds, dsn, version)
                if r == 0:
                    print(f"  PIPELINE_CONCURRENCY={pipeline} warm-up round: {wall:.2f} s", flush=True)
                    continue
                walls[pipeline].append(wall)
                facts[pipeline].append(f)
                show_round(pipeline, f"round {r}", wall, f)
    return {p: summary(walls[p], facts[p]) for p, _ in settings}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=300, help="items per project")
    ap.add_argument("--delay-ms", type=float, default=300.0, help="how long the feed server waits before answering")
    ap.add_argument("--rounds", type=int, default=3, help="measured rounds per setting (after one warm-up round)")
    ap.add_argument("--concurrency", type=int, nargs=2, default=(1, 4), metavar=("BASE", "HIGH"))
    ap.add_argument("--data-dir", type=Path, default=Path("/tmp/firefeed-bench/concurrency"))
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/15", help="Redis database of the BASE fleet")
    ap.add_argument("--redis-high", default="redis://127.0.0.1:6379/7", help="Redis database of the HIGH fleet")
    ap.add_argument("--admin-dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = ap.parse_args()
    args.data_dir.mkdir(parents=True, exist_ok=True)

    db = f"firefeed_cbench_{os.getpid()}"
    admin, dsn = create_database(args.admin_dsn, db)
    base_env = fleet_env(dsn, args.redis, args.data_dir, FIREFEED_FETCH_ALLOWED_HOSTS="127.0.0.1")
    for url in (args.redis, args.redis_high):
        redis.Redis.from_url(url).flushdb()
    from firefeed.config import reset_settings
    from tests.integration.celery_workers import use_broker

    reset_settings()
    use_broker(args.redis)
    from firefeed.cli import ensure_migrated
    from firefeed.runs.service import RunStore
    from firefeed.spec.loader import load_spec_file

    ensure_migrated()
    feeds = SlowFeeds(args.items, args.delay_ms / 1000)
    results: dict[str, Any] = {"projects": PROJECTS, "items": args.items, "delay_ms": args.delay_ms}
    try:
        with feeds.serving():
            store = RunStore()
            for spec in write_specs(args.data_dir, feeds.port):
                store.apply_spec(load_spec_file(spec), spec_dir=spec.parent)
            base, high = args.concurrency
            print(
                f"{PROJECTS} projects of {args.items} items, feeds answering after {args.delay_ms:.0f} ms; "
                f"all {PROJECTS} triggered at once; {args.rounds} rounds per setting, alternating",
                flush=True,
            )
            figures = measure([(base, args.redis), (high, args.redis_high)], base_env, feeds, dsn, args)
        ratio = figures[high]["runs_per_s"] / figures[base]["runs_per_s"]
        results.update(
            {
                f"pipeline_{base}": figures[base],
                f"pipeline_{high}": figures[high],
                "ratio": ratio,
                "target_ratio": TARGET_RATIO,
            }
        )
        for pipeline in (base, high):
            f = figures[pipeline]
            print(
                f"PIPELINE_CONCURRENCY={pipeline}: {f['wall_s']:.2f} s for {PROJECTS} runs (median of "
                f"{len(f['rounds_s'])}), {f['runs_per_s']:.2f} runs/s; at most {f['peak_running']} runs and "
                f"{f['peak_fetches']} downloads at once",
                flush=True,
            )
        print(f"throughput ratio {high} against {base}: {ratio:.2f}x (target >= {TARGET_RATIO:.0f}x)", flush=True)
        print(f"figures: {save_results('concurrency', results)}")
    finally:
        from firefeed.db.engine import dispose_engines

        dispose_engines()
        drop_database(admin, db)


if __name__ == "__main__":
    main()
