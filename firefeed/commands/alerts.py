"""`firefeed alerts PROJECT`: a project's latest alerts, their status and each attempt's outcome;
`firefeed alerts send [PROJECT]`: one attempt now at every due alert (no broker, no beat)."""

from __future__ import annotations

import argparse
import json
from typing import Any

EXIT_OK = 0


def cmd_alerts(args: argparse.Namespace) -> int:
    from firefeed.alerts import outbox
    from firefeed.cli import ensure_migrated
    from firefeed.db.engine import get_engine

    ensure_migrated()
    engine = get_engine()
    if args.project == "send":
        return _send(args.target)
    rows = outbox.recent(engine, args.project, limit=args.limit)
    if args.json:
        print(json.dumps([_jsonable(r) for r in rows], indent=2))
        return EXIT_OK
    if not rows:
        print(f"no alerts of project {args.project}")
        return EXIT_OK
    for r in rows:
        last = (r["outcomes"] or [{}])[-1]
        said = last.get("error") or (f"answered {last['status_code']}" if last.get("status_code") else "")
        export = f" export {r['export']}" if r["export"] else ""
        print(
            f"{r['created_at']:%Y-%m-%d %H:%M:%S}  {r['event']:<15} {r['status']:<9} {r['attempts']} attempt(s)  "
            f"run {r['run_id']}{export}  {r['url']}" + (f"  last: {said}" if said else "")
        )
    return EXIT_OK


def _send(project: str | None) -> int:
    from firefeed.alerts import outbox
    from firefeed.alerts.sender import attempt
    from firefeed.config import get_settings
    from firefeed.db.engine import get_engine

    engine, settings = get_engine(), get_settings()
    due = outbox.due(engine, project=project)
    for alert_id in due:
        print(f"alert {alert_id}: {attempt(alert_id, settings=settings, engine=engine).state.value}")
    if not due:
        print("no alert is due")
    return EXIT_OK


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() if hasattr(v, "isoformat") else str(v) if k == "run_id" else v) for k, v in row.items()}


def register(sub: Any) -> None:
    p = sub.add_parser(
        "alerts",
        help="a project's latest alerts and their attempts; `alerts send [PROJECT]` sends the due ones now",
    )
    p.add_argument("project", metavar="PROJECT|send")
    p.add_argument("target", nargs="?", metavar="PROJECT", help="with `send`: only this project's alerts")
    p.add_argument("--limit", type=int, default=20, help="how many alerts to list (default 20)")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.set_defaults(func=cmd_alerts)
