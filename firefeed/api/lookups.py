"""The category-mapping workflow (#53): a lookup's unmatched values, and rows added to a lookup the spec holds.

A lookup written in the spec (`rows:`, SPEC 9) is grown from the page: the rows are appended to the
current document and the result is applied as any spec is (every check of an apply holds, and it is a new
spec version), with the project's own folder, since only the lookup's rows changed. A lookup read from a
file (`url:`) is the file's: 409 `lookup_not_inline`. The unmatched values come from the last succeeded
run's report (P23, `rules.lookups`): each lookup action using the lookup, its unmatched values with counts.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from sqlalchemy import select

from firefeed.api import schemas
from firefeed.db.models import PipelineRun
from firefeed.errors import LookupNotInlineError, NotFoundError, SpecChangedError, SpecError
from firefeed.runs.service import RunStore
from firefeed.spec.loader import check_spec_size, parse_spec
from firefeed.spec.model import MAX_INLINE_LOOKUP_ROWS

#: rows one request may add (the page adds a few at a time; the spec's own bound is MAX_INLINE_LOOKUP_ROWS)
MAX_ROWS_PER_REQUEST = 1000
#: how many times an append is tried again when another apply changed the spec while it was being made
_ATTEMPTS = 3


def _lookup_at(doc: dict[str, Any], name: str, project_id: str) -> tuple[int, dict[str, Any]]:
    for i, lk in enumerate(doc.get("lookups") or []):
        if isinstance(lk, dict) and lk.get("name") == name:
            return i, lk
    raise NotFoundError(f"project {project_id!r} has no lookup {name!r}")


def checked_rows(body: Any) -> list[dict[str, str]]:
    """The request's rows: `{"rows": [{column: text, ...}, ...]}`, else SpecError naming what is wrong."""
    if not isinstance(body, dict) or set(body) != {"rows"}:
        raise SpecError("", 'the body must be {"rows": [{"<column>": "<text>", ...}, ...]}')
    rows = body["rows"]
    if not isinstance(rows, list) or not rows:
        raise SpecError("rows", "must be a non-empty list of rows")
    if len(rows) > MAX_ROWS_PER_REQUEST:
        raise SpecError("rows", f"at most {MAX_ROWS_PER_REQUEST} rows at a time")
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not row:
            raise SpecError(f"rows[{i}]", "must be a mapping of column -> text")
        for k, v in row.items():
            if not isinstance(v, str):
                raise SpecError(f"rows[{i}]", f"column {k!r} must be text")
    return rows


def add_rows(store: RunStore, company: str, project_id: str, name: str, rows: list[dict[str, str]]) -> dict[str, Any]:
    """Append `rows` to the inline lookup `name` and apply the spec: the PUT's answer and the lookup's row count."""
    for _ in range(_ATTEMPTS):
        project = store.project(project_id, company=company)
        doc = copy.deepcopy(project.spec)
        i, lk = _lookup_at(doc, name, project_id)
        if "rows" not in lk:
            raise LookupNotInlineError(
                f"lookup {name!r} is read from its file (`url`): add the rows there, or write its rows in the spec"
            )
        key = str(lk.get("key", ""))
        for j, row in enumerate(rows):
            if not str(row.get(key, "")).strip():
                raise SpecError(f"rows[{j}]", f"needs a non-empty {key!r}, the lookup's key column")
        lk["rows"] = [*lk["rows"], *rows]
        if len(lk["rows"]) > MAX_INLINE_LOOKUP_ROWS:
            raise SpecError(
                f"lookups[{i}].rows", f"would hold {len(lk['rows'])} rows, more than {MAX_INLINE_LOOKUP_ROWS}"
            )
        check_spec_size(len(json.dumps(doc).encode("utf-8")))
        spec = parse_spec(doc)
        folder = Path(project.spec_dir) if project.spec_dir else None
        try:
            created = store.apply_spec(spec, spec_dir=folder, company=company, expected=project.spec_version_id)
        except SpecChangedError:
            continue  # another apply changed the spec meanwhile: append to what it made
        applied = schemas.ProjectApplied(
            project=project_id, company=company, created=created, links=schemas.project_links(project_id)
        )
        return applied.model_dump() | {"lookup": name, "rows": len(lk["rows"])}
    raise SpecChangedError(f"project {project_id!r} kept changing while the rows were added; send them again")


def unmatched(store: RunStore, company: str, project_id: str, name: str) -> dict[str, Any]:
    """The last succeeded run's unmatched values of every lookup action using `name`, counts added up."""
    project = store.project(project_id, company=company)
    _lookup_at(project.spec, name, project_id)
    with store.sessions() as s:
        run = s.execute(
            select(PipelineRun.id, PipelineRun.report)
            .where(PipelineRun.project_id == project_id, PipelineRun.status == "SUCCEEDED")
            .order_by(PipelineRun.requested_at.desc())
            .limit(1)
        ).first()
    if run is None or not run.report:
        return {"lookup": name, "run_id": None, "actions": [], "values": []}
    report = run.report
    found = [a for a in (report.get("rules") or {}).get("lookups") or [] if a.get("lookup") == name]
    for exp in report.get("exports") or []:  # an export's own rules' lookup actions (channel rules)
        found += [
            dict(a, export=exp.get("name"))
            for a in ((exp.get("rules") or {}).get("lookups") or [])
            if a.get("lookup") == name
        ]
    counts: dict[str, int] = {}
    for a in found:
        for v in a.get("unmatched_values") or []:
            counts[str(v.get("value", ""))] = counts.get(str(v.get("value", "")), 0) + int(v.get("count", 0))
    values = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return {
        "lookup": name,
        "run_id": str(run.id),
        "actions": [
            {k: a.get(k) for k in ("rule", "action", "export", "matched", "unmatched") if k in a} for a in found
        ],
        "values": [{"value": v, "count": n} for v, n in values],
    }
