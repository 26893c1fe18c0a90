"""alert deliveries: the outbox of a project's alerts and each attempt to send one (SPEC 10 C8, #50)

Revision ID: 20261206_0018
Revises: 20261206_0017
Create Date: 2026-12-06 20:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "20261206_0018"
down_revision: str | None = "20261206_0017"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "alert_deliveries",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("company_id", sa.Text(), nullable=False),
        sa.Column("project_id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.UUID(), nullable=False),
        sa.Column("event", sa.String(length=32), nullable=False),
        sa.Column("export", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("secret_name", sa.String(length=64), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), server_default=sa.text("'pending'"), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("last_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "outcomes", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'[]'::jsonb"), nullable=False
        ),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["run_id"], ["pipeline_runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "event", "export", "url", name="uq_alert_deliveries_once"),
    )
    op.create_index(
        "ix_alert_deliveries_due",
        "alert_deliveries",
        ["next_attempt_at"],
        unique=False,
        postgresql_where=sa.text("status = 'pending'"),
    )
    op.create_index(
        "ix_alert_deliveries_project_created", "alert_deliveries", ["project_id", "created_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_alert_deliveries_project_created", table_name="alert_deliveries")
    op.drop_index("ix_alert_deliveries_due", table_name="alert_deliveries")
    op.drop_table("alert_deliveries")
