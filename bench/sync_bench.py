"""`make bench-sync`: --items products to the Merchant API stand-in, answering in 50 ms and allowing 3,000
requests a minute, through FireFeed's sync (SPEC 10 C9-C10, #51).

The stand-in (tests/standins/merchant_api.py) runs as a process of its own. A `firefeed run` publishes a
google-xml export of --items items with `sync: {to: google-merchant}` (its own sync is held back: the
stand-in's loopback address is not allowed to it), then a child process runs what a sync job runs
(firefeed.sync.jobs.run_sync) with the stand-in allowed: one insert request per item, paced by
FIREFEED_GOOGLE_MERCHANT_REQUESTS_PER_MINUTE=3000 on FIREFEED_SYNC_THREADS. Prints and writes to bench/out/:

  budget use       requests sent per minute of the send / 3,000          (target >= 95%)
  quota errors     429 answers of the stand-in                          (target 0)
  CPU per 1,000    the sync process's own CPU seconds (user + system) per 1,000 items sent;
                   the stand-in's CPU is not counted (another process)

100,000 items take about 35 minutes at 3,000 a minute; `--items 10000` about 3.5.
Needs Postgres (FIREFEED_BENCH_ADMIN_DSN, default postgresql://postgres@127.0.0.1:5432/postgres).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _benchdb import create_database, drop_database, save_results  # noqa: E402

EXE = Path(sys.executable).with_name("firefeed")
SHOP = "https://www.shoeshop-firenze.it/p"


def child(project: str, export: str) -> None:
    """The sync, in this process (its CPU is what the parent measures); prints the outcome as JSON."""
    from firefeed.config import get_settings
    from firefeed.db.engine import get_engine
    from firefeed.sync.jobs import run_sync
    from firefeed.sync.service import synced_exports

    engine = get_engine()
    (item,) = synced_exports(engine, project, export)
    result, _ = run_sync(
        item.spec, item.spec_dir, item.export, item.columns, settings=get_settings(), engine=engine, list_status=False
    )
    print(json.dumps(result.to_json()), flush=True)


def start_standin(work: Path, latency_ms: float, per_minute: int) -> tuple[subprocess.Popen[str], str, Path]:
    sa = work / "service-account.json"
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "tests.standins.merchant_api", "--port", "0", "--latency-ms", str(latency_ms),
            "--per-minute", str(per_minute), "--service-account-out", str(sa),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("ready "):
        proc.kill()
        raise SystemExit(f"the stand-in did not start: {line!r}")
    return proc, line.split(" ", 1)[1], sa


def stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/_standin/stats", timeout=10) as answer:
        found: dict[str, Any] = json.loads(answer.read())
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--per-minute", type=int, default=3000, help="the stand-in's quota and FireFeed's budget")
    ap.add_argument("--data-dir", type=Path, default=Path("/tmp/firefeed-bench"))
    ap.add_argument(
        "--admin-dsn",
        default=os.environ.get("FIREFEED_BENCH_ADMIN_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    ap.add_argument("--child", nargs=2, metavar=("PROJECT", "EXPORT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return

    from firefeed.secrets.crypto import generate_key

    db = f"firefeed_bench_sync_{os.getpid()}"
    admin, dsn = create_database(args.admin_dsn, db)
    work = args.data_dir / f"sync_{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    standin, url, sa = start_standin(work, args.latency_ms, args.per_minute)
    results: dict[str, Any] = {"items": args.items, "latency_ms": args.latency_ms, "per_minute": args.per_minute}
    try:
        env = dict(
            os.environ,
            FIREFEED_DATABASE_URL=dsn,
            FIREFEED_EXPORT_DIR=str(work / "exports"),
            FIREFEED_DATA_DIR=str(work / "var"),
            FIREFEED_SECRETS_KEY=generate_key(),
            FIREFEED_GOOGLE_MERCHANT_URL=url,
            FIREFEED_GOOGLE_MERCHANT_REQUESTS_PER_MINUTE=str(args.per_minute),
            FIREFEED_SYNC_MAX_S=str(max(900, args.items * 60 / args.per_minute * 1.5)),
        )
        for name in ("FIREFEED_STORAGE_URL", "FIREFEED_BROKER_URL", "FIREFEED_FETCH_ALLOWED_HOSTS"):
            env.pop(name, None)
        subprocess.run([str(EXE), "migrate"], env=env, check=True, stdout=subprocess.DEVNULL)
        subprocess.run(
            [str(EXE), "secret", "set", "--company", "bench", "GSA"],
            env=env,
            input=sa.read_text().replace("\n", ""),
            text=True,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        feed = work / "items.csv"
        with feed.open("w", encoding="utf-8") as f:
            f.write("id,title,description,availability,condition,price,link,image_link,brand\n")
            for i in range(args.items):
                price = f"{i % 90 + 1}.50 EUR"
                f.write(f"K{i:06d},Item {i},Item {i} of ours,in stock,new,{price},{SHOP}/{i},{SHOP}/{i}.jpg,Acme\n")
        sync = {
            "to": "google-merchant",
            "account": "1234567",
            "data_source": "7654321",
            "content_language": "it",
            "feed_label": "IT",
            "credentials": "${secret:GSA}",
        }
        spec = work / "spec.yaml"
        doc = {
            "company": "bench",
            "project": "sync",
            "sources": [{"name": "feed", "url": feed.name}],
            "exports": [{"name": "google", "format": "google-xml", "path": "google.xml", "sync": sync}],
        }
        spec.write_text(yaml.safe_dump(doc))
        done = subprocess.run([str(EXE), "run", str(spec), "--json"], env=env, capture_output=True, text=True)
        report = json.loads(done.stdout)
        if report["status"] != "SUCCEEDED":
            raise SystemExit(f"the publishing run failed: {report.get('error')}")
        print(f"published {args.items} items; its own sync held back ({report['exports'][0]['sync'].get('error')})")

        before = stats(url)
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--child", "sync", "google"],
            env=dict(env, FIREFEED_FETCH_ALLOWED_HOSTS="127.0.0.1"),
            stdout=subprocess.PIPE,
            text=True,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        assert proc.stdout is not None
        out = proc.stdout.read()
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"the sync process failed: {out[-2000:]}")
        result = json.loads(out.strip().splitlines()[-1])
        after = stats(url)
        cpu = usage.ru_utime + usage.ru_stime
        by_before, by_after = before["by_status"], after["by_status"]
        tokens = int(after["tokens_issued"]) - int(before["tokens_issued"])  # the OAuth calls are not products calls
        sent = int(by_after.get("200", 0)) - int(by_before.get("200", 0)) - tokens
        quota = int(by_after.get("429", 0)) - int(by_before.get("429", 0))
        send_s = float(result["seconds"])
        per_minute = (sent + quota) / send_s * 60 if send_s else 0.0
        results |= {
            "sync": {k: result[k] for k in ("inserted", "updated", "failed", "pending", "requests", "seconds")},
            "process_wall_s": round(wall, 1),
            "requests_sent": sent,
            "requests_per_minute": round(per_minute, 1),
            "budget_use": round(per_minute / args.per_minute, 4),
            "quota_errors": quota,
            "max_in_any_60s": after["max_in_window"],
            "cpu_s": round(cpu, 2),
            "cpu_s_per_1000_items": round(cpu / max(1, result["inserted"] + result["updated"]) * 1000, 3),
            "products_held": after["products"],
        }
        print(
            f"sent {sent} requests in {send_s:.1f} s: {per_minute:.0f}/min = {per_minute / args.per_minute:.1%} of the "
            f"budget (target >= 95%), {quota} quota errors (target 0), most in any 60 s {after['max_in_window']}"
        )
        print(
            f"FireFeed's sync process: {cpu:.2f} CPU s, {results['cpu_s_per_1000_items']:.3f} CPU s per 1,000 items "
            f"(process wall {wall:.1f} s); the stand-in holds {after['products']} products"
        )
        print(f"figures: {save_results('sync', results)}")
    finally:
        standin.terminate()
        try:
            standin.wait(10)
        except subprocess.TimeoutExpired:
            standin.kill()
        drop_database(admin, db)


if __name__ == "__main__":
    main()
