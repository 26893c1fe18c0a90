"""`firefeed projects` and `firefeed cancel RUN`: the API's project list and cancel, for an operator's shell."""

from __future__ import annotations

import argparse
import json
from typing import Any


def cmd_projects(args: argparse.Namespace) -> int:
    from sqlalchemy import select

    from firefeed.api.service import list_projects
    from firefeed.db.models import Company
    from firefeed.errors import NotFoundError
    from firefeed.runs.service import RunStore

    store = RunStore()
    with store.sessions() as s:
        if args.company and s.get(Company, args.company) is None:
            raise NotFoundError(f"unknown company {args.company!r}")
        companies = [args.company] if args.company else list(s.scalars(select(Company.id).order_by(Company.id)))
    listed = [list_projects(store, c) for c in companies]
    if args.json:
        print(json.dumps([p.model_dump() for lst in listed for p in lst.projects], indent=2))
        return 0
    rows = [
        (
            p.company,
            p.project,
            p.schedule or "-",
            p.latest_run.status if p.latest_run else "never run",
            (p.latest_run.finished_at or p.latest_run.requested_at or "") if p.latest_run else "",
            p.latest_run.run_id if p.latest_run else "",
        )
        for lst in listed
        for p in lst.projects
    ]
    if not rows:
        print("no projects" + (f" of company {args.company}" if args.company else "") + ": `firefeed apply SPEC`")
        return 0
    header = ("company", "project", "schedule", "latest run", "at", "run id")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from firefeed.runs.service import RunStore

    store = RunStore()
    run_id = str(store.run(args.run_id).id)  # NotFoundError (exit 4) for an unknown or malformed id
    status = store.request_cancel(run_id)
    if status == "CANCELLED":
        print(f"run {run_id} cancelled")
    elif status == "RUNNING":
        print(f"run {run_id}: cancel requested; it stops at its next check (`firefeed status {run_id}`)")
    else:
        print(f"run {run_id} already ended ({status}): nothing to cancel")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "projects",
        help="the projects, each with its latest run",
        description="Lists every project (or one company's) with its schedule and latest run. Exit 4: unknown company.",
    )
    p.add_argument("--company", metavar="COMPANY", help="only this company's projects")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.set_defaults(func=cmd_projects)

    c = subparsers.add_parser(
        "cancel",
        help="cancel a run (pending: at once; running: at its next check)",
        description=(
            "Records the cancel of RUN_ID, as POST /api/runs/{id}/cancel does: a pending run ends CANCELLED at once, "
            "a running one stops at its next check and frees its project; a finished run is left as it is. "
            "Exit 4: unknown run."
        ),
    )
    c.add_argument("run_id", metavar="RUN_ID")
    c.set_defaults(func=cmd_cancel)
