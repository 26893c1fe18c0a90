"""`make bench-incremental`: what a refresh costs against a full run, on the 1M-item feed, in one run (#52).

On the feeds of ../shared/feedgen (cached in --data-dir, as `make bench` makes them), copied into a
folder of this benchmark's own (the cached files are never changed), with `make bench`'s spec (20
rules, the stock source enriching, a csv export), each a `firefeed run SPEC --json` child:

  1. the first (full) run;
  2. a no-op refresh: nothing changed (target <= 0.03x the full run);
  3. 1% of the main feed's items changed (every 100th item's title; target <= 0.25x);
  4. only the stock source changed (every 10th item's availability; target <= 0.2x);
  5. the Polars anchor's full run on the same feeds (../shared/baseline/polars_anchor.py, Polars 2.1.0 in
     a venv of its own, built once like the pandas reference's): the 1% refresh against it (the goal
     is to be faster).

Every figure is printed with its target and whether this run met it. Part 1 of #52 reuses a run only
when nothing changed (`unchanged`); the delta (part 2) is what the 1% and stock targets wait for.
The figures are written as JSON to bench/out/.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _benchdb import create_database, drop_database, save_results  # noqa: E402
from pipeline_bench import feed_files, firefeed_run, step_seconds, write_spec  # noqa: E402

ANCHOR = HERE.parent.parent / "shared" / "baseline" / "polars_anchor.py"
POLARS = "polars==2.1.0"  # ../shared/baseline/README.md: the anchor's recorded version
ANCHOR_TIMEOUT_S = 1800


def changed_copy(src: Path, dest: Path, *, column: str, every: int, change: Any) -> int:
    """`src` copied to `dest` with `column` of every `every`-th row passed through `change`; the rows changed."""
    changed = 0
    with src.open(newline="", encoding="utf-8") as fin, dest.open("w", newline="", encoding="utf-8") as fout:
        reader, writer = csv.reader(fin), csv.writer(fout, lineterminator="\n")
        header = next(reader)
        writer.writerow(header)
        at = header.index(column)
        for n, row in enumerate(reader):
            if n % every == 0:
                row[at] = change(row[at])
                changed += 1
            writer.writerow(row)
    return changed


def polars_python(venv: Path) -> Path:
    """A venv with the anchor's Polars, built once (its stamp names the version)."""
    python, stamp = venv / "bin" / "python", venv / ".polars"
    if python.exists() and stamp.exists() and stamp.read_text().strip() == POLARS:
        return python
    print(f"building the Polars anchor's venv {venv} ({POLARS}, once) …", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--retries", "2", POLARS], check=True)
    stamp.write_text(POLARS + "\n")
    return python


def run_anchor(python: Path, feed: Path, stock: Path, out: Path) -> float:
    """The anchor's wall time, its output removed afterwards (as large as the feed, nothing reads it)."""
    t = time.perf_counter()
    try:
        subprocess.run(
            [str(python), str(ANCHOR), str(feed), str(stock), str(out)], check=True, timeout=ANCHOR_TIMEOUT_S
        )
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return time.perf_counter() - t


def verdict(ratio: float, target: float) -> str:
    return f"{ratio:.3f}x (target <= {target}x): {'met' if ratio <= target else 'MISSED'}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--data-dir", type=Path, default=Path("/tmp/firefeed-bench"))
    ap.add_argument(
        "--admin-dsn",
        default=os.environ.get("FIREFEED_BENCH_ADMIN_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    ap.add_argument("--skip-anchor", action="store_true", help="leave out the Polars anchor")
    args = ap.parse_args()

    db = f"firefeed_bench_inc_{os.getpid()}"
    admin, dsn = create_database(args.admin_dsn, db)
    work = args.data_dir / f"incremental_{os.getpid()}"
    work.mkdir(parents=True)
    results: dict[str, Any] = {"rows": args.rows}
    try:
        env = dict(
            os.environ,
            FIREFEED_DATABASE_URL=dsn,
            FIREFEED_EXPORT_DIR=str(work / "exports"),
            FIREFEED_DATA_DIR=str(work / "var"),
        )
        cached_feed, cached_stock = feed_files(args.data_dir, args.rows)
        feed, stock = work / "feed.csv", work / "stock.csv"
        shutil.copy(cached_feed, feed)
        shutil.copy(cached_stock, stock)
        spec = write_spec(work / "spec.yaml", "bench_incremental", feed, stock, "csv")

        def measured(label: str) -> dict[str, Any]:
            print(f"{label} …", flush=True)
            run = firefeed_run(spec, env)
            part = run["report"].get("incremental") or {}
            steps = step_seconds(run["report"])
            print(f"  {run['wall_s']:.2f} s, {part.get('mode')} ({part.get('reason')}), steps {steps}")
            return {
                "wall_s": run["wall_s"],
                "run_s": run["report"]["duration_s"],  # the run itself: the child's start-up and apply left out
                "steps_s": steps,
                "incremental": part,
            }

        full = measured(f"first run, {args.rows:,} items (full)")
        noop = measured("no-op refresh (nothing changed)")

        print("changing 1% of the main feed's items (every 100th title) …", flush=True)
        staged = work / "feed.next.csv"
        n_feed = changed_copy(feed, staged, column="title", every=100, change=lambda v: v + " (new)")
        os.replace(staged, feed)
        one_percent = measured(f"refresh, {n_feed:,} items of the main feed changed")

        print("changing only the stock source (every 10th item's availability) …", flush=True)
        flip = {"in_stock": "out_of_stock", "out_of_stock": "in_stock", "preorder": "in_stock"}
        staged = work / "stock.next.csv"
        n_stock = changed_copy(stock, staged, column="availability", every=10, change=lambda v: flip.get(v, "in_stock"))
        os.replace(staged, stock)
        stock_only = measured(f"refresh, {n_stock:,} items' availability in the stock source changed")

        anchor_s: float | None = None
        if not args.skip_anchor:
            print("the Polars anchor's full run on the same feeds …", flush=True)
            try:
                anchor_s = run_anchor(polars_python(args.data_dir / "venv-polars"), feed, stock, work / "polars_out")
                print(f"  {anchor_s:.2f} s", flush=True)
            except (subprocess.SubprocessError, OSError) as err:
                print(f"  the anchor could not run: {err}", flush=True)

        base, base_run = full["wall_s"], full["run_s"]
        targets = {
            "no-op refresh / full run": (noop, 0.03),
            "1% of the main feed changed / full run": (one_percent, 0.25),
            "only the stock source changed / full run": (stock_only, 0.2),
        }
        figures = {name: (run["wall_s"] / base, target) for name, (run, target) in targets.items()}
        run_figures = {name: (run["run_s"] / base_run, target) for name, (run, target) in targets.items()}
        results |= {
            "full": full,
            "noop": noop,
            "one_percent": one_percent | {"items_changed": n_feed},
            "stock_only": stock_only | {"items_changed": n_stock},
            "polars_anchor_s": anchor_s,
            "ratios": {k: {"ratio": r, "target": t, "met": r <= t} for k, (r, t) in figures.items()},
            "run_ratios": {k: {"ratio": r, "target": t, "met": r <= t} for k, (r, t) in run_figures.items()},
        }
        print("\n== results ==")
        print("wall time of `firefeed run SPEC` (the child: start-up and apply included):")
        print(f"  {'full run':42s} {base:8.2f} s")
        for name, (run, target) in targets.items():
            mode = run["incremental"].get("mode")
            print(f"  {name:42s} {run['wall_s']:8.2f} s   {verdict(figures[name][0], target)}   mode {mode}")
        print("the runs' own duration (RunReport duration_s: RUNNING to its end):")
        print(f"  {'full run':42s} {base_run:8.2f} s")
        for name, (run, target) in targets.items():
            print(f"  {name:42s} {run['run_s']:8.2f} s   {verdict(run_figures[name][0], target)}")
        if anchor_s is not None:
            ratio = one_percent["wall_s"] / anchor_s
            results["one_percent_to_polars"] = ratio
            print(f"Polars anchor, full run    {anchor_s:8.2f} s")
            print(
                f"1% refresh / Polars full run: {ratio:.2f}x (the goal is < 1.0: "
                f"{'met' if ratio < 1.0 else 'MISSED'}); FireFeed's full run / Polars: {base / anchor_s:.2f}x"
            )
        print(f"figures written to {save_results('incremental', results)}")
    finally:
        drop_database(admin, db)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
