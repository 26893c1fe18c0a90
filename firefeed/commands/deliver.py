"""`firefeed deliver PROJECT [EXPORT]`: send again what the last published run did not deliver (SPEC 10 C7).

The project's last SUCCEEDED run is the one whose files are published; each of its deliver jobs
that did not deliver (failed, never run, or left by a worker that stopped beating) runs again in
this process, with the same claim as on a worker, so a worker still delivering it is never doubled.
A delivered or unchanged target is left alone. The run's saved report is then rewritten.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def cmd_deliver(args: argparse.Namespace) -> int:
    from firefeed.cli import ensure_migrated
    from firefeed.config import get_settings
    from firefeed.db.engine import get_engine
    from firefeed.deliveries.retry import retry_deliveries
    from firefeed.errors import NotFoundError

    ensure_migrated()
    try:
        results = retry_deliveries(args.project, args.export, settings=get_settings(), engine=get_engine())
    except NotFoundError as err:
        print(f"firefeed: {err}", file=sys.stderr)
        return 1
    rows: list[dict[str, Any]] = [{"export": r.export, **r.report()} for r in results]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            line = f"{row['export']}\t{row['target']}\t{row['status']}"
            print(line + (f"\t{row['error']}" if row["error"] else ""))
    return 1 if any(r["status"] == "failed" for r in rows) else 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "deliver", help="send the project's last published files to the delivery targets they did not reach"
    )
    p.add_argument("project")
    p.add_argument("export", nargs="?", help="only this export's targets")
    p.add_argument("--json", action="store_true", help="print each target's outcome as JSON")
    p.set_defaults(func=cmd_deliver)
