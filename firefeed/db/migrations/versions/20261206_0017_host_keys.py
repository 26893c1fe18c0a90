"""SFTP host keys pinned per company and host (SPEC 10 C6, #50)

The first fetch from an SFTP server records the key it presented; later fetches must present it.

Revision ID: 20261206_0017
Revises: 20261206_0016
Create Date: 2026-12-06 20:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261206_0017"
down_revision: str | None = "20261206_0016"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "host_keys",
        sa.Column("company_id", sa.String(length=40), nullable=False),
        sa.Column("host", sa.Text(), nullable=False),
        sa.Column("port", sa.Integer(), nullable=False),
        sa.Column("public_key", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(["company_id"], ["companies.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("company_id", "host", "port"),
    )


def downgrade() -> None:
    op.drop_table("host_keys")
