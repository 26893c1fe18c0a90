"""The `firefeed` command line (SPEC section 4)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from firefeed.commands import ACCEPT_INVALID_HELP, FULL_HELP
from firefeed.errors import CompanyLimitError, ConfigError, FireFeedError, NotFoundError, PipelineBusyError, SpecError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_BUSY, EXIT_UNKNOWN = 0, 1, 2, 3, 4


def _err(message: str) -> None:
    print(f"firefeed: {message}", file=sys.stderr)


def ensure_migrated() -> None:
    """Bring the control plane to head when it is behind (cheap when it is not)."""
    from firefeed.db.migrate import current_and_head, upgrade

    current, head = current_and_head()
    if current != head:
        upgrade()


# -- printing ---------------------------------------------------------------
def format_report(report: dict[str, Any]) -> str:
    """The RunReport as a readable table."""
    lines = [
        f"run {report['run_id']}  {report['company']}/{report['project']}  {report['status']}"
        f"  trigger={report['trigger']}  {report.get('duration_s') or 0:.2f}s",
        "",
        f"  {'step':<8}{'status':<11}{'seconds':>9}{'rows in':>12}{'rows out':>12}  timeline",
    ]
    total = report.get("duration_s") or 0.0
    start = report.get("started_at")
    from datetime import datetime

    t0 = datetime.fromisoformat(start) if start else None
    for st in report["steps"]:
        bar = ""
        if t0 and total and st["started_at"] and st["finished_at"]:
            a = (datetime.fromisoformat(st["started_at"]) - t0).total_seconds() / total
            b = (datetime.fromisoformat(st["finished_at"]) - t0).total_seconds() / total
            width = 30
            lo, hi = int(a * width), max(int(a * width) + 1, round(b * width))
            bar = " " * lo + "█" * (hi - lo)
        dur = f"{st['duration_s']:.2f}" if st["duration_s"] is not None else "-"
        lines.append(f"  {st['step']:<8}{st['status']:<11}{dur:>9}{st['rows_in']:>12,}{st['rows_out']:>12,}  {bar}")
    refresh = report.get("incremental")
    if refresh:  # SPEC 11 I2: an unchanged run's MERGE, RULES and EXPORT are the reused run's
        lines += ["", f"  refresh: {refresh['mode']} ({refresh['reason']})"]
    if report["sources"]:
        lines += [
            "",
            f"  {'source':<20}{'bytes':>14}{'rows':>11}{'unchanged':>10}{'empty key':>10}{'dup key':>9}"
            f"{'malformed':>10}",
        ]
        for s in report["sources"]:
            sk = s["skipped"]
            lines.append(
                f"  {s['name'][:19]:<20}{s['bytes']:>14,}{s['rows']:>11,}{'yes' if s['not_modified'] else 'no':>10}"
                f"{sk['empty_key']:>10,}{sk['duplicate_key']:>9,}{sk['malformed']:>10,}"
            )
    rules = report.get("rules") or {}
    if rules.get("matched"):
        lines += ["", f"  rules: {rules['passes']} pass(es), {rules['excluded']:,} excluded"]
        for name, n in rules["matched"].items():
            lines.append(f"    {n:>10,}  {name}")
    lines += format_lookups(rules.get("lookups") or [], report.get("lookups") or [])
    if report["exports"]:
        lines += ["", f"  {'export':<16}{'rows':>11}{'bytes':>14}  path"]
        for e in report["exports"]:
            lines.append(f"  {e['name'][:15]:<16}{e['rows']:>11,}{e['bytes']:>14,}  {e['path']}")
        for e in report["exports"]:
            own = e.get("rules")
            if not own:
                continue
            lines += ["", f"  {e['name']} rules: {own['passes']} pass(es), {own['excluded']:,} excluded"]
            for name, n in own["matched"].items():
                lines.append(f"    {n:>10,}  {name}")
            lines += format_lookups(own.get("lookups") or [], [])
        lines += format_quality(report["exports"])
    for w in report.get("warnings") or []:
        lines.append(f"  warning: {w}")
    if report.get("error"):
        e = report["error"]
        lines += ["", f"  error in {e.get('step')}: {e.get('type')}: {e.get('message')}"]
    return "\n".join(lines)


def format_lookups(actions: list[dict[str, Any]], tables: list[dict[str, Any]]) -> list[str]:
    """The lookup tables' rows and skipped keys, then per lookup action its counts and top unmatched values."""
    lines: list[str] = []
    for t in tables:
        sk = t["skipped"]
        lines += [
            "",
            f"  lookup {t['name']}: {t['rows']:,} rows, {t['keys']:,} keys, {sk['empty_key']:,} empty key, "
            f"{sk['duplicate_key']:,} dup key, {sk['malformed']:,} malformed",
        ]
    for a in actions:
        lines.append(
            f"  lookup {a['lookup']} in {a['rule']!r} {a['action']}: {a['matched']:,} matched, "
            f"{a['unmatched']:,} unmatched"
        )
        if a["unmatched_values"]:
            shown = a["unmatched_values"][:_UNMATCHED_SHOWN]
            top = ", ".join(f"{_short_value(v['value'])} ({v['count']:,})" for v in shown)
            rest = len(a["unmatched_values"]) - len(shown)
            lines.append(f"    unmatched: {top}" + (f", and {rest} more in the report" if rest else ""))
    return lines


