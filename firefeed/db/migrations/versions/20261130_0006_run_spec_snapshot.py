"""pipeline runs keep the spec they were requested with

Revision ID: 20261130_0006
Revises: 20261130_0005
Create Date: 2026-11-30 05:25:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "20261130_0006"
down_revision: str | None = "20261130_0005"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("pipeline_runs", sa.Column("spec", postgresql.JSONB(astext_type=sa.Text()), nullable=True))
    op.add_column("pipeline_runs", sa.Column("spec_dir", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("pipeline_runs", "spec_dir")
    op.drop_column("pipeline_runs", "spec")
