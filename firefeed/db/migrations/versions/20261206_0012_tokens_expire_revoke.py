"""tokens expire and are revoked; spec versions carry their size, and an old run may lose its version (#47)

API tokens get `expires_at` (NULL: never), `revoked_at` (NULL: live; a revoked token's row stays, so
`firefeed token list` still shows it) and `last_used_at` (written at most once a minute per token).

Spec versions get `size_bytes` (the document's JSON text and its folder, as stored) so the per-company
bound (FIREFEED_SPEC_VERSIONS_MAX, FIREFEED_SPEC_VERSIONS_MAX_BYTES) is one sum, not a read of every
document; existing rows are measured here. A run's reference to its version becomes ON DELETE SET NULL:
the bound may delete the version of an old finished run (never an active run's, the latest succeeded
run's or a project's current one), and such a run then reads its project's current spec.

Revision ID: 20261206_0012
Revises: 20261201_0011
Create Date: 2026-12-06 17:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261206_0012"
down_revision: str | None = "20261201_0011"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None

_RUN_FK = "pipeline_runs_spec_version_id_fkey"


def upgrade() -> None:
    op.add_column("api_tokens", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("api_tokens", sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("api_tokens", sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))

    op.add_column("spec_versions", sa.Column("size_bytes", sa.BigInteger(), server_default="0", nullable=False))
    op.execute("UPDATE spec_versions SET size_bytes = octet_length(spec::text) + coalesce(octet_length(spec_dir), 0)")

    op.drop_constraint(_RUN_FK, "pipeline_runs", type_="foreignkey")
    op.create_foreign_key(_RUN_FK, "pipeline_runs", "spec_versions", ["spec_version_id"], ["id"], ondelete="SET NULL")


def downgrade() -> None:
    op.drop_constraint(_RUN_FK, "pipeline_runs", type_="foreignkey")
    op.create_foreign_key(_RUN_FK, "pipeline_runs", "spec_versions", ["spec_version_id"], ["id"])
    op.drop_column("spec_versions", "size_bytes")
    op.drop_column("api_tokens", "last_used_at")
    op.drop_column("api_tokens", "revoked_at")
    op.drop_column("api_tokens", "expires_at")
