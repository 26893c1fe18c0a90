"""`firefeed api` (the HTTP API and web page) and `firefeed token create --company C`."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def cmd_api(args: argparse.Namespace) -> int:
    from firefeed.api.app import create_app
    from firefeed.api.serve import serve
    from firefeed.cli import ensure_migrated
    from firefeed.config import get_settings

    ensure_migrated()
    # No broker: no worker anywhere could take a run, so this process drives the runs it accepts.
    local_runs = get_settings().broker_url is None
    if local_runs:
        print(
            "firefeed api: no FIREFEED_BROKER_URL, so runs requested here run in this process, one at a time "
            "(set FIREFEED_BROKER_URL and start workers to run them on the fleet)",
            file=sys.stderr,
        )
    serve(create_app(local_runs=local_runs), args.host, args.port, access_log=not args.no_access_log)
    return 0


def cmd_token_create(args: argparse.Namespace) -> int:
    from firefeed.cli import ensure_migrated
    from firefeed.runs.tokens import TokenStore

    ensure_migrated()
    try:
        token = TokenStore().create(args.company)
    except ValueError as err:
        print(f"firefeed: {err}", file=sys.stderr)
        return 2
    print(token)
    print(
        f"token for company {args.company!r}: it is shown once and stored only as a hash; "
        "send it as `Authorization: Bearer <token>`",
        file=sys.stderr,
    )
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("api", help="serve the HTTP API and the run timeline page (default 127.0.0.1:8000)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    p.add_argument("--no-access-log", action="store_true", help="do not log every request")
    p.set_defaults(func=cmd_api)

    p = subparsers.add_parser("token", help="API tokens")
    token_sub = p.add_subparsers(dest="token_command", required=True, metavar="ACTION")
    c = token_sub.add_parser("create", help="print a new API token for a company (stored hashed)")
    c.add_argument("--company", required=True, help="the company the token may see and act for")
    c.set_defaults(func=cmd_token_create)
