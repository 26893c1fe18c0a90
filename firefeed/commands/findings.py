"""`firefeed findings PROJECT [EXPORT]`: the items behind each channel finding, to fix them one by one (#49)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from firefeed.export.findings_list import FindingsPage

EXIT_OK, EXIT_BAD_INPUT = 0, 2


def cmd_findings(args: argparse.Namespace) -> int:
    from firefeed.db.engine import get_engine
    from firefeed.errors import SpecError
    from firefeed.export.findings_list import channel_exports, check_paging, list_findings

    engine = get_engine()
    try:
        check_paging(args.check, args.offset, args.limit)
        names = [args.export] if args.export is not None else channel_exports(engine, args.project)
        pages = [
            list_findings(engine, args.project, name, check=args.check, offset=args.offset, limit=args.limit)
            for name in names
        ]
    except SpecError as err:
        # Not a spec's mistake but the command's: said as the command's (values says a wrong FIELD alike).
        print(f"firefeed: {err.detail}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        # One export: the API's answer, word for word; every export: those answers, in spec order.
        shown: Any = (
            pages[0].to_json()
            if args.export is not None
            else {
                "project": args.project,
                "exports": [p.to_json() for p in pages],
            }
        )
        print(json.dumps(shown, indent=2, ensure_ascii=False))
        return EXIT_OK
    if not pages:
        print(f"project {args.project} has no export with a channel: nothing is checked")
    for n, page in enumerate(pages):
        if n:
            print()
        print("\n".join(_table(page)))
    return EXIT_OK


def _table(page: FindingsPage) -> list[str]:
    """An export's page as a heading and one line per item, and how to ask for the next page."""
    if page.reason is not None:
        return [f"{page.export}: {page.reason}"]
    origin = "of the run blocked before publishing" if page.source == "blocked" else "of the published file"
    run = f", run {page.run_id}" if page.run_id else ""
    if not page.items:
        shown = "" if page.total == 0 else f" (none from offset {page.offset})"
        return [f"{page.export}: {page.total:,} finding item(s) {origin}{run}{shown}"]
    last = page.offset + len(page.items)
    lines = [f"{page.export}: {page.total:,} finding item(s) {origin}{run}; {page.offset + 1:,}-{last:,} shown"]
    lines.append(f"  {'key':<24}{'severity':<9}{'check':<20}{'attribute':<22}value / message")
    for item in page.items:
        value = "(none)" if item.value is None else repr(item.value if len(item.value) <= 60 else item.value[:59] + "…")
        lines.append(
            f"  {item.key[:23]:<24}{item.severity:<9}{item.check[:19]:<20}{item.attribute[:21]:<22}{value}"
            f"  {item.message}"
        )
    if page.next_offset is not None:
        lines.append(f"  more: --offset {page.next_offset}")
    return lines


def register(subparsers: Any) -> None:
    from firefeed.export.channels import CHECKS
    from firefeed.export.findings_list import DEFAULT_LIMIT, MAX_LIMIT

    p = subparsers.add_parser(
        "findings",
        help="the items behind each channel finding of an export: key, check, attribute, value, message",
        description=(
            "Lists the items behind the channel findings of EXPORT (without it: of every export with a channel), "
            "in export order: each item's channel id (else its key), the check, the attribute, the value the "
            "export wrote and the message. Read from the last run blocked before publishing when there is one, "
            "else from the last published file. Nothing is written. Exit codes: 0 ok, 2 an unknown check or a "
            "page out of bounds, 4 unknown project or export."
        ),
    )
    p.add_argument("project", metavar="PROJECT")
    p.add_argument("export", metavar="EXPORT", nargs="?", default=None)
    p.add_argument("--check", metavar="C", default=None, help=f"only this check's items ({', '.join(CHECKS)})")
    p.add_argument("--offset", metavar="N", type=int, default=0, help="skip the first N items (default 0)")
    p.add_argument(
        "--limit",
        metavar="N",
        type=int,
        default=DEFAULT_LIMIT,
        help=f"at most N items per export (default {DEFAULT_LIMIT}, at most {MAX_LIMIT})",
    )
    p.add_argument("--json", action="store_true", help="print the items as JSON (one export: the API's answer)")
    p.set_defaults(func=cmd_findings)
