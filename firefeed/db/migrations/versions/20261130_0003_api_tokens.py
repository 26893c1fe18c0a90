"""api tokens: bearer tokens of the HTTP API, one company each, stored as SHA-256

Revision ID: 20261130_0003
Revises: 20261130_0002
Create Date: 2026-11-30 05:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261130_0003"
down_revision: str | None = "20261130_0002"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("company_id", sa.String(length=40), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("token_prefix", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(["company_id"], ["companies.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    op.create_index(op.f("ix_api_tokens_company_id"), "api_tokens", ["company_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_api_tokens_company_id"), table_name="api_tokens")
    op.drop_table("api_tokens")
