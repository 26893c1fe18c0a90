"""pipeline runs remember whether a full recompute was asked for (`--full`, SPEC 11 I2, #52)

Revision ID: 20261206_0022
Revises: 20261206_0021
Create Date: 2026-12-06 23:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261206_0022"
down_revision: str | None = "20261206_0021"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("pipeline_runs", sa.Column("full", sa.Boolean(), server_default=sa.text("false"), nullable=False))


def downgrade() -> None:
    op.drop_column("pipeline_runs", "full")
