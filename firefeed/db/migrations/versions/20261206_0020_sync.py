"""channel API sync state per export (SPEC 10 C9-C10, #51)

One row per export with `sync`: which channel account its ledger belongs to (a sync pointed at
another account starts a new ledger), the export's output columns (the names of the values in
each item's payload, for `firefeed sync repair` outside a run), and the last sync's outcome and
time, which `firefeed sync status` and the API show. The ledger itself is a table per export in
the company's schema (firefeed/sync/ledger.py).

Revision ID: 20261206_0020
Revises: 20261206_0019
Create Date: 2026-12-06 23:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "20261206_0020"
down_revision: str | None = "20261206_0019"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "sync_state",
        sa.Column("project_id", sa.String(length=64), nullable=False),
        sa.Column("export_name", sa.Text(), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("account", sa.Text(), nullable=False),
        sa.Column("columns", postgresql.JSONB(), nullable=False),
        sa.Column("run_id", postgresql.UUID(as_uuid=True), nullable=True),
        sa.Column("last_sync_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_result", postgresql.JSONB(), nullable=True),
        sa.Column("listed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("channel_issues", postgresql.JSONB(), nullable=True),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("project_id", "export_name"),
    )


def downgrade() -> None:
    op.drop_table("sync_state")
