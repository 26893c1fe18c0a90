"""The checks between writing the exports and publishing them: what the run's files take together
(`run_max_export_bytes`, export/bounds.py), `fail_on` and the drop guard.

Both look only at what the export jobs measured (`quality`), so they cost
nothing at publish time. When any export fails a check nothing is published:
the run fails with one error that names every export and why, and the
previous files stay in place. The drop guard is the classic feed disaster's
stop: a supplier's feed comes back empty or half, and the shop would vanish
from the channel. A person confirms a real drop with `accept_drop`.

After the files are published, `promote` makes each export's run table the
published one, which the next run diffs against.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from firefeed import metrics
from firefeed.dataplane.names import export_tmp_table
from firefeed.errors import ChannelRejectError, DropGuardError, PublishBlockedError
from firefeed.export.bounds import check_run_bytes
from firefeed.export.diff import FILE_TAG
from firefeed.schema.identifiers import checked_keys_table, published_keys_table

if TYPE_CHECKING:
    from firefeed.schema.service import SchemaService
    from firefeed.spec.model import ExportSpec, ProjectSpec


def percent(value: float) -> str:
    """50.0 -> "50%", 12.5 -> "12.5%", 60.04 -> "60%"."""
    return f"{value:.1f}".rstrip("0").rstrip(".") + "%"


def export_definition(export: ExportSpec) -> str:
    """A digest of what decides an export's rows besides the items: its own rules, `where` and `fields` (P31)."""
    fields = export.model_dump(mode="json", include={"fields"})["fields"]  # a literal as {value: TEXT} (C1)
    doc = {"rules": export.rules, "where": export.where, "fields": fields}
    return hashlib.sha256(json.dumps(doc, ensure_ascii=False).encode()).hexdigest()


def _drop(
    export: ExportSpec, entry: dict[str, Any], accept_drop: bool, warnings: list[str], changed: bool = False
) -> str | None:
    """Annotate the entry's diff with the guard's reading; the problem when it blocks the publish.

    `changed`: the spec changed the export's rules, where or fields since its previous rows, so a
    drop is what the user asked for: it is not guarded, only reported as a warning (P31).
    """
    changes = entry.get("diff")
    if not changes or not changes.get("baseline") or not changes.get("previous"):
        return None  # nothing published before: nothing to lose
    previous, removed = int(changes["previous"]), int(changes["removed"])
    share = 100.0 * removed / previous
    over = share > export.max_drop
    status = ("accepted" if accept_drop else "blocked") if over else "ok"
    if over and changed:
        status = "unguarded"
    changes["drop"] = {"share": round(share, 2), "max_drop": export.max_drop, "status": status}
    if status == "unguarded":
        warnings.append(
            f"export {export.name!r}: {removed} of {previous} items dropped ({percent(share)} > max_drop "
            f"{percent(export.max_drop)}), not guarded: the spec changed the export's rules, where or fields"
        )
        return None
    if not over or accept_drop:
        return None
    return (
        f"export {export.name!r}: {removed} of {previous} items would be dropped "
        f"({percent(share)} > max_drop {percent(export.max_drop)}); re-run with --accept-drop to publish anyway"
    )


def _top(findings: Sequence[dict[str, Any]], limit: int = 3) -> str:
    """The largest findings, as a person reads them in the run's error."""
    top = sorted(findings, key=lambda f: -int(f["count"]))[:limit]
    return "; ".join(f"{f['count']:,} item(s) {f['message']} (e.g. {', '.join(f['samples'][:3])})" for f in top)


def _channel(export: ExportSpec, entry: dict[str, Any], accept_invalid: bool) -> str | None:
    """max_invalid (SPEC 10 C3) and `fail_on: warning`: the problem when the export must not be published.

    Annotates `diagnostics.max_invalid` with the share of items with an error finding, the limit and
    the reading (ok, accepted, blocked), as the drop guard annotates the diff.
    """
    diagnostics = entry.get("diagnostics")
    if not diagnostics:
        return None
    items, invalid = int(diagnostics.get("items") or 0), int(diagnostics.get("invalid") or 0)
    share = 100.0 * invalid / items if items else 0.0
    limit = export.invalid_limit
    over = share > limit
    diagnostics["max_invalid"] = {
        "share": round(share, 2),
        "max_invalid": limit,
        "status": ("accepted" if accept_invalid else "blocked") if over else "ok",
    }
    if accept_invalid:
        return None
    if over:
        errors = [f for f in diagnostics["findings"] if f["severity"] == "error"]
        setting = "fail_on: error allows none" if export.fail_on != "none" else f"max_invalid {percent(limit)}"
        return (
            f"export {export.name!r}: {invalid:,} of {items:,} items ({percent(share)}) have errors "
            f"{diagnostics['channel']} rejects, more than {setting} ({_top(errors)}); "
            "re-run with --accept-invalid to publish anyway"
        )
    warned = [f for f in diagnostics["findings"] if f["severity"] == "warning"]
    if export.fail_on == "warning" and warned:
        return (
            f"export {export.name!r}: {diagnostics['channel']} warns about items ({_top(warned)}); "
            "fail_on: warning keeps the previous file while there are channel warnings"
        )
    return None


