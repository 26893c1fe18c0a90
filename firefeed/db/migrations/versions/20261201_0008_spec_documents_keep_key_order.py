"""spec documents are stored as json, which keeps the order of mapping keys (SPEC 8.18)

JSONB sorts object keys (by length, then bytes), so an export's `fields` came back
in that order and so did its columns. `json` keeps the document's text. Rows written
before this migration already lost their order: it comes back when the spec is
applied again (and a run snapshots the project's spec when it is requested).

Revision ID: 20261201_0008
Revises: 20261130_0007
Create Date: 2026-12-01 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "20261201_0008"
down_revision: str | None = "20261130_0007"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None

# (table, column, nullable): every column that holds a spec document or a part of one.
_SPEC_COLUMNS = (
    ("projects", "spec", False),
    ("sources", "definition", False),
    ("rules", "definition", False),
    ("exports", "definition", False),
    ("pipeline_runs", "spec", True),
)


def upgrade() -> None:
    for table, column, nullable in _SPEC_COLUMNS:
        op.alter_column(
            table,
            column,
            type_=postgresql.JSON(astext_type=sa.Text()),
            existing_type=postgresql.JSONB(astext_type=sa.Text()),
            existing_nullable=nullable,
            postgresql_using=f"{column}::json",
        )


def downgrade() -> None:
    for table, column, nullable in _SPEC_COLUMNS:
        op.alter_column(
            table,
            column,
            type_=postgresql.JSONB(astext_type=sa.Text()),
            existing_type=postgresql.JSON(astext_type=sa.Text()),
            existing_nullable=nullable,
            postgresql_using=f"{column}::jsonb",
        )
