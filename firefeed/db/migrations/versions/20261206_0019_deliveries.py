"""export deliveries to SFTP/FTP/HTTPS targets (SPEC 10 C7, #50) (placeholder: filled in by the change that needs it)

Revision ID: 20261206_0019
Revises: 20261206_0018
Create Date: 2026-12-06 20:40:00
"""

from collections.abc import Sequence

revision: str = "20261206_0019"
down_revision: str | None = "20261206_0018"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
