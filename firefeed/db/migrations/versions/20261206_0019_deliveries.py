"""export deliveries to SFTP/FTP/HTTPS targets (SPEC 10 C7, #50)

What each delivery target of an export last received, so a delivery of the same file is `unchanged`.
The deliveries themselves are step jobs (`pipeline_jobs`, kind `deliver`).

Revision ID: 20261206_0019
Revises: 20261206_0018
Create Date: 2026-12-06 20:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "20261206_0019"
down_revision: str | None = "20261206_0018"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "delivered_files",
        sa.Column("project_id", sa.String(length=64), nullable=False),
        sa.Column("export_name", sa.Text(), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("run_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("project_id", "export_name", "target"),
    )


def downgrade() -> None:
    op.drop_table("delivered_files")
