"""The pandas reference script (../shared/baseline/baseline.py, section pandas), timed on this machine now.

The target "FireFeed no slower than the pandas script" compares two wall times that swing by 10-15 %
(up to 2x) between invocations on these shared 2-core machines, so the published figure is only
context: the ratio that counts is the one measured in the same run, on the same machine state and
the same feed files, like the all-in-Postgres floor.

The baseline's own dependencies (pandas 3.1.1 and numpy, pinned in its requirements.txt) must not
leak into FireFeed's venv, so it runs from a separate venv, built once and reused while that
requirements file is unchanged. baseline.py names its feeds `feed_<rows>_s<seed>.csv` and
`stock_<rows>_s<seed>.csv` in --data-dir, as pipeline_bench.py does, so it reads the bench's
cached feeds; it only generates them (with the same feedgen) when they are missing. Side effects
in the data dir: the baseline sets it to mode 0755 (for its server-side COPY sections) and writes
out_pandas.csv there, which is removed afterwards (it is as large as the feed and nothing reads it).

  .venv/bin/python bench/pandas_reference.py --rows 10000       # about 10 s once the venv exists
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BASELINE_DIR = HERE.parent.parent / "shared" / "baseline"
BASELINE = BASELINE_DIR / "baseline.py"
REQUIREMENTS = BASELINE_DIR / "requirements.txt"
DEFAULT_DATA_DIR = Path("/tmp/firefeed-bench")
TOTAL_STEP = "TOTAL read+merge+rules+write"
RSS_STEP = "peak RSS"
RUN_TIMEOUT_S = 1800  # 1M rows take about a minute; a hung child must not hold the bench forever


class PandasReferenceUnavailable(RuntimeError):
    """The reference could not be measured (no venv, no network for pip, or the script failed)."""


def ensure_venv(venv: Path) -> Path:
    """Build `venv` from the baseline's requirements.txt unless it already matches it; its python.

    The whole file is installed, not just pandas and numpy: the published figure was measured with
    all of it (pyarrow included) in one venv, and the same environment keeps the two comparable.
    """
    if not REQUIREMENTS.exists():
        raise PandasReferenceUnavailable(f"{REQUIREMENTS} not found (../shared/baseline beside the checkout?)")
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    stamp = venv / ".requirements.sha256"
    python = venv / "bin" / "python"
    if python.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return python
    print(f"building the pandas reference venv {venv} from {REQUIREMENTS} (once) …", flush=True)
    log = venv.parent / f"{venv.name}-install.log"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        for cmd in (
            [sys.executable, "-m", "venv", "--clear", str(venv)],
            [str(python), "-m", "pip", "install", "--quiet", "--retries", "2", "-r", str(REQUIREMENTS)],
        ):
            if subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode != 0:
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                raise PandasReferenceUnavailable(f"{' '.join(cmd[:4])} … failed (see {log}): {' | '.join(tail)}")
    stamp.write_text(digest + "\n")
    return python


def _records(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["step"]: r for r in results if r.get("section") == "pandas"}


def run_reference(
    rows: int,
    data_dir: Path = DEFAULT_DATA_DIR,
    seed: int = 42,
    venv: Path | None = None,
    dsn: str | None = None,
) -> dict[str, Any]:
    """Run `baseline.py --sections pandas --repeat 1` on the feeds in `data_dir`; its total and peak RSS.

    Returns total_s, peak_rss_mib, steps_s (the timed steps), the package versions it ran with,
    whether the feeds had to be generated, and the wall time of the whole child. `dsn` only feeds
    the baseline's environment probe (the Postgres version in its report); the pandas section
    itself touches no server. Raises PandasReferenceUnavailable instead of failing the caller.
    """
    if not BASELINE.exists():
        raise PandasReferenceUnavailable(f"{BASELINE} not found (../shared/baseline beside the checkout?)")
    python = ensure_venv(venv or data_dir / "venv-pandas")
    feeds = [data_dir / f"feed_{rows}_s{seed}.csv", data_dir / f"stock_{rows}_s{seed}.csv"]
    generated = [p.name for p in feeds if not p.exists()]
    if generated:
        print(f"  baseline.py generates its own {', '.join(generated)} (missing in {data_dir})", flush=True)
    log = data_dir / "pandas_reference.log"
    with tempfile.TemporaryDirectory() as tmp:
        json_out = Path(tmp) / "baseline.json"
        cmd = [str(python), str(BASELINE), "--sections", "pandas", "--repeat", "1"]
        cmd += ["--rows", str(rows), "--seed", str(seed), "--data-dir", str(data_dir), "--json-out", str(json_out)]
        if dsn:
            cmd += ["--dsn", dsn]
        t = time.perf_counter()
        try:
            with log.open("w") as out:
                proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            raise PandasReferenceUnavailable(f"baseline.py ran over {RUN_TIMEOUT_S} s (see {log})") from e
        finally:
            (data_dir / "out_pandas.csv").unlink(missing_ok=True)
        wall = time.perf_counter() - t
        if proc.returncode != 0 or not json_out.exists():
            raise PandasReferenceUnavailable(f"baseline.py exited {proc.returncode} (see {log})")
        report = json.loads(json_out.read_text())
    steps = _records(report["results"])
    if TOTAL_STEP not in steps or RSS_STEP not in steps:
        failed = [s for s in steps if s.startswith("FAILED")]
        what = failed or "no records"
        raise PandasReferenceUnavailable(f"baseline.py's pandas section gave no total ({what}; see {log})")
    env = report.get("environment") or {}
    return {
        "total_s": steps[TOTAL_STEP]["values"][0],
        "peak_rss_mib": steps[RSS_STEP]["values"][0],
        "steps_s": {k: v["values"][0] for k, v in steps.items() if v["unit"] == "s" and k != TOTAL_STEP},
        "versions": {k: env.get(k) for k in ("python", "pandas", "numpy", "pyarrow")},
        "feeds_generated": generated,
        "child_wall_s": wall,
        "rows": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    ap.add_argument("--venv", type=Path, default=None, help="default: DATA_DIR/venv-pandas")
    args = ap.parse_args()
    try:
        res = run_reference(args.rows, args.data_dir, args.seed, args.venv)
    except PandasReferenceUnavailable as e:
        raise SystemExit(f"pandas reference unavailable: {e}") from e
    print(json.dumps(res, indent=2))
    print(f"pandas reference, {args.rows:,} rows: {res['total_s']:.2f} s, peak RSS {res['peak_rss_mib']:.0f} MiB")


if __name__ == "__main__":
    main()
