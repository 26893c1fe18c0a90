"""Run the sample project with progress per step, print its timeline and what to try next."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

SPEC = Path(__file__).parent / "spec.yaml"


def _hook(step: str, phase: str, info: dict[str, Any]) -> None:
    """One line per step: drawn at its start and finished in place on a terminal, written once at its end elsewhere.

    Piped into a file or CI's log, a carriage return does not take the line back, so the step was named twice.
    FETCH reads no rows (PARSE does): its line says it fetched instead of "0 rows".
    """
    tty = sys.stdout.isatty()
    if phase == "start":
        if tty:
            print(f"  {step:<7} …", end="", flush=True)
        return
    if step == "FETCH":
        done = "fetched"
    else:
        done = f"{info.get('rows_in', 0):>6,} rows in  {info.get('rows_out', 0):>6,} rows out"
    print(("\r" if tty else "") + f"  {step:<7} ✓ {done}", flush=True)


def run_demo(out: Path) -> int:
    """Apply and run the demo project, writing its exports under `out`."""
    from firefeed.cli import ensure_migrated, format_report
    from firefeed.config import get_settings
    from firefeed.pipeline.run import execute_run
    from firefeed.runs.service import RunStore
    from firefeed.spec.loader import load_spec_file

    started = time.monotonic()
    # The demo's exports always land in `out`, even on a machine whose FIREFEED_STORAGE_URL names a bucket.
    settings = get_settings().model_copy(update={"export_dir": out.resolve(), "storage_url": None})
    print(f"FireFeed demo: the sample project in {SPEC.parent}")
    ensure_migrated()
    spec = load_spec_file(SPEC)
    store = RunStore()
    store.apply_spec(spec, spec_dir=SPEC.parent)
    run_id = store.request_run(spec.project, "cli")
    report = execute_run(run_id, settings=settings, hook=_hook)
    print()
    print(format_report(report))
    print(f"\ndone in {time.monotonic() - started:.1f}s")
    if report["status"] != "SUCCEEDED":
        return 1
    print(
        "\nWhat next:\n"
        f"  - open the exports in {out}/\n"
        f"  - edit a rule in {SPEC} and run `firefeed run {SPEC}`\n"
        "  - `firefeed status shoes_it` lists the project's runs\n",
        file=sys.stdout,
    )
    return 0