#: the unmatched values the table shows per lookup action (the report lists up to 20)
_UNMATCHED_SHOWN = 10


def _short_value(value: str, width: int = 40) -> str:
    """An unmatched value for the table: "(empty)" for "", a long one cut with an ellipsis (not silently)."""
    if not value:
        return "(empty)"
    return value if len(value) <= width else value[: width - 1] + "…"


def format_quality(exports: list[dict[str, Any]]) -> list[str]:
    """Per export: the run diff against the last published file, and a short summary of channel findings."""
    from firefeed.export.guard import percent

    lines: list[str] = []
    diffs = [e for e in exports if e.get("diff")]
    if diffs:
        lines += ["", f"  {'diff':<16}{'added':>11}{'removed':>11}{'changed':>11}{'unchanged':>11}  against"]
        for e in diffs:
            d = e["diff"]
            against = f"{d['previous']:,} published" if d.get("baseline") else "nothing published yet"
            drop = d.get("drop") or {}
            if drop.get("status") in ("blocked", "accepted"):
                against += f"; drop {percent(drop['share'])} > max_drop {percent(drop['max_drop'])} {drop['status']}"
            lines.append(
                f"  {e['name'][:15]:<16}{d['added']:>11,}{d['removed']:>11,}{d['changed']:>11,}{d['unchanged']:>11,}"
                f"  {against}"
            )
    for e in exports:
        diag = e.get("diagnostics")
        if not diag:
            continue
        channel = f" for {diag['channel']}" if diag["channel"] else ""
        lines += ["", f"  {e['name']}: {diag['errors']} error(s), {diag['warnings']} warning(s){channel}"]
        for f in diag["findings"]:
            samples = ", ".join(str(x)[:24] for x in f["samples"][:3])
            lines.append(f"    {f['severity']:<8}{f['count']:>9,}  {f['message']}  (e.g. {samples})")
    return lines


# -- commands -------------------------------------------------------------
_PROJECT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def cmd_run(args: argparse.Namespace) -> int:
    from firefeed.pipeline.run import execute_run
    from firefeed.runs.service import RunStore
    from firefeed.spec.loader import load_spec_file

    target = Path(args.spec)
    # A project id has no dot or slash (spec/model.py): anything else is a spec file, and a missing
    # one is said as such (exit 2), not looked up as an unknown project. The spec is read first: a
    # bad one is reported without touching the database.
    spec = load_spec_file(target) if target.is_file() or not _PROJECT_ID.fullmatch(args.spec) else None
    ensure_migrated()
    store = RunStore()
    if spec is not None:
        store.apply_spec(spec, spec_dir=target.resolve().parent)
        project = spec.project
    else:
        project = args.spec
    run_id = store.request_run(
        project, "cli", accept_drop=args.accept_drop, accept_invalid=args.accept_invalid, full=args.full
    )
    report = execute_run(run_id)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return EXIT_OK if report["status"] == "SUCCEEDED" else EXIT_FAILED


def cmd_apply(args: argparse.Namespace) -> int:
    from firefeed.runs.service import RunStore
    from firefeed.spec.loader import load_spec_file

    path = Path(args.spec)
    spec = load_spec_file(path)
    ensure_migrated()
    created = RunStore().apply_spec(spec, spec_dir=path.resolve().parent)
    print(
        f"{'created' if created else 'updated'} project {spec.project} of company {spec.company}: "
        f"{len(spec.sources)} sources, {len(spec.parsed_rules)} rules, {len(spec.exports)} exports"
    )
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    from firefeed.runs.report import build_report
    from firefeed.runs.service import RunStore

    store = RunStore()
    try:
        report = build_report(store, args.target)
    except NotFoundError:
        runs = store.runs_of_project(args.target) if _project_exists(store, args.target) else None
        if runs is None:
            _err(f"unknown run or project {args.target!r}")
            return EXIT_UNKNOWN
        reports = [build_report(store, str(r.id)) for r in runs]
        if args.json:
            print(json.dumps(reports, indent=2))
        else:
            print(f"{'run':<38}{'status':<11}{'trigger':<9}{'started':<27}{'seconds':>9}")
            for r in reports:
                print(
                    f"{r['run_id']:<38}{r['status']:<11}{r['trigger']:<9}{(r['started_at'] or '-')[:26]:<27}"
                    f"{(r['duration_s'] or 0):>9.2f}"
                )
        return EXIT_OK
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return EXIT_OK


