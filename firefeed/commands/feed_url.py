"""`firefeed feed-url PROJECT [EXPORT]` and `firefeed feed-url rotate PROJECT EXPORT` (SPEC 10 C4)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def cmd_feed_url(args: argparse.Namespace) -> int:
    from firefeed.cli import ensure_migrated
    from firefeed.config import get_settings
    from firefeed.db.engine import get_engine
    from firefeed.errors import NotFoundError
    from firefeed.feeds import store

    words: list[str] = args.words
    rotate = len(words) == 3 and words[0] == "rotate"
    if not rotate and len(words) not in (1, 2):
        print("firefeed: feed-url takes PROJECT [EXPORT], or rotate PROJECT EXPORT", file=sys.stderr)
        return 2
    ensure_migrated()
    engine, settings = get_engine(), get_settings()
    export: str | None
    try:
        if rotate:
            project, export = words[1], words[2]
            store.rotate(engine, project, export)
            print(f"feed URL of export {export!r} rotated: the old URL answers 404 now", file=sys.stderr)
        else:
            project, export = words[0], (words[1] if len(words) == 2 else None)
        found = store.project_feeds(engine, settings, project)
    except NotFoundError as err:
        print(f"firefeed: {err}", file=sys.stderr)
        return 1
    if export is not None:
        found = [f for f in found if f.export == export]
        if not found:
            print(f"firefeed: project {project!r} has no export {export!r}", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps([f.as_dict() for f in found], indent=2))
    elif export is not None:
        print(found[0].url)
    else:
        for f in found:
            print(f"{f.export}\t{f.url}")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "feed-url",
        help="print a project's feed URLs (FIREFEED_PUBLIC_URL makes them absolute); `rotate PROJECT EXPORT` "
        "replaces one's secret",
    )
    p.add_argument("words", nargs="+", metavar="ARG", help="PROJECT [EXPORT], or rotate PROJECT EXPORT")
    p.add_argument("--json", action="store_true", help="print export, url and last fetch as JSON")
    p.set_defaults(func=cmd_feed_url)
