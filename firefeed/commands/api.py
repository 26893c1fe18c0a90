"""`firefeed api` (the HTTP API and web page) and `firefeed token create|list|revoke --company C`."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timedelta
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
    expires_in = timedelta(days=args.expires_in) if args.expires_in is not None else None
    try:
        token = TokenStore().create(args.company, expires_in, name=args.name)
    except (ValueError, OverflowError) as err:
        print(f"firefeed: {err}", file=sys.stderr)
        return 2
    print(token)
    lasts = f"valid for {args.expires_in:g} days" if expires_in is not None else "valid until revoked"
    print(
        f"token for company {args.company!r}, {lasts}: it is shown once and stored only as a hash; "
        "send it as `Authorization: Bearer <token>`",
        file=sys.stderr,
    )
    return 0


def _when(value: datetime | None) -> str:
    return value.isoformat(timespec="seconds") if value else "-"


def cmd_token_list(args: argparse.Namespace) -> int:
    from firefeed.cli import ensure_migrated
    from firefeed.runs.tokens import TokenStore

    ensure_migrated()
    found = TokenStore().list(args.company)
    if args.json:
        print(json.dumps([t.as_dict() for t in found], indent=2))
        return 0
    if not found:
        print(f"company {args.company} has no tokens")
        return 0
    # The parent: the token that created this one over the API ("-": the operator's); the name last, as text.
    print(f"{'id':>6}  {'prefix':<12}{'state':<9}{'created':<27}{'expires':<27}{'last used':<27}{'parent':>6}  name")
    for t in found:
        parent = str(t.parent_id) if t.parent_id is not None else "-"
        print(
            f"{t.id:>6}  {t.prefix + '…':<12}{t.state:<9}{_when(t.created_at):<27}{_when(t.expires_at):<27}"
            f"{_when(t.last_used_at):<27}{parent:>6}  {t.name or '-'}"
        )
    return 0


def cmd_token_revoke(args: argparse.Namespace) -> int:
    from firefeed.cli import ensure_migrated
    from firefeed.runs.tokens import TokenStore

    ensure_migrated()
    done = TokenStore().revoke(args.company, args.id)  # NotFoundError: exit 4, like any unknown object
    info = done.info
    below = f" and {len(done.descendants)} token(s) it created" if done.descendants else ""
    print(
        f"revoked token {info.id} ({info.prefix}…){below} of company {args.company}: every API process refuses "
        "them within FIREFEED_TOKEN_CACHE_S seconds"
    )
    return 0


def _days(text: str) -> float:
    try:
        days = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of days, got {text!r}") from None
    if not days > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 days, got {text!r}")
    return days


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
    c.add_argument(
        "--expires-in",
        type=_days,
        metavar="DAYS",
        help="refused after this many days (may be a fraction); default never",
    )
    c.add_argument("--name", help="a label to tell it apart (one line, at most 100 characters)")
    c.set_defaults(func=cmd_token_create)
    c = token_sub.add_parser(
        "list", help="a company's tokens: id, first characters, state, created, expires, last used, parent, name"
    )
    c.add_argument("--company", required=True)
    c.add_argument("--json", action="store_true", help="print the list as JSON")
    c.set_defaults(func=cmd_token_list)
    c = token_sub.add_parser(
        "revoke", help="refuse a token and every token it created from now on (every API process within seconds)"
    )
    c.add_argument("--company", required=True, help="the company the token belongs to")
    c.add_argument("id", type=int, metavar="ID", help="the token's id, as `firefeed token list` shows it")
    c.set_defaults(func=cmd_token_revoke)
