"""schedules: projects.last_scheduled_at, the cron slot beat last handled for a project

Revision ID: 20261130_0005
Revises: 20261130_0004
Create Date: 2026-11-30 06:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261130_0005"
down_revision: str | None = "20261130_0004"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("projects", sa.Column("last_scheduled_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("projects", "last_scheduled_at")
