"""The `processes` table: one row per job another service asks FireFeed to run (SPEC section 6).

The columns SPEC 6 names are the contract with those services; `attempts` and
`heartbeat_at` are FireFeed's own bookkeeping for lease recovery.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, CheckConstraint, DateTime, Index, Integer, String, Text, func, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from firefeed.db.models import Base

STATUSES = ("pending", "running", "completed", "failed")
NOTIFY_CHANNEL = "firefeed_processes"
"""The trigger on `processes` notifies this channel when a row becomes pending (insert or release)."""


class Process(Base):
    """A job row: pending -> running (claimed by one worker) -> completed | failed."""

    __tablename__ = "processes"
    __table_args__ = (
        CheckConstraint("status IN ('pending', 'running', 'completed', 'failed')", name="ck_processes_status"),
        # Serves the claim: the oldest pending row of one (worker_type, workspace_id).
        Index(
            "ix_processes_claim",
            "worker_type",
            "workspace_id",
            "created_at",
            "id",
            postgresql_where=text("status = 'pending'"),
        ),
        # Serves the lease sweep: running rows of one scope whose heartbeat is old.
        Index(
            "ix_processes_lease",
            "worker_type",
            "workspace_id",
            "heartbeat_at",
            postgresql_where=text("status = 'running'"),
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    worker_type: Mapped[str] = mapped_column(Text)
    workspace_id: Mapped[str] = mapped_column(Text)
    function: Mapped[str] = mapped_column(Text)
    input_data: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    status: Mapped[str] = mapped_column(String(16), server_default=text("'pending'"))
    output_data: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    error_message: Mapped[str | None] = mapped_column(Text)
    claimed_by: Mapped[str | None] = mapped_column(Text)
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    # How many claimers died holding this row (lease expired); past the limit the row fails.
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
