"""field_values (placeholder: filled in by the change that needs it)

Revision ID: 20261206_0014
Revises: 20261206_0013
Create Date: 2026-12-06 17:00:00
"""

from collections.abc import Sequence

revision: str = "20261206_0014"
down_revision: str | None = "20261206_0013"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
