"""spec versions: a project's spec stored once per apply, runs refer to it instead of copying it

Every run request copied the project's whole spec document into pipeline_runs.spec
(and read it from projects first): the largest part of a run request's work, for
a document that changes only when the spec is applied. Now each apply stores its
document (with its folder) once in spec_versions, content-addressed per project,
and a run keeps only the id of the version current when it was requested, so a
spec applied while the run waits still takes effect only with the next run.

Existing projects get a version of their current spec; existing run snapshots
become versions (identical ones shared) and the copied columns go. The digest is
SHA-256 of `spec_dir` (or '') + newline + the document's JSON text, the same one
firefeed/runs/service.py computes, so an unchanged spec applied again reuses its
migrated version.

Revision ID: 20261201_0010
Revises: 20261201_0009
Create Date: 2026-12-01 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "20261201_0010"
down_revision: str | None = "20261201_0009"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def _digest(table: str) -> str:
    return f"encode(sha256(convert_to(coalesce({table}.spec_dir, '') || E'\\n' || {table}.spec::text, 'UTF8')), 'hex')"


def upgrade() -> None:
    op.create_table(
        "spec_versions",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("project_id", sa.String(length=64), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("spec", postgresql.JSON(astext_type=sa.Text()), nullable=False),
        sa.Column("spec_dir", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("project_id", "digest", name="uq_spec_versions_project_digest"),
    )
    op.add_column("projects", sa.Column("spec_version_id", sa.BigInteger(), nullable=True))
    op.create_foreign_key("fk_projects_spec_version_id", "projects", "spec_versions", ["spec_version_id"], ["id"])
    op.add_column(
        "pipeline_runs", sa.Column("spec_version_id", sa.BigInteger(), sa.ForeignKey("spec_versions.id"), nullable=True)
    )
    op.create_index("ix_pipeline_runs_spec_version_id", "pipeline_runs", ["spec_version_id"])

    op.execute(
        "INSERT INTO spec_versions (project_id, digest, spec, spec_dir) "
        f"SELECT projects.id, {_digest('projects')}, projects.spec, projects.spec_dir FROM projects "
        "ON CONFLICT (project_id, digest) DO NOTHING"
    )
    op.execute(
        "UPDATE projects SET spec_version_id = v.id FROM spec_versions v "
        f"WHERE v.project_id = projects.id AND v.digest = {_digest('projects')}"
    )
    op.execute(
        "INSERT INTO spec_versions (project_id, digest, spec, spec_dir) "
        f"SELECT pipeline_runs.project_id, {_digest('pipeline_runs')}, pipeline_runs.spec, pipeline_runs.spec_dir "
        "FROM pipeline_runs WHERE pipeline_runs.spec IS NOT NULL ON CONFLICT (project_id, digest) DO NOTHING"
    )
    op.execute(
        "UPDATE pipeline_runs SET spec_version_id = v.id FROM spec_versions v "
        "WHERE pipeline_runs.spec IS NOT NULL AND v.project_id = pipeline_runs.project_id "
        f"AND v.digest = {_digest('pipeline_runs')}"
    )
    op.drop_column("pipeline_runs", "spec_dir")
    op.drop_column("pipeline_runs", "spec")


def downgrade() -> None:
    op.add_column("pipeline_runs", sa.Column("spec", postgresql.JSON(astext_type=sa.Text()), nullable=True))
    op.add_column("pipeline_runs", sa.Column("spec_dir", sa.Text(), nullable=True))
    op.execute(
        "UPDATE pipeline_runs SET spec = v.spec, spec_dir = v.spec_dir FROM spec_versions v "
        "WHERE v.id = pipeline_runs.spec_version_id"
    )
    op.drop_index("ix_pipeline_runs_spec_version_id", table_name="pipeline_runs")
    op.drop_column("pipeline_runs", "spec_version_id")
    op.drop_constraint("fk_projects_spec_version_id", "projects", type_="foreignkey")
    op.drop_column("projects", "spec_version_id")
    op.drop_table("spec_versions")
