"""pipeline runs remember whether a person accepted exports over their max_invalid (SPEC 10 C3, #49)

Revision ID: 20261206_0015
Revises: 20261206_0014
Create Date: 2026-12-06 20:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261206_0015"
down_revision: str | None = "20261206_0014"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "pipeline_runs", sa.Column("accept_invalid", sa.Boolean(), server_default=sa.text("false"), nullable=False)
    )


def downgrade() -> None:
    op.drop_column("pipeline_runs", "accept_invalid")