def check_publish(
    spec: ProjectSpec,
    exports: Sequence[dict[str, Any]],
    *,
    accept_drop: bool,
    accept_invalid: bool = False,
    previous: Mapping[str, str | None] | None = None,
) -> list[str]:
    """Raise DropGuardError / ChannelRejectError when an export must not be published; count the findings.

    ChannelRejectError: more items with an error finding than `max_invalid` (C3, `accept_invalid`
    overrides it), or `fail_on: warning` and a warning.

    Every export is checked, so the one error names every export that failed;
    a drop problem makes it a DropGuardError, the one `accept_drop` answers.
    `previous`: each export's definition (export_definition) in the last succeeded run, where
    known; returns the warnings of drops left unguarded because it changed (P31). First, an
    ExportError when the files together take more than run_max_export_bytes (no answer publishes them).
    """
    check_run_bytes(exports)
    by_name = {e.name: e for e in spec.exports}
    warnings: list[str] = []
    drops: list[str] = []
    rejects: list[str] = []
    blocked: list[str] = []
    for entry in exports:
        export = by_name[entry["name"]]
        diagnostics = entry.get("diagnostics") or {}
        for finding in diagnostics.get("findings", []):
            metrics.export_finding(diagnostics["channel"], finding["severity"], finding["check"], finding["count"])
        before = (previous or {}).get(export.name)
        changed = before is not None and before != entry.get("definition")
        dropped = _drop(export, entry, accept_drop, warnings, changed)
        for found, problems in ((dropped, drops), (_channel(export, entry, accept_invalid), rejects)):
            if found:
                problems.append(found)
                if export.name not in blocked:
                    blocked.append(export.name)
    if not blocked:
        return warnings
    error: PublishBlockedError
    if drops:
        metrics.publish_blocked("drop_guard")
        error = DropGuardError("; ".join(drops + rejects), blocked)
    else:
        metrics.publish_blocked("channel_errors")
        error = ChannelRejectError("; ".join(rejects), blocked)
    raise error


def promote(schema: SchemaService, spec: ProjectSpec, run_id: str, exports: Sequence[dict[str, Any]]) -> None:
    """After publish: each export's run table becomes its published one (one transaction for all); a delta's,
    which holds only the changed items' rows, changes the published one in place instead (export/patch.py)."""
    index = {e.name: i for i, e in enumerate(spec.exports)}
    renames = [
        (export_tmp_table(run_id, index[e["name"]]), published_keys_table(spec.project, e["name"]))
        for e in exports
        if e.get("diff") is not None
    ]
    checked = [checked_keys_table(spec.project, e["name"]) for e in exports]
    tags = {
        published_keys_table(spec.project, e["name"]): FILE_TAG + str(e["sha256"])
        for e in exports
        if e.get("diff") is not None and e.get("sha256")
    }
    schema.promote_export_keys(spec.company, renames, drop=checked, key_comments=tags)


def keep_checked(schema: SchemaService, spec: ProjectSpec, run_id: str, exports: Sequence[dict[str, Any]]) -> None:
    """After a blocked publish: each export's run table is kept as its checked one, for `firefeed findings`.

    A merchant whose run was stopped by max_invalid needs the items behind the findings of that run,
    not of the file still live.
    """
    index = {e.name: i for i, e in enumerate(spec.exports)}
    renames = [
        (export_tmp_table(run_id, index[e["name"]]), checked_keys_table(spec.project, e["name"]))
        for e in exports
        if e.get("diff") is not None
    ]
    # A delta's run table holds only the changed items' rows: made whole from its baseline when kept.
    baselines = {
        export_tmp_table(run_id, index[e["name"]]): published_keys_table(spec.project, e["name"])
        for e in exports
        if e.get("diff") is not None
    }
    schema.promote_export_keys(spec.company, renames, baselines=baselines)
