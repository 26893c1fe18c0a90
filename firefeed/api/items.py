"""One item as the page shows it (#53): as each source brought it, through each rule, and in each export.

Built on the preview (a sample of one id, `preview_detail`), so it is bounded as a preview is: it runs in
the preview pool under FIREFEED_PREVIEW_DEADLINE_S, one of the company's FIREFEED_PREVIEW_PER_COMPANY, and
its answer within FIREFEED_PREVIEW_MAX_ANSWER_BYTES. An export's findings are its channel checks on the row
the export would write now (export/diagnostics.py), not the last run's: the page shows what the current
spec does, and the checks of one row cost nothing beside the preview.
"""

from __future__ import annotations

import json
from typing import Any

from firefeed.config import get_settings
from firefeed.errors import NotFoundError, PreviewRefusedError
from firefeed.preview.budget import json_bytes
from firefeed.preview.deadline import Deadline
from firefeed.preview.service import preview_detail, sample_ids
from firefeed.runs.service import RunStore


def item_view(store: RunStore, company: str, project_id: str, key: str, deadline: Deadline) -> dict[str, Any]:
    """The item `key` of the company's project under its stored spec; NotFoundError when no source has it."""
    store.project(project_id, company=company)
    try:
        (wanted,) = sample_ids([key])
    except ValueError:
        raise NotFoundError(f"no source of project {project_id!r} has an item with an empty key") from None
    spec, spec_dir = store.project_spec(project_id)
    answer, detail = preview_detail(
        spec, spec_dir=spec_dir, ids=[wanted], engine=store.engine, deadline=deadline, checks=True
    )
    if wanted in answer.sample.missing_ids:
        raise NotFoundError(f"no source of project {project_id!r} has an item {wanted!r}")
    if not answer.items:
        raise PreviewRefusedError(f"item {wanted!r} is larger than FIREFEED_PREVIEW_MAX_ANSWER_BYTES allows an answer")
    item = answer.items[0]
    # The item fit the preview's bound; the sources' rows and every export's row repeat it, so the answer is
    # measured as it grows and refused past the same bound (30 exports of a 5 MB item: a 153 MB answer).
    bound = _Bound(get_settings().preview_max_answer_bytes, wanted, json_bytes(item))
    bound.add(answer.fields)
    sources = [{"name": n, "fields": f, "values": v} for n, f, v in detail.sources.brought(item.key)]
    bound.add(sources)
    exports = []
    for exp, out in zip(spec.exports, detail.outputs, strict=True):
        row = next((r for r in out.rows if r.key == item.key), None)
        gone = next((e.by for e in out.excluded if e.key == item.key), None)
        entry = {
            "name": exp.name,
            "columns": out.columns,
            "cells": row.cells if row is not None else None,
            "excluded_by": gone,
            "findings": (out.findings or {}).get(item.key, []) if row is not None else [],
        }
        bound.add(entry)
        exports.append(entry)
    return {
        "key": item.key,
        "sources": sources,
        "rules": [r.model_dump(mode="json") for r in item.rules],
        "excluded_by": item.excluded_by,
        "fields": answer.fields,
        "values": item.values,
        "origin": item.origin,
        "changed": item.changed,
        "exports": exports,
    }


class _Bound:
    """The answer's size as it grows (compact JSON, UTF-8), and the refusal past FIREFEED_PREVIEW_MAX_ANSWER_BYTES."""

    def __init__(self, limit: int, key: str, start: int) -> None:
        self.limit, self.key, self.used = limit, key, start

    def add(self, part: Any) -> None:
        self.used += len(json.dumps(part, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))
        if self.used > self.limit:
            raise PreviewRefusedError(
                f"item {self.key!r} as each source brought it and each export writes it is larger than "
                f"FIREFEED_PREVIEW_MAX_ANSWER_BYTES ({self.limit:,} bytes) allows an answer"
            )
