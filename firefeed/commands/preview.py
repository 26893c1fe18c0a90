"""`firefeed preview SPEC`: what the rules do to a sample of the items, without touching the project."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from firefeed.errors import SpecError


def _items(text: str) -> int:
    from firefeed.preview import MAX_ITEMS

    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
    if not 1 <= n <= MAX_ITEMS:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_ITEMS}, not {n}")
    return n


def _looks_like_a_file(target: str) -> bool:
    return "/" in target or "\\" in target or target.lower().endswith((".yaml", ".yml", ".json"))


def cmd_preview(args: argparse.Namespace) -> int:
    from firefeed.preview import DEFAULT_ITEMS, preview_spec
    from firefeed.preview.service import sample_ids
    from firefeed.preview.table import format_preview
    from firefeed.spec.loader import load_spec_file

    target = Path(args.spec)
    spec_dir: Path | None
    if target.is_file():
        spec, spec_dir = load_spec_file(target), target.resolve().parent
    elif _looks_like_a_file(args.spec):
        raise SpecError(args.spec, "no such spec file")
    else:
        from firefeed.runs.service import RunStore

        # A stored project: read its spec, nothing else (a preview writes no control-plane row).
        spec, spec_dir = RunStore().project_spec(args.spec)
    try:
        ids = sample_ids(args.item) if args.item else None
    except ValueError as err:
        raise SpecError("--item", str(err)) from None
    preview = preview_spec(spec, spec_dir=spec_dir, items=args.items or DEFAULT_ITEMS, ids=ids)
    print(preview.model_dump_json(indent=2) if args.json else format_preview(preview))
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "preview",
        help="show what the rules do to a sample of the items (touches no table, run or export)",
        description=(
            "Runs FETCH, PARSE, MERGE and RULES on a sample - the first N items of the primary source, or the "
            "items with the given ids - in a throwaway schema, and shows per rule how many items it matched, "
            "changed and excluded, and per item each field a rule changed (before -> after). The project's "
            "tables, its runs and its exports are left exactly as they were. The whole preview must finish "
            "within FIREFEED_PREVIEW_DEADLINE_S (default 20 s), however slowly a source answers. Exit codes: "
            "0 ok, 1 a source could not be fetched, parsed or merged, the preview did not finish in time, or the "
            "database refused one of its statements (its message is shown), "
            "2 bad spec (the message names the key), 4 unknown project."
        ),
    )
    p.add_argument("spec", metavar="SPEC|PROJECT", help="a spec file, or a stored project id (its stored spec)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--items", type=_items, metavar="N", help="the first N items of the primary (default 20)")
    group.add_argument(
        "--item", action="append", metavar="ID", help="an item id to preview (repeatable; appended items too)"
    )
    p.add_argument("--json", action="store_true", help="print the preview as JSON")
    p.set_defaults(func=cmd_preview)
