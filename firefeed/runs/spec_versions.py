"""A project's spec versions: stored once per distinct document, and a company's kept within its bound.

Every apply of a different document stores a version that runs refer to. Two PUTs at a time of a
1 MiB spec stored 148 versions, 131 MB, in 20 s, and the hourly pruner came far too late. So the
apply that stores a version also deletes, in the same transaction, the company's oldest versions
that nothing needs, until the company holds at most FIREFEED_SPEC_VERSIONS_MAX versions and
FIREFEED_SPEC_VERSIONS_MAX_BYTES bytes. Needed, and never deleted:

- every project's current version, and the one the applied project had before this apply (a run
  request that read the project a moment ago may be inserting a run that refers to it);
- the versions of the company's PENDING and RUNNING runs (their jobs read them);
- each project's latest SUCCEEDED run's (`firefeed values` and the next run's diff read it).

An older finished run whose version goes keeps its row (the reference is ON DELETE SET NULL) and
reads its project's current spec. When what is needed alone would pass a bound, the apply is refused
(CompanyLimitError) and rolls back. The applies of one company take its `companies` row FOR NO KEY
UPDATE first (which no foreign-key check waits for), so two at once cannot both see room for one more.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, literal_column, select, union
from sqlalchemy.dialects.postgresql import distinct_on
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from firefeed.config import get_settings
from firefeed.db.models import Company, PipelineRun, Project, SpecVersion
from firefeed.errors import CompanyLimitError


def spec_digest(document: dict[str, Any], spec_dir: str | None) -> str:
    """The content address of a spec version: SHA-256 of the folder, a newline and the document's JSON text.

    The text is the one the `json` column stores (json.dumps, as SQLAlchemy sends it); migration
    20261201_0010 computes the same digest in SQL for the versions it made of existing specs.
    """
    return hashlib.sha256(f"{spec_dir or ''}\n{json.dumps(document)}".encode()).hexdigest()


def version_size(document: dict[str, Any], spec_dir: str | None) -> int:
    """Bytes a version takes: its JSON text and its folder (migration 20261206_0012 measures old rows alike)."""
    return len(json.dumps(document).encode("utf-8")) + len((spec_dir or "").encode("utf-8"))


@dataclass(frozen=True)
class Bound:
    """At most `count` versions and `size` bytes of them per company."""

    count: int
    size: int

    @classmethod
    def from_settings(cls) -> Bound:
        settings = get_settings()
        return cls(settings.spec_versions_max, settings.spec_versions_max_bytes)


def store_version(
    s: Session, company: str, project_id: str, document: dict[str, Any], spec_dir: str | None, *, previous: int | None
) -> int:
    """The id of the version holding this document and folder, stored now if it is new, the company's
    versions then cut back to its bound; `previous` is the project's version before this apply.

    An identical document from the same folder reuses its version and stores nothing.
    """
    s.execute(select(Company.id).where(Company.id == company).with_for_update(key_share=True))
    digest = spec_digest(document, spec_dir)
    row = pg_insert(SpecVersion).values(
        project_id=project_id,
        digest=digest,
        spec=document,
        spec_dir=spec_dir,
        size_bytes=version_size(document, spec_dir),
    )
    # Applied before: the no-op update locks that version until this apply commits, so neither the
    # history pruner (`prune_spec_versions`) nor another apply's bound can delete it meanwhile.
    again = row.on_conflict_do_update(
        constraint="uq_spec_versions_project_digest", set_={"digest": row.excluded.digest}
    )
    # xmax = 0: the row was inserted by this statement, not found and updated.
    stored: Any = s.execute(again.returning(SpecVersion.id, literal_column("xmax = 0"))).one()
    version_id = int(stored[0])
    if stored[1]:
        keep = {version_id} | ({previous} if previous is not None else set())
        enforce_bound(s, company, keep, Bound.from_settings())
    return version_id


def _needed(company: str) -> Any:
    """The ids of the company's versions that must stay (see the module's docstring)."""
    projects = select(Project.id).where(Project.company_id == company)
    current = select(Project.spec_version_id.label("id")).where(Project.company_id == company)
    active = select(PipelineRun.spec_version_id).where(
        PipelineRun.project_id.in_(projects), PipelineRun.status.in_(("PENDING", "RUNNING"))
    )
    latest = (
        select(PipelineRun.spec_version_id)
        .where(PipelineRun.project_id.in_(projects), PipelineRun.status == "SUCCEEDED")
        .ext(distinct_on(PipelineRun.project_id))
        .order_by(PipelineRun.project_id, PipelineRun.requested_at.desc())
        .subquery()
    )
    return union(current, active, select(latest.c.spec_version_id)).subquery()


def enforce_bound(s: Session, company: str, keep: set[int], bound: Bound) -> int:
    """Delete the company's oldest versions nothing needs until it holds at most `bound`; returns how many.

    `keep`: versions this transaction needs besides the others (the one just stored, the project's
    previous one). A version another transaction is locking (a run being inserted that refers to it,
    an apply reusing it) is skipped and counted as needed. CompanyLimitError when what must stay is
    alone past the bound.
    """
    needed = _needed(company)
    rows = s.execute(
        select(SpecVersion.id, SpecVersion.size_bytes, SpecVersion.id.in_(select(needed.c.id)).label("needed"))
        .join(Project, Project.id == SpecVersion.project_id)
        .where(Project.company_id == company)
        .order_by(SpecVersion.id.desc())
    ).all()
    count = sum(1 for r in rows if r.needed or r.id in keep)
    size = sum(r.size_bytes for r in rows if r.needed or r.id in keep)
    victims: list[int] = []
    for r in rows:  # newest first: the newest versions nothing needs stay while they fit
        if r.needed or r.id in keep:
            continue
        if count + 1 <= bound.count and size + r.size_bytes <= bound.size:
            count, size = count + 1, size + r.size_bytes
        else:
            victims.append(int(r.id))
    if victims:
        free = set(
            s.execute(
                select(SpecVersion.id).where(SpecVersion.id.in_(victims)).with_for_update(skip_locked=True)
            ).scalars()
        )
        for vid in victims:
            if vid not in free:  # in use by a transaction right now: it stays, and counts
                count += 1
                size += next(r.size_bytes for r in rows if r.id == vid)
        if free:
            s.execute(delete(SpecVersion).where(SpecVersion.id.in_(free)))
    else:
        free = set()
    if count > bound.count or size > bound.size:
        raise CompanyLimitError(
            f"company {company!r} would hold {count} spec versions ({size} bytes) that its projects and runs "
            f"still use, more than FIREFEED_SPEC_VERSIONS_MAX={bound.count} / FIREFEED_SPEC_VERSIONS_MAX_BYTES="
            f"{bound.size} allow: the spec was not applied; let active runs end, or remove projects"
        )
    return len(free)


def company_versions(s: Session, company: str) -> tuple[int, int]:
    """(count, bytes) of the company's stored spec versions."""
    count, size = s.execute(
        select(func.count(SpecVersion.id), func.coalesce(func.sum(SpecVersion.size_bytes), 0))
        .join(Project, Project.id == SpecVersion.project_id)
        .where(Project.company_id == company)
    ).one()
    return int(count), int(size)
