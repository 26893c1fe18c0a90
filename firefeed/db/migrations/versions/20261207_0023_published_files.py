"""published export files' stat identities, so an unchanged run need not read them (#52)

Revision ID: 20261207_0023
Revises: 20261206_0022
Create Date: 2026-12-07 07:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "20261207_0023"
down_revision: str | None = "20261206_0022"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "published_files",
        sa.Column("project_id", sa.String(length=64), nullable=False),
        sa.Column("export_name", sa.Text(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("identity", postgresql.JSONB(), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("project_id", "export_name"),
    )


def downgrade() -> None:
    op.drop_table("published_files")
