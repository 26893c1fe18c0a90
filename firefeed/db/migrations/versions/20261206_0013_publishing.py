"""pipeline runs record the exports they are switching into place (publishing, #47)

A run writes every export to a hidden partial key, then records here, in one statement with its
EXPORT step's success, which partial becomes which published key, and only then switches them.
A driver that dies part-way leaves this record: recovery (`firefeed.pipeline.publishing`) finishes
the switch and ends the run SUCCEEDED; a run without it switched nothing and is failed.

Revision ID: 20261206_0013
Revises: 20261206_0012
Create Date: 2026-12-06 17:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "20261206_0013"
down_revision: str | None = "20261206_0012"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("pipeline_runs", sa.Column("publishing", postgresql.JSONB(astext_type=sa.Text()), nullable=True))


def downgrade() -> None:
    op.drop_column("pipeline_runs", "publishing")
