"""pipeline runs remember whether a person accepted an export drop (the drop guard, #9)

Revision ID: 20261130_0007
Revises: 20261130_0006
Create Date: 2026-11-30 06:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261130_0007"
down_revision: str | None = "20261130_0006"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "pipeline_runs", sa.Column("accept_drop", sa.Boolean(), server_default=sa.text("false"), nullable=False)
    )


def downgrade() -> None:
    op.drop_column("pipeline_runs", "accept_drop")
