"""What finding the changed records of a 1%-changed feed costs (#52, the 1% refresh; firefeed/pipeline/record_diff.py).

On the cached 1M-item main feed (`make bench`'s, in --data-dir; copied, never changed) and a copy changed
like `make bench-incremental`'s 1% refresh (every 100th item's title + " (new)"), each timed --runs times
(the median printed):

  - `cat` of both files to /dev/null: reading the bytes a diff reads, the floor;
  - a full csv.reader pass over the new file: the least a full PARSE does in Python;
  - diff_records with the old file's quotes vouched for (what a refresh after a diffed one costs), and
    without (the first refresh after a full run also checks the old file's quotes: quotes_agree);
  - with --refusals, what refusing costs: a rewritten file (every title changed; refused after 10% of
    the rows changed, stage_patch's share) and a record inserted after the header (refused at once);
  - dense changes, as `make bench-incremental`'s stock refresh makes them: the cached stock file (no
    quotes, ~35-byte rows) and a copy with every 10th row's availability flipped (--skip-stock: not).

The target is under 1 s for the 695 MB pair (--skip-feed: the stock pair alone). The load average and each
run's CPU time are printed beside the wall times (the machine may be shared); the figures go to bench/out/ as JSON.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _benchdb import save_results  # noqa: E402
from incremental_bench import changed_copy  # noqa: E402

from firefeed.pipeline.record_diff import RecordDiff, diff_records  # noqa: E402

TARGET_S = 1.0


def wait_for(path: Path, timeout_s: float) -> None:
    """Until `path` exists and its size holds still (another process may be writing it)."""
    deadline, size = time.monotonic() + timeout_s, -1
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_size == size:
            return
        size = path.stat().st_size if path.exists() else -1
        time.sleep(2)
    raise SystemExit(f"{path} did not appear (make bench or make bench-incremental writes it)")


@dataclass
class Timing:
    """Wall times of the runs, and their CPU times (on a shared machine the steadier; 0 for `cat`'s child)."""

    label: str
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def median(self) -> float:
        return statistics.median(self.wall)


def timed(label: str, runs: int, work: Callable[[], Any]) -> tuple[Timing, Any]:
    timing, result = Timing(label), None
    for _ in range(runs):
        t, cpu = time.perf_counter(), time.process_time()
        result = work()
        timing.wall.append(time.perf_counter() - t)
        timing.cpu.append(time.process_time() - cpu)
    return timing, result


def csv_pass(path: Path) -> int:
    with path.open(newline="", encoding="utf-8") as f:
        return sum(1 for _ in csv.reader(f))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/firefeed-bench"))
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-changed", type=int, default=50_000)
    parser.add_argument("--wait-s", type=float, default=1800, help="how long to wait for the cached feed")
    parser.add_argument("--skip-csv", action="store_true", help="no csv.reader pass (it takes ~10 s per 1M items)")
    parser.add_argument(
        "--refusals",
        action="store_true",
        help="also time the refusals of a rewritten file (every title changed) and of a record inserted after the "
        "header, with max_changed 10%% of the rows (stage_patch's share)",
    )
    parser.add_argument("--skip-feed", action="store_true", help="only the stock file's dense changes")
    parser.add_argument("--skip-stock", action="store_true", help="no dense changes of the stock file")
    args = parser.parse_args()

    figures: dict[str, Any] = {"load_before": os.getloadavg()}
    timings: list[Timing] = []
    diffs: dict[str, RecordDiff] = {}
    expected: dict[str, int] = {}
    if not args.skip_stock:
        stock = args.data_dir / f"stock_{args.rows}_s42.csv"
        wait_for(stock, args.wait_s)
        with tempfile.TemporaryDirectory(prefix="record-diff-bench-") as folder:
            old, new = Path(folder) / "old.csv", Path(folder) / "new.csv"
            shutil.copyfile(stock, old)
            flip = {"in_stock": "out_of_stock", "out_of_stock": "in_stock", "preorder": "in_stock"}
            n_stock = changed_copy(
                stock, new, column="availability", every=10, change=lambda v: flip.get(v, "in_stock")
            )
            print(f"{stock.name}: {old.stat().st_size / 1e6:.0f} MB, {n_stock:,} availabilities changed", flush=True)
            figures |= {"stock": str(stock), "stock_changed": n_stock}
            for vouched in (True, False):
                label = f"stock, 10% changed: diff_records, old quotes {'vouched for' if vouched else 'checked'}"
                run = partial(diff_records, old, new, max_changed=args.rows // 10, old_quotes_checked=vouched)
                timing, diffs[label] = timed(label, args.runs, run)
                timings.append(timing)
                expected[label] = n_stock
    if args.skip_feed:
        report(timings, diffs, expected, figures, size=0)
        return

    feed = args.data_dir / f"feed_{args.rows}_s42.csv"
    wait_for(feed, args.wait_s)
    with tempfile.TemporaryDirectory(prefix="record-diff-bench-") as folder:
        old, new = Path(folder) / "old.csv", Path(folder) / "new.csv"
        shutil.copyfile(feed, old)
        n_changed = changed_copy(feed, new, column="title", every=100, change=lambda v: v + " (new)")
        size = old.stat().st_size + new.stat().st_size
        print(f"{feed.name}: {old.stat().st_size / 1e6:.0f} MB, {n_changed:,} titles changed", flush=True)
        figures |= {"feed": str(feed), "bytes_old": old.stat().st_size, "bytes_new": new.stat().st_size}

        def cat() -> None:
            subprocess.run(["cat", str(old), str(new)], stdout=subprocess.DEVNULL, check=True)

        timings.append(timed("cat of both files > /dev/null", args.runs, cat)[0])
        if not args.skip_csv:
            timing, n = timed("csv.reader over the new file", args.runs, partial(csv_pass, new))
            timing.label += f" ({n:,} rows)"
            timings.append(timing)
        for vouched in (True, False):
            label = "diff_records, old quotes vouched for" if vouched else "diff_records, old quotes checked"
            run = partial(diff_records, old, new, max_changed=args.max_changed, old_quotes_checked=vouched)
            timing, diffs[label] = timed(label, args.runs, run)
            timings.append(timing)
            expected[label] = n_changed
        if args.refusals:
            rewritten, inserted = Path(folder) / "rewritten.csv", Path(folder) / "inserted.csv"
            changed_copy(feed, rewritten, column="title", every=1, change=lambda v: v + " (new)")
            with old.open("rb") as fin, inserted.open("wb") as fout:
                fout.write(fin.readline() + b"FF0,an inserted item\n")
                shutil.copyfileobj(fin, fout)
            for name, path in (("a rewritten file", rewritten), ("a record inserted after the header", inserted)):
                label = f"diff_records refusing {name}"
                run = partial(diff_records, old, path, max_changed=args.rows // 10, old_quotes_checked=True)
                timing, diffs[label] = timed(label, args.runs, run)
                timings.append(timing)
    figures["changed"] = n_changed
    report(timings, diffs, expected, figures, size=size)


def report(
    timings: list[Timing], diffs: dict[str, RecordDiff], expected: dict[str, int], figures: dict[str, Any], size: int
) -> None:
    """The medians printed and saved; each diff checked against the changes made (or refused, refusing)."""
    figures["load_after"] = os.getloadavg()
    for t in timings:
        runs = ", ".join(f"{w:.3f}" for w in t.wall)
        print(f"  {t.label:<45} {t.median():7.3f} s  (runs: {runs}; CPU median {statistics.median(t.cpu):.3f} s)")
    for label, diff in diffs.items():
        print(f"  {label}: {len(diff.changed):,} changed records, refused: {diff.refused}")
        refusing = label.startswith("diff_records refusing")
        assert (
            (diff.refused is not None) if refusing else (diff.refused is None and len(diff.changed) == expected[label])
        )
    if size:
        fast = next(t for t in timings if t.label == "diff_records, old quotes vouched for").median()
        print(
            f"  throughput (vouched): {size / fast / 1e9:.2f} GB/s of both files; target under {TARGET_S} s: ", end=""
        )
        print("met" if fast < TARGET_S else "NOT met")
    print(f"  load average before {figures['load_before']}, after {figures['load_after']} (2 cores)")
    figures["figures_s"] = {t.label: {"median": t.median(), "runs": t.wall, "cpu": t.cpu} for t in timings}
    print(f"written to {save_results('record_diff', figures)}")


if __name__ == "__main__":
    main()
