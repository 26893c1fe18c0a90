"""processes: the table other services insert jobs into (SPEC 6), its claim index and NOTIFY trigger

Revision ID: 20261130_0004
Revises: 20261130_0003
Create Date: 2026-11-30 05:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "20261130_0004"
down_revision: str | None = "20261130_0003"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None

# Wakes the workers listening on `firefeed_processes` when a row becomes pending (inserted or handed back).
# The payload names the scope so a worker ignores other scopes' rows; identical payloads in one transaction
# are folded into one notification by Postgres, so a bulk insert wakes each worker once per scope.
NOTIFY_FUNCTION = """
CREATE FUNCTION firefeed_processes_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(
        'firefeed_processes',
        json_build_object(
            'worker_type', left(NEW.worker_type, 1000),
            'workspace_id', left(NEW.workspace_id, 1000)
        )::text
    );
    RETURN NULL;
END
$$
"""

NOTIFY_TRIGGER = """
CREATE TRIGGER processes_notify
AFTER INSERT OR UPDATE OF status ON processes
FOR EACH ROW WHEN (NEW.status = 'pending')
EXECUTE FUNCTION firefeed_processes_notify()
"""


def upgrade() -> None:
    op.create_table(
        "processes",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("worker_type", sa.Text(), nullable=False),
        sa.Column("workspace_id", sa.Text(), nullable=False),
        sa.Column("function", sa.Text(), nullable=False),
        sa.Column(
            "input_data",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("status", sa.String(length=16), server_default=sa.text("'pending'"), nullable=False),
        sa.Column("output_data", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("claimed_by", sa.Text(), nullable=True),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("status IN ('pending', 'running', 'completed', 'failed')", name="ck_processes_status"),
        sa.PrimaryKeyConstraint("id"),
    )
    # Serves the claim query: the oldest pending row of one (worker_type, workspace_id).
    op.create_index(
        "ix_processes_claim",
        "processes",
        ["worker_type", "workspace_id", "created_at", "id"],
        unique=False,
        postgresql_where=sa.text("status = 'pending'"),
    )
    # Serves the lease sweep: one scope's running rows by heartbeat age.
    op.create_index(
        "ix_processes_lease",
        "processes",
        ["worker_type", "workspace_id", "heartbeat_at"],
        unique=False,
        postgresql_where=sa.text("status = 'running'"),
    )
    op.execute(NOTIFY_FUNCTION)
    op.execute(NOTIFY_TRIGGER)


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS processes_notify ON processes")
    op.execute("DROP FUNCTION IF EXISTS firefeed_processes_notify()")
    op.drop_index("ix_processes_lease", table_name="processes", postgresql_where=sa.text("status = 'running'"))
    op.drop_index("ix_processes_claim", table_name="processes", postgresql_where=sa.text("status = 'pending'"))
    op.drop_table("processes")
