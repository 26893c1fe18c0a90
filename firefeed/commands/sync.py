"""`firefeed sync status PROJECT [EXPORT] [--refresh] [--json]` and `firefeed sync repair PROJECT EXPORT
[--delete-orphans]` (SPEC 10 C10): what an export's sync ledger holds, and a repair against the channel.

Both read the export as the project's last published run has it (firefeed/sync/service.py). `status`
prints, per export with `sync`, the items the channel took, what is pending or failed (the first
failures with the channel's code and message), the channel's own issues ("google says") and the last
sync. `repair` lists what the channel holds, sends what it lacks or holds otherwise, and deletes the
orphans (items the export no longer has) only with `--delete-orphans`; otherwise it lists them.
Exit 1 when the sync could not run or left failures, 0 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def cmd_sync_status(args: argparse.Namespace) -> int:
    from firefeed.cli import ensure_migrated
    from firefeed.config import get_settings
    from firefeed.db.engine import get_engine
    from firefeed.errors import NotFoundError
    from firefeed.sync import service

    ensure_migrated()
    try:
        found = service.status(
            args.project, args.export, settings=get_settings(), engine=get_engine(), refresh=args.refresh
        )
    except NotFoundError as err:
        print(f"firefeed: {err}", file=sys.stderr)
        return 1
    if args.json:
        print(service.dumps(found))
        return 0
    if not found:
        print(f"project {args.project!r} has no export with sync")
    for doc in found:
        _print_status(doc)
    return 1 if any(d.get("refresh_error") for d in found) else 0


def _print_status(doc: dict[str, Any]) -> None:
    print(f"{doc['export']} -> {doc['to']}: {doc['items']} items on the channel, {doc['pending']} pending, "
          f"{doc['failed']} failed")  # fmt: skip
    last = doc.get("last_sync")
    if last:
        line = (
            f"  last sync {doc['last_sync_at']}: {last.get('inserted', 0)} inserted, {last.get('updated', 0)} "
            f"updated, {last.get('deleted', 0)} deleted, {last.get('failed', 0)} failed"
        )
        print(line + (f" ({last['error']})" if last.get("error") else ""))
    for e in doc["errors"]:
        print(f"  failed {e['key']}: {e['code']} {e['message']}")
    if doc.get("left_out"):
        print(f"  {doc['left_out']} items on the channel without an attribute FireFeed could not read:")
    for w in doc.get("warnings", []):
        print(f"  left out {w['key']} {w['attribute']}: {w['message']}")
    issues = doc.get("channel_issues")
    if issues:
        print(
            f"  channel says ({doc['listed_at']}): {issues['items']} items with issues, "
            f"{issues['flagged_by_firefeed']} of them flagged by FireFeed's checks"
        )
        for code, n in issues.get("codes", {}).items():
            print(f"    {code}: {n}")
    if doc.get("refresh_error"):
        print(f"  could not list the channel: {doc['refresh_error']}")


def cmd_sync_repair(args: argparse.Namespace) -> int:
    from firefeed.cli import ensure_migrated
    from firefeed.config import get_settings
    from firefeed.db.engine import get_engine
    from firefeed.errors import NotFoundError
    from firefeed.sync import service

    ensure_migrated()
    try:
        doc = service.repair(
            args.project, args.export, delete_orphans=args.delete_orphans, settings=get_settings(), engine=get_engine()
        )
    except NotFoundError as err:
        print(f"firefeed: {err}", file=sys.stderr)
        return 1
    sync = doc["sync"]
    if args.json:
        print(service.dumps(doc))
    else:
        print(f"{doc['export']} -> {doc['to']}: {doc['missing']} missing on the channel, {doc['different']} "
              f"different, {doc['resent']} sent again")  # fmt: skip
        orphans = doc["orphans"]
        if orphans:
            verb = "deleted" if doc["orphans_deleted"] else "left (add --delete-orphans to delete them)"
            print(f"  {orphans} orphans on the channel {verb}: {', '.join(doc['orphan_keys'][:20])}")
        print(
            f"  sent: {sync['inserted']} inserted, {sync['updated']} updated, {sync['deleted']} deleted, "
            f"{sync['failed']} failed, {sync['pending']} pending"
        )
        for e in sync["errors"]:
            print(f"  failed {e['key']}: {e['code']} {e['message']}")
        for w in sync.get("warnings", []):
            print(f"  left out {w['key']} {w['attribute']}: {w['message']}")
        if sync.get("error"):
            print(f"  the sync stopped: {sync['error']}")
    return 1 if sync.get("error") or sync["failed"] else 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("sync", help="an export's channel API sync: its ledger's status, or a repair")
    sub = p.add_subparsers(dest="sync_command", required=True)
    s = sub.add_parser("status", help="what each export's sync ledger holds, the channel's issues, the last sync")
    s.add_argument("project")
    s.add_argument("export", nargs="?", help="only this export")
    s.add_argument("--refresh", action="store_true", help="list the channel's item statuses first")
    s.add_argument("--json", action="store_true", help="print the status as JSON")
    s.set_defaults(func=cmd_sync_status)
    r = sub.add_parser("repair", help="compare the channel with the export and send what differs")
    r.add_argument("project")
    r.add_argument("export")
    r.add_argument("--delete-orphans", action="store_true", help="delete items the channel holds and the export lacks")
    r.add_argument("--json", action="store_true", help="print the outcome as JSON")
    r.set_defaults(func=cmd_sync_repair)
