"""The spec as the page reads, checks and restores it: text, validation at lines, and the version history.

Every function takes the caller's company: another company's project (or a version of it) is
reported exactly like a missing one (NotFoundError -> 404). Validating runs the PUT's checks without
storing anything; restoring applies the old document through the apply every PUT goes through, so
every check of an apply holds for it (the company's secrets, local paths, the version bound).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from firefeed.api import schemas, service
from firefeed.api.spec_text import error_list, spec_yaml
from firefeed.config import get_settings
from firefeed.db.models import PipelineRun, Project, SpecVersion
from firefeed.errors import NotFoundError, SpecError
from firefeed.runs.service import RunStore
from firefeed.secrets.references import check_spec as check_references
from firefeed.secrets.references import origin_of
from firefeed.secrets.store import SecretStore
from firefeed.spec.loader import check_spec_size, parse_spec
from firefeed.spec.server_checks import check_server_side


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def spec_document(store: RunStore, company: str, project_id: str) -> dict[str, Any]:
    """The project's current spec: its version id, as YAML text in its key order, as an object, and when."""
    project = store.project(project_id, company=company)
    return {
        "project": project.id,
        "version": project.spec_version_id,
        "yaml": spec_yaml(project.spec),
        "spec": project.spec,
        "applied_at": _iso(project.updated_at),
    }


def check_owner(store: RunStore, company: str, project_id: str) -> None:
    """NotFoundError when the project is another company's; a project not created yet passes (a draft)."""
    try:
        store.project(project_id, company=company)
    except NotFoundError:
        with store.sessions() as s:
            if s.get(Project, project_id) is not None:
                raise
    return None


def validate(store: RunStore, company: str, project_id: str, body: bytes) -> dict[str, Any]:
    """The PUT's checks on a draft, storing nothing: `{"ok": true}`, or every problem at its line and key.

    No body checks the stored spec again (as a preview without one previews it): a secret deleted or a
    folder moved since it was applied shows here; without a stored spec that is a 404.
    """
    check_owner(store, company, project_id)
    if not body.strip():
        body = spec_yaml(store.project(project_id, company=company).spec).encode("utf-8")
    settings = get_settings()
    try:
        spec = service.spec_from_body(company, project_id, body, where=f"POST /api/projects/{project_id}/validate")
        # What apply_spec checks before it writes, for a spec with no folder (one sent over the API).
        check_references(spec, origin_of(None), settings.spec_env_allow)
        check_server_side(spec, None, settings, lambda c: (x.name for x in SecretStore(store.engine).list(c)))
    except SpecError as err:
        return {"ok": False, "errors": error_list(err, body.decode("utf-8", "replace"))}
    return {"ok": True}


def versions(store: RunStore, company: str, project_id: str) -> dict[str, Any]:
    """The project's stored spec versions, newest first, each with its size, whether it is current and how
    many runs used it."""
    project = store.project(project_id, company=company)
    runs = (
        select(PipelineRun.spec_version_id, func.count().label("n"))
        .where(PipelineRun.project_id == project_id)
        .group_by(PipelineRun.spec_version_id)
        .subquery()
    )
    with store.sessions() as s:
        rows = s.execute(
            select(SpecVersion.id, SpecVersion.created_at, SpecVersion.size_bytes, func.coalesce(runs.c.n, 0))
            .outerjoin(runs, runs.c.spec_version_id == SpecVersion.id)
            .where(SpecVersion.project_id == project_id)
            .order_by(SpecVersion.id.desc())
        ).all()
    return {
        "versions": [
            {
                "version": int(r[0]),
                "created_at": _iso(r[1]),
                "bytes": int(r[2]),
                "current": r[0] == project.spec_version_id,
                "runs": int(r[3]),
            }
            for r in rows
        ]
    }


def _version(store: RunStore, company: str, project_id: str, version: str) -> SpecVersion:
    """The project's version `version` (the id as the URL has it: anything else than one is unknown)."""
    store.project(project_id, company=company)
    if not version.isascii() or not version.isdigit() or not 0 < int(version) < 2**63:
        raise NotFoundError(f"project {project_id!r} has no spec version {version!r}")
    with store.sessions() as s:
        row = s.get(SpecVersion, int(version))
        if row is None or row.project_id != project_id:
            raise NotFoundError(f"project {project_id!r} has no spec version {version}")
        return row


def version_document(store: RunStore, company: str, project_id: str, version: str) -> dict[str, Any]:
    """One stored version as YAML text (and as an object)."""
    row = _version(store, company, project_id, version)
    return {"version": row.id, "yaml": spec_yaml(row.spec), "spec": row.spec, "created_at": _iso(row.created_at)}


def restore(store: RunStore, company: str, project_id: str, version: str) -> schemas.ProjectApplied:
    """Apply an older version's document as the project's spec: a new apply, with every check of one.

    With the version's own folder: a version applied from a spec file (`firefeed apply`) names its sources
    relative to it, and restored without it they would point nowhere. Safe, since document and folder are
    exactly a pair an earlier apply accepted; the checks run again on it (secrets, local paths, bounds).
    """
    row = _version(store, company, project_id, version)
    check_spec_size(len(json.dumps(row.spec).encode("utf-8")))
    spec = parse_spec(row.spec)
    created = store.apply_spec(spec, spec_dir=Path(row.spec_dir) if row.spec_dir else None, company=company)
    return schemas.ProjectApplied(
        project=project_id, company=company, created=created, links=schemas.project_links(project_id)
    )
