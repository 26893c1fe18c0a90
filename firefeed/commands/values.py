"""`firefeed values PROJECT FIELD`: a field's distinct values after the project's rules, to seed a map or a lookup."""

from __future__ import annotations

import argparse
import json
from typing import Any


def cmd_values(args: argparse.Namespace) -> int:
    from firefeed.config import get_settings
    from firefeed.db.engine import get_engine
    from firefeed.errors import NotFoundError
    from firefeed.pipeline.values import values_within
    from firefeed.preview.deadline import Deadline
    from firefeed.preview.pool import VALUES

    # The API's deadline here too: a project whose latest run kept no result has its rules applied again.
    deadline = Deadline(get_settings().values_deadline_s, timeout=VALUES.timeout)
    try:
        found = values_within(get_engine(), args.project, args.field, deadline=deadline)
    except NotFoundError as err:
        import sys

        print(f"firefeed: {err.message}", file=sys.stderr)
        return 4
    if args.json:
        print(json.dumps(found.to_json(), indent=2, ensure_ascii=False))
        return 0
    print(f"{found.field!r} of {found.project}: {len(found.values):,} distinct values in {found.items:,} items")
    print(f"(after the rules of run {found.run_id})")
    for value, count in found.values:
        print(f"{count:>10,}  {value if value != '' else '(empty)'}")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "values",
        help="a field's distinct values after the project's rules, most frequent first",
        description=(
            "Lists the distinct values of FIELD after the project's rules, with how many items hold each, most "
            "frequent first (ties in feed order), for the project's latest succeeded run: to seed a map or a "
            "lookup table. Nothing of the project is written. Exit codes: 0 ok, 1 not done within "
            "FIREFEED_VALUES_DEADLINE_S, 2 FIELD is not a field of the project, 4 unknown project or no "
            "succeeded run yet."
        ),
    )
    p.add_argument("project", metavar="PROJECT")
    p.add_argument("field", metavar="FIELD")
    p.add_argument("--json", action="store_true", help="print the values as JSON")
    p.set_defaults(func=cmd_values)