def _project_exists(store: Any, project: str) -> bool:
    try:
        store.project(project)
        return True
    except NotFoundError:
        return False


def cmd_migrate(args: argparse.Namespace) -> int:
    from firefeed.config import get_settings
    from firefeed.db.migrate import current_and_head, upgrade
    from firefeed.db.reachable import create_database, explain

    try:
        current_and_head()
    except Exception as err:
        reason = explain(err, get_settings().sqlalchemy_url)
        if reason is None or reason.kind != "missing":
            raise
        if create_database(get_settings().sqlalchemy_url):
            print(f"created database {reason.database} on {reason.where}")
    upgrade()
    current, _ = current_and_head()
    print(f"control plane at revision {current}")
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from firefeed.demo import run_demo

    return run_demo(Path(args.out))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="firefeed", description="Keeps product feeds fresh: fetch, parse, merge, rules, export."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("demo", help="run the shipped sample project end to end on the embedded default")
    p.add_argument("--out", default="firefeed-demo", help="folder for the demo's exports (default ./firefeed-demo)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("run", help="batch mode: run one project in this process and print its RunReport")
    p.add_argument("spec", metavar="SPEC|PROJECT", help="a spec file (applied first) or a stored project id")
    p.add_argument("--json", action="store_true", help="print the RunReport as JSON")
    p.add_argument(
        "--accept-drop",
        action="store_true",
        help="publish even when an export loses more of its items than its max_drop (the drop guard)",
    )
    p.add_argument("--accept-invalid", action="store_true", help=ACCEPT_INVALID_HELP)
    p.add_argument("--full", action="store_true", help=FULL_HELP)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("apply", help="create or update the company, project, sources, rules and exports of a spec")
    p.add_argument("spec", metavar="SPEC")
    p.set_defaults(func=cmd_apply)

    p = sub.add_parser("status", help="a run's status and step timeline, or a project's latest runs")
    p.add_argument("target", metavar="RUN_ID|PROJECT")
    p.add_argument("--json", action="store_true", help="print the RunReport as JSON")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("migrate", help="bring the control-plane tables up to date (Alembic)")
    p.set_defaults(func=cmd_migrate)

    import importlib
    import pkgutil

    import firefeed.commands

    for info in sorted(pkgutil.iter_modules(firefeed.commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"firefeed.commands.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from firefeed.config import get_settings
    from firefeed.logging import setup_logging

    args = build_parser().parse_args(argv)
    try:
        settings = get_settings()
        setup_logging(settings.log_level if getattr(args, "verbose", False) else "WARNING", settings.log_json)
        return int(args.func(args))
    except SpecError as err:
        _err(f"bad spec: {err}")
        if getattr(args, "json", False):
            # A `--json` caller reads stdout: no run was started, so the error alone, as a RunReport holds one.
            error = {"step": None, "type": type(err).__name__, "path": err.path, "message": str(err)}
            print(json.dumps({"status": None, "error": error}, indent=2))
        return EXIT_BAD_INPUT
    except ConfigError as err:
        _err(f"bad configuration: {err}")
        return EXIT_BAD_INPUT
    except PipelineBusyError as err:
        _err(f"busy: {err}")
        print(err.run_id or "")
        return EXIT_BUSY
    except NotFoundError as err:
        _err(str(err))
        return EXIT_UNKNOWN
    except CompanyLimitError as err:
        _err(str(err))
        return EXIT_BAD_INPUT
    except FireFeedError as err:
        _err(str(err))
        return EXIT_FAILED
    except Exception as err:
        # A database that is missing, down or refuses the login: a few lines that say so, not a traceback.
        from firefeed.config import get_settings
        from firefeed.db.reachable import explain

        reason = explain(err, get_settings().sqlalchemy_url)
        if reason is None:
            raise
        _err(f"{reason.message}\n  {reason.fix}")
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
