"""exports' feed URLs (SPEC 10 C4-C5, #50)

One row per project and export name: the export's secret feed id (its URL `/feeds/{feed_id}/{file}`)
and the last fetch of that URL. Keyed by the export's name, not the `exports` row, which every apply
replaces: re-applying a spec keeps an export's URL; rotating it replaces `feed_id`.

Revision ID: 20261206_0016
Revises: 20261206_0015
Create Date: 2026-12-06 20:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261206_0016"
down_revision: str | None = "20261206_0015"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "feed_urls",
        sa.Column("project_id", sa.String(length=64), nullable=False),
        sa.Column("export_name", sa.Text(), nullable=False),
        sa.Column("feed_id", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("changed_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("last_fetch_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_fetch_user_agent", sa.Text(), nullable=True),
        sa.Column("last_fetch_status", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("project_id", "export_name"),
        sa.UniqueConstraint("feed_id"),
    )


def downgrade() -> None:
    op.drop_table("feed_urls")
