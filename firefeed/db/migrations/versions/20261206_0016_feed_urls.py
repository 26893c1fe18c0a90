"""exports' feed URLs (SPEC 10 C4-C5, #50) (placeholder: filled in by the change that needs it)

Revision ID: 20261206_0016
Revises: 20261206_0015
Create Date: 2026-12-06 20:20:00
"""

from collections.abc import Sequence

revision: str = "20261206_0016"
down_revision: str | None = "20261206_0015"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
